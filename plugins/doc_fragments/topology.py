# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """Mesh-wide options shared by kilo.mesh.topology and kilo.mesh.mesh."""

    DOCUMENTATION = r"""
options:
  nodes:
    description:
      - The nodes, instead of the inventory. Each has C(name), C(location), C(endpoint) (V(host:port)),
        C(internal_ip) (CIDR or null), C(pod_cidr) (CIDR or null), C(public_key), C(leader),
        C(persistent_keepalive), C(allowed_location_ips) and C(discovered_endpoints) (public key to V(ip:port)).
    type: list
    elements: dict
  peers:
    description:
      - Outside WireGuard clients (Kilo's Peer resources), each with C(name), C(public_key), C(allowed_ips),
        and optionally C(endpoint), C(persistent_keepalive), C(preshared_key).
      - Defaults to the variable C(kilo_peers).
    type: list
    elements: dict
  group:
    description: Inventory group whose hosts form the mesh; its child groups are the locations.
    type: str
    default: kilo
  facts_var:
    description: Name of the registered result of M(kilo.mesh.key) on each host.
    type: str
    default: kilo_host
  registry:
    description:
      - JSON file on the controller holding the public data (keys, endpoints, IPs) of every host seen,
        so that hosts outside C(--limit) or unreachable keep their place in the mesh.
      - Defaults to C(kilo-registry.json) in the inventory directory.
    type: path
  granularity:
    description:
      - V(location) - one segment per location, its leader links to the other leaders (Kilo's default).
      - V(full) - every node is its own segment.
      - V(cross) - every node links over WireGuard to every node in other locations; no WireGuard inside
        a location, whose members reach each other over their private network.
    type: str
    choices: [location, full, cross]
    default: location
  subnet:
    description: Subnet the WireGuard IPs of the segments come from.
    type: str
    default: 10.4.0.0/16
  port:
    description: WireGuard UDP port, used for endpoints made from discovered addresses.
    type: int
    default: 51820
  interface:
    description: Name of the WireGuard interface.
    type: str
    default: kilo0
  encapsulate:
    description: When traffic inside a location goes through the IPIP tunnel C(tunl0) (Kilo's C(--encapsulate)).
    type: str
    choices: [always, crosssubnet, never]
    default: always
  local:
    description: Manage routes between nodes of the same location (Kilo's C(--local)).
    type: bool
    default: true
  service_cidrs:
    description: Service CIDRs that are never masqueraded (Kilo's C(--service-cidr)).
    type: list
    elements: str
    default: []
  cni:
    description: Kilo's C(--cni) flag, kept for parity.
    type: bool
    default: true
  forward_rules:
    description: Add FORWARD accept rules for the node's own ranges (Kilo's C(--iptables-forward-rules)).
    type: bool
    default: false
"""
