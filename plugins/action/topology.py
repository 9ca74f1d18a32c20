# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.topology: compute every node's plan on the controller."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kilo.mesh.plugins.module_utils.topology import TopologyError, build_plans, peer_config, to_dot
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import InputError, mesh_inputs, missing_warning
from ansible_collections.kilo.mesh.plugins.plugin_utils.options import TOPOLOGY_SPEC, engine_options

SPEC = dict(TOPOLOGY_SPEC, peer=dict(type="str"))


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


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self.validate_argument_spec(argument_spec=SPEC)[1]
        try:
            nodes, peers, dummy, missing, dummy = mesh_inputs(task_vars, args)
            computed = build_plans(nodes, peers, engine_options(args))
            sections = peer_config(nodes, peers, args["peer"], engine_options(args)) if args["peer"] else None
        except (TopologyError, InputError) as e:
            result.update(failed=True, msg=str(e))
            return result
        result.update(changed=False, plans=computed["plans"], segments=computed["segments"], graph=to_dot(computed))
        if sections is not None:
            # Like `kgctl showconf peer NAME`: what the peer itself needs, keys masked.
            for entry in sections:
                if entry.pop("preshared_key", None):
                    entry["preshared_key"] = True
            result.update(peer_config=sections, peer_conf=wireguard_sections(sections))
        if missing:
            result["missing"] = missing
            result.setdefault("warnings", []).append(missing_warning(missing))
        # Preshared keys stay off the output; kilo.mesh.mesh passes them to the host itself.
        for plan in computed["plans"].values():
            for peer in plan.get("peers", []):
                peer.pop("preshared_key", None)
        return result
