# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.key: fill the module's options from the inventory, then run it on the host.

The module checks the host itself (port, subnet, forced internal IP); a host that reports no
usable address and has no forced endpoint fails here, before any converge call.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, host_subject
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction


class ActionModule(KiloAction):
    SCOPES = ("key",)

    def run_kilo(self, args, task_vars):
        args["port"] = self.listen_port(args, task_vars)
        result = self._execute_module(module_name="kilo.mesh.key", module_args=args, task_vars=task_vars)
        if result.get("failed") or result.get("skipped"):
            return result
        host = task_vars.get("inventory_hostname")
        forced = self.variables(task_vars, host, ["kilo_force_endpoint", "kilo_force_internal_ip"])
        # an endpoint comes from a forced endpoint, else the external IP, else the internal IP
        # (forced or discovered): see inputs.node_from_host
        internal = str(forced.get("kilo_force_internal_ip") or "").strip() not in ("", "-")
        if not (result.get("internal_ip") or result.get("external_ip") or internal or forced.get("kilo_force_endpoint")):
            raise KiloError("no usable address found by discovery (every address is loopback, link-local or on an"
                            " ignored interface); set it or change kilo_discovery_ignore_interfaces",
                            host_subject(host), "kilo_force_endpoint")
        return result
