#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: topology
short_description: Compute Kilo's segments, leaders and per-node plans on the controller
version_added: 0.1.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - Computes what Kilo computes for a cluster - segments (locations), one leader per segment,
    WireGuard IPs, allowed IPs, and for every node its WireGuard peers, routes, ip rules and firewall rules.
  - Runs on the controller only (an action plugin); it touches no host.
  - Without O(nodes), the nodes are the hosts of the inventory group O(group). Its child groups are
    the locations; the host variable C(kilo_location) overrides. Other host variables mirror Kilo's
    annotations (see the notes). What each host reported about itself (M(kilo.mesh.key), registered as
    O(facts_var)) fills the rest;
    hosts that did not report in this run come from the O(registry).
  - The whole input is validated first; a bad value fails with a message naming the node or peer and the field.
extends_documentation_fragment:
  - kilo.mesh.options.mesh
  - kilo.mesh.options.plans
  - kilo.mesh.options.slicing
  - kilo.mesh.options.inputs
  - kilo.mesh.options.node_vars
  - kilo.mesh.attributes
options:
  peer:
    description:
      - Also return the WireGuard configuration this outside peer needs, like C(kgctl showconf peer NAME) -
        one C([Peer]) section per segment (its leader) and one per other peer.
      - Preshared keys are not printed; the output says where one belongs.
    type: str
  save_plans:
    description:
      - Compute the mesh once for the whole play (use with C(run_once)) - write the registry and keep each
        play host's plan on the controller for its M(kilo.mesh.join) (O(kilo.mesh.join#module:topology_var)).
      - Returns where the plans are (RV(plan_store)) and counts instead of the plans, so no host's task
        variables hold the whole mesh and each host's work follows the size of its own plan.
      - The plans live in Ansible's per-run temporary directory on the controller (0700, files 0600,
        removed when the run ends).
    type: bool
    default: false
  stand_ins:
    description:
      - A preview for people, before every host has run - a host of the group that reported nothing yet (no
        key or endpoint in this run, the registry or its Node) is computed with a stand-in key (its text
        starts with C(kiloMeshStandInNoKeyYet)), internal IP and public endpoint (from C(100.64.0.0/10), clear
        of every network the mesh names), so the result shows every location, segment and leader.
      - Who leads is Kilo's choice with those stand-ins - C(kilo_leader), else the first by name, since every
        stand-in endpoint counts as public; a host whose real endpoint turns out private may lose the lead to
        one with a public endpoint.
      - RV(stand_ins) names those hosts, the graph draws them dashed and RV(segments) leaves out their stand-in
        addresses. Never with O(save_plans) or O(peer) - stand-ins never reach a host or a peer's configuration.
      - C(playbooks/plan.yml) sets it.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Computes only; nothing is changed in either mode.
  diff_mode:
    support: none
    details: Returns plans, not differences.
seealso:
  - module: kilo.mesh.join
  - name: Kilo
    description: The Kubernetes multi-cloud network overlay this collection follows.
    link: https://kilo.squat.ai/
"""

EXAMPLES = r"""
- name: Compute the plans from the inventory
  kilo.mesh.topology:
  run_once: true
  register: mesh

- name: Show who leads each location
  ansible.builtin.debug:
    msg: "{{ mesh.segments | map(attribute='leader') | list }}"

- name: Print what the outside peer "laptop" needs (like kgctl showconf peer laptop)
  kilo.mesh.topology:
    peer: laptop
  run_once: true
  register: mesh_laptop

- name: Compute the mesh once for the play; each host's kilo.mesh.join reads its own plan
  kilo.mesh.topology:
    facts_var: node_host
    save_plans: true
  run_once: true
  register: node_mesh

- name: Compute from explicit nodes
  kilo.mesh.topology:
    granularity: full
    nodes:
      - name: a
        location: aws
        endpoint: 203.0.113.10:51820
        internal_ip: 10.1.0.10/16
        pod_cidr: 10.244.1.0/24
        public_key: "{{ key_a }}"
"""

RETURN = r"""
plan_store:
  description: With O(save_plans), the controller directory holding each play host's plan.
  returned: when O(save_plans) is true
  type: str
  sample: "/home/ops/.ansible/tmp/ansible-local-1234/kilo-plans-x1y2"
leaders:
  description: With O(save_plans), the leader of every segment.
  returned: when O(save_plans) is true
  type: list
  elements: str
  sample: ["aws-1", "gcp-1"]
registry:
  description: Without O(save_plans), the registry file the mesh was read from (and O(registry)'s default resolved).
  returned: when O(save_plans) is false
  type: str
  sample: /srv/mesh/kilo-registry.json
subnet:
  description: Without O(save_plans), the subnet the segments' WireGuard IPs come from (O(subnet) as resolved; a list of two in a dual-stack mesh).
  returned: when O(save_plans) is false
  type: raw
  sample: 10.4.0.0/16
plans:
  description:
    - Every node's plan, keyed by node name (with O(save_plans), the number of plans kept instead).
    - Preshared keys are left out (M(kilo.mesh.join) passes them to hosts itself).
    - Route entries whose other fields are equal share one entry with a list of destinations (C(dst)).
  returned: success
  type: dict
  contains:
    leader:
      description: Whether the node leads its segment.
      type: bool
      sample: true
    segment:
      description: The segment key, such as C(location:aws) or C(node:db-1).
      type: str
      sample: "location:aws"
    address:
      description: WireGuard address of a leader with the subnet's mask; null for non-leaders.
      type: str
      sample: "10.4.0.1/16"
    listen_port:
      description: WireGuard listen port.
      type: int
      sample: 51820
    peers:
      description:
        - WireGuard peers with C(name), C(public_key), C(endpoint), C(allowed_ips), C(persistent_keepalive).
        - In a mesh with locations behind NAT, a relay's entry also lists in C(relayed) the segments whose traffic
          it carries.
      type: list
      elements: dict
      sample:
        - {"name": "location:gcp", "public_key": "Xp2rT0wK2r0dq5rP6r3L8qYz1sV3mN9bQ4cW7eR5tY0=",
           "endpoint": "203.0.113.20:51820", "allowed_ips": ["10.4.0.2/32", "10.2.0.0/24"], "persistent_keepalive": 0}
    routes:
      description: Routes with C(dst) (a CIDR or a list of them), C(gateway), C(device), C(source), C(table), C(onlink).
      type: list
      elements: dict
      sample: [{"dst": "10.2.0.0/24", "gateway": "10.4.0.2", "device": "kilo0", "source": null, "table": null, "onlink": false}]
    rules:
      description: Policy rules with C(src), C(dst), C(iif), C(table).
      type: list
      elements: dict
      sample: [{"src": "10.1.0.0/24", "dst": "10.2.0.0/24", "iif": null, "table": 1107}]
    firewall:
      description:
        - C(nat_sources), C(nat_exempt_destinations), C(nat_destinations), C(forward_accept),
          C(ipip_accept_sources) (lists of CIDRs) and C(ipip_filter) (drop other IPIP).
        - C(relay_accept) on a relay (a mesh with locations behind NAT) - forward from the WireGuard interface back into it.
      type: dict
      sample: {"nat_sources": ["10.4.0.0/16"], "forward_accept": ["10.4.0.0/16"]}
    tunnel_address:
      description: Address for C(tunl0) when the node encapsulates (Kilo's first pod address), else null.
      type: str
      sample: null
segments:
  description:
    - The segments with their location, leader, nodes, WireGuard IP and allowed IPs (with O(save_plans), their number).
    - In a mesh with locations behind NAT (every node marked C(kilo_behind_nat) or without an endpoint), also
      C(reachable) (false for such a location) and C(relay) (its leader may relay, option C(relays)).
  returned: success
  type: list
  elements: dict
  sample: [{"key": "location:aws", "location": "aws", "leader": "aws-1", "nodes": ["aws-1", "aws-2"], "wireguard_ip": "10.4.0.1/16"}]
paths:
  description:
    - In a mesh with locations behind NAT, each pair of segments with an end behind NAT - C(a), C(b) (segment keys),
      C(path) (V(direct), or V(relayed) for two ends behind NAT in different locations) and C(via) (the relay's
      segment).
    - With C(kilo_direct_paths=always), what this run does with each pair of two ends behind NAT - V(probing) (a
      direct probe beside the relayed path), V(direct) (both ends reported a fresh probe handshake), else V(relayed).
  returned: when a location is behind NAT
  type: list
  elements: dict
  sample: [{"a": "location:aws", "b": "location:home", "path": "relayed", "via": "location:gcp"}]
peer_paths:
  description:
    - Each outside peer without endpoint (a machine joined with M(kilo.mesh.connect)) and segment behind NAT that
      reach each other through a relay - C(segment), C(peer) (its name) and C(via) (the relay's segment).
  returned: when such a pair exists
  type: list
  elements: dict
  sample: [{"segment": "location:home", "peer": "laptop", "via": "location:gcp"}]
direct_switch:
  description:
    - With O(save_plans) and C(kilo_direct_paths=always), the leaders behind NAT that move a pair between its relay
      and a direct path in this run (C(hosts)), and the moment they all apply it (C(at), seconds since the epoch;
      C(scheduled) false when the play's hosts do not run at once, forks).
  returned: when a pair moves
  type: dict
  sample: {"hosts": ["azure-1", "gcp-1"], "scheduled": true, "at": 1764300000.5}
graph:
  description: The topology as Graphviz DOT, like C(kgctl graph).
  returned: unless O(save_plans) is true
  type: str
  sample: "digraph kilo { ... }"
peer_config:
  description: With O(peer), the peer's C([Peer]) sections as data (C(preshared_key) is V(true) where one is set).
  returned: when O(peer) is set
  type: list
  elements: dict
  sample: [{"public_key": "Xp2rT0wK2r0dq5rP6r3L8qYz1sV3mN9bQ4cW7eR5tY0=", "allowed_ips": ["10.4.0.1/32"], "endpoint": "203.0.113.10:51820"}]
peer_conf:
  description: With O(peer), the same in wg-quick syntax, ready to append to the peer's own C([Interface]).
  returned: when O(peer) is set
  type: str
  sample: "[Peer]\nPublicKey = Xp2rT0wK2r0dq5rP6r3L8qYz1sV3mN9bQ4cW7eR5tY0=\nAllowedIPs = 10.4.0.1/32\n"
missing:
  description: Hosts of the group left out because neither this run nor the registry knows their key or endpoint.
  returned: when any
  type: list
  elements: str
  sample: ["gcp-2"]
stand_ins:
  description: With O(stand_ins), the hosts computed with stand-in keys and addresses - those that still need their first run.
  returned: when O(stand_ins) is true
  type: list
  elements: str
  sample: [aws-1, aws-2]
"""
