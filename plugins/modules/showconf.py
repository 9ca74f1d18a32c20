#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: showconf
short_description: Show a node's or an outside peer's WireGuard configuration, like kgctl showconf
version_added: 0.1.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - Does what C(kgctl showconf) does, from the mesh of the inventory (and the registry) instead of the
    Kubernetes API; runs on the controller only (an action plugin) and touches no host.
  - With O(node), the WireGuard configuration of that node - an C([Interface]) with C(ListenPort) (the
    private key never leaves the host, so there is none) and one C([Peer]) per WireGuard peer of its plan.
    Only the leader of a segment carries WireGuard; for any other node the task fails, as C(kgctl) says
    "is not a leader node", and names the leader.
  - With O(peer), the C([Peer]) sections the outside peer (an entry of C(kilo_peers)) applies with
    C(wg setconf) or appends to its own C([Interface]).
  - With O(as_peer), the node (under O(granularity=location) its segment - the leader's key and endpoint,
    the segment's pod CIDRs, internal IPs and WireGuard IP) or the outside peer, described as a peer of
    another WireGuard network.
  - Preshared keys are never printed; a comment marks where one belongs.
  - The C([Peer]) layout is kgctl's - C(AllowedIPs), C(Endpoint), C(PersistentKeepalive) (also 0),
    C(PresharedKey), C(PublicKey).
extends_documentation_fragment:
  - kilo.mesh.options.mesh
  - kilo.mesh.options.inputs
  - kilo.mesh.options.output
  - kilo.mesh.attributes
options:
  dest:
    description:
      - Also write the configuration (RV(config)) to this file on the controller; a relative path is taken from
        O(output_dir), else from the directory C(ansible-playbook) runs in. Replaced atomically, mode C(0644),
        only when its content changes.
    type: path
  node:
    description:
      - The node (inventory host of the mesh group) to show, like C(kgctl showconf node NAME).
      - Exactly one of O(node) and O(peer) is required.
    type: str
  peer:
    description:
      - The outside peer (by its C(name) in O(peers)) to show, like C(kgctl showconf peer NAME).
    type: str
  as_peer:
    description:
      - Show the node or peer as a peer of another network (C(kgctl showconf --as-peer)).
      - With O(format=yaml) or O(format=json), a Kilo C(Peer) resource (C(kilo.squat.ai/v1alpha1)) ready for
        C(kubectl apply); with O(format=wireguard), one C([Peer]) section.
    type: bool
    default: false
  allowed_ips:
    description:
      - CIDRs added to the allowed IPs of the O(as_peer) description (C(kgctl showconf --allowed-ips)).
      - Only with O(as_peer).
    type: list
    elements: str
    default: []
  format:
    description:
      - V(wireguard) - C(wg setconf) syntax.
      - V(json), V(yaml) - with O(as_peer) the C(Peer) resource, otherwise RV(data).
    type: str
    choices: [wireguard, json, yaml]
    default: wireguard
attributes:
  check_mode:
    support: full
    details: Computes only; O(dest) is not written, the task reports changed when it would be.
  diff_mode:
    support: none
    details: Returns a configuration, not differences.
seealso:
  - module: kilo.mesh.topology
  - name: kgctl showconf
    description: The Kilo command this module follows.
    link: https://kilo.squat.ai/docs/kgctl/
"""

EXAMPLES = r"""
- name: The WireGuard configuration of the leader aws-1
  kilo.mesh.showconf:
    node: aws-1
  run_once: true
  register: aws_conf

- name: What the outside peer laptop applies with wg setconf
  kilo.mesh.showconf:
    peer: laptop
  run_once: true
  register: laptop_conf

- name: Location aws as a Kilo Peer resource of another cluster, with one more CIDR routed to it
  kilo.mesh.showconf:
    node: aws-1
    as_peer: true
    allowed_ips: [172.31.0.0/16]
    format: yaml
  run_once: true
  register: aws_peer

- name: Write it for kubectl apply
  ansible.builtin.copy:
    content: "{{ aws_peer.config }}"
    dest: /tmp/aws-peer.yaml
    mode: "0644"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
config:
  description: The configuration as text in O(format).
  returned: success
  type: str
  sample: |
    [Interface]
    ListenPort = 51820

    [Peer]
    AllowedIPs = 10.244.4.0/24, 10.2.0.21/32, 10.2.0.22/32, 10.244.5.0/24, 10.4.0.2/32
    Endpoint = 198.51.100.21:51820
    PersistentKeepalive = 0
    PublicKey = JGgekz5BTYW+R50UbOcovQBS5ekhEwMb/nSmLV5BiX8=
lines:
  description: RV(config) as a list of lines, which Ansible's default output prints one per line.
  returned: success
  type: list
  elements: str
  sample: ["[Interface]", "ListenPort = 51820", "", "[Peer]", "PublicKey = Xp2rT0wK2r0dq5rP6r3L8qYz1sV3mN9bQ4cW7eR5tY0="]
dest:
  description: The absolute path written (or, in check mode, that would be).
  returned: when O(dest) is given
  type: str
  sample: "/home/ops/mesh/aws-1.conf"
data:
  description:
    - The same as data. With O(as_peer), the C(Peer) resource (C(apiVersion), C(kind), C(metadata.name),
      C(spec) with C(allowedIPs), C(endpoint.dnsOrIP.ip) or C(endpoint.dnsOrIP.dns), C(endpoint.port),
      C(persistentKeepalive), C(publicKey)).
    - Otherwise C(name), C(interface.listen_port) (with O(node)) and C(peers), each with C(name), C(public_key),
      C(endpoint), C(allowed_ips), C(persistent_keepalive), and C(preshared_key) (V(true)) where one is set.
  returned: success
  type: dict
  sample: {"interface": {"listen_port": 51820}, "peers": []}
missing:
  description: Hosts of the group left out because neither this run nor the registry knows their key or endpoint.
  returned: when any
  type: list
  elements: str
  sample: ["gcp-2"]
"""
