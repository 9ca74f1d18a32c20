# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.converge: fill the module's options from the inventory, then run it on the host."""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.plan import CONVERGE_SPEC
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction


class ActionModule(KiloAction):
    SCOPES = ("host",)
    EXTRA_SPEC = CONVERGE_SPEC

    def run_kilo(self, args, task_vars):
        peers = (args.get("plan") or {}).get("peers") or []
        if any(isinstance(p, dict) and p.get("preshared_key") for p in peers):
            # checked here, before the module's arguments are logged on the host
            raise KiloError(
                "peers carry preshared keys; pass them in preshared_keys (no_log) instead", "plan"
            )
        return self.converge(args, task_vars)
