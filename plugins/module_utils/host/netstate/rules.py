# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""netstate's ip rules: those that look up table 1107 are ours; read, resolved from the plan,
compared and changed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.base import (
    FAMILIES,
    NetStateError,
    family_of,
    version_of,
)
from ansible_collections.kilo.mesh.plugins.module_utils.plan import KILO_TABLE

RULE_PRIORITY = 32000  # before main (32766); fixed so a re-run compares equal


def rule_str(r):
    parts = ["%d:" % r["priority"], "from", r.get("src") or "all"]
    if r.get("dst"):
        parts += ["to", r["dst"]]
    if r.get("iif"):
        parts += ["iif", r["iif"]]
    parts += ["lookup", str(r["table"])]
    return " ".join(parts)


def rule_key(r):
    return (r["family"], r.get("src"), r.get("dst"), r.get("iif"), r["table"], r["priority"])


def sorted_rules(rules):
    return sorted(rules, key=lambda r: tuple("" if v is None else str(v) for v in rule_key(r)))


def read(reader):
    """Our rules (those looking up table 1107), both families."""
    rules = []
    for family in FAMILIES:
        for msg in reader.get_rules(family=family):
            table = msg.get_attr("FRA_TABLE") or msg["table"]
            if table != KILO_TABLE:
                continue
            src = msg.get_attr("FRA_SRC")
            dst = msg.get_attr("FRA_DST")
            rules.append(
                {
                    "family": version_of(family),
                    "src": str(ipaddress.ip_network("%s/%d" % (src, msg["src_len"])))
                    if src
                    else None,
                    "dst": str(ipaddress.ip_network("%s/%d" % (dst, msg["dst_len"])))
                    if dst
                    else None,
                    "iif": msg.get_attr("FRA_IIFNAME"),
                    "table": table,
                    "priority": msg.get_attr("FRA_PRIORITY") or 0,
                }
            )
    return rules


def desired(plan):
    """The plan's rules at our fixed priority, each once."""
    rules, keys = [], set()
    for r in plan["rules"]:
        rule = {
            "family": ipaddress.ip_network(r["src"] or r["dst"]).version,
            "src": r["src"],
            "dst": r["dst"],
            "iif": r["iif"],
            "table": r["table"],
            "priority": RULE_PRIORITY,
        }
        if rule_key(rule) not in keys:
            keys.add(rule_key(rule))
            rules.append(rule)
    return sorted_rules(rules)


def changes(have, want):
    """Change lines of our rules."""
    have_k = set(rule_key(r) for r in have)
    want_k = set(rule_key(r) for r in want)
    return ["add rule %s" % rule_str(r) for r in want if rule_key(r) not in have_k] + [
        "remove rule %s" % rule_str(r) for r in have if rule_key(r) not in want_k
    ]


def apply(ipr, have, want):
    """Make ``want`` our rules, by difference against ``have`` (read just before): adds first."""
    have_k = set(rule_key(r) for r in have)
    want_k = set(rule_key(r) for r in want)
    todo = [("add", "add", r) for r in want if rule_key(r) not in have_k]
    todo += [("del", "remove", r) for r in have if rule_key(r) not in want_k]
    for cmd, verb, r in todo:
        try:
            ipr.rule(cmd, **_rule_kw(r))
        except Exception as exc:
            raise NetStateError("cannot %s rule %s: %s" % (verb, rule_str(r), exc))


def _rule_kw(r):
    kw = {
        "family": family_of(r["family"]),
        "table": r["table"],
        "priority": r["priority"],
        "action": "FR_ACT_TO_TBL",
    }
    for field in ("src", "dst"):
        if r.get(field):
            net = ipaddress.ip_network(r[field])
            kw[field] = str(net.network_address)
            kw[field + "_len"] = net.prefixlen
    if r.get("iif"):
        kw["iifname"] = r["iif"]
    return kw
