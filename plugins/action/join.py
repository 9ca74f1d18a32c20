# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.join: this host's plan on the controller, converged in one call.

The plan comes from a run-once kilo.mesh.topology (``topology_var``, the role's way: the mesh is
computed once per run), else this action computes the mesh itself. Every host of the mesh group
counts, not only the hosts of the play: hosts outside ``--limit`` or unreachable in this run come
from the registry, so their peers survive.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.action.topology import engine_options
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import TopologyError, build_plans
from ansible_collections.kilo.mesh.plugins.module_utils.plan import flat_routes
from ansible_collections.kilo.mesh.plugins.plugin_utils import plan_store
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import mesh_inputs, missing_warning, update_registry


def not_a_node(args):
    return KiloError("not a node of the mesh: it is not in group %r or reported no key (run kilo.mesh.key"
                     " first, or set kilo_public_key and kilo_force_endpoint)" % args["group"])


class ActionModule(KiloAction):
    SCOPES = ("mesh", "inputs", "host")
    EXTRA_SPEC = dict(topology_var=dict(type="str"))

    def run_kilo(self, args, task_vars):
        result = {}
        plan = None
        if args["state"] == "present":
            stored = (task_vars.get(args["topology_var"]) or {}) if args["topology_var"] else {}
            if stored.get("plan_store"):
                plan = plan_store.load(stored["plan_store"], task_vars["inventory_hostname"])
                if plan is None:
                    raise not_a_node(args)
            else:
                plan = self.compute(args, task_vars, result)

        module_args = dict(self.module_args(args, ("host",)), plan=plan,
                           preshared_keys=plan_store.split_preshared_keys(plan))
        converged = self._execute_module(module_name="kilo.mesh.converge", module_args=module_args,
                                         task_vars=task_vars)
        result.update(converged)
        if plan is not None and not converged.get("failed"):
            result.update(segment=plan["segment"], leader=plan["leader"], address=plan.get("address"),
                          peers=len(plan.get("peers", [])), routes=len(flat_routes(plan.get("routes"))))
        return result

    def compute(self, args, task_vars, result):
        """This host's plan from the whole mesh, computed here (a join without the run-once step)."""
        host = task_vars["inventory_hostname"]
        nodes, peers, fresh, missing, registry = mesh_inputs(task_vars, args, self.locations(task_vars, args["group"]))
        try:
            # validates every node and peer first: a bad one is named before this host is
            computed = build_plans(nodes, peers, engine_options(args), only=[host])
        except TopologyError as e:
            if e.field != "only":
                raise
            raise not_a_node(args)
        plan = computed["plans"][host]
        plan_store.mark_roaming([plan], computed)
        if missing:
            result["warnings"] = [missing_warning(missing)]
        # Only this host's fresh facts: parallel workers each write their own entry.
        if not self._task.check_mode and host in fresh:
            update_registry(registry, {host: fresh[host]})
        return plan
