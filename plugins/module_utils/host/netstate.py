# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Host network state of a kilo.mesh node: WireGuard interface addresses, routes, ip rules, tunl0.

Runs on the host (Debian's /usr/bin/python3 with pyroute2 0.7.2, and pyroute2 0.9.x). No Ansible.
The plan comes checked and normalised (``plan.check_plan``): nothing here parses it again.

Ownership (only this is ever changed or removed):
- routes carrying routing protocol 107 (any table; the plan uses main and 1107);
- ip rules that look up table 1107;
- global addresses on the WireGuard interface named in settings (the link itself belongs to
  the WireGuard backend);
- tunl0 is brought up when a route or the plan's tunnel_address needs it, never deleted (it is
  the kernel's fallback device);
- on tunl0, only the IPv4 address carrying our label (TUNL_LABEL): like Kilo, the plan's
  tunnel_address (first address of the pod CIDR, /32). Unlike Kilo, other addresses on tunl0
  (e.g. another CNI's) are left alone. IPv6 tunnel addresses are not managed: IPIP carries IPv4
  only, and an IPv6 address has no label to mark it as ours.

The host is read with the standard library (netlink_links.NetlinkReader, netlink_routes) and
netlink strict checking where the kernel (4.20+) allows it: the kernel then returns only our
protocol's routes, and foreign routes (another protocol's) only from the tables where the plan
puts a route of ours that is not there yet; an idempotent re-run reads no foreign route at all,
so a host carrying a full BGP table stays cheap, and never imports pyroute2. A first converge
reads those tables decoding only the messages at the plan's keys. Without strict checking,
pyroute2 with one whole dump per family, filtered here. Changes go through pyroute2.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import ipaddress
import socket

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, host_subject
from ansible_collections.kilo.mesh.plugins.module_utils.common import kernel_module_available
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import Backend
from ansible_collections.kilo.mesh.plugins.module_utils.host.host_checks import ssh_client_address
from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink_links import NetlinkReader
from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink_routes import StrictCheckUnsupported
from ansible_collections.kilo.mesh.plugins.module_utils.plan import (
    CILIUM_TUNNEL, FLANNEL, KILO_TABLE, MAIN_TABLE, PRIVATE, ROUTE_PROTO, TUNNEL)

RULE_PRIORITY = 32000  # before main (32766); fixed so a re-run compares equal
RTNH_F_ONLINK = 4
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_LINK = 253
RT_SCOPE_NOWHERE = 255
RTN_UNICAST = 1
IPIP_HEADER = 20
RTM_GETROUTE = 26
NLM_F_REQUEST = 1
NLM_F_DUMP = 0x300
FAMILIES = (socket.AF_INET, socket.AF_INET6)
# The label marks the tunl0 address as ours, so removal needs no plan; "<dev>:" keeps `ip` happy.
TUNL_LABEL = TUNNEL + ":kilo"
_TABLE_NAMES = {MAIN_TABLE: "main", 255: "local", 253: "default"}
_IPIP_HINT = ("host lacks IPIP (%s) support: load the ipip module (modprobe ipip) "
              "or set encapsulate: never" % TUNNEL)


class NetStateError(KiloError):
    """Clear, user-facing failure of the network-state backend."""


def _pyroute2():
    try:
        from pyroute2 import IPRoute  # noqa: deferred so unit tests need no netlink
    except ImportError:
        raise NetStateError("python module pyroute2 is missing on this host "
                            "(Debian: apt install python3-pyroute2)")
    return IPRoute


def _table_name(table):
    return _TABLE_NAMES.get(table, str(table))


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
    parts += ["table", _table_name(r["table"])]
    return " ".join(parts)


def foreign_str(r):
    """A foreign route as the error and change messages name it."""
    parts = [r["dst"]]
    if r.get("gateway"):
        parts += ["via", r["gateway"]]
    parts += ["dev", r["device"], "proto", str(r["proto"])]
    return " ".join(parts)


def rule_str(r):
    parts = ["%d:" % r["priority"], "from", r.get("src") or "all"]
    if r.get("dst"):
        parts += ["to", r["dst"]]
    if r.get("iif"):
        parts += ["iif", r["iif"]]
    parts += ["lookup", str(r["table"])]
    return " ".join(parts)


def _rule_key(r):
    return (r["family"], r.get("src"), r.get("dst"), r.get("iif"), r["table"], r["priority"])


def _route_attrs(r):
    return (r.get("gateway"), r["device"], r.get("source"), bool(r.get("onlink")))


def _clashing(foreign, route):
    """Foreign routes at ``route``'s (dst, table) that 'route replace' of ours would overwrite
    (same metric: ours carry none, which is 0 for IPv4 and 1024 for IPv6)."""
    default = 1024 if route["family"] == 6 else 0
    return [f for f in (foreign or []) if route_key(f) == route_key(route)
            and (f.get("priority") or default) == default]


def _sorted_routes(routes):
    return sorted(routes, key=lambda r: (r["table"], r["family"], r["dst"]))


def _sorted_rules(rules):
    return sorted(rules, key=lambda r: tuple("" if v is None else str(v) for v in _rule_key(r)))


def _addr_list(value):
    """tunnel_address as a list: None, one address, or (after a foreign edit) several."""
    if not value:
        return []
    return [value] if isinstance(value, str) else list(value)


def _family(version):
    return socket.AF_INET if version == 4 else socket.AF_INET6


class NetStateBackend(Backend):
    """Addresses, routes, rules and tunl0 of one host, converged by difference."""

    name = "netstate"

    def __init__(self, settings, preshared_keys=None):
        super(NetStateBackend, self).__init__(settings)
        # 'fail': a foreign route at one of our destinations is an error;
        # 'replace': take it over (Kilo's behaviour: it always replaces).
        self.route_conflict = settings["route_conflict"]
        self.ssh_guard = settings["ssh_guard"]
        self._ipr_class = None

    # ---------------------------------------------------------------- netlink helpers
    def _ipr(self, **options):
        if self._ipr_class is None:
            self._ipr_class = _pyroute2()
        return self._ipr_class(**options)

    def _reader(self):
        """(reader, strict): the standard library's NetlinkReader, whose route dumps the kernel
        filters by protocol and table (strict checking), so a re-run that changes nothing never
        imports pyroute2; where the kernel (before 4.20) refuses strict checking, pyroute2's
        IPRoute with whole dumps."""
        try:
            return NetlinkReader(), True
        except StrictCheckUnsupported:
            return self._ipr(), False

    @staticmethod
    def _links(ipr):
        """ifindex -> {name, up, mtu}."""
        out = {}
        for link in ipr.get_links():
            out[link["index"]] = {
                "name": link.get_attr("IFLA_IFNAME"),
                "up": bool(link["flags"] & 1),
                "mtu": link.get_attr("IFLA_MTU"),
            }
        return out

    @staticmethod
    def _by_name(links, name):
        for idx, link in links.items():
            if link["name"] == name:
                return idx
        return None

    @staticmethod
    def _addresses(ipr, index=None):
        """List of (ifindex, ip_interface) of global-scope addresses."""
        out = []
        for msg in ipr.get_addr():
            if index is not None and msg["index"] != index:
                continue
            if msg["scope"] != RT_SCOPE_UNIVERSE:
                continue
            addr = msg.get_attr("IFA_ADDRESS")
            if msg["family"] == socket.AF_INET:
                addr = msg.get_attr("IFA_LOCAL") or addr
            out.append((msg["index"], ipaddress.ip_interface("%s/%d" % (addr, msg["prefixlen"]))))
        return out

    @staticmethod
    def _tunl_addresses(ipr, index):
        """Our (labelled) IPv4 addresses on tunl0, as strings."""
        out = []
        for msg in ipr.get_addr(family=socket.AF_INET):
            if msg["index"] != index or msg.get_attr("IFA_LABEL") != TUNL_LABEL:
                continue
            addr = msg.get_attr("IFA_LOCAL") or msg.get_attr("IFA_ADDRESS")
            out.append(str(ipaddress.ip_interface("%s/%d" % (addr, msg["prefixlen"]))))
        return sorted(out)

    @staticmethod
    def _route_entry(msg, links, family, dst, table):
        oif = msg.get_attr("RTA_OIF")
        return {
            "family": 4 if family == socket.AF_INET else 6,
            "dst": dst,
            "table": table,
            "gateway": msg.get_attr("RTA_GATEWAY"),
            "device": links.get(oif, {}).get("name", str(oif)),
            "source": msg.get_attr("RTA_PREFSRC"),
            "onlink": bool(msg["flags"] & RTNH_F_ONLINK),
            "priority": msg.get_attr("RTA_PRIORITY"),
        }

    @staticmethod
    def _dump(ipr, family, table=0, proto=0, rtype=0):
        """RTM_GETROUTE dump of ``family`` on a strict socket: the kernel returns only routes of
        ``table``, ``proto`` and ``rtype`` (0: any)."""
        if isinstance(ipr, NetlinkReader):
            return ipr.routes(family, table=table, proto=proto, rtype=rtype)
        from pyroute2.netlink.rtnl.rtmsg import rtmsg  # noqa: deferred like IPRoute
        msg = rtmsg()
        for field in ("dst_len", "src_len", "tos", "table", "scope", "flags"):
            msg[field] = 0  # strict checking refuses a dump request with any of them set
        msg["family"], msg["proto"], msg["type"] = family, proto, rtype
        msg["attrs"] = [["RTA_TABLE", table]] if table else []  # u32: also tables above 255
        status = getattr(ipr, "status", None)
        if status is not None and "nlm_generator" not in status:
            status["nlm_generator"] = False  # pyroute2 0.9's sync nlm_request reads it unset
        try:
            return ipr.nlm_request(msg, msg_type=RTM_GETROUTE, msg_flags=NLM_F_REQUEST | NLM_F_DUMP)
        except Exception as exc:  # NetlinkError; keep pyroute2 version differences out
            if table and getattr(exc, "code", None) == errno.ENOENT:
                return []  # the table does not exist yet, so nothing is in it
            raise

    def _scan(self, msgs, links, family, watch, ours, foreign):
        """Sort route messages into ``ours`` and ``foreign`` (those at a (dst, table) key in
        ``watch``). A foreign route costs a look at its header unless its prefix length and
        table fit a watched key: no Python objects for a full BGP table."""
        version = 4 if family == socket.AF_INET else 6
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
                ours.append(self._route_entry(msg, links, family, dst, table))
            elif (dst, table) in watch:
                foreign.append(dict(self._route_entry(msg, links, family, dst, table), proto=msg["proto"]))

    def _routes(self, ipr, strict, links, watch):
        """(our routes, foreign routes at the (dst, table) keys in ``watch`` not ours yet: only
        those can be in the way of a 'route replace' of ours).

        ``strict``: the kernel returns our routes, then, only for watched keys not ours yet,
        the unicast routes of their tables. Otherwise one whole dump per family."""
        ours, foreign = [], []
        if not strict:
            for family in FAMILIES:
                self._scan(ipr.route("dump", family=family), links, family, watch, ours, foreign)
            have = set(route_key(r) for r in ours)
            return ours, [f for f in foreign if route_key(f) not in have]
        for family in FAMILIES:
            self._scan(self._dump(ipr, family, proto=ROUTE_PROTO), links, family, set(), ours, [])
        missing = set(watch) - set(route_key(r) for r in ours)
        tables = set((_family(ipaddress.ip_network(dst).version), table) for dst, table in missing)
        for family, table in sorted(tables):
            self._scan(self._table_routes(ipr, family, table, missing), links, family, missing, [], foreign)
        return ours, foreign

    def _table_routes(self, ipr, family, table, keys):
        """Unicast route messages of ``table`` (strict dump), at least those at ``keys``. A full BGP
        table is read by netlink_routes, which decodes only the messages at ``keys``: pyroute2
        would parse every message."""
        if isinstance(ipr, NetlinkReader):
            return ipr.routes(family, table=table, rtype=RTN_UNICAST, keys=keys)
        return self._dump(ipr, family, table=table, rtype=RTN_UNICAST)

    @staticmethod
    def _rules(ipr):
        rules = []
        for family in (socket.AF_INET, socket.AF_INET6):
            for msg in ipr.get_rules(family=family):
                table = msg.get_attr("FRA_TABLE") or msg["table"]
                if table != KILO_TABLE:
                    continue
                src = msg.get_attr("FRA_SRC")
                dst = msg.get_attr("FRA_DST")
                rules.append({
                    "family": 4 if family == socket.AF_INET else 6,
                    "src": str(ipaddress.ip_network("%s/%d" % (src, msg["src_len"]))) if src else None,
                    "dst": str(ipaddress.ip_network("%s/%d" % (dst, msg["dst_len"]))) if dst else None,
                    "iif": msg.get_attr("FRA_IIFNAME"),
                    "table": table,
                    "priority": msg.get_attr("FRA_PRIORITY") or 0,
                })
        return rules

    def _read(self, ipr, strict, plan):
        links = self._links(ipr)
        wg_index = self._by_name(links, self.interface)
        host_addrs = self._addresses(ipr)
        addresses = sorted(str(a) for idx, a in host_addrs if idx == wg_index)
        watch = set((r["dst"], r["table"]) for r in (plan or {}).get("routes") or [])
        routes, foreign = self._routes(ipr, strict, links, watch)
        tunnel = self._tunnel_device(links, plan)
        tunl_index = self._by_name(links, tunnel)
        tunl = None
        tunnel_address = None
        if tunl_index is not None:
            tunl = {"up": links[tunl_index]["up"], "mtu": links[tunl_index]["mtu"]}
            ours = self._tunl_addresses(ipr, tunl_index)
            # more than one only after a foreign edit; a list keeps every one visible
            tunnel_address = ours[0] if len(ours) == 1 else (ours or None)
        private = None
        if plan and plan.get("internal_ip"):
            want = ipaddress.ip_interface(plan["internal_ip"]).ip
            for idx, addr in host_addrs:
                if addr.ip == want:
                    private = {"name": links[idx]["name"], "mtu": links[idx]["mtu"]}
                    break
        ipip = tunl is not None
        # devices the plan routes through that must exist already (flannel.1): we never make them
        names = set(link["name"] for link in links.values())
        absent = sorted(set(r["device"] for r in (plan or {}).get("routes") or [])
                        - names - set((PRIVATE, TUNNEL, tunnel, self.interface)))
        ssh = self._ssh_path(ipr, plan) if self.ssh_guard and plan else None
        if not ipip and plan and _tunnel_needed(plan):
            # side-effect free (modprobe -n), so check mode sees a host without IPIP too
            ipip = kernel_module_available("ipip")
        return {
            "interface": self.interface,
            "interface_present": wg_index is not None,
            "addresses": addresses,
            "routes": _sorted_routes(routes),
            "rules": _sorted_rules(self._rules(ipr)),
            "tunl0": tunl,
            "tunnel_device": tunnel,
            "tunnel_address": tunnel_address,
            # what desired() and changes() need to know of the host beyond what we own: foreign
            # routes at plan destinations not ours yet
            "foreign": sorted(foreign, key=lambda r: (r["table"], r["family"], r["dst"], r["proto"])),
            "private_device": private,
            "absent_devices": absent,
            "ipip": ipip,
            "ssh": ssh,
        }

    def _ssh_path(self, ipr, plan):
        """Where this run's SSH client is reached now, when a main-table route of the plan covers
        it: {client, prefixlen (of the best route to it now), ours}; else None. The main table
        is read only in that case (rare: a peer with 0.0.0.0/0, a controller inside a pod CIDR)."""
        client = ssh_client_address()
        if client is None:
            return None
        ip = ipaddress.ip_address(client)
        if not any(r["table"] == MAIN_TABLE and ip in ipaddress.ip_network(r["dst"]) for r in plan.get("routes") or []):
            return None
        family = _family(ip.version)
        best = (-1, None)
        for msg in self._dump(ipr, family, table=MAIN_TABLE, rtype=RTN_UNICAST):
            if msg["type"] != RTN_UNICAST or msg["dst_len"] <= best[0] \
                    or (msg.get_attr("RTA_TABLE") or msg["table"]) != MAIN_TABLE:
                continue  # (a kernel without strict checking returns every table)
            dst = msg.get_attr("RTA_DST") or ("0.0.0.0" if ip.version == 4 else "::")
            if ip in ipaddress.ip_network("%s/%d" % (dst, msg["dst_len"]), strict=False):
                best = (msg["dst_len"], msg["proto"])
        return {"client": client, "prefixlen": best[0], "ours": best[1] == ROUTE_PROTO}

    def _ssh_in_the_way(self, current, desired):
        """Raise when a main-table route we add or replace would take over the path of this
        run's SSH connection: the host would answer the controller through the mesh."""
        ssh = current.get("ssh")
        if not ssh or ssh["ours"] or ssh["prefixlen"] < 0:
            # no plan route covers the client, its path already is ours, or no main-table route
            # reaches it (the connection runs through a policy-routing table: not ours to judge)
            return
        ip = ipaddress.ip_address(ssh["client"])
        have = dict((route_key(r), r) for r in current["routes"])
        for r in desired["routes"]:
            net = ipaddress.ip_network(r["dst"])
            old = have.get(route_key(r))
            if r["table"] != MAIN_TABLE or ip not in net or (old and _route_attrs(old) == _route_attrs(r)):
                continue
            if net.prefixlen >= ssh["prefixlen"]:
                raise NetStateError(
                    "route %s would carry this run's SSH connection (from %s) into the mesh; keep the management"
                    " network out of allowed IPs and pod CIDRs, add a more specific route to it, or set"
                    " ssh_guard: false" % (route_str(r), ssh["client"]), desired.get("subject"), r.get("field"))

    # ---------------------------------------------------------------- Backend API
    def current(self, plan):
        """Our addresses, routes, rules and tunl0; with a plan also the foreign routes at its
        destinations, the interface holding its internal_ip and whether IPIP is available."""
        ipr, strict = self._reader()
        try:
            return self._read(ipr, strict, plan)
        finally:
            ipr.close()

    def _tunnel_device(self, links, plan):
        """The IPIP device this host encapsulates through: tunl0, or cilium_tunl when the plan
        says compatibility cilium and Cilium renamed tunl0 to it (Kilo reuses it then). Without
        a plan (removal): cilium_tunl when it is there and tunl0 is not."""
        if self._by_name(links, CILIUM_TUNNEL) is None:
            return TUNNEL
        if plan is None:
            return CILIUM_TUNNEL if self._by_name(links, TUNNEL) is None else TUNNEL
        return CILIUM_TUNNEL if plan.get("compatibility") == "cilium" else TUNNEL

    def desired(self, plan, current):
        """Resolve the plan against ``current`` (device 'private', tunl0 MTU); reads nothing."""
        subject = host_subject(plan["name"])
        private = current.get("private_device")
        tunnel = current.get("tunnel_device") or TUNNEL
        routes, seen = [], {}
        for i, r in enumerate(plan["routes"]):
            field = "plan.routes[%d]" % i
            device = r["device"]
            if device == PRIVATE:
                if private is None:
                    raise NetStateError(
                        "'%s' needs the interface holding internal_ip %s, but no interface of this host "
                        "has that address" % (PRIVATE, plan["internal_ip"]), subject, field + ".device")
                device = private["name"]
            elif device == TUNNEL:
                device = tunnel
            elif device in current.get("absent_devices", ()):
                hint = (" (compatibility flannel routes through Flannel's VXLAN device: is Flannel running"
                        " on this host?)" if device == FLANNEL else "")
                raise NetStateError("device %s does not exist on this host%s" % (device, hint),
                                    subject, field + ".device")
            route = {
                "family": ipaddress.ip_network(r["dst"]).version,
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
                if _route_attrs(seen[key]) != _route_attrs(route):
                    raise NetStateError("a second, different route to %s in table %s (first: %s)"
                                        % (route["dst"], _table_name(route["table"]), seen[key]["field"]),
                                        subject, field)
                continue
            seen[key] = route
            routes.append(route)

        rules, rule_keys = [], set()
        for r in plan["rules"]:
            rule = {
                "family": ipaddress.ip_network(r["src"] or r["dst"]).version,
                "src": r["src"],
                "dst": r["dst"],
                "iif": r["iif"],
                "table": r["table"],
                "priority": RULE_PRIORITY,
            }
            if _rule_key(rule) not in rule_keys:
                rule_keys.add(_rule_key(rule))
                rules.append(rule)

        tunnel_address = None
        if plan["tunnel_address"] and ipaddress.ip_interface(plan["tunnel_address"]).version == 4:
            tunnel_address = plan["tunnel_address"]

        tunl = current["tunl0"]
        # Kilo creates tunl0 whenever it encapsulates, also when no route uses it yet
        # (crosssubnet inside one subnet): its address is set either way.
        if _tunnel_needed(plan):
            if tunl is None and not current.get("ipip"):
                raise NetStateError(_IPIP_HINT, subject, _tunnel_field(plan))
            mtu = (private["mtu"] - IPIP_HEADER) if private and private["mtu"] else None
            if (mtu is None or tunnel == CILIUM_TUNNEL) and tunl:
                mtu = tunl["mtu"]  # cilium_tunl's MTU is Cilium's: only its state is ours to set
            tunl = {"up": True, "mtu": mtu}
        return {
            "interface": self.interface,
            "subject": subject,
            "addresses": [plan["address"]] if plan["address"] else [],
            "routes": _sorted_routes(routes),
            "rules": _sorted_rules(rules),
            "tunl0": tunl,
            "tunnel_device": tunnel,
            "tunnel_address": tunnel_address,
        }

    def _foreign_in_the_way(self, current, desired):
        """[(our desired route, foreign routes a replace would overwrite)] for routes we add."""
        have = set(route_key(r) for r in current["routes"])
        out = []
        for r in desired["routes"]:
            clash = [] if route_key(r) in have else _clashing(current.get("foreign"), r)
            if clash:
                out.append((r, clash))
        return out

    def changes(self, current, desired):
        """What apply() would do; KiloError when a foreign route holds a destination of the plan
        and route_conflict is 'fail', so check mode fails where the real run would."""
        self._ssh_in_the_way(current, desired)
        taken = {}
        for r, clash in self._foreign_in_the_way(current, desired):
            if self.route_conflict != "replace":
                raise NetStateError(
                    "a foreign route (%s) already holds %s in table %s; remove it or set route_conflict: replace"
                    % (foreign_str(clash[0]), r["dst"], _table_name(r["table"])),
                    desired.get("subject"), r.get("field"))
            taken[route_key(r)] = clash
        out = []
        if desired["addresses"] and not current["interface_present"]:
            out.append("interface %s absent (addresses follow once it exists)" % self.interface)
        for a in desired["addresses"]:
            if a not in current["addresses"]:
                out.append("add address %s dev %s" % (a, self.interface))
        for a in current["addresses"]:
            if a not in desired["addresses"]:
                out.append("remove address %s dev %s" % (a, self.interface))
        want_t, have_t = desired.get("tunl0"), current.get("tunl0")
        tunnel = _tunnel_name(current, desired)
        if want_t and want_t != have_t:
            if not have_t:
                out.append("create %s (mtu %s)" % (tunnel, want_t["mtu"]))
            else:
                out.append("set %s up mtu %s" % (tunnel, want_t["mtu"]))
        for a in _addr_list(desired.get("tunnel_address")):
            if a not in _addr_list(current.get("tunnel_address")):
                out.append("add address %s dev %s" % (a, tunnel))
        for a in _addr_list(current.get("tunnel_address")):
            if a not in _addr_list(desired.get("tunnel_address")):
                out.append("remove address %s dev %s" % (a, tunnel))
        have = dict((route_key(r), r) for r in current["routes"])
        want = dict((route_key(r), r) for r in desired["routes"])
        for key in sorted(want):
            if key not in have:
                extra = ""
                if key in taken:
                    extra = " (taking over foreign route %s)" % "; ".join(foreign_str(f) for f in taken[key])
                out.append("add route %s%s" % (route_str(want[key]), extra))
            elif _route_attrs(have[key]) != _route_attrs(want[key]):
                out.append("replace route %s -> %s" % (route_str(have[key]), route_str(want[key])))
        for key in sorted(have):
            if key not in want:
                out.append("remove route %s" % route_str(have[key]))
        have_r = set(_rule_key(r) for r in current["rules"])
        want_r = set(_rule_key(r) for r in desired["rules"])
        for r in desired["rules"]:
            if _rule_key(r) not in have_r:
                out.append("add rule %s" % rule_str(r))
        for r in current["rules"]:
            if _rule_key(r) not in want_r:
                out.append("remove rule %s" % rule_str(r))
        return out

    @staticmethod
    def render(state):
        out = {
            "interface": state["interface"],
            "addresses": list(state["addresses"]),
            "routes": sorted(route_str(r) for r in state["routes"]),
            "rules": sorted(rule_str(r) for r in state["rules"]),
        }
        if state.get("tunl0"):
            out["tunl0"] = "%s %s mtu %s" % (state.get("tunnel_device") or TUNNEL,
                                             "up" if state["tunl0"]["up"] else "down", state["tunl0"]["mtu"])
        if state.get("tunnel_address"):
            out["tunnel_address"] = state["tunnel_address"]
        return out

    def _empty(self):
        return {"interface": self.interface, "subject": None, "addresses": [], "routes": [], "rules": [],
                "tunl0": None, "tunnel_address": None}

    def diff(self, current, desired):
        """(before, after); removing (desired None) leaves nothing of ours."""
        return self.render(current), self.render(desired if desired is not None else self._empty())

    @staticmethod
    def owns(current):
        """Whether ``current`` holds anything remove() would delete. tunl0 itself and the
        interface are not ours to remove."""
        return bool(current and (current["addresses"] or current["routes"] or current["rules"]
                                 or current.get("tunnel_address")))

    def remove(self, current):
        """Remove our routes, rules, the addresses on our interface and our tunl0 address."""
        self.apply(dict(current, foreign=[]), self._empty())

    # ---------------------------------------------------------------- apply
    def apply(self, current, desired):
        """Converge by difference; a foreign route in the way fails before anything changes."""
        self.changes(current, desired)
        ipr = self._ipr()
        try:
            links = self._links(ipr)
            wg_index = self._by_name(links, self.interface)
            needs_wg = desired["addresses"] or any(r["device"] == self.interface for r in desired["routes"])
            if wg_index is None and needs_wg:
                raise NetStateError("interface %s does not exist; the WireGuard backend must "
                                    "create it before addresses and routes" % self.interface)
            # tunl0 first: a host without IPIP fails before anything else was changed
            tunnel = _tunnel_name(current, desired)
            if desired.get("tunl0") and desired["tunl0"] != current.get("tunl0"):
                self._apply_tunl(ipr, desired["tunl0"], tunnel)
            self._apply_tunnel_address(ipr, desired.get("tunnel_address"), tunnel)
            if wg_index is not None:
                self._apply_addresses(ipr, wg_index, desired["addresses"])
            # diff routes against the live state: address or tunl0 changes can make the kernel
            # drop routes, and ``current`` may be older than this call
            links = self._links(ipr)
            reader, strict = self._reader()
            try:
                routes, dummy = self._routes(reader, strict, links, set())
            finally:
                reader.close()
            self._apply_routes(ipr, links, routes, desired["routes"])
            self._apply_rules(ipr, self._rules(ipr), desired["rules"])
        finally:
            ipr.close()

    def _apply_addresses(self, ipr, index, wanted):
        have = [str(pair[1]) for pair in self._addresses(ipr, index)]
        # add first: removing the last address of a link flushes every route through it
        for a in wanted:
            if a not in have:
                self._addr(ipr, "add", index, a)
        stale = [a for a in have if a not in wanted]
        if any(ipaddress.ip_interface(a).version == 4 for a in stale):
            self._promote_secondaries()
        for a in stale:
            self._addr(ipr, "del", index, a)
        # deleting an old primary also deletes secondaries of the same subnet: re-add them
        have = [str(pair[1]) for pair in self._addresses(ipr, index)]
        for a in wanted:
            if a not in have:
                self._addr(ipr, "add", index, a)

    def _promote_secondaries(self):
        """Deleting the primary IPv4 address would take the secondaries (and, with the last
        one, every route through the link) with it; promotion keeps the new one. Our link."""
        path = "/proc/sys/net/ipv4/conf/%s/promote_secondaries" % self.interface
        try:
            with open(path, "w") as f:
                f.write("1")
        except (IOError, OSError):
            pass  # best effort: the re-add below still converges

    def _addr(self, ipr, cmd, index, address):
        iface = ipaddress.ip_interface(address)
        kw = {"index": index, "address": str(iface.ip), "prefixlen": iface.network.prefixlen}
        if iface.version == 6:
            kw["family"] = socket.AF_INET6
        try:
            ipr.addr(cmd, **kw)
        except Exception as exc:  # NetlinkError; keep pyroute2 version differences out
            raise NetStateError("cannot %s address %s on %s: %s" % (cmd, address, self.interface, exc))

    def _apply_tunl(self, ipr, want, name=TUNNEL):
        links = self._links(ipr)
        index = self._by_name(links, name)
        if index is None:  # only tunl0 is ever made here: cilium_tunl is Cilium's
            try:
                ipr.link("add", ifname=TUNNEL, kind="ipip")
            except Exception as exc:
                if "exist" not in str(exc).lower():
                    raise NetStateError("%s (creating %s failed: %s)" % (_IPIP_HINT, TUNNEL, exc))
            links = self._links(ipr)
            index = self._by_name(links, TUNNEL)
            if index is None:
                raise NetStateError(_IPIP_HINT)
        kw = {"index": index, "state": "up"}
        if want.get("mtu") and links[index]["mtu"] != want["mtu"]:
            kw["mtu"] = want["mtu"]
        if not links[index]["up"] or "mtu" in kw:
            try:
                ipr.link("set", **kw)
            except Exception as exc:
                raise NetStateError("cannot set %s up (mtu %s): %s" % (name, want.get("mtu"), exc))

    def _apply_tunnel_address(self, ipr, want, name=TUNNEL):
        """Our labelled address on tunl0 (or cilium_tunl): add the wanted one, remove other labelled ones."""
        index = self._by_name(self._links(ipr), name)
        if index is None:
            return  # no tunl0: nothing of ours can be on it (and nothing is wanted)
        want = _addr_list(want)
        have = self._tunl_addresses(ipr, index)
        for a in want:
            if a in have:
                continue
            iface = ipaddress.ip_interface(a)
            kw = {"index": index, "address": str(iface.ip), "prefixlen": iface.network.prefixlen}
            try:
                try:
                    ipr.addr("add", label=TUNL_LABEL, **kw)
                except Exception as exc:
                    if "exist" not in str(exc).lower():
                        raise
                    # the same address without our label (Kilo itself set it, say): the
                    # kernel cannot relabel in place, so take it over by delete + add
                    ipr.addr("del", **kw)
                    ipr.addr("add", label=TUNL_LABEL, **kw)
            except Exception as exc:
                raise NetStateError("cannot add address %s on %s: %s" % (a, name, exc))
        for a in have:
            if a not in want:
                iface = ipaddress.ip_interface(a)
                try:
                    ipr.addr("del", index=index, address=str(iface.ip), prefixlen=iface.network.prefixlen)
                except Exception as exc:
                    raise NetStateError("cannot remove address %s from %s: %s" % (a, name, exc))

    def _route_kw(self, links, r):
        index = self._by_name(links, r["device"])
        if index is None:
            raise NetStateError("route %s: device %s does not exist" % (route_str(r), r["device"]))
        net = ipaddress.ip_network(r["dst"])
        kw = {
            "family": _family(r["family"]),
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

    def _apply_routes(self, ipr, links, live, wanted):
        have = dict((route_key(r), r) for r in live)
        want = dict((route_key(r), r) for r in wanted)
        # add/replace before removing stale ones so a moved prefix never has a gap; replace
        # also takes over a foreign route that changes() allowed (route_conflict: replace)
        for key in sorted(want):
            r = want[key]
            if key in have and _route_attrs(have[key]) == _route_attrs(r):
                continue
            kw = self._route_kw(links, r)
            try:
                ipr.route("replace", **kw)
            except Exception as exc:
                raise NetStateError("cannot set route %s: %s" % (route_str(r), exc))
        for key in sorted(have):
            if key not in want:
                self._del_route(ipr, links, have[key])

    def _del_route(self, ipr, links, r):
        net = ipaddress.ip_network(r["dst"])
        kw = {
            "family": _family(r["family"]),
            "dst": str(net.network_address),
            "dst_len": net.prefixlen,
            "table": r["table"],
            "proto": ROUTE_PROTO,
            "scope": RT_SCOPE_NOWHERE,  # match any scope, as `ip route del` does
        }
        index = self._by_name(links, r["device"])
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

    @staticmethod
    def _rule_kw(r):
        kw = {
            "family": _family(r["family"]),
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

    def _apply_rules(self, ipr, have, want):
        have_k = set(_rule_key(r) for r in have)
        want_k = set(_rule_key(r) for r in want)
        for r in want:
            if _rule_key(r) not in have_k:
                try:
                    ipr.rule("add", **self._rule_kw(r))
                except Exception as exc:
                    raise NetStateError("cannot add rule %s: %s" % (rule_str(r), exc))
        for r in have:
            if _rule_key(r) not in want_k:
                try:
                    ipr.rule("del", **self._rule_kw(r))
                except Exception as exc:
                    raise NetStateError("cannot remove rule %s: %s" % (rule_str(r), exc))


def _tunnel_name(current, desired):
    """The IPIP device of this converge (the one read with the plan; tunl0 by default)."""
    return (desired or {}).get("tunnel_device") or (current or {}).get("tunnel_device") or TUNNEL


def _tunnel_needed(plan):
    """Whether the plan encapsulates: an IPv4 tunnel_address or a route through tunl0."""
    return bool(_tunnel_field(plan))


def _tunnel_field(plan):
    """The first plan field that needs tunl0, or None."""
    if plan.get("tunnel_address") and ipaddress.ip_interface(plan["tunnel_address"]).version == 4:
        return "plan.tunnel_address"
    for i, r in enumerate(plan.get("routes") or []):
        if r["device"] == TUNNEL:
            return "plan.routes[%d].device" % i
    return None
