#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: graph
short_description: Draw the mesh as a Graphviz graph, like kgctl graph, and render it to SVG, PNG or PDF
version_added: 0.1.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - Does what C(kgctl graph) does, from the mesh of the inventory (and the registry) instead of the
    Kubernetes API; runs on the controller only (an action plugin) and touches no host.
  - The DOT text has one dashed cluster per segment (per location under O(granularity=location)), each
    node labelled with its location, name, pod CIDR and internal IP; the leader also with its WireGuard IP
    and endpoint, ranked first and drawn with a double bold outline. Members are linked to their leader,
    leaders to each other, and the outside peers (one dashed cluster) to every leader.
  - Beyond kgctl, for large meshes - with more than six segments (or O(mesh_edges=hub)) the links between
    every pair of leaders (435 at 30 locations) are drawn as one C(WireGuard mesh) node that every leader
    and peer is linked to, and the graph asks for Graphviz's C(fdp) layout, which keeps the clusters.
  - With O(dest), the graph is written there; as the DOT text, or rendered by Graphviz's C(dot) command on
    the controller. Without Graphviz the task fails and says how to install it
    (C(apt install graphviz), C(dnf install graphviz), C(pacman -S graphviz)).
extends_documentation_fragment:
  - kilo.mesh.options.mesh
  - kilo.mesh.options.inputs
  - kilo.mesh.options.output
  - kilo.mesh.attributes
options:
  dest:
    description:
      - File on the controller to write the graph to; a relative path is taken from O(output_dir), else from
        the directory C(ansible-playbook) runs in. Replaced atomically, and only when its content changes.
      - Its extension says the format - C(.dot) or C(.gv) the DOT text, C(.svg), C(.png), C(.pdf) rendered by
        Graphviz; any other name is refused before anything is computed.
      - Without it, the DOT text is returned only (RV(graph)).
    type: path
  format:
    description:
      - V(dot) - the DOT text; V(svg), V(png), V(pdf) - rendered by Graphviz.
      - The extension of O(dest) says it; when given too, the two must agree.
    type: str
    choices: [dot, svg, png, pdf]
  stand_ins:
    description:
      - A preview before every host has run - hosts that reported nothing yet are drawn, dashed and labelled
        as having no key yet, where Kilo would place them (see
        O(kilo.mesh.topology#module:stand_ins)); RV(stand_ins) names them.
    type: bool
    default: false
  layout:
    description:
      - Graphviz layout engine (C(dot -K)). V(auto) is V(dot) (kgctl's picture) and V(fdp) for a
        graph drawn with the mesh node (see O(mesh_edges)).
      - V(circo), V(twopi), V(neato) and V(sfdp) do not draw clusters.
    type: str
    choices: [auto, dot, fdp, neato, circo, twopi, sfdp]
    default: auto
  mesh_edges:
    description:
      - How leaders are linked. V(all) - every pair, as kgctl draws it; V(hub) - one C(WireGuard mesh) node
        for those links; V(auto) - V(all) up to six segments, else V(hub).
    type: str
    choices: [auto, all, hub]
    default: auto
attributes:
  check_mode:
    support: full
    details: The graph is computed and rendered; O(dest) is not written; the task reports changed when it would be.
  diff_mode:
    support: none
    details: Returns a picture, not differences.
seealso:
  - module: kilo.mesh.topology
  - module: kilo.mesh.showconf
  - name: kgctl graph
    description: The Kilo command this module follows.
    link: https://kilo.squat.ai/docs/kgctl/
"""

EXAMPLES = r"""
- name: The mesh as an SVG picture on the controller
  kilo.mesh.graph:
    dest: /tmp/kilo-mesh.svg
  run_once: true

- name: The DOT text only, as kgctl graph prints it (every leader pair linked)
  kilo.mesh.graph:
    mesh_edges: all
  run_once: true
  register: kilo_graph

- name: A PNG with another layout engine
  kilo.mesh.graph:
    dest: /tmp/kilo-mesh.png
    layout: neato
  run_once: true
"""

RETURN = r"""
graph:
  description: The graph in Graphviz's DOT language.
  returned: success
  type: str
  sample: |
    digraph kilo {
      label="10.4.0.0/16";
      ...
    }
format:
  description: The format written to O(dest) (V(dot) without O(dest)).
  returned: success
  type: str
  sample: svg
layout:
  description: The Graphviz layout engine used for rendering; null for V(dot) output.
  returned: success
  type: str
  sample: dot
dest:
  description: The absolute path written (or, in check mode, that would be).
  returned: when O(dest) is given
  type: str
  sample: /home/me/kilo-topology.svg
command:
  description: The Graphviz arguments used (C(-K) engine, C(-T) format), null for V(dot) output.
  returned: when O(dest) is given
  type: str
  sample: -Kdot -Tsvg
hub:
  description: Whether the leader links are drawn as one C(WireGuard mesh) node.
  returned: success
  type: bool
  sample: false
segments:
  description: Number of segments (clusters).
  returned: success
  type: int
  sample: 3
nodes:
  description: Number of nodes drawn.
  returned: success
  type: int
  sample: 6
peers:
  description: Number of outside peers drawn.
  returned: success
  type: int
  sample: 1
missing:
  description: Hosts of the group left out because neither this run nor the registry knows their key or endpoint.
  returned: when any
  type: list
  elements: str
  sample: ["gcp-2"]
stand_ins:
  description: With O(stand_ins), the hosts drawn with stand-in keys - those that still need their first run.
  returned: when O(stand_ins) is true
  type: list
  elements: str
  sample: ["azure-1"]
lines:
  description:
    - What the task did, for people - the counts, the file written, the hosts drawn with stand-ins or left out;
      a list, so Ansible's default output prints one line each.
  returned: success
  type: list
  elements: str
  sample: ["2 segments, 4 nodes, 0 peers", "written: /home/me/kilo-topology.svg (svg, dot layout)"]
"""
