#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: annotate
short_description: Write on a host's Kubernetes Node the annotations Kilo's agent writes there
version_added: 0.1.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - Runs on the controller only. Writes on the host's Node the C(kilo.squat.ai/*) annotations that Kilo's
    agent owns, in Kilo's formats, so that C(kgctl), Kilo's tooling and the inventory plugin
    P(kilo.mesh.kubernetes#inventory) read the mesh this run made - C(key) (public key), C(endpoint),
    C(internal-ip), C(wireguard-ip) (the leader's WireGuard address, empty on other nodes),
    C(granularity), C(discovered-endpoints) and C(last-seen).
  - The values are those the mesh was computed from in this run - the host's M(kilo.mesh.key) result
    (O(facts_var)), else its registry entry, else what its Node already says - and this host's plan
    (O(topology_var)); without a stored plan the plan is computed as M(kilo.mesh.join) does.
  - All changes go in ONE JSON merge patch of the Node's annotations. The task reports C(changed) only
    when an annotation other than C(last-seen) differs.
  - C(last-seen) is the time of the last run that reached the host. Every run refreshes it (not in
    check mode), in a patch of C(last-seen) alone when nothing else differs; that alone never reports
    C(changed), so a second run reports no change.
  - Operator annotations (location, leader, force-endpoint, ...) and every other annotation are
    never touched.
  - O(state=absent) removes the agent annotations, as Kilo's agent does when it leaves, and those of the
    collection's own that describe the node's part in the mesh (C(kilo.mesh/wireguard-ips), C(kilo.mesh/internal-ips),
    and the agent's C(kilo.mesh/unreachable-leaders), C(kilo.mesh/deposed-at), C(kilo.mesh/next-key)); the
    operator's (location, leader, forced values, C(kilo.mesh/pod-cidrs), C(kilo.mesh/pod-cidr-source)) stay. A Node
    that no longer exists has nothing to remove - no error then (it is one with O(state=present)).
  - A client option not given in the task comes from the host's inventory variable C(kilo_kube) (a mapping
    of these options; the inventory plugin P(kilo.mesh.kubernetes#inventory) sets it to the options of its
    own file, so the write-back reaches the cluster the inventory was read from), else from its
    C(K8S_AUTH_*) environment variable. The old variables C(kilo_kube_<option>) are still read, deprecated.
  - The role C(kilo.mesh.node) runs this after M(kilo.mesh.join) for hosts from the inventory plugin
    P(kilo.mesh.kubernetes#inventory) (those with C(kilo_kubernetes_node)).
extends_documentation_fragment:
  - kilo.mesh.kubernetes
  - kilo.mesh.options.mesh
  - kilo.mesh.options.inputs
  - kilo.mesh.attributes
options:
  node:
    description:
      - Name of the Node to annotate; the inventory hostname when not given.
    type: str
  topology_var:
    description:
      - Name of the variable holding the registered result of a run-once M(kilo.mesh.topology) with
        O(kilo.mesh.topology#module:save_plans=true); this host's plan (its WireGuard IP) is read from there.
      - Without it the plan is computed here, as M(kilo.mesh.join) without O(kilo.mesh.join#module:topology_var) does.
    type: str
  state:
    description:
      - V(present) writes the agent annotations; V(absent) removes them.
      - Defaults to the inventory variable C(kilo_state), then to the default below.
    type: str
    choices: [present, absent]
    default: present
  takeover:
    description:
      - The node changes agents in place (C(playbooks/migrate.yml) moving it from Kilo's C(kg)) - fail, and
        write nothing, when this run would change an annotation the other nodes build their mesh from
        (C(key), C(endpoint), C(internal-ip), C(wireguard-ip), C(granularity)) from what the Node's
        current agent wrote. A Node without a C(key) annotation has nothing to keep.
    type: bool
    default: false
  handback_timeout:
    description:
      - After the write, keep C(last-seen) fresh (every 10 seconds) until another agent writes its own
        value there, for at most this many seconds; fail when none does. For a node handed back to Kilo's
        C(kg) (C(playbooks/migrate.yml -e to=kg)) - C(kg) started on a node whose annotations already say what it
        computes writes C(last-seen) first at its first check-in, 30 seconds after it starts, and the other
        agents drop a node silent for 60 seconds.
      - V(0) writes once.
    type: int
    default: 0
attributes:
  check_mode:
    support: full
    details: Reads the Node, reports whether an annotation would change, sends no patch.
  diff_mode:
    support: full
    details: Shows the agent annotations (without C(last-seen)) before and after.
notes:
  - The identity needs C(get) and C(patch) on C(nodes) (the ClusterRole of C(manifests/rbac.yaml)).
  - Do not run Kilo's agent on the same cluster at the same time; between runs no agent refreshes
    C(last-seen), so Kilo's agents would drop these nodes after a minute.
seealso:
  - module: kilo.mesh.join
  - module: kilo.mesh.key
"""

EXAMPLES = r"""
# After kilo.mesh.key (registered as kilo_host), the run-once kilo.mesh.topology with save_plans
# (registered as kilo_mesh) and kilo.mesh.join, as the role kilo.mesh.node does:
- name: Write back what Kilo's agent would write on the host's Node
  kilo.mesh.annotate:
    facts_var: kilo_host
    topology_var: kilo_mesh
    kubeconfig: ~/.kube/prod.yaml
  when: kilo_kubernetes_node is defined

- name: Remove the agent annotations of a Node named differently from its host
  kilo.mesh.annotate:
    node: worker-7.example.com
    state: absent
"""

RETURN = r"""
node:
  description: Name of the Node.
  returned: success
  type: str
  sample: "aws-1"
annotations:
  description: The agent annotations of the Node after the task (without C(last-seen)); in check mode, what they would be.
  returned: success
  type: dict
  sample: {"kilo.squat.ai/key": "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls=", "kilo.squat.ai/endpoint": "203.0.113.11:51820",
           "kilo.squat.ai/internal-ip": "172.16.1.1/24", "kilo.squat.ai/wireguard-ip": "10.4.0.1/16",
           "kilo.squat.ai/granularity": "location", "kilo.squat.ai/discovered-endpoints": "{}"}
last_seen:
  description: Unix time written to C(kilo.squat.ai/last-seen) (not written in check mode); null with O(state=absent).
  returned: success
  type: int
  sample: 1764288000
handed_back:
  description: With O(handback_timeout), the C(last-seen) the other agent wrote and the seconds waited for it.
  returned: when O(handback_timeout) is set and the task wrote
  type: dict
  sample: {"last_seen": 1764270000, "waited": 21.4}
"""
