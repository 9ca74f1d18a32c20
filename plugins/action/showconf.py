# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.showconf: a node's or a peer's WireGuard configuration, like ``kgctl showconf``.

The mesh comes from the inventory and the registry as for kilo.mesh.topology; the engine and
module_utils/engine/showconf.py do the rest. Runs on the controller only.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.engine.showconf import FORMATS, showconf
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import missing_result


class ActionModule(KiloAction):
    _requires_connection = False
    SCOPES = ("mesh", "inputs")
    EXTRA_SPEC = dict(node=dict(type="str"), peer=dict(type="str"), as_peer=dict(type="bool", default=False),
                      allowed_ips=dict(type="list", elements="str", default=[]),
                      format=dict(type="str", default=FORMATS[0], choices=list(FORMATS)))

    def run_kilo(self, args, task_vars):
        mesh = self.mesh(task_vars, args)
        mesh.checked()  # the one check of the whole mesh (plugin_utils/validate.py), as every reader
        result = dict(changed=False)
        result.update(showconf(mesh.nodes, mesh.peers, mesh.options, node=args["node"], peer=args["peer"],
                               as_peer=args["as_peer"], allowed_ips=args["allowed_ips"], output=args["format"]))
        result.update(missing_result(mesh.missing))
        return result
