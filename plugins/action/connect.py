# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.connect: a machine outside the mesh converged as one of its peers (kgctl connect).

The machine's own options (interface, backend, MTU, ``kilo_connect_*``) come from its variables;
the mesh's (granularity, subnet, port, group, registry, peers) from the mesh group's first host,
as every controller-side action reads them. The plan (``module_utils/engine/connect.py``) is converged in
one ``kilo.mesh.converge`` call, as a node's; ``connect_state: absent`` removes what we own there.
"""

from __future__ import annotations

import json

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, host_subject
from ansible_collections.kilo.mesh.plugins.module_utils.engine.connect import connect_plan
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import mesh_families, read_families
from ansible_collections.kilo.mesh.plugins.module_utils.plan import (
    flat_routes,
    split_preshared_keys,
)
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import connect_peer, missing_warning


class ActionModule(KiloAction):
    SCOPES = ("host", "connect")
    EXTRA_SPEC = dict(
        group=dict(type="str"),
        step=dict(type="str", choices=["peer", "converge"], default="converge"),
        kubernetes=dict(type="bool", default=False),
        public_key=dict(type="str", no_log=False),
        mesh_facts_var=dict(type="str"),
    )

    def run_kilo(self, args, task_vars):
        host = task_vars["inventory_hostname"]
        group = self.mesh_group(task_vars, args)
        if host in task_vars.get("groups", {}).get(group, []):
            raise KiloError(
                "is a node of the mesh (group %r); kilo.mesh.connect is for machines outside it"
                % group,
                host_subject(host),
                "group",
            )
        if args["step"] == "peer":
            # a mesh with Kubernetes client options (kilo_kube: the inventory plugin sets it) keeps its peers
            # as Peer resources, which it reads back
            kube = (
                args["kubernetes"]
                or self.variable(task_vars, self.mesh_source(task_vars, args), "kilo_kube")[1]
                is not None
            )
            return dict(
                changed=False,
                peer=self.peer(dict(args, kubernetes=kube), host, self.families(task_vars, group)),
            )
        settings = self.module_args(args, ("host",))
        settings["state"] = args["connect_state"]
        result = {}
        plan = None
        if args["connect_state"] == "present":
            plan = self.plan(args, task_vars, host, group, result)
        module_args = dict(settings, plan=plan, preshared_keys=split_preshared_keys(plan))
        result.update(self.converge(module_args, task_vars))
        if plan is not None and not result.get("failed"):
            result.update(
                address=plan["address"],
                peers=len(plan["peers"]),
                routes=len(flat_routes(plan["routes"])),
            )
        return result

    def families(self, task_vars, group):
        """The IP versions of the mesh's two subnets when it is dual-stack, else () (the mesh
        group's first host's ``kilo_subnet``, as every controller action reads the mesh's options):
        whether this machine may hold an address of each family."""
        members = task_vars.get("groups", {}).get(group) or []
        if not members:
            return ()
        return read_families(
            self.options_of(task_vars, source=members[0], scopes=("mesh",))["subnet"]
        )

    @staticmethod
    def peer(args, host, families=()):
        """The arguments of kilo.mesh.peer for this machine (the role passes them on); in a
        dual-stack mesh (``families``) its allowed IPs may be one of each family."""
        return connect_peer(args, host, families, args["kubernetes"])

    def plan(self, args, task_vars, host, group, result):
        members = task_vars.get("groups", {}).get(group) or []
        if not members:
            raise KiloError(
                "no host in group %r: there is no mesh to connect to" % group,
                host_subject(host),
                "kilo_group",
            )
        options = self.options_of(task_vars, source=members[0], scopes=("mesh", "inputs"))
        options["group"] = group
        if self._task.check_mode and args["mesh_facts_var"]:
            # check mode writes no registry: the mesh's keys as this run's key step reported them
            # (a key it would rotate as its stand-in), so the diff shows what the run would change
            # here, as the mesh hosts' own check mode does. A real run reads the registry, which
            # names each host's key once its converge switched (inputs.registry_facts).
            options["facts_var"] = args["mesh_facts_var"]
        mesh = self.mesh(task_vars, options)
        nodes, peers = mesh.nodes, list(mesh.peers)
        if mesh.missing:
            result["warnings"] = [missing_warning(mesh.missing)]
        peer = self.peer(args, host, mesh_families(options["subnet"]))
        if args["public_key"] and not any(p.get("name") == peer["name"] for p in peers):
            # this run's key, before the store shows it (check mode; a cluster the inventory read earlier)
            peers.append(
                dict(
                    name=peer["name"],
                    public_key=args["public_key"],
                    allowed_ips=peer["allowed_ips"],
                    persistent_keepalive=peer["persistent_keepalive"],
                )
            )
        # the machine listens where its kilo.mesh.key step checked the port (the key scope's
        # options from its own variables, as that step read them)
        port = self.listen_port(self.options_of(task_vars, source=host, scopes=("key",)), task_vars)
        try:
            return connect_plan(
                nodes,
                peers,
                dict(mesh.options, interface=args["interface"]),
                host,
                peer["name"],
                args["connect_allowed_ip"],
                extra=args["connect_allowed_ips"],
                via=args["connect_via"],
                port=port,
                main_routes=lambda: self.main_routes(host),
            )
        except KiloError as e:  # a node's field, as its host's variable
            raise mesh.as_inventory_error(e)

    def main_routes(self, host):
        """The machine's main table (`ip -j route show`), read only when a route through the
        interface would cover a leader's endpoint (an exit, or an endpoint inside an allowed IP)."""
        routes = []
        for family in (4, 6):
            out = self._low_level_execute_command("ip -j -%d route show table main" % family)
            if out.get("rc") != 0:
                raise KiloError(
                    "cannot read the main routing table: %s" % (out.get("stderr") or "").strip(),
                    host_subject(host),
                    "kilo_connect_allowed_ips",
                )
            # a default route's "dst" does not say its family
            routes.extend(dict(r, family=family) for r in json.loads(out.get("stdout") or "[]"))
        return routes
