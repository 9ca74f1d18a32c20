#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: connect
short_description: Converge a machine outside the mesh as one of its peers, like kgctl connect
version_added: 0.3.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - For a host that is not in the mesh group and is already a peer of the mesh (M(kilo.mesh.peer) with its public
    key from M(kilo.mesh.key)), computes on the controller the WireGuard configuration the peer needs (what
    M(kilo.mesh.showconf) prints for it) and converges the host in ONE call of M(kilo.mesh.converge) - its
    WireGuard interface with the peer's own allowed IP as address, one WireGuard peer per segment of the mesh,
    and a route through the interface for every allowed IP of the mesh.
  - O(connect_allowed_ips) (kgctl connect's C(--allowed-ips)) join the segment of O(connect_via) on this side only.
    A default route among them (V(0.0.0.0/0)) goes in as two /1 routes, and every leader endpoint they would
    cover gets a host route along the path the machine's main table gives it now, so the tunnel never carries
    its own packets; the leader masquerades the peer's traffic leaving the mesh, as Kilo does.
  - The machine's options come from its own variables; the mesh's (granularity, subnet, group, registry,
    peers) from the mesh group's first host.
  - With O(connect_state=absent) removes exactly what this collection owns on the machine (interface, routes,
    firewall table); the key file stays.
  - The role C(kilo.mesh.connect) and C(playbooks/connect.yml) make the key, keep the peer and run the
    mesh's join around this.
extends_documentation_fragment:
  - kilo.mesh.options.connect
  - kilo.mesh.options.host
  - kilo.mesh.attributes
options:
  group:
    description:
      - The mesh's group; the machine's C(kilo_group), else V(kilo).
    type: str
  step:
    description:
      - V(converge) - compute the plan and converge the machine (or remove what we own, O(connect_state=absent)).
      - V(peer) - change nothing; return in RV(peer) the arguments of M(kilo.mesh.peer) for this machine
        (name, state, store, allowed IPs, keepalive), so the role keeps the defaults of the option table.
    type: str
    choices: [converge, peer]
    default: converge
  public_key:
    description:
      - This machine's public key from M(kilo.mesh.key) in this run; the peer is computed with it when the
        store does not show it yet (check mode, or a Peer resource created after the inventory was read).
    type: str
  kubernetes:
    description:
      - Kubernetes client options were given; O(connect_store) then defaults to V(kubernetes).
      - So it does when the mesh group's first host has C(kilo_kube) (the inventory plugin C(kilo.mesh.kubernetes)
        sets it on every host it makes).
    type: bool
    default: false
  mesh_facts_var:
    description:
      - In check mode, the name of the mesh hosts' registered M(kilo.mesh.key) results of this run (the role
        C(kilo.mesh.node) registers C(node_host)); the mesh's keys are read from them instead of the registry,
        which check mode does not write, so a key the run would rotate shows in this machine's diff.
      - Ignored outside check mode, where the registry names each host's key once its converge switched.
    type: str
attributes:
  check_mode:
    support: full
    details: Reports exactly what would change and changes nothing.
  diff_mode:
    support: full
    details: Shows peers, addresses, routes and firewall before and after, without keys.
notes:
  - The option O(state) of the host options is not read; O(connect_state) says whether the peer stays.
  - Endpoints given as DNS names are resolved by WireGuard and are not pinned; with a default route through the
    mesh, give the leaders IP endpoints (C(kilo_force_endpoint)) or a route of its own to them.
  - Private and preshared keys never appear in results or diffs.
seealso:
  - module: kilo.mesh.peer
  - module: kilo.mesh.showconf
  - module: kilo.mesh.converge
"""

EXAMPLES = r"""
- name: Make the key on the laptop
  kilo.mesh.key:
  register: laptop_key

- name: Keep the laptop as a peer in the registry
  kilo.mesh.peer:
    name: laptop
    public_key: "{{ laptop_key.public_key }}"
    allowed_ips: [10.5.0.1/32]
    persistent_keepalive: 10
    store: registry
  delegate_to: localhost

- name: Converge the laptop, its traffic to everything through the location gcp
  kilo.mesh.connect:
    connect_allowed_ip: 10.5.0.1/32
    connect_allowed_ips: [0.0.0.0/0]
    connect_via: gcp-1
"""

RETURN = r"""
peer:
  description: The arguments of M(kilo.mesh.peer) for this machine (without its public key).
  returned: with O(step=peer)
  type: dict
  sample: {"name": "laptop", "state": "present", "store": "registry", "allowed_ips": ["10.5.0.1/32"],
           "persistent_keepalive": 10}
changes:
  description: What changed (or would change in check mode), by backend.
  returned: always
  type: dict
  sample: {"wireguard": ["add peer location:aws"], "netstate": ["add route 10.4.0.1/32 dev kilo0"]}
address:
  description: The peer's address on its interface.
  returned: when connect_state is present
  type: str
  sample: "10.5.0.1/32"
peers:
  description: Number of WireGuard peers (segments of the mesh and other peers).
  returned: when connect_state is present
  type: int
  sample: 3
routes:
  description: Number of routes in the plan.
  returned: when connect_state is present
  type: int
  sample: 4
"""
