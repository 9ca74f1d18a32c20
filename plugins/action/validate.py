# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.validate: check the whole mesh on the controller, touch no host."""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, host_subject
from ansible_collections.kilo.mesh.plugins.module_utils.options import OPTIONS
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import missing_result
from ansible_collections.kilo.mesh.plugins.plugin_utils.validate import (
    agree, check_node_vars, check_rotation, check_topology, converged_together, one_location_each)


# A live tunnel handshakes every 120 s (WireGuard's REKEY_AFTER_TIME); anything shorter than
# this would call healthy leaders stale between two handshakes.
MIN_HANDSHAKE_BOUND = 180


class ActionModule(KiloAction):
    _requires_connection = False
    SCOPES = ("mesh", "inputs", "host", "key", "prepare", "run")

    def run_kilo(self, args, task_vars):
        hosts = task_vars["groups"].get(args["group"], [])
        # each host's variables, checked as that host's actions will read them (the table's bounds too)
        per_host = dict((host, self.options_of(task_vars, source=host)) for host in hosts)
        for host, opts in per_host.items():
            bound = opts["leader_handshake_timeout"]
            if 0 < bound < MIN_HANDSHAKE_BOUND:
                raise KiloError("%d s is below WireGuard's rekey interval (a live tunnel handshakes every 120 s);"
                                " use 0 (off) or at least %d" % (bound, MIN_HANDSHAKE_BOUND),
                                host_subject(host), OPTIONS["leader_handshake_timeout"]["var"])
        agree(per_host)
        check_rotation(hosts, per_host, converged_together(task_vars))
        groups = self.location_groups(task_vars, args["group"])
        one_location_each(groups, task_vars["hostvars"])
        check_node_vars(hosts, task_vars["hostvars"])
        mesh = self.mesh(task_vars, args, location_groups=groups)
        nodes, peers, missing = mesh.nodes, mesh.peers, mesh.missing
        check_topology(nodes, peers, mesh.options, task_vars["hostvars"], hosts[0] if hosts else None)
        self.keep_reading(task_vars, args["group"])
        # The play's hosts that stay in the mesh report their key in this run (kilo.mesh.key, next
        # in site.yml): not left out. A host that fails to is warned of by kilo.mesh.topology.
        play = set(task_vars.get("ansible_play_hosts") or ())
        joining = [host for host in missing if host in play and per_host[host]["state"] == "present"]
        result = dict(changed=False, hosts=len(hosts), nodes=len(nodes),
                      msg="%d hosts, %d known nodes (%d join in this run), %d peers: valid"
                      % (len(hosts), len(nodes), len(joining), len(peers)))
        result.update(missing_result(missing, joining))
        return result
