# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.prepare: fill the options from the inventory, choose the port, run the module.

``state: absent`` (a task argument only) removes what the module wrote that is ours.
The port to open is the one WireGuard listens on: the port of the host's kilo_force_endpoint
when that is set (the engine makes the host listen there), else kilo_port, else 51820.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.options import STATE_SPEC, argument_spec
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction


class ActionModule(KiloAction):
    SCOPES = ("prepare",)
    EXTRA_SPEC = {"port": argument_spec("mesh")["port"], "state": STATE_SPEC}

    def run_kilo(self, args, task_vars):
        if "state" not in self._task.args:
            # a task argument only: the table's kilo_state (a node leaving the mesh) never reaches it
            args["state"] = "present"
        if args["state"] == "absent":  # nothing to probe: no port, no package, no sysctl wanted
            return self._execute_module(
                module_name="kilo.mesh.prepare",
                module_args={"state": "absent"},
                task_vars=task_vars,
            )
        args["port"] = self.listen_port(args, task_vars)
        return self._execute_module(
            module_name="kilo.mesh.prepare", module_args=args, task_vars=task_vars
        )
