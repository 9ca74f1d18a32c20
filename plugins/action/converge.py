# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.converge: fill the module's options from the inventory, then run it on the host."""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.module_utils.plan import CONVERGE_SPEC


class ActionModule(KiloAction):
    SCOPES = ("host",)
    EXTRA_SPEC = CONVERGE_SPEC

    def run_kilo(self, args, task_vars):
        return self._execute_module(module_name="kilo.mesh.converge", module_args=args, task_vars=task_vars)
