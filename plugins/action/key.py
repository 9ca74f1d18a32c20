# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.key: fill the module's options from the inventory, then run it on the host.

The module checks the host itself (port, subnet, forced internal IP); a host that reports no
usable address and has no forced endpoint fails here, before any converge call.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction


class ActionModule(KiloAction):
    SCOPES = ("key",)

    def run_kilo(self, args, task_vars):
        args["port"] = self.listen_port(args, task_vars)
        result = self._execute_module(module_name="kilo.mesh.key", module_args=args, task_vars=task_vars)
        if result.get("failed") or result.get("skipped"):
            return result
        found, endpoint = self.variable(task_vars, task_vars.get("inventory_hostname"), "kilo_force_endpoint")
        if not (result.get("internal_ip") or result.get("external_ip")) and not (found and endpoint):
            result.update(failed=True, msg="no usable address found by discovery (every address is loopback, link-local"
                          " or on an ignored interface); set kilo_force_endpoint or change kilo_discovery_ignore_interfaces")
        return result
