# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.status: a host's WireGuard status, or (summary) the mesh-wide table.

On a host: the interface comes from ``kilo_interface`` as for every module; the mesh size for
Kilo's kilo_nodes / kilo_peers gauges and the location come from the inventory, the segment from
the engine (the mesh reading's node of this host), then the module reads the host. With ``summary`` (run_once): no host call, the registered
results of every play host become one table (plugin_utils/status_summary.py), with the
engine's ``paths`` of a mesh with segments behind NAT (PATHS).
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.options import status_spec
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.status_summary import summary


class ActionModule(KiloAction):
    def spec(self):
        return status_spec()

    def run_kilo(self, args, task_vars):
        host = task_vars.get("inventory_hostname")
        # the mesh's options as this host's variables give them (the task's own are the module's)
        mesh = self.mesh(
            task_vars, self.options_of(task_vars, source=host, scopes=("mesh", "inputs"))
        )
        peers = mesh.peers
        if args["summary"]:
            return self.summary(args, task_vars, peers, mesh.registry, mesh)
        locations = mesh.locations or {}
        if args["mesh_nodes"] is None and locations:
            args["mesh_nodes"] = len(locations)
        if args["mesh_peers"] is None:
            args["mesh_peers"] = len(peers)
        result = self._execute_module(
            module_name="kilo.mesh.status", module_args=args, task_vars=task_vars
        )
        if result.get("failed") or result.get("skipped"):
            return result
        # as the host's node has it: kilo_location when set (even empty), else its location group
        result["location"] = mesh.location(host)
        # the engine's (a node without an internal IP is a segment of its own); None when the
        # host is no node of the mesh (no key reported, none in the registry or on its Node)
        result["segment"] = mesh.segment(host)
        return result

    def summary(self, args, task_vars, peers, registry, mesh=None):
        hosts = task_vars.get("ansible_play_hosts_all") or []
        results = {}
        for host in hosts:
            found, value = self.variable(task_vars, host, args["status_var"])
            results[host] = value if found and isinstance(value, dict) else None
        # names of public keys: outside peers, the registry (a host whose interface is gone
        # reports no key of its own), then the hosts' own results (in summary())
        names = dict(
            (p.get("public_key"), p.get("name"))
            for p in peers
            if isinstance(p, dict) and p.get("public_key")
        )
        for host, facts in registry["hosts"].items():
            if isinstance(facts, dict) and facts.get("public_key"):
                names[facts["public_key"]] = host
        out = summary(results, names, engine_paths(mesh))
        done = dict(
            changed=False,
            lines=out["lines"],
            leaders=out["leaders"],
            stale=out["stale"],
            unreported=out["unreported"],
            hosts=out["hosts"],
            tunnels=out["tunnels"],
        )
        if out["paths"]:
            done["paths"] = [
                dict(
                    a=a, b=b, path=path, via=None if via == "-" else via, handshake=age, probe=probe
                )
                for a, b, path, via, age, probe in out["paths"]
            ]
        return done


def engine_paths(mesh):
    """The engine's ``paths`` (a mesh with segments behind NAT), None without them or when the mesh
    does not compute here (a summary still shows what the hosts report)."""
    if mesh is None:
        return None
    try:
        return mesh.computed(only=[]).get("paths")
    except (KiloError, ValueError, KeyError, TypeError):
        return None
