#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: validate
short_description: Check the whole Kilo mesh on the controller before any host changes
version_added: 0.1.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - Reads every host of the mesh group the way M(kilo.mesh.join) and M(kilo.mesh.key) will, and fails
    with the host and the inventory variable named when one does not validate; a peer's error names the peer
    and its field.
  - The one check of a mesh - C(playbooks/site.yml), C(rotate.yml), C(connect.yml) and C(status.yml) run this
    module first, and M(kilo.mesh.topology) (C(playbooks/plan.yml)), M(kilo.mesh.graph) and M(kilo.mesh.showconf)
    run the same checks, in the same order, with the same words, before they compute anything.
  - In this order - the mesh group has hosts (C(-e kilo_group=NAME) names it; a play's hosts never see the
    inventory's variables); every C(kilo_*) variable of every host is one the collection reads and every Node
    annotation of Kilo's prefix or ours one it knows (see the notes; anything else is refused with the closest
    known name); every option of every host (the options below, of every role and module); mesh-wide settings
    (Kilo's flags, the group, the registry, the peers, the source of pod ranges) are the same on every host; each
    host is in one location group, and none sits directly under the mesh group outside all of them; every node
    variable; then the topology of every host.
  - The topology check computes the mesh of every host - known ones from this run's facts, the registry or their
    pinned key and endpoint, and hosts that have not run M(kilo.mesh.key) yet with stand-ins for what it will report
    (a key, an internal IP, an endpoint) - so duplicate keys, a subnet too small for the segments, a peer at a
    leader's WireGuard IP or a location without any endpoint fail here on a first run too, before the key step.
  - It refuses what two parties claim at once, naming both - the same or overlapping pod ranges on two nodes, one
    internal IP twice, two nodes at one endpoint (or one at another node's internal IP), one CNI compatibility IP
    twice, a peer whose allowed IPs hold a node's pod range, internal IP, a leader's WireGuard IP, a location's
    allowed IPs or a service CIDR, two peers (of C(kilo_peers), the registry, or C(connect.yml)'s machines) with
    overlapping allowed IPs or a peer at a node's endpoint, the subnet holding a host's internal IP, a pod range or
    allowed location IPs, a service CIDR overlapping a node's ranges or the subnet, a pod range holding an internal
    IP, and allowed location IPs meeting another location's ranges. Kilo takes such a mesh and drops one claim
    quietly (WireGuard keeps an allowed IP on one peer only).
  - Runs on the controller only (an action plugin).
extends_documentation_fragment:
  - kilo.mesh.options.mesh
  - kilo.mesh.options.plans
  - kilo.mesh.options.slicing
  - kilo.mesh.options.inputs
  - kilo.mesh.options.host
  - kilo.mesh.options.key
  - kilo.mesh.options.prepare
  - kilo.mesh.options.run
  - kilo.mesh.options.registry
  - kilo.mesh.options.connect
  - kilo.mesh.options.agent
  - kilo.mesh.options.kube
  - kilo.mesh.options.output
  - kilo.mesh.options.node_vars
  - kilo.mesh.options.variables
  - kilo.mesh.attributes
options:
  connecting:
    description:
      - Machines outside the mesh that C(playbooks/connect.yml) is about to keep as its peers (their
        C(kilo_connect_*) variables), checked with the mesh's peers; their variables are checked too.
    type: list
    elements: str
    default: []
  group_only:
    description:
      - Only check that the mesh group (C(-e kilo_group), else V(kilo)) has hosts, as the first play of
        C(playbooks/site.yml) and C(status.yml) does on any host of the inventory.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Checks only; nothing is changed in either mode.
  diff_mode:
    support: none
    details: Returns no differences.
seealso:
  - module: kilo.mesh.join
  - module: kilo.mesh.topology
"""

EXAMPLES = r"""
- name: Check the whole mesh before any host changes
  kilo.mesh.validate:
  run_once: true

- name: Check the mesh with the machines about to connect to it as peers
  kilo.mesh.validate:
    connecting: "{{ groups['connect'] }}"
  run_once: true
"""

RETURN = r"""
group:
  description: The mesh group (with O(group_only)).
  returned: with O(group_only)
  type: str
  sample: kilo
hosts:
  description: Hosts of the mesh group.
  returned: success
  type: int
  sample: 6
nodes:
  description: Hosts known with a key and an endpoint (the rest join once they have run kilo.mesh.key).
  returned: success
  type: int
  sample: 5
missing:
  description:
    - Hosts not known yet that this play does not reach (outside the play or C(--limit)), or that leave the
      mesh. They are left out, with a warning, until they have run M(kilo.mesh.key).
  returned: when some are missing
  type: list
  elements: str
  sample: ["gcp-2"]
joining:
  description:
    - Hosts not known yet that are hosts of this play with O(state=present) (C(kilo_state)). The play's
      M(kilo.mesh.key) step reports their key and addresses later in this run (as in C(playbooks/site.yml)),
      so they are not warned of here. One that fails that step is warned of by M(kilo.mesh.topology).
  returned: when some are joining
  type: list
  elements: str
  sample: ["aws-1", "aws-2"]
"""
