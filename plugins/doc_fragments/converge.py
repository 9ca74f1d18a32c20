# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """Host-side settings shared by kilo.mesh.converge and kilo.mesh.mesh."""

    DOCUMENTATION = r"""
options:
  backend:
    description:
      - How WireGuard runs. V(kernel) uses the kernel module over netlink; V(userspace) runs
        O(userspace_command) and configures it through its UAPI socket; V(auto) picks kernel when
        the module loads.
    type: str
    choices: [auto, kernel, userspace]
    default: auto
  userspace_command:
    description: Userspace WireGuard implementation to start (wireguard-go or boringtun).
    type: str
    default: wireguard-go
  key_path:
    description: Path of the private key made by M(kilo.mesh.key). It is read on the host only.
    type: path
    default: /var/lib/kilo/key
  mtu:
    description: MTU of the interface; V(0) means Kilo's auto value (default-route MTU - 80, else 1420).
    type: int
    default: 0
  firewall:
    description: Firewall backend for the NAT, forward and IPIP rules of the plan.
    type: str
    choices: [nftables, iptables, none]
    default: nftables
  route_conflict:
    description:
      - What to do when a foreign route (another routing protocol) already holds a destination of the plan.
      - V(fail) stops with a message naming the route; V(replace) takes the route over, as Kilo does.
    type: str
    choices: [fail, replace]
    default: fail
  state:
    description: V(absent) removes exactly what this collection owns on the host.
    type: str
    choices: [present, absent]
    default: present
"""
