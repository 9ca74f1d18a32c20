# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""netstate's routes: ours (protocol 107, any table) read, resolved from the plan, compared and
changed, and the foreign routes at the plan's keys that a route of ours would replace.

Reading (netstate's module docstring says why): through a strict reader, the kernel returns our
protocol's routes, then the unicast routes of the tables of plan routes not ours yet, of which
netlink.routes decodes only those at the plan's keys; through pyroute2 without strict checking,
one whole dump per family, filtered here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import ipaddress

from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink.links import NetlinkReader
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.base import (
    FAMILIES,
    RT_SCOPE_LINK,
    RT_SCOPE_NOWHERE,
    RT_SCOPE_UNIVERSE,
    RTN_UNICAST,
    RTNH_F_ONLINK,
    NetStateError,
    by_name,
    family_of,
    table_name,
    version_of,
)
from ansible_collections.kilo.mesh.plugins.module_utils.plan import (
    FLANNEL,
    PRIVATE,
    ROUTE_PROTO,
    TUNNEL,
    as_list,
)

RTM_GETROUTE = 26
NLM_F_REQUEST = 1
NLM_F_DUMP = 0x300


def route_key(route):
    """Identity of a route: at most one route per (destination, table) is ours."""
    return (route["dst"], route["table"])


def route_str(r):
    parts = [r["dst"]]
    if r.get("gateway"):
        parts += ["via", r["gateway"]]
    parts += ["dev", r["device"]]
    if r.get("onlink"):
        parts.append("onlink")
    if r.get("source"):
        parts += ["src", r["source"]]
    parts += ["table", table_name(r["table"])]
    return " ".join(parts)


def foreign_str(r):
    """A foreign route as the error and change messages name it."""
    parts = [r["dst"]]
    if r.get("gateway"):
        parts += ["via", r["gateway"]]
    parts += ["dev", r["device"], "proto", str(r["proto"])]
    return " ".join(parts)


def route_attrs(r):
    """What a route of ours must match to need no change (not its metric: the kernel's)."""
    return (r.get("gateway"), r["device"], r.get("source"), bool(r.get("onlink")))


def clashing(foreign, route):
    """Foreign routes at ``route``'s (dst, table) that 'route replace' of ours would overwrite
    (same metric: ours carry none, which is 0 for IPv4 and 1024 for IPv6)."""
    default = 1024 if route["family"] == 6 else 0
    return [
        f
        for f in (foreign or [])
        if route_key(f) == route_key(route) and (f.get("priority") or default) == default
    ]


def sorted_routes(routes):
    return sorted(routes, key=lambda r: (r["table"], r["family"], r["dst"]))


# ---------------------------------------------------------------- reading
def dump(reader, family, table=0, proto=0, rtype=0):
    """RTM_GETROUTE dump of ``family`` on a strict socket: the kernel returns only routes of
    ``table``, ``proto`` and ``rtype`` (0: any). ``reader``: a NetlinkReader, or pyroute2's
    IPRoute (strict or not: without strict checking the kernel returns every route)."""
    if isinstance(reader, NetlinkReader):
        return reader.routes(family, table=table, proto=proto, rtype=rtype)
    from pyroute2.netlink.rtnl.rtmsg import rtmsg  # noqa: F401  deferred like IPRoute

    msg = rtmsg()
    for field in ("dst_len", "src_len", "tos", "table", "scope", "flags"):
        msg[field] = 0  # strict checking refuses a dump request with any of them set
    msg["family"], msg["proto"], msg["type"] = family, proto, rtype
    msg["attrs"] = [["RTA_TABLE", table]] if table else []  # u32: also tables above 255
    status = getattr(reader, "status", None)
    if status is not None and "nlm_generator" not in status:
        status["nlm_generator"] = False  # pyroute2 0.9's sync nlm_request reads it unset
    try:
        return reader.nlm_request(msg, msg_type=RTM_GETROUTE, msg_flags=NLM_F_REQUEST | NLM_F_DUMP)
    except Exception as exc:  # NetlinkError; keep pyroute2 version differences out
        if table and getattr(exc, "code", None) == errno.ENOENT:
            return []  # the table does not exist yet, so nothing is in it
        raise


def _table_routes(reader, family, table, keys):
    """Unicast route messages of ``table`` (strict dump), at least those at ``keys``. A full BGP
    table is read by netlink.routes, which decodes only the messages at ``keys``: pyroute2
    would parse every message."""
    if isinstance(reader, NetlinkReader):
        return reader.routes(family, table=table, rtype=RTN_UNICAST, keys=keys)
    return dump(reader, family, table=table, rtype=RTN_UNICAST)


def _entry(msg, links, family, dst, table):
    oif = msg.get_attr("RTA_OIF")
    return {
        "family": version_of(family),
        "dst": dst,
        "table": table,
        "gateway": msg.get_attr("RTA_GATEWAY"),
        "device": links.get(oif, {}).get("name", str(oif)),
        "source": msg.get_attr("RTA_PREFSRC"),
        "onlink": bool(msg["flags"] & RTNH_F_ONLINK),
        "priority": msg.get_attr("RTA_PRIORITY"),
    }


def _scan(msgs, links, family, watch, ours, foreign):
    """Sort route messages into ``ours`` and ``foreign`` (those at a (dst, table) key in
    ``watch``). A foreign route costs a look at its header unless its prefix length and
    table fit a watched key: no Python objects for a full BGP table."""
    version = version_of(family)
    lengths = set()
    for dst, table in watch:
        net = ipaddress.ip_network(dst)
        if net.version == version:
            lengths.add((net.prefixlen, table))
    dst_lens = set(length for length, table in lengths)
    for msg in msgs:
        if msg["type"] != RTN_UNICAST:  # ours are all unicast
            continue
        mine = msg["proto"] == ROUTE_PROTO
        if not mine and msg["dst_len"] not in dst_lens:
            continue
        table = msg.get_attr("RTA_TABLE") or msg["table"]
        if not mine and (msg["dst_len"], table) not in lengths:
            continue
        dst = msg.get_attr("RTA_DST") or ("0.0.0.0" if version == 4 else "::")
        dst = str(ipaddress.ip_network("%s/%d" % (dst, msg["dst_len"])))
        if mine:
            ours.append(_entry(msg, links, family, dst, table))
        elif (dst, table) in watch:
            foreign.append(dict(_entry(msg, links, family, dst, table), proto=msg["proto"]))


def read(reader, strict, links, watch):
    """(our routes, foreign routes at the (dst, table) keys in ``watch`` not ours yet: only
    those can be in the way of a 'route replace' of ours).

    ``strict``: the kernel returns our routes, then, only for watched keys not ours yet,
    the unicast routes of their tables. Otherwise one whole dump per family."""
    ours, foreign = [], []
    if not strict:
        for family in FAMILIES:
            _scan(reader.route("dump", family=family), links, family, watch, ours, foreign)
        have = set(route_key(r) for r in ours)
        return ours, [f for f in foreign if route_key(f) not in have]
    for family in FAMILIES:
        _scan(dump(reader, family, proto=ROUTE_PROTO), links, family, set(), ours, [])
    missing = set(watch) - set(route_key(r) for r in ours)
    tables = set((family_of(ipaddress.ip_network(dst).version), table) for dst, table in missing)
    for family, table in sorted(tables):
        _scan(_table_routes(reader, family, table, missing), links, family, missing, [], foreign)
    return ours, foreign


# ---------------------------------------------------------------- plan, compare
def desired(plan, current, tunnel, subject):
    """Our routes of the plan on this host: device 'private' resolved to the interface holding
    the internal IP of the route's family, tunl0 to ``tunnel``; NetStateError for a device the
    host lacks or a second, different route at one key."""
    private = current.get("private_devices") or {}
    internal = as_list(plan["internal_ip"])
    routes, seen = [], {}
    for i, r in enumerate(plan["routes"]):
        field = "plan.routes[%d]" % i
        device = r["device"]
        family = ipaddress.ip_network(r["dst"]).version
        if device == PRIVATE:
            holder = private.get(str(family))
            if holder is None:
                same = [a for a in internal if ipaddress.ip_interface(a).version == family]
                if not same:
                    raise NetStateError(
                        "'%s' needs an IPv%d internal_ip, but the plan has none"
                        % (PRIVATE, family),
                        subject,
                        field + ".device",
                    )
                raise NetStateError(
                    "'%s' needs the interface holding internal_ip %s, but no interface of this host "
                    "has that address" % (PRIVATE, same[0]),
                    subject,
                    field + ".device",
                )
            device = holder["name"]
        elif device == TUNNEL:
            device = tunnel
        elif device in current.get("absent_devices", ()):
            hint = (
                " (compatibility flannel routes through Flannel's VXLAN device: is Flannel running"
                " on this host?)"
                if device == FLANNEL
                else ""
            )
            raise NetStateError(
                "device %s does not exist on this host%s" % (device, hint),
                subject,
                field + ".device",
            )
        route = {
            "family": family,
            "dst": r["dst"],
            "table": r["table"],
            "gateway": r["gateway"],
            "device": device,
            "source": r["source"],
            # onlink only means something with a gateway; the kernel drops it otherwise
            "onlink": r["onlink"] and bool(r["gateway"]),
            "priority": None,
            "field": field,
        }
        key = route_key(route)
        if key in seen:
            if route_attrs(seen[key]) != route_attrs(route):
                raise NetStateError(
                    "a second, different route to %s in table %s (first: %s)"
                    % (route["dst"], table_name(route["table"]), seen[key]["field"]),
                    subject,
                    field,
                )
            continue
        seen[key] = route
        routes.append(route)
    return sorted_routes(routes)


def taken(current, desired, route_conflict):
    """{key: foreign routes} that routes we add would take over; NetStateError unless
    ``route_conflict`` is 'replace', so check mode fails where the real run would."""
    have = set(route_key(r) for r in current["routes"])
    out = {}
    for r in desired["routes"]:
        clash = [] if route_key(r) in have else clashing(current.get("foreign"), r)
        if not clash:
            continue
        if route_conflict != "replace":
            raise NetStateError(
                "a foreign route (%s) already holds %s in table %s; remove it or set route_conflict: replace"
                % (foreign_str(clash[0]), r["dst"], table_name(r["table"])),
                desired.get("subject"),
                r.get("field"),
            )
        out[route_key(r)] = clash
    return out


def changes(current, desired, taken_over):
    """Change lines of our routes (``taken_over``: taken())."""
    out = []
    have = dict((route_key(r), r) for r in current["routes"])
    want = dict((route_key(r), r) for r in desired["routes"])
    for key in sorted(want):
        if key not in have:
            extra = ""
            if key in taken_over:
                extra = " (taking over foreign route %s)" % "; ".join(
                    foreign_str(f) for f in taken_over[key]
                )
            out.append("add route %s%s" % (route_str(want[key]), extra))
        elif route_attrs(have[key]) != route_attrs(want[key]):
            out.append("replace route %s -> %s" % (route_str(have[key]), route_str(want[key])))
    for key in sorted(have):
        if key not in want:
            out.append("remove route %s" % route_str(have[key]))
    return out


# ---------------------------------------------------------------- apply
def apply(ipr, links, live, wanted):
    """Make ``wanted`` our routes, by difference against ``live`` (read just before)."""
    have = dict((route_key(r), r) for r in live)
    want = dict((route_key(r), r) for r in wanted)
    # add/replace before removing stale ones so a moved prefix never has a gap; replace
    # also takes over a foreign route that changes() allowed (route_conflict: replace)
    for key in sorted(want):
        r = want[key]
        if key in have and route_attrs(have[key]) == route_attrs(r):
            continue
        kw = _route_kw(links, r)
        try:
            ipr.route("replace", **kw)
        except Exception as exc:
            raise NetStateError("cannot set route %s: %s" % (route_str(r), exc))
    for key in sorted(have):
        if key not in want:
            _del_route(ipr, links, have[key])


def _route_kw(links, r):
    index = by_name(links, r["device"])
    if index is None:
        raise NetStateError("route %s: device %s does not exist" % (route_str(r), r["device"]))
    net = ipaddress.ip_network(r["dst"])
    kw = {
        "family": family_of(r["family"]),
        "dst": str(net.network_address),
        "dst_len": net.prefixlen,
        "oif": index,
        "table": r["table"],
        "proto": ROUTE_PROTO,
        "scope": RT_SCOPE_UNIVERSE if r.get("gateway") else RT_SCOPE_LINK,
    }
    if r.get("gateway"):
        kw["gateway"] = r["gateway"]
    if r.get("source"):
        kw["prefsrc"] = r["source"]
    if r.get("onlink"):
        kw["flags"] = RTNH_F_ONLINK
    if r.get("priority") is not None:
        kw["priority"] = r["priority"]
    return kw


def _del_route(ipr, links, r):
    net = ipaddress.ip_network(r["dst"])
    kw = {
        "family": family_of(r["family"]),
        "dst": str(net.network_address),
        "dst_len": net.prefixlen,
        "table": r["table"],
        "proto": ROUTE_PROTO,
        "scope": RT_SCOPE_NOWHERE,  # match any scope, as `ip route del` does
    }
    index = by_name(links, r["device"])
    if index is not None:
        kw["oif"] = index
    if r.get("gateway"):
        kw["gateway"] = r["gateway"]
    if r.get("priority") is not None:
        kw["priority"] = r["priority"]
    try:
        ipr.route("del", **kw)
    except Exception as exc:
        raise NetStateError("cannot remove route %s: %s" % (route_str(r), exc))
