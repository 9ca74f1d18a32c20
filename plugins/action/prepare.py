# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.prepare: fill the options from the inventory, choose the port, run the module.

The port to open is the one WireGuard listens on: the port of the host's kilo_force_endpoint
when that is set (the engine makes the host listen there), else kilo_port, else 51820.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.options import argument_spec
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction


class ActionModule(KiloAction):
    SCOPES = ("prepare",)
    EXTRA_SPEC = {"port": argument_spec("mesh")["port"]}

    def run_kilo(self, args, task_vars):
        args["port"] = self.listen_port(args, task_vars)
        return self._execute_module(module_name="kilo.mesh.prepare", module_args=args, task_vars=task_vars)
