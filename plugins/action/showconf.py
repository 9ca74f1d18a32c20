# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.showconf: a node's or a peer's WireGuard configuration, like ``kgctl showconf``.

The mesh comes from the inventory and the registry as for kilo.mesh.topology; the engine and
plugin_utils/showconf.py do the rest; with ``dest`` the configuration is written on the
controller (plugin_utils/output.py's rule). Runs on the controller only.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.plugin_utils.showconf import FORMATS, showconf
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import missing_result
from ansible_collections.kilo.mesh.plugins.plugin_utils.output import output_path, write_output


class ActionModule(KiloAction):
    _requires_connection = False
    SCOPES = ("mesh", "inputs", "output")
    EXTRA_SPEC = dict(
        node=dict(type="str"),
        peer=dict(type="str"),
        as_peer=dict(type="bool", default=False),
        allowed_ips=dict(type="list", elements="str", default=[]),
        format=dict(type="str", default=FORMATS[0], choices=list(FORMATS)),
        dest=dict(type="path"),
    )

    def run_kilo(self, args, task_vars):
        dest = args["dest"] and output_path(
            args["dest"], args["output_dir"], task_vars.get("ansible_inventory_sources")
        )
        mesh = self.mesh(task_vars, args)
        mesh.checked()  # the one check of the whole mesh (plugin_utils/validate.py), as every reader
        result = dict(changed=False)
        result.update(
            showconf(
                mesh.nodes,
                mesh.peers,
                mesh.options,
                node=args["node"],
                peer=args["peer"],
                as_peer=args["as_peer"],
                allowed_ips=args["allowed_ips"],
                output=args["format"],
            )
        )
        # for people: Ansible's default callback prints a list one line per line, a text as one escaped string
        result["lines"] = result["config"].splitlines()
        if dest:
            result.update(
                dest=dest,
                changed=write_output(dest, result["config"], check_mode=self._task.check_mode),
            )
        result.update(missing_result(mesh.missing))
        return result
