# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.topology: compute every node's plan on the controller."""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.options import names
from ansible_collections.kilo.mesh.plugins.module_utils.topology import build_plans, peer_config
from ansible_collections.kilo.mesh.plugins.module_utils.topology_graph import to_dot
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import mesh_inputs, missing_warning


def wireguard_sections(entries):
    """[Peer] sections in wg-quick syntax; a preshared key is named, never printed."""
    lines = []
    for entry in entries:
        lines += ["[Peer]", "# %s" % entry["name"], "PublicKey = %s" % entry["public_key"],
                  "AllowedIPs = %s" % ", ".join(entry["allowed_ips"])]
        if entry.get("endpoint"):
            lines.append("Endpoint = %s" % entry["endpoint"])
        if entry.get("persistent_keepalive"):
            lines.append("PersistentKeepalive = %d" % entry["persistent_keepalive"])
        if entry.get("preshared_key"):
            lines.append("# PresharedKey = (this peer's preshared key from kilo_peers)")
        lines.append("")
    return "\n".join(lines)


def engine_options(args):
    """The options the topology engine reads (Kilo's flags)."""
    return dict((k, args[k]) for k in names("mesh"))


class ActionModule(KiloAction):
    _requires_connection = False
    SCOPES = ("mesh", "inputs")
    EXTRA_SPEC = dict(peer=dict(type="str"))

    def run_kilo(self, args, task_vars):
        nodes, peers, dummy, missing, dummy = mesh_inputs(task_vars, args, self.locations(task_vars, args["group"]))
        computed = build_plans(nodes, peers, engine_options(args))
        sections = peer_config(nodes, peers, args["peer"], engine_options(args)) if args["peer"] else None
        result = dict(changed=False, plans=computed["plans"], segments=computed["segments"], graph=to_dot(computed))
        if sections is not None:
            # Like `kgctl showconf peer NAME`: what the peer itself needs, keys masked.
            for entry in sections:
                if entry.pop("preshared_key", None):
                    entry["preshared_key"] = True
            result.update(peer_config=sections, peer_conf=wireguard_sections(sections))
        if missing:
            result["missing"] = missing
            result["warnings"] = [missing_warning(missing)]
        # Preshared keys stay off the output; kilo.mesh.join passes them to the host itself.
        for plan in computed["plans"].values():
            for peer in plan.get("peers", []):
                peer.pop("preshared_key", None)
        return result
