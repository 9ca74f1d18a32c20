# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.status: a host's WireGuard status, or (summary) the mesh-wide table.

On a host: the interface comes from ``kilo_interface`` as for every module; the mesh size for
Kilo's kilo_nodes / kilo_peers gauges, the location and the segment come from the inventory,
then the module reads the host. With ``summary`` (run_once): no host call, the registered
results of every play host become one table (module_utils/host/status.py).
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.status import summary
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import mesh_peers, read_registry, registry_path


class ActionModule(KiloAction):

    def spec(self):
        from ansible_collections.kilo.mesh.plugins.modules.status import spec
        return spec()

    def inventory(self, task_vars, host, name, default):
        found, value = self.variable(task_vars, host, name)
        return value if found and value is not None else default

    def run_kilo(self, args, task_vars):
        host = task_vars.get("inventory_hostname")
        group = self.inventory(task_vars, host, "kilo_group", "kilo")
        peers = self.inventory(task_vars, host, "kilo_peers", []) or []
        if not isinstance(peers, list):
            raise KiloError("a list of peers expected", "host %r" % host, "kilo_peers")
        found, path = self.variable(task_vars, host, "kilo_registry")
        registry = read_registry(registry_path(task_vars, path if found else None, group))
        peers = mesh_peers([p for p in peers if isinstance(p, dict)], registry)
        if args["summary"]:
            return self.summary(args, task_vars, peers, registry)
        locations = self.locations(task_vars, group) or {}
        if args["mesh_nodes"] is None and locations:
            args["mesh_nodes"] = len(locations)
        if args["mesh_peers"] is None:
            args["mesh_peers"] = len(peers)
        result = self._execute_module(module_name="kilo.mesh.status", module_args=args, task_vars=task_vars)
        if result.get("failed") or result.get("skipped"):
            return result
        location = locations.get(host)
        found, forced = self.variable(task_vars, host, "kilo_location")
        if found and forced:
            location = forced
        granularity = self.inventory(task_vars, host, "kilo_granularity", "location")
        result["location"] = location
        # the engine's segment key (a node without an internal IP is its own segment there too)
        result["segment"] = ("location:%s" % location) if granularity == "location" and location else "node:%s" % host
        return result

    def summary(self, args, task_vars, peers, registry):
        hosts = task_vars.get("ansible_play_hosts_all") or []
        results = {}
        for host in hosts:
            found, value = self.variable(task_vars, host, args["status_var"])
            results[host] = value if found and isinstance(value, dict) else None
        # names of public keys: outside peers, the registry (a host whose interface is gone
        # reports no key of its own), then the hosts' own results (in summary())
        names = dict((p.get("public_key"), p.get("name")) for p in peers if isinstance(p, dict) and p.get("public_key"))
        for host, facts in registry["hosts"].items():
            if isinstance(facts, dict) and facts.get("public_key"):
                names[facts["public_key"]] = host
        out = summary(results, names)
        return dict(changed=False, lines=out["lines"], leaders=out["leaders"], stale=out["stale"],
                    unreported=out["unreported"], hosts=out["hosts"], tunnels=out["tunnels"])
