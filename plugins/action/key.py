# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.key: fill the module's options from the inventory, then run it on the host."""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction


class ActionModule(KiloAction):
    SCOPES = ("key",)

    def run_kilo(self, args, task_vars):
        return self._execute_module(module_name="kilo.mesh.key", module_args=args, task_vars=task_vars)
