#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: join
short_description: Compute this host's Kilo plan and converge the host to it in one call
version_added: 0.1.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - On the controller, gathers the public data of every host of the mesh group (this run's
    M(kilo.mesh.key) results, else the registry), computes this host's plan exactly as
    M(kilo.mesh.topology) does, and records this host's public data in the registry (not in check mode).
  - Then converges the host in ONE remote call of M(kilo.mesh.converge) - WireGuard peers by difference,
    addresses, routes, ip rules and firewall.
  - The mesh is the whole group, not the play. A run with C(--limit) never removes or changes the
    peers of hosts outside the limit, and a host that is unreachable in this run keeps its entry everywhere.
  - The whole mesh is validated on the controller before this host is changed, and the host compares
    every part of its state before it applies any.
  - Every option not given in the task is read from the host's inventory variable named in its
    description (C(kilo_*)), else Kilo's default; the role C(kilo.mesh.node) calls this with no options.
  - Formerly C(kilo.mesh.mesh); that name still works and is deprecated.
extends_documentation_fragment:
  - kilo.mesh.options.mesh
  - kilo.mesh.options.plans
  - kilo.mesh.options.inputs
  - kilo.mesh.options.host
  - kilo.mesh.attributes
options:
  topology_var:
    description:
      - Name of the variable holding the registered result of a run-once M(kilo.mesh.topology) with
        O(kilo.mesh.topology#module:save_plans=true). This host's plan is then read from there, so the
        mesh is computed once per run instead of once per host (the role C(kilo.mesh.node) does this).
      - Without it, or when the variable holds no plan store, this action computes the mesh itself.
    type: str
  rotation_var:
    description:
      - Name of the variable holding the registered result of an earlier M(kilo.mesh.join) task that
        converged only the hosts whose key rotates (their M(kilo.mesh.key) result, O(facts_var), says
        C(rotating)); the role C(kilo.mesh.node) runs that task first, so a rotating host switches
        before its peers.
      - A rotating host whose result there is not a success (failed, unreachable, skipped) keeps the
        key its interface still runs in this host's plan, so this host does not cut it off.
    type: str
  takeover:
    description:
      - Take over, in place, a host whose interface, routes and firewall another agent made (Kilo's C(kg),
        stopped without its clean-up), as C(playbooks/migrate.yml) does - fail before anything changes when
        the plan would change the interface's key, port or peers (the two agents must have computed the same
        mesh), and take over that agent's routes at the plan's destinations (as
        O(kilo.mesh.converge#module:route_conflict=replace) would) for this call alone.
      - A task argument only; no inventory variable sets it, so it never reaches an agent's configuration
        or the stored plan of the boot restore.
    type: bool
    default: false
  forget:
    description:
      - With O(state=absent), once this host's state is removed, take its entry out of the registry (where
        hosts outside a run keep their place), so no later run hands this host to its peers. A registry left
        with no host and no peer is deleted, with its lock file. C(playbooks/uninstall.yml) sets it.
      - Without it a host removed with C(kilo_state=absent) keeps its entry, and the other hosts keep it as a peer
        while it stays in the mesh group.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reports exactly what would change and changes nothing.
  diff_mode:
    support: full
    details: Shows peers, addresses, routes, rules and firewall before and after, without keys.
notes:
  - Private and preshared keys never appear in results or diffs.
seealso:
  - module: kilo.mesh.key
  - module: kilo.mesh.topology
  - module: kilo.mesh.converge
"""

EXAMPLES = r"""
- name: Ensure the key and report this host's addresses
  kilo.mesh.key:
  register: kilo_host

- name: Converge the mesh
  kilo.mesh.join:
    encapsulate: never
    backend: userspace

- name: Compute the mesh once for the play
  kilo.mesh.topology:
    facts_var: kilo_host
    save_plans: true
  run_once: true
  register: kilo_mesh

- name: Converge each host with its own plan
  kilo.mesh.join:
    topology_var: kilo_mesh
"""

RETURN = r"""
changes:
  description: What changed (or would change in check mode), by backend.
  returned: always
  type: dict
  sample: {"wireguard": ["add peer location:gcp"], "netstate": ["add route 10.2.0.0/16 via 10.4.0.2 dev kilo0"]}
segment:
  description: This host's segment.
  returned: when state is present
  type: str
  sample: location:aws
leader:
  description: Whether this host leads its segment.
  returned: when state is present
  type: bool
  sample: true
address:
  description: WireGuard address of this host (leaders only).
  returned: when state is present
  type: str
  sample: 10.4.0.1/16
peers:
  description: Number of WireGuard peers in the plan.
  returned: when state is present
  type: int
  sample: 2
routes:
  description: Number of routes in the plan.
  returned: when state is present
  type: int
  sample: 6
"""
