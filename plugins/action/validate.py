# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.validate: check the whole mesh on the controller, touch no host.

The checks are the one path every playbook that reads a mesh takes (``plugin_utils/validate.py``
``check_mesh``); this action adds what only a run knows: a key rotation under --limit, the
machines connect.yml is about to add as peers (``connecting``), and (``group_only``) whether the
group the playbooks' plays run on exists at all.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, host_subject
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import read_families
from ansible_collections.kilo.mesh.plugins.module_utils.options import OPTIONS, SCOPES
from ansible_collections.kilo.mesh.plugins.plugin_utils import ansible_internals
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import connect_peer, missing_result
from ansible_collections.kilo.mesh.plugins.plugin_utils.mesh import stand_in_key
from ansible_collections.kilo.mesh.plugins.plugin_utils.validate import (
    check_names,
    check_rotation,
    converged_together,
    mesh_hosts,
)


# Stand-in keys of connecting machines without one yet: numbered apart from the hosts' (1, 2, ...).
CONNECTING_KEYS = 10**12


class ActionModule(KiloAction):
    _requires_connection = False
    # the options of every role and module: each host's are checked in every scope
    SCOPES = SCOPES
    EXTRA_SPEC = dict(
        connecting=dict(type="list", elements="str", default=[]),
        group_only=dict(type="bool", default=False),
    )

    def run_kilo(self, args, task_vars):
        if args["group_only"]:
            return self.check_group(task_vars)
        mesh = self.mesh(task_vars, args)
        checked = mesh.checked(self.connecting(task_vars, args, mesh))
        hosts, per_host = checked.hosts, checked.per_host
        check_rotation(hosts, per_host, converged_together(task_vars))
        self.keep_reading(task_vars, args["group"])
        nodes, peers, missing = mesh.nodes, mesh.peers, mesh.missing
        # The play's hosts that stay in the mesh report their key in this run (kilo.mesh.key, next
        # in site.yml): not left out. A host that fails to is warned of by kilo.mesh.topology.
        # connect.yml checks before its first play, on its connecting machines: the mesh's hosts
        # the run admits (--limit) join in its mesh play.
        play = set(task_vars.get("ansible_play_hosts") or ())
        if args["connecting"]:
            admitted = ansible_internals.limit_admits(self.inventory(task_vars), args["group"])
            play |= set(hosts) if admitted is None else admitted
        joining = [
            host for host in missing if host in play and per_host[host]["state"] == "present"
        ]
        result = dict(
            changed=False,
            hosts=len(hosts),
            nodes=len(nodes),
            msg="%d hosts, %d known nodes (%d join in this run), %d peers: valid"
            % (len(hosts), len(nodes), len(joining), len(peers)),
        )
        result.update(missing_result(missing, joining))
        if checked.warnings:  # a relayed mesh's (validate.relay_warnings)
            result["warnings"] = checked.warnings + result.get("warnings", [])
        return result

    def check_group(self, task_vars):
        """The playbooks' plays run on the hosts of ``-e kilo_group`` (else ``kilo``): a play's hosts
        are templated with extra variables alone. Refuse a run where that group has no host (the
        play would match none and the run end at once, nothing done, rc 0), naming the host whose
        inventory kilo_group names another group (``validate.mesh_hosts``)."""
        extra = getattr(task_vars["hostvars"], "extra_vars", lambda: None)()
        if extra is None:  # not told: the variable as this host sees it
            group = self.mesh_group(task_vars)
        else:
            group = extra.get("kilo_group") or OPTIONS["group"]["default"]
        hosts = mesh_hosts(task_vars, group)
        return dict(
            changed=False,
            group=group,
            hosts=len(hosts),
            msg="group %s: %d hosts" % (group, len(hosts)),
        )

    def connecting(self, task_vars, args, mesh):
        """(name, peer) of each machine of ``connecting`` as connect.yml is about to keep it (None:
        it leaves), its key the one the mesh holds for that name, else a stand-in."""
        out = []
        group_hosts = set(task_vars.get("groups", {}).get(args["group"]) or ())
        families = read_families(args.get("subnet"))
        known = dict(
            (p.get("name"), p.get("public_key")) for p in mesh.peers if isinstance(p, dict)
        )
        for host in args["connecting"]:
            if host in group_hosts:
                raise KiloError(
                    "is a node of the mesh (group %r); connect.yml's machines are outside it"
                    % args["group"],
                    host_subject(host),
                    "connect_hosts",
                )
        check_names(args["connecting"], task_vars["hostvars"])
        for index, host in enumerate(args["connecting"]):
            options = self.options_of(task_vars, source=host, scopes=("connect",))
            peer = connect_peer(options, host, families)
            if peer["state"] != "present":
                out.append((peer["name"], None))
                continue
            out.append(
                (
                    peer["name"],
                    dict(
                        name=peer["name"],
                        allowed_ips=peer["allowed_ips"],
                        persistent_keepalive=peer["persistent_keepalive"],
                        public_key=known.get(peer["name"]) or stand_in_key(CONNECTING_KEYS + index),
                    ),
                )
            )
        return out
