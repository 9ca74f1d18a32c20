# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.graph: the mesh as a Graphviz picture, like ``kgctl graph``.

The mesh comes from the inventory and the registry as for kilo.mesh.topology; the DOT text is
module_utils/engine/topology_graph.py's, rendered by Graphviz's ``dot`` on the controller when a file
of format svg, png or pdf is asked for. Touches no host.
"""

from __future__ import annotations

import os

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.status import write_atomic
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology_graph import (
    FORMATS, LAYOUTS, MESH_EDGES, GraphError, format_of, layout_for, render, to_dot, uses_hub)
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import missing_result


class ActionModule(KiloAction):
    _requires_connection = False
    SCOPES = ("mesh", "inputs")
    EXTRA_SPEC = dict(dest=dict(type="path"), format=dict(type="str", choices=list(FORMATS)),
                      layout=dict(type="str", default="auto", choices=list(LAYOUTS)),
                      mesh_edges=dict(type="str", default="auto", choices=list(MESH_EDGES)))

    def run_kilo(self, args, task_vars):
        mesh = self.mesh(task_vars, args)
        computed = mesh.computed()
        text = to_dot(computed, args["mesh_edges"])
        result = dict(changed=False, graph=text, segments=len(computed["segments"]), nodes=len(mesh.nodes),
                      peers=len(computed["peers"]), hub=uses_hub(computed, args["mesh_edges"]))
        dest = args["dest"]
        fmt = format_of(dest, args["format"])
        result.update(format=fmt, layout=layout_for(text, args["layout"]) if fmt != "dot" else None)
        if dest:
            dest = os.path.abspath(dest)
            try:
                data, argv = render(text, fmt, args["layout"])
            except GraphError as e:
                raise KiloError(str(e), "graph", "dest")
            result.update(dest=dest, command=argv and " ".join(argv[1:]),
                          changed=write_atomic(dest, data, check_mode=self._task.check_mode))
        result.update(missing_result(mesh.missing))
        return result
