# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The plan: what the controller computes for one host and the host converges to.

``SCHEMA`` is the contract between the topology engine (which writes plans) and the converge
backends (which read them). ``check_plan`` checks and normalises a plan once, at the module
boundary, so the backends can trust every field. The same schema documents the ``plan``
option of kilo.mesh.converge (``doc()``).
"""

from __future__ import absolute_import, division, print_function
from __future__ import annotations

__metaclass__ = type

import ipaddress

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    check_interface_name,
    host_subject,
    parse_key,
    to_bool,
    to_int,
)
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import parse_keepalive, split_endpoint
from ansible_collections.kilo.mesh.plugins.module_utils.options import bounds

# Type hints: the annotations are never evaluated (``annotations`` above), and typing is not
# imported at run time (a host's call pays for every import); type checkers read this block.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Mapping, Optional

    # one host's plan: the fields of SCHEMA
    Plan = dict[str, Any]


MAIN_TABLE = 254
KILO_TABLE = 1107  # Kilo's table for its ip rules; our rules live only there
TUNNEL = "tunl0"
ROUTE_PROTO = 107  # the protocol number that marks a route as ours on the host
# where a node agent keeps the plan it last computed (its option plan_file's default); status reads it
AGENT_PLAN_FILE = "/run/kilo/agent-plan.json"
# Cilium with IPIP termination renames the kernel's tunl0 to this; under compatibility cilium a
# host that has it encapsulates through it (as Kilo's cilium encapsulator reuses it).
CILIUM_TUNNEL = "cilium_tunl"
PRIVATE = "private"  # a route's device: the interface holding the host's internal IP
FLANNEL = "flannel.1"  # Flannel's VXLAN device: compatibility flannel encapsulates through it

FIREWALL_LISTS = (
    "nat_sources",
    "nat_destinations",
    "nat_exempt_destinations",
    "forward_accept",
    "ipip_accept_sources",
)

# field -> (kind, required, description). Kinds: str, bool, int, port, keepalive (seconds, 0: none;
# nodes.parse_keepalive), key, endpoint, ifname,
# network (CIDR, host bits cleared), address (host address with prefix), ip, table, networks
# (list of networks), names (list of non-empty strings), network_or_networks (one network, or a list of them), address_or_addresses
# (one address, or a dual-stack plan's two, one of each IP family), or a nested schema
# ({...} for a dict, [{...}] for a list of dicts).
PEER = {
    "name": ("str", True, "Segment (C(location:NAME), C(node:NAME)) or outside peer name."),
    "public_key": ("key", True, "WireGuard public key (base64)."),
    "endpoint": ("endpoint", False, "V(host:port) or V([IPv6]:port); null when the peer has none."),
    "allowed_ips": ("networks", True, "CIDRs routed to this peer."),
    "persistent_keepalive": ("keepalive", False, "Seconds; 0 is off."),
    "roaming": (
        "bool",
        False,
        "Keep an endpoint WireGuard learned while handshakes are fresh (NAT).",
    ),
    "relayed": (
        "names",
        False,
        "Beyond Kilo, a relay's entry on a leader no other leader can reach: the segments"
        " whose traffic goes through this peer (their CIDRs are among its C(allowed_ips)); absent otherwise.",
    ),
    "probe": (
        "bool",
        False,
        "Beyond Kilo: an entry that only tries a direct path (no C(allowed_ips): the CIDRs"
        " stay on the relay's entry until the path is direct).",
    ),
}
ROUTE = {
    "dst": (
        "destinations",
        True,
        "Destination CIDR, or a list of CIDRs that share every other field of the entry"
        " (the engine writes consecutive routes of equal gateway, device and source as one entry).",
    ),
    "gateway": ("ip", False, "Next hop; null for a device route."),
    "device": (
        "ifname",
        True,
        "The WireGuard interface, C(tunl0), C(flannel.1) (must exist), or V(private)"
        " (the interface holding C(internal_ip), in a dual-stack plan the one of the route's IP family).",
    ),
    "source": ("ip", False, "Preferred source address."),
    "table": ("table", False, "Routing table (254 is main)."),
    "onlink": ("bool", False, "Gateway is on-link (no route to it needed)."),
}
RULE = {
    "src": ("network", False, "Source CIDR."),
    "dst": ("network", False, "Destination CIDR."),
    "iif": ("ifname", False, "Input interface."),
    "table": ("table", False, "Table the rule points at; only %d is managed." % KILO_TABLE),
}
FIREWALL = dict((name, ("networks", False, "CIDRs.")) for name in FIREWALL_LISTS)
FIREWALL["ipip_filter"] = (
    "bool",
    False,
    "Install the IPIP chain (accept C(ipip_accept_sources), drop other IPIP).",
)
FIREWALL["relay_accept"] = (
    "bool",
    False,
    "Beyond Kilo, a relay: accept (and count) forwarding from the WireGuard"
    " interface back into it, the traffic it relays between leaders that cannot reach each"
    " other.",
)
SCHEMA = {
    "name": ("str", True, "Inventory name of the host."),
    "leader": (
        "bool",
        True,
        "Whether the host leads its segment (only leaders carry WireGuard peers).",
    ),
    "segment": ("str", True, "Segment key, C(location:NAME) or C(node:NAME)."),
    "interface": ("ifname", False, "WireGuard interface name."),
    "address": (
        "address_or_addresses",
        False,
        "WireGuard address with prefix (leaders), or in a dual-stack mesh"
        " the list of its two (one of each IP family, the primary first); null otherwise.",
    ),
    "internal_ip": (
        "address_or_addresses",
        False,
        "The host's private address with prefix, or in a dual-stack mesh"
        " the list of its two (one of each IP family); null when it has none.",
    ),
    "listen_port": ("port", True, "WireGuard UDP port."),
    "tunnel_address": ("address", False, "Address of C(tunl0) when encapsulating; null otherwise."),
    "pod_cidr": (
        "network_or_networks",
        False,
        "The node's pod CIDR, or the list of its pod ranges when it has"
        " several; null when it has none.",
    ),
    "cni": (
        "bool",
        False,
        "Kilo's C(--cni): keep the node's CNI configuration on C(pod_cidr) (its first range).",
    ),
    "compatibility": (
        "str",
        False,
        "Kilo's C(--compatibility) (V(none), V(flannel), V(cilium)); with V(cilium) a host"
        " that has C(cilium_tunl) routes the C(tunl0) routes through it.",
    ),
    "peers": ([PEER], False, "WireGuard peers."),
    "routes": ([ROUTE], False, "Routes, marked as ours on the host."),
    "rules": ([RULE], False, "ip rules into table %d." % KILO_TABLE),
    "firewall": (FIREWALL, False, "NAT, forward and IPIP lists."),
}
# Fields of a relayed mesh only (docs/DESIGN.md, "Relays and NAT traversal"): absent from every
# other plan, also once checked; readers take them with ``get``.
RELAY_FIELDS = ("relayed", "probe", "relay_accept")
# Fields a checked plan always has, as empty values.
_EMPTY = {"peers": [], "routes": [], "rules": [], "firewall": {}}


def _network(value, subject, field):
    try:
        return str(ipaddress.ip_network(str(value).strip(), strict=False))
    except ValueError:
        raise KiloError("%r is not a CIDR" % (value,), subject, field)


def _value(kind, value, subject, field):
    if isinstance(kind, list):
        if not isinstance(value, (list, tuple)):
            raise KiloError("expected a list, got %r" % (value,), subject, field)
        return [
            _fields(kind[0], item, subject, "%s[%d]" % (field, i)) for i, item in enumerate(value)
        ]
    if isinstance(kind, dict):
        return _fields(kind, value, subject, field)
    if kind == "str":
        if not isinstance(value, str) or not value:
            raise KiloError("expected a non-empty string, got %r" % (value,), subject, field)
        return value
    if kind == "bool":
        return to_bool(value, subject, field)
    if kind == "int":
        return to_int(value, subject, field, low=0)
    if kind == "port":
        return to_int(value, subject, field, *bounds("port"))
    if kind == "keepalive":
        return parse_keepalive(value, subject, field)
    if kind == "table":
        return to_int(value, subject, field, low=1, high=2**32 - 1)
    if kind == "key":
        return parse_key(value, subject, field)
    if kind == "endpoint":
        split_endpoint(value, subject, field)
        return value.strip()
    if kind == "ifname":
        return check_interface_name(value, subject, field)
    if kind == "network":
        return _network(value, subject, field)
    if kind == "network_or_networks":
        if isinstance(value, (list, tuple)):
            if not value:
                raise KiloError("an empty list of CIDRs", subject, field)
            return _value("networks", value, subject, field)
        return _network(value, subject, field)
    if kind == "destinations":
        if isinstance(value, (list, tuple)) and not value:
            raise KiloError("an empty list of destinations", subject, field)
        return _value(
            "networks", value if isinstance(value, (list, tuple)) else [value], subject, field
        )
    if kind == "names":
        if not isinstance(value, (list, tuple)):
            raise KiloError("expected a list of names, got %r" % (value,), subject, field)
        return [_value("str", v, subject, "%s[%d]" % (field, i)) for i, v in enumerate(value)]
    if kind == "networks":
        if not isinstance(value, (list, tuple)):
            raise KiloError("expected a list of CIDRs, got %r" % (value,), subject, field)
        return [_network(v, subject, "%s[%d]" % (field, i)) for i, v in enumerate(value)]
    if kind == "address_or_addresses":
        if not isinstance(value, (list, tuple)):
            return _value("address", value, subject, field)
        out = [_value("address", v, subject, "%s[%d]" % (field, i)) for i, v in enumerate(value)]
        versions = [ipaddress.ip_interface(v).version for v in out]
        if not out or len(out) > 2 or len(set(versions)) != len(versions):
            raise KiloError(
                "expected one address, or two of different IP families, got %r" % (value,),
                subject,
                field,
            )
        return out
    if kind in ("address", "ip"):
        try:
            parsed = ipaddress.ip_interface(str(value).strip())
        except ValueError:
            raise KiloError("%r is not an IP address" % (value,), subject, field)
        return str(parsed) if kind == "address" else str(parsed.ip)
    raise AssertionError("unknown kind %r" % (kind,))


def _fields(schema, data, subject, where):
    if not isinstance(data, dict):
        raise KiloError("expected a mapping, got %r" % (data,), subject, where)
    unknown = sorted(set(data) - set(schema))
    if unknown:
        raise KiloError(
            "unknown field (known: %s)" % ", ".join(sorted(schema)),
            subject,
            "%s.%s" % (where, unknown[0]),
        )
    out = {}
    for name, (kind, required, dummy) in schema.items():
        field = "%s.%s" % (where, name)
        value = data.get(name)
        if value is None:
            if required:
                raise KiloError("missing", subject, field)
            out[name] = type(_EMPTY[name])() if where == "plan" and name in _EMPTY else None
            continue
        out[name] = _value(kind, value, subject, field)
    return out


def check_plan(plan: Any, interface: str) -> Plan:
    """The plan checked and normalised; KiloError names the host and the field.

    ``interface`` is the host's WireGuard interface setting: the plan must name the same one
    (or none), so routes and rules on the plan's interface land on the host's.
    """
    name = plan.get("name") if isinstance(plan, dict) else None
    subject = host_subject(name) if isinstance(name, str) and name else "plan"
    out = _fields(SCHEMA, plan, subject, "plan")
    out["firewall"] = dict(
        (k, out["firewall"].get(k) or (False if FIREWALL[k][0] == "bool" else []))
        for k in FIREWALL
        if k not in RELAY_FIELDS or out["firewall"].get(k) is not None
    )
    if out["interface"] is not None and out["interface"] != interface:
        raise KiloError(
            "%r, but this host's interface setting is %r" % (out["interface"], interface),
            subject,
            "plan.interface",
        )
    out["interface"] = interface
    out["cni"] = bool(out["cni"])
    for i, entry in enumerate(out["routes"]):
        entry["table"] = entry["table"] or MAIN_TABLE
        entry["onlink"] = bool(entry["onlink"])
        version = ipaddress.ip_address(entry["gateway"]).version if entry["gateway"] else None
        for dst in entry["dst"]:
            if version and version != ipaddress.ip_network(dst).version:
                raise KiloError(
                    "gateway %s and dst %s differ in IP version" % (entry["gateway"], dst),
                    subject,
                    "plan.routes[%d]" % i,
                )
    # the backends see one route per destination
    out["routes"] = flat_routes(out["routes"])
    for i, rule in enumerate(out["rules"]):
        if not rule["src"] and not rule["dst"]:
            raise KiloError("a rule needs src or dst", subject, "plan.rules[%d]" % i)
        if (
            rule["src"]
            and rule["dst"]
            and ipaddress.ip_network(rule["src"]).version
            != ipaddress.ip_network(rule["dst"]).version
        ):
            raise KiloError("src and dst differ in IP version", subject, "plan.rules[%d]" % i)
        rule["table"] = rule["table"] or KILO_TABLE
        if rule["table"] != KILO_TABLE:
            raise KiloError(
                "only table %d is managed, got %s" % (KILO_TABLE, rule["table"]),
                subject,
                "plan.rules[%d].table" % i,
            )
    for peer in out["peers"]:
        peer["persistent_keepalive"] = peer["persistent_keepalive"] or 0  # absent: none
        peer["roaming"] = bool(peer["roaming"])
        for key in (
            RELAY_FIELDS
        ):  # a relayed mesh's fields stay absent elsewhere, as the engine writes them
            if peer.get(key, 0) is None:
                del peer[key]
    return out


def as_list(value: Any) -> list[Any]:
    """A plan field that holds one value or a list of them (``pod_cidr``; ``address`` and
    ``internal_ip`` of a dual-stack plan) as a list: [] for null."""
    if not value:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def flat_routes(routes: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One route per destination out of a plan's (possibly grouped) route entries, in order."""
    out = []
    for entry in routes or ():
        dsts = entry["dst"]
        if isinstance(dsts, str):
            out.append(entry)
        else:
            out.extend(dict(entry, dst=dst) for dst in dsts)
    return out


def _kind_doc(kind):
    if isinstance(kind, list):
        return "list of dicts with " + ", ".join("C(%s)" % k for k in kind[0])
    if isinstance(kind, dict):
        return "dict with " + ", ".join("C(%s)" % k for k in kind)
    return kind


def doc() -> list[str]:
    """Lines describing the plan's fields, for the module documentation."""
    lines = []
    for name, (kind, required, text) in SCHEMA.items():
        lines.append(
            "C(%s) (%s%s): %s" % (name, _kind_doc(kind), ", required" if required else "", text)
        )
        nested = kind[0] if isinstance(kind, list) else kind if isinstance(kind, dict) else None
        for sub, (subkind, subreq, subtext) in (nested or {}).items():
            lines.append(
                "C(%s.%s) (%s%s): %s"
                % (name, sub, _kind_doc(subkind), ", required" if subreq else "", subtext)
            )
    return lines


# The options of kilo.mesh.converge beside the host settings: the plan and its peers'
# preshared keys, which travel apart because module arguments are logged on the host.
CONVERGE_SPEC = dict(
    plan=dict(type="dict"),
    preshared_keys=dict(type="dict", no_log=True),
    switch_at=dict(type="float"),
    pending_public_key=dict(type="str", no_log=False),
    takeover=dict(type="bool", default=False),
    app_digest=dict(type="str"),
    app_src=dict(type="path"),
)
# A key rotation's schedule (``switch_at``): how long after a rotating node switches its key its
# peers switch to the new one, in a push run's schedule and between agents alike. What the
# rotating node sends meanwhile waits in WireGuard's queue (128 packets a peer) while its peers
# still reach it over the old sessions, and the step covers clocks a little apart.
SWITCH_STEP = 0.25


# --- what a computed plan goes through before a host gets it (push run and agent alike) -------


def split_preshared_keys(plan: Optional[Plan]) -> dict[str, str]:
    """Take the preshared keys out of the plan: the module gets them in a no_log option."""
    keys = {}
    for peer in (plan or {}).get("peers", []):
        if peer.get("preshared_key"):
            keys[peer["public_key"]] = peer.pop("preshared_key")
    return keys


def roaming(computed: Mapping[str, Any]) -> Callable[[Plan], Plan]:
    """``mark_roaming`` of one plan at a time (a reader that takes the engine's plans one by one):
    a function that flags the plan's peers and returns the plan."""
    keepalive = dict(
        (s.get("public_key"), s.get("persistent_keepalive") or 0)
        for s in computed.get("segments", [])
    )
    keepalive.update(
        (p.get("public_key"), p.get("persistent_keepalive") or 0) for p in computed.get("peers", [])
    )

    def mark(plan: Plan) -> Plan:
        plan["peers"] = [
            dict(peer, roaming=True) if keepalive.get(peer["public_key"], 0) > 0 else peer
            for peer in plan.get("peers", [])
        ]
        return plan

    return mark


def mark_roaming(plans: Iterable[Plan], computed: Mapping[str, Any]) -> None:
    """Flag WireGuard peers whose remote end sends keepalives (Kilo's NAT case).

    For those, the host keeps an endpoint WireGuard learned while handshakes are fresh
    instead of resetting it to the configured one; the plan itself stays Kilo's. Plans share
    peer lists' contents with each other (topology engine), so flagged entries are copies.
    """
    mark = roaming(computed)
    for plan in plans:
        mark(plan)
