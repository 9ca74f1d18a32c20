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
  - The lines of a table for people, a list of strings, so Ansible's default output callback prints one line
    per line (a single string would be printed as one JSON string with its line breaks escaped).
  - A summary line (nodes, locations, segments, who leads each location), then one line per node - location,
    segment, leader or not, WireGuard IP (both, comma-separated, in a dual-stack mesh), the names of its
    WireGuard peers, and its route and rule counts.
  - Nodes shown with stand-in keys (M(kilo.mesh.topology) with O(kilo.mesh.topology#module:stand_ins=true),
    before their first run) are marked C(*), and a last line names them as the hosts that still need a run.
    Hosts left out (no key or endpoint) are named too.
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
  description: The table's lines.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kilo.mesh.plugins.module_utils.common import text_table
from ansible_collections.kilo.mesh.plugins.module_utils.plan import as_list, flat_routes

MARK = "*"


def _names(hosts):
    return ", ".join(hosts)


def _count(number, what):
    return "%d %s%s" % (number, what, "" if number == 1 else "s")


def plan_table(result):
    """Plans as the lines of a text table: who leads, their WireGuard IPs, each host's peers and routes."""
    if not isinstance(result, dict) or "plans" not in result:
        raise AnsibleFilterError("plan_table expects the registered result of kilo.mesh.topology")
    stand_ins = sorted(result.get("stand_ins") or [])
    marked = set(stand_ins)
    location_of = {}
    segments = result.get("segments", [])
    for segment in segments:
        for node in segment.get("nodes", []):
            location_of[node] = segment.get("location") or ""
    header = ("node", "location", "segment", "leader", "wireguard ip", "peers", "routes", "rules")
    rows = []
    for name in sorted(result["plans"]):
        plan = result["plans"][name]
        peers = ", ".join(p["name"] for p in plan.get("peers", [])) or "-"
        rows.append(
            (
                name + (" " + MARK if name in marked else ""),
                location_of.get(name, ""),
                plan["segment"],
                "yes" if plan["leader"] else "",
                # a dual-stack plan's address is a list of two: both shown, primary first
                ", ".join(as_list(plan.get("address"))) or "-",
                peers,
                str(len(flat_routes(plan.get("routes")))),
                str(len(plan.get("rules", []))),
            )
        )
    lines = text_table(header, rows, rule=True)
    locations = sorted(set(location_of.values()))
    leaders = (
        ", ".join("%s (%s)" % (s["leader"], s.get("location") or s["key"]) for s in segments)
        or "none"
    )
    summary = "%s in %s, %s; leaders: %s" % (
        _count(len(result["plans"]), "node"),
        _count(len(locations), "location"),
        _count(len(segments), "segment"),
        leaders,
    )
    lines.insert(0, summary)
    if stand_ins:
        lines += [
            "%s no key yet: %s still need their first run (kilo.mesh.site)."
            % (MARK, _names(stand_ins)),
            "  Their keys and endpoints are stand-ins, for this table only. Who leads assumes each gets a public",
            "  endpoint (Kilo's order: kilo_leader with a public endpoint, kilo_leader, a public endpoint, the first",
            "  by name).",
        ]
    if result.get("missing"):
        lines.append("left out, no key or endpoint known: %s" % _names(result["missing"]))
    return lines


class FilterModule(object):
    def filters(self):
        return {"plan_table": plan_table}
