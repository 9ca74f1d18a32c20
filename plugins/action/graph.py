# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.graph: the mesh as a Graphviz picture, like ``kgctl graph``.

The mesh comes from the inventory and the registry as for kilo.mesh.topology; the DOT text is
module_utils/engine/graph.py's, rendered by Graphviz's ``dot`` on the controller when a file
of format svg, png or pdf is asked for; the file's place is plugin_utils/output.py's rule. Touches
no host.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.engine.graph import (
    FORMATS,
    LAYOUTS,
    MESH_EDGES,
    GraphError,
    format_of,
    layout_for,
    render,
    to_dot,
    uses_hub,
)
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import missing_result
from ansible_collections.kilo.mesh.plugins.plugin_utils.output import output_path, write_output


class ActionModule(KiloAction):
    _requires_connection = False
    SCOPES = ("mesh", "inputs", "output")
    EXTRA_SPEC = dict(
        dest=dict(type="path"),
        format=dict(type="str", choices=list(FORMATS)),
        layout=dict(type="str", default="auto", choices=list(LAYOUTS)),
        mesh_edges=dict(type="str", default="auto", choices=list(MESH_EDGES)),
        stand_ins=dict(type="bool", default=False),
    )

    def run_kilo(self, args, task_vars):
        dest = args["dest"]
        try:
            fmt = format_of(dest, args["format"])  # refused before the mesh is read
        except GraphError as e:
            raise KiloError(str(e), "task", "dest" if dest else "format")
        if dest:
            dest = output_path(dest, args["output_dir"], task_vars.get("ansible_inventory_sources"))
        mesh = self.mesh(task_vars, args, stand_ins=args["stand_ins"])
        computed = mesh.computed(lazy=True)  # the picture reads no plan: none is rendered
        text = to_dot(computed, args["mesh_edges"])
        result = dict(
            changed=False,
            graph=text,
            segments=len(computed["segments"]),
            nodes=len(mesh.nodes),
            peers=len(computed["peers"]),
            hub=uses_hub(computed, args["mesh_edges"]),
        )
        result.update(format=fmt, layout=layout_for(text, args["layout"]) if fmt != "dot" else None)
        if dest:
            try:
                data, argv = render(text, fmt, args["layout"])
            except GraphError as e:
                raise KiloError(str(e), "task", "dest")
            result.update(
                dest=dest,
                command=argv and " ".join(argv[1:]),
                changed=write_output(dest, data, check_mode=self._task.check_mode),
            )
        result.update(missing_result(mesh.missing))
        if args["stand_ins"]:
            result["stand_ins"] = list(mesh.stand_ins)
        result["lines"] = summary_lines(result, self._task.check_mode)
        return result


def summary_lines(result, check_mode=False):
    """What the task did, as lines for people (playbooks/graph.yml prints them)."""
    lines = [
        "%d segments, %d nodes, %d peers" % (result["segments"], result["nodes"], result["peers"])
    ]
    if result.get("dest"):
        how = result["format"] + (", %s layout" % result["layout"] if result.get("layout") else "")
        done = (
            ("would be written" if check_mode else "written") if result["changed"] else "unchanged"
        )
        lines.append("%s: %s (%s)" % (done, result["dest"], how))
    if result.get("stand_ins"):
        lines.append(
            "no key yet, drawn dashed with stand-in keys (still need their first run): %s"
            % ", ".join(result["stand_ins"])
        )
    if result.get("missing"):
        lines.append("left out, no key or endpoint known: %s" % ", ".join(result["missing"]))
    return lines
