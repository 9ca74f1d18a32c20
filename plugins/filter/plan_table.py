# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""A filter for people: the plans as a table (the DOT picture is kilo.mesh.topology's C(graph))."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: plan_table
short_description: Render kilo.mesh.topology's result as a readable table
version_added: 0.1.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - One line per node - location, segment, leader or not, WireGuard IP (both, comma-separated, in a
    dual-stack mesh), the names of its WireGuard peers, and its route and rule counts.
positional: _input
options:
  _input:
    description: The registered result of M(kilo.mesh.topology).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Print the plans
  ansible.builtin.debug:
    msg: "{{ mesh | kilo.mesh.plan_table }}"
"""

RETURN = r"""
_value:
  description: The table, one line per node.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kilo.mesh.plugins.module_utils.plan import as_list, flat_routes


def plan_table(result):
    """Plans as a text table: who leads, their WireGuard IPs, each host's peers and routes."""
    if not isinstance(result, dict) or "plans" not in result:
        raise AnsibleFilterError("plan_table expects the registered result of kilo.mesh.topology")
    location_of = {}
    for segment in result.get("segments", []):
        for node in segment.get("nodes", []):
            location_of[node] = segment.get("location") or ""
    header = ("node", "location", "segment", "leader", "wireguard ip", "peers", "routes", "rules")
    rows = [header]
    for name in sorted(result["plans"]):
        plan = result["plans"][name]
        peers = ", ".join(p["name"] for p in plan.get("peers", [])) or "-"
        rows.append((name, location_of.get(name, ""), plan["segment"], "yes" if plan["leader"] else "",
                     # a dual-stack plan's address is a list of two: both shown, primary first
                     ", ".join(as_list(plan.get("address"))) or "-", peers, str(len(flat_routes(plan.get("routes")))), str(len(plan.get("rules", [])))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class FilterModule(object):
    def filters(self):
        return {"plan_table": plan_table}
