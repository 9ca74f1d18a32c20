# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.join: compute this host's plan on the controller, converge it in one call.

Every host of the mesh group counts, not only the hosts of the play: hosts outside
``--limit`` or unreachable in this run come from the registry, so their peers survive.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.action.topology import engine_options
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.topology import TopologyError, build_plans
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import mesh_inputs, missing_warning, update_registry


def split_preshared_keys(plan):
    """Take the preshared keys out of the plan: the module gets them in a no_log option."""
    keys = {}
    for peer in (plan or {}).get("peers", []):
        if peer.get("preshared_key"):
            keys[peer["public_key"]] = peer.pop("preshared_key")
    return keys


def mark_roaming(plan, computed):
    """Flag WireGuard peers whose remote end sends keepalives (Kilo's NAT case).

    For those, the host keeps an endpoint WireGuard learned while handshakes are fresh
    instead of resetting it to the configured one; the plan itself stays Kilo's.
    """
    keepalive = dict((s.get("public_key"), s.get("persistent_keepalive") or 0) for s in computed.get("segments", []))
    keepalive.update((p.get("public_key"), p.get("persistent_keepalive") or 0) for p in computed.get("peers", []))
    for peer in plan.get("peers", []):
        if keepalive.get(peer["public_key"], 0) > 0:
            peer["roaming"] = True


class ActionModule(KiloAction):
    SCOPES = ("mesh", "inputs", "host")

    def run_kilo(self, args, task_vars):
        host = task_vars["inventory_hostname"]
        result = {}
        plan = None
        if args["state"] == "present":
            nodes, peers, fresh, missing, registry = mesh_inputs(task_vars, args, self.locations(task_vars, args["group"]))
            try:
                # validates every node and peer first: a bad one is named before this host is
                computed = build_plans(nodes, peers, engine_options(args), only=[host])
            except TopologyError as e:
                if e.field != "only":
                    raise
                raise KiloError("not a node of the mesh: it is not in group %r or reported no key (run kilo.mesh.key"
                                " first, or set kilo_public_key and kilo_force_endpoint)" % args["group"])
            plan = computed["plans"][host]
            mark_roaming(plan, computed)
            if missing:
                result["warnings"] = [missing_warning(missing)]
            # Only this host's fresh facts: parallel workers each write their own entry.
            if not self._task.check_mode and host in fresh:
                update_registry(registry, {host: fresh[host]})

        module_args = dict(self.module_args(args, ("host",)), plan=plan, preshared_keys=split_preshared_keys(plan))
        converged = self._execute_module(module_name="kilo.mesh.converge", module_args=module_args,
                                         task_vars=task_vars)
        result.update(converged)
        if plan is not None and not converged.get("failed"):
            result.update(segment=plan["segment"], leader=plan["leader"], address=plan.get("address"),
                          peers=len(plan.get("peers", [])), routes=len(plan.get("routes", [])))
        return result
