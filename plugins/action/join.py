# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.join: this host's plan on the controller, converged in one call.

The plan comes from a run-once kilo.mesh.topology (``topology_var``, the role's way: the mesh is
computed once per run), else the mesh reading computes it here (``MeshReading.plan``). Every host
of the mesh group counts, not only the hosts of the play: hosts outside ``--limit`` or unreachable
in this run come from the registry, so their peers survive.

``takeover`` (``playbooks/migrate.yml``): the host's interface, routes and firewall are another
agent's (Kilo's ``kg``), taken over in place by this one call: the converge refuses to change the
tunnels and takes over the other agent's routes (as ``route_conflict: replace`` would, for this call alone).
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import facts_from_result
from ansible_collections.kilo.mesh.plugins.module_utils.plan import (
    flat_routes,
    split_preshared_keys,
)
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import (
    forget_registry_hosts,
    update_registry,
)
from ansible_collections.kilo.mesh.plugins.plugin_utils.registry_store import shown


def unswitched_keys(task_vars, facts_var, rotation_var, rotating):
    """{new public key: the key its interface still runs} of the ``rotating`` hosts (kilo.mesh.topology
    names them: every hostvars[] look-up computes a host's variables, which a plain run must not pay
    per host and per host) whose key step reported a rotation (``facts_var``) and whose earlier
    converge (``rotation_var``, the role's first converge task) did not succeed: their peers must
    keep the old key until they switch."""
    hostvars, keep = task_vars["hostvars"], {}
    if not facts_var:
        return keep
    for host in rotating:
        facts = hostvars[host].get(facts_var) or {}
        if not (facts.get("rotating") and facts.get("previous_public_key")):
            continue
        switched = hostvars[host].get(rotation_var) or {}
        if (
            switched.get("failed")
            or switched.get("unreachable")
            or switched.get("skipped")
            or "changed" not in switched
        ):
            keep[facts["public_key"]] = facts["previous_public_key"]
    return keep


def keep_unswitched_keys(plan, keep):
    """Put back the old key of peers that did not switch (``unswitched_keys``) in ``plan``."""
    for peer in plan.get("peers") or ():
        if peer.get("public_key") in keep:
            peer["public_key"] = keep[peer["public_key"]]


class ActionModule(KiloAction):
    SCOPES = ("mesh", "plans", "inputs", "host")
    EXTRA_SPEC = dict(
        topology_var=dict(type="str"),
        rotation_var=dict(type="str"),
        takeover=dict(type="bool", default=False),
        forget=dict(type="bool", default=False),
    )

    def run_kilo(self, args, task_vars):
        if args["forget"] and args["state"] != "absent":
            raise KiloError(
                "takes this host out of the registry: only with state absent", "task", "forget"
            )
        result = {}
        plan = None
        if args["state"] == "present":
            plan = self.mesh(task_vars, args).plan(
                task_vars["inventory_hostname"], args["topology_var"], result
            )

        rotation = (
            (task_vars.get(args["topology_var"]) or {}).get("rotation")
            if args["topology_var"]
            else None
        )
        if (
            plan is not None
            and args["rotation_var"]
            and (rotation or {}).get("hosts")
            and not rotation.get("scheduled")
        ):
            keep_unswitched_keys(
                plan,
                unswitched_keys(
                    task_vars, args["facts_var"], args["rotation_var"], rotation["hosts"]
                ),
            )
        module_args = dict(
            self.module_args(args, ("host",)), plan=plan, preshared_keys=split_preshared_keys(plan)
        )
        if args["takeover"] and plan is not None:
            # one call's option, never a kilo_* variable: no agent's configuration or stored plan sees it
            module_args["takeover"] = True
        own = task_vars.get(args["facts_var"]) if args["facts_var"] else None
        if (
            plan is not None
            and self._task.check_mode
            and isinstance(own, dict)
            and own.get("pending")
        ):
            # check mode: the stand-in key of a key the key step would make or rotate, so the diff
            # shows the switch (a rotating host reported ok before)
            module_args["pending_public_key"] = own.get("public_key")
        if plan is not None and rotation and rotation.get("at") and not self._task.check_mode:
            # the rotating hosts switch first (leaders one by one), their peers a step after the last
            # (kilo.mesh.topology's schedule)
            module_args["switch_at"] = rotation["moments"].get(
                task_vars["inventory_hostname"], rotation["peers_at"]
            )
        elif plan is not None and args["topology_var"] and not self._task.check_mode:
            # beyond Kilo: the NAT'd leaders moving a pair between a relay and a direct path move at
            # one instant (kilo.mesh.topology's direct_switch, kilo_direct_paths: always)
            switch = (task_vars.get(args["topology_var"]) or {}).get("direct_switch") or {}
            if switch.get("at") and task_vars["inventory_hostname"] in switch.get("hosts", ()):
                module_args["switch_at"] = switch["at"]
        converged = self.converge(module_args, task_vars)
        result.update(converged)
        if (
            plan is not None
            and not converged.get("failed")
            and not self._task.check_mode
            and isinstance(own, dict)
            and own.get("rotating")
        ):
            # switched: the registry takes the new key now (until here it named the one the
            # interface ran: inputs.registry_facts)
            update_registry(
                self.mesh(task_vars, args).registry_file,
                {task_vars["inventory_hostname"]: facts_from_result(own)},
            )
        if args["forget"] and not converged.get("failed"):
            self.forget(args, task_vars, result)
        if plan is not None and not converged.get("failed"):
            result.update(
                segment=plan["segment"],
                leader=plan["leader"],
                address=plan.get("address"),
                peers=len(plan.get("peers", [])),
                routes=len(flat_routes(plan.get("routes"))),
            )
        return result

    def forget(self, args, task_vars, result):
        """This host out of the registry (``forget``), once its state is removed; in check mode,
        what would go."""
        host = task_vars["inventory_hostname"]
        path = self.mesh(task_vars, args).registry_file
        if forget_registry_hosts(path, [host], self._task.check_mode):
            result["changed"] = True
            result.setdefault("changes", {})["registry"] = ["forget %s in %s" % (host, shown(path))]
