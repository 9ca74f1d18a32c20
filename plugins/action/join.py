# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.join: this host's plan on the controller, converged in one call.

The plan comes from a run-once kilo.mesh.topology (``topology_var``, the role's way: the mesh is
computed once per run), else the mesh reading computes it here (``MeshReading.plan``). Every host
of the mesh group counts, not only the hosts of the play: hosts outside ``--limit`` or unreachable
in this run come from the registry, so their peers survive.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.plan import flat_routes, split_preshared_keys
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction


class ActionModule(KiloAction):
    SCOPES = ("mesh", "inputs", "host")
    EXTRA_SPEC = dict(topology_var=dict(type="str"))

    def run_kilo(self, args, task_vars):
        result = {}
        plan = None
        if args["state"] == "present":
            plan = self.mesh(task_vars, args).plan(task_vars["inventory_hostname"], args["topology_var"], result)

        module_args = dict(self.module_args(args, ("host",)), plan=plan,
                           preshared_keys=split_preshared_keys(plan))
        converged = self._execute_module(module_name="kilo.mesh.converge", module_args=module_args,
                                         task_vars=task_vars)
        result.update(converged)
        if plan is not None and not converged.get("failed"):
            result.update(segment=plan["segment"], leader=plan["leader"], address=plan.get("address"),
                          peers=len(plan.get("peers", [])), routes=len(flat_routes(plan.get("routes"))))
        return result
