"""Host network state of a kilo.mesh node: WireGuard interface addresses, routes, ip rules, tunl0.

Runs on the host (Debian's /usr/bin/python3 with pyroute2 0.7.2, and pyroute2 0.9.x). No Ansible.

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
"""

import ipaddress
import os
import socket
import subprocess

ROUTE_PROTO = 107
RULE_TABLE = 1107
DEFAULT_RULE_PRIORITY = 32000  # before main (32766); fixed so a re-run compares equal
RTNH_F_ONLINK = 4
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_LINK = 253
IPIP_HEADER = 20
TUNL = "tunl0"
# The label marks the tunl0 address as ours, so removal needs no plan; "<dev>:" keeps `ip` happy.
TUNL_LABEL = "tunl0:kilo"
_TABLE_NAMES = {254: "main", 255: "local", 253: "default"}
_IPIP_HINT = ("host lacks IPIP (tunl0) support: load the ipip module (modprobe ipip) "
              "or set encapsulate: never")


class NetStateError(Exception):
    """Clear, user-facing failure of the network-state backend."""


def _pyroute2():
    try:
        from pyroute2 import IPRoute  # noqa: deferred so unit tests need no netlink
    except ImportError:
        raise NetStateError("python module pyroute2 is missing on this host "
                            "(Debian: apt install python3-pyroute2)")
    return IPRoute


def _net(value, what):
    try:
        return ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        raise NetStateError("%s: %r is not an IP network" % (what, value))


def _iface(value, what):
    try:
        return ipaddress.ip_interface(str(value))
    except ValueError:
        raise NetStateError("%s: %r is not an IP address with prefix" % (what, value))


def _ip(value, what):
    try:
        return ipaddress.ip_address(str(value).split("/", 1)[0])
    except ValueError:
        raise NetStateError("%s: %r is not an IP address" % (what, value))


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


def _fkey(key):
    """String form of a route key, so states stay JSON-serialisable."""
    return "%s table %s" % key


def _clashing(foreign, route):
    """Foreign routes that 'route replace' of ours would overwrite (same metric)."""
    default = 1024 if route["family"] == 6 else 0
    return [f for f in (foreign or []) if (f.get("priority") or default) == default]


def _sorted_routes(routes):
    return sorted(routes, key=lambda r: (r["table"], r["family"], r["dst"]))


def _sorted_rules(rules):
    return sorted(rules, key=lambda r: tuple("" if v is None else str(v) for v in _rule_key(r)))


class NetStateBackend(object):
    """Addresses, routes, rules and tunl0 of one host, converged by difference."""

    name = "netstate"

    def __init__(self, settings=None):
        settings = dict(settings or {})
        self.interface = settings.get("interface") or "kilo0"
        self.rule_priority = int(settings.get("rule_priority") or DEFAULT_RULE_PRIORITY)
        # 'fail' (default): a foreign route at one of our destinations is an error;
        # 'replace': take it over (Kilo's behaviour: it always replaces).
        self.route_conflict = settings.get("route_conflict") or "fail"
        if self.route_conflict not in ("fail", "replace"):
            raise NetStateError("setting route_conflict: %r is not one of fail, replace"
                                % self.route_conflict)
        self.tunl_mtu = int(settings.get("tunl_mtu") or 0)
        self._ipr_class = None

    # ---------------------------------------------------------------- netlink helpers
    def _ipr(self):
        if self._ipr_class is None:
            self._ipr_class = _pyroute2()
        return self._ipr_class()

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

    def _read(self, ipr):
        links = self._links(ipr)
        wg_index = self._by_name(links, self.interface)
        addresses = []
        if wg_index is not None:
            addresses = sorted(str(pair[1]) for pair in self._addresses(ipr, wg_index))
        routes, foreign = [], {}
        for family in (socket.AF_INET, socket.AF_INET6):
            for msg in ipr.route("dump", family=family):
                if msg["type"] != 1:  # unicast only; ours are all unicast
                    continue
                table = msg.get_attr("RTA_TABLE") or msg["table"]
                dst = msg.get_attr("RTA_DST")
                if dst is None:
                    dst = "0.0.0.0" if family == socket.AF_INET else "::"
                dst = str(ipaddress.ip_network("%s/%d" % (dst, msg["dst_len"])))
                oif = msg.get_attr("RTA_OIF")
                entry = {
                    "family": 4 if family == socket.AF_INET else 6,
                    "dst": dst,
                    "table": table,
                    "gateway": msg.get_attr("RTA_GATEWAY"),
                    "device": links.get(oif, {}).get("name", str(oif)),
                    "source": msg.get_attr("RTA_PREFSRC"),
                    "onlink": bool(msg["flags"] & RTNH_F_ONLINK),
                    "priority": msg.get_attr("RTA_PRIORITY"),
                }
                if msg["proto"] == ROUTE_PROTO:
                    routes.append(entry)
                else:
                    foreign.setdefault(_fkey((dst, table)), []).append(
                        dict(entry, proto=msg["proto"]))
        rules = []
        for family in (socket.AF_INET, socket.AF_INET6):
            for msg in ipr.get_rules(family=family):
                table = msg.get_attr("FRA_TABLE") or msg["table"]
                if table != RULE_TABLE:
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
        tunl_index = self._by_name(links, TUNL)
        tunl = None
        tunnel_address = None
        if tunl_index is not None:
            tunl = {"up": links[tunl_index]["up"], "mtu": links[tunl_index]["mtu"]}
            ours = self._tunl_addresses(ipr, tunl_index)
            # more than one only after a foreign edit; a list keeps every one visible
            tunnel_address = ours[0] if len(ours) == 1 else (ours or None)
        return {
            "interface": self.interface,
            "interface_present": wg_index is not None,
            "addresses": addresses,
            "routes": _sorted_routes(routes),
            "rules": _sorted_rules(rules),
            "tunl0": tunl,
            "tunnel_address": tunnel_address,
            "_foreign": foreign,
            "_links": links,
        }

    # ---------------------------------------------------------------- Backend API
    def current(self):
        ipr = self._ipr()
        try:
            return self._read(ipr)
        finally:
            ipr.close()

    def desired(self, plan):
        """Resolve the plan against this host (device 'private', tunl0 MTU); read-only."""
        node = plan.get("name", "?")
        ipr = self._ipr()
        try:
            live = self._read(ipr)
            host_addrs = self._addresses(ipr)
        finally:
            ipr.close()
        links = live["_links"]

        addresses = []
        if plan.get("address"):
            addresses.append(str(_iface(plan["address"], "node %s: address" % node)))

        private_dev = None
        private_mtu = None
        internal = plan.get("internal_ip")
        if internal:
            want = _ip(internal, "node %s: internal_ip" % node)
            for idx, addr in host_addrs:
                if addr.ip == want:
                    private_dev = links[idx]["name"]
                    private_mtu = links[idx]["mtu"]
                    break

        wg_names = (self.interface, plan.get("interface") or "kilo0", "kilo0")
        routes, seen = [], {}
        for i, r in enumerate(plan.get("routes") or []):
            what = "node %s: routes[%d]" % (node, i)
            dst = _net(r.get("dst"), what + ".dst")
            device = r.get("device") or self.interface
            if device in wg_names:
                device = self.interface
            elif device == "private":
                if private_dev is None:
                    raise NetStateError(
                        "%s.device: 'private' needs the interface holding internal_ip %s, "
                        "but no interface of this host has that address" % (what, internal))
                device = private_dev
            gateway = r.get("gateway")
            if gateway:
                gateway = str(_ip(gateway, what + ".gateway"))
                if ipaddress.ip_address(gateway).version != dst.version:
                    raise NetStateError("%s: gateway %s and dst %s differ in IP version"
                                        % (what, gateway, dst))
            source = r.get("source")
            if source:
                source = str(_ip(source, what + ".source"))
            route = {
                "family": dst.version,
                "dst": str(dst),
                "table": int(r.get("table") or 254),
                "gateway": gateway or None,
                "device": device,
                "source": source or None,
                # onlink only means something with a gateway; the kernel drops it otherwise
                "onlink": bool(r.get("onlink")) and bool(gateway),
                "priority": None,
            }
            key = route_key(route)
            if key in seen:
                if _route_attrs(seen[key]) != _route_attrs(route):
                    raise NetStateError("%s: a second, different route to %s in table %s"
                                        % (what, route["dst"], route["table"]))
                continue
            seen[key] = route
            routes.append(route)

        rules, rule_keys = [], set()
        for i, r in enumerate(plan.get("rules") or []):
            what = "node %s: rules[%d]" % (node, i)
            src = _net(r["src"], what + ".src") if r.get("src") else None
            dst = _net(r["dst"], what + ".dst") if r.get("dst") else None
            if src is None and dst is None:
                raise NetStateError("%s: a rule needs src or dst" % what)
            if src is not None and dst is not None and src.version != dst.version:
                raise NetStateError("%s: src and dst differ in IP version" % what)
            table = int(r.get("table") or RULE_TABLE)
            if table != RULE_TABLE:
                raise NetStateError("%s.table: only table %d is managed, got %s"
                                    % (what, RULE_TABLE, table))
            iif = r.get("iif")
            if iif in wg_names:
                iif = self.interface
            rule = {
                "family": (src or dst).version,
                "src": str(src) if src else None,
                "dst": str(dst) if dst else None,
                "iif": iif or None,
                "table": table,
                "priority": self.rule_priority,
            }
            if _rule_key(rule) not in rule_keys:
                rule_keys.add(_rule_key(rule))
                rules.append(rule)

        tunnel_address = None
        if plan.get("tunnel_address"):
            tun = _iface(plan["tunnel_address"], "node %s: tunnel_address" % node)
            if tun.version == 4:
                tunnel_address = str(tun)

        tunl = live["tunl0"]
        # Kilo creates tunl0 whenever it encapsulates, also when no route uses it yet
        # (crosssubnet inside one subnet): its address is set either way.
        if tunnel_address or any(r["device"] == TUNL for r in routes):
            mtu = self.tunl_mtu or ((private_mtu - IPIP_HEADER) if private_mtu else None)
            if mtu is None and tunl:
                mtu = tunl["mtu"]
            if tunl is None and not ipip_supported():
                # check mode must see this too, not only apply
                raise NetStateError("node %s: %s" % (node, _IPIP_HINT))
            tunl = {"up": True, "mtu": mtu}
        return {
            "interface": self.interface,
            "interface_present": live["interface_present"],
            "addresses": sorted(addresses),
            "routes": _sorted_routes(routes),
            "rules": _sorted_rules(rules),
            "tunl0": tunl,
            "tunnel_address": tunnel_address,
            "_foreign": live["_foreign"],
            "_links": links,
        }

    def changes(self, current, desired):
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
        if want_t and want_t != have_t:
            if not have_t:
                out.append("create %s (mtu %s)" % (TUNL, want_t["mtu"]))
            else:
                out.append("set %s up mtu %s" % (TUNL, want_t["mtu"]))
        for a in _addr_list(desired.get("tunnel_address")):
            if a not in _addr_list(current.get("tunnel_address")):
                out.append("add address %s dev %s" % (a, TUNL))
        for a in _addr_list(current.get("tunnel_address")):
            if a not in _addr_list(desired.get("tunnel_address")):
                out.append("remove address %s dev %s" % (a, TUNL))
        have = dict((route_key(r), r) for r in current["routes"])
        want = dict((route_key(r), r) for r in desired["routes"])
        for key in sorted(want):
            if key not in have:
                foreign = _clashing(desired.get("_foreign", {}).get(_fkey(key)), want[key])
                extra = (" (over foreign route, proto %s)" % foreign[0]["proto"]) if foreign else ""
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

    def render(self, state):
        out = {
            "interface": state["interface"],
            "addresses": list(state["addresses"]),
            "routes": sorted(route_str(r) for r in state["routes"]),
            "rules": sorted(rule_str(r) for r in state["rules"]),
        }
        if state.get("tunl0"):
            out["tunl0"] = "%s %s mtu %s" % (TUNL, "up" if state["tunl0"]["up"] else "down",
                                             state["tunl0"]["mtu"])
        if state.get("tunnel_address"):
            out["tunnel_address"] = state["tunnel_address"]
        return out

    @staticmethod
    def owns(state):
        """Whether `state` (from current()) holds anything remove() would delete. tunl0 itself and
        the interface name are not ours to remove, so render() output cannot answer this."""
        return bool(state and (state["addresses"] or state["routes"] or state["rules"]
                               or state.get("tunnel_address")))

    # ---------------------------------------------------------------- apply
    def apply(self, current, desired):
        """Converge by difference. Returns the list of changes made."""
        done = []
        ipr = self._ipr()
        try:
            links = self._links(ipr)
            wg_index = self._by_name(links, self.interface)
            needs_wg = desired["addresses"] or any(
                r["device"] == self.interface for r in desired["routes"])
            if wg_index is None and needs_wg:
                raise NetStateError("interface %s does not exist; the WireGuard backend must "
                                    "create it before addresses and routes" % self.interface)
            # tunl0 first: a host without IPIP fails before anything else was changed
            if desired.get("tunl0") and desired["tunl0"] != current.get("tunl0"):
                done += self._apply_tunl(ipr, desired["tunl0"])
            done += self._apply_tunnel_address(ipr, desired.get("tunnel_address"))
            if wg_index is not None:
                done += self._apply_addresses(ipr, wg_index, desired["addresses"])
            # diff routes against live state: address or tunl0 changes can make the kernel drop
            # routes, and `current` may be older than this call
            live = self._read(ipr)
            done += self._apply_routes(ipr, live, desired)
            done += self._apply_rules(ipr, live["rules"], desired["rules"])
        finally:
            ipr.close()
        return done

    def _apply_addresses(self, ipr, index, wanted):
        done = []
        have = [str(pair[1]) for pair in self._addresses(ipr, index)]
        # add first: removing the last address of a link flushes every route through it
        for a in wanted:
            if a not in have:
                self._addr(ipr, "add", index, a)
                done.append("add address %s dev %s" % (a, self.interface))
        stale = [a for a in have if a not in wanted]
        if any(ipaddress.ip_interface(a).version == 4 for a in stale):
            self._promote_secondaries()
        for a in stale:
            if a not in wanted:
                self._addr(ipr, "del", index, a)
                done.append("remove address %s dev %s" % (a, self.interface))
        # deleting an old primary also deletes secondaries of the same subnet: re-add them
        have = [str(pair[1]) for pair in self._addresses(ipr, index)]
        for a in wanted:
            if a not in have:
                self._addr(ipr, "add", index, a)
        return done

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

    def _apply_tunl(self, ipr, want):
        done = []
        links = self._links(ipr)
        index = self._by_name(links, TUNL)
        if index is None:
            try:
                ipr.link("add", ifname=TUNL, kind="ipip")
            except Exception as exc:
                if "exist" not in str(exc).lower():
                    raise NetStateError("%s (creating %s failed: %s)" % (_IPIP_HINT, TUNL, exc))
            links = self._links(ipr)
            index = self._by_name(links, TUNL)
            if index is None:
                raise NetStateError(_IPIP_HINT)
            done.append("create %s" % TUNL)
        kw = {"index": index, "state": "up"}
        if want.get("mtu") and links[index]["mtu"] != want["mtu"]:
            kw["mtu"] = want["mtu"]
        if not links[index]["up"] or "mtu" in kw:
            try:
                ipr.link("set", **kw)
            except Exception as exc:
                raise NetStateError("cannot set %s up (mtu %s): %s" % (TUNL, want.get("mtu"), exc))
            done.append("set %s up mtu %s" % (TUNL, want.get("mtu")))
        return done

    def _apply_tunnel_address(self, ipr, want):
        """Our labelled address on tunl0: add the wanted one, remove other labelled ones."""
        index = self._by_name(self._links(ipr), TUNL)
        if index is None:
            return []  # no tunl0: nothing of ours can be on it (and nothing is wanted)
        want = _addr_list(want)
        have = self._tunl_addresses(ipr, index)
        done = []
        for a in want:
            if a not in have:
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
                    raise NetStateError("cannot add address %s on %s: %s" % (a, TUNL, exc))
                done.append("add address %s dev %s" % (a, TUNL))
        for a in have:
            if a not in want:
                iface = ipaddress.ip_interface(a)
                try:
                    ipr.addr("del", index=index, address=str(iface.ip),
                             prefixlen=iface.network.prefixlen)
                except Exception as exc:
                    raise NetStateError("cannot remove address %s from %s: %s" % (a, TUNL, exc))
                done.append("remove address %s dev %s" % (a, TUNL))
        return done

    def _route_kw(self, links, r):
        index = self._by_name(links, r["device"])
        if index is None:
            raise NetStateError("route %s: device %s does not exist" % (route_str(r), r["device"]))
        kw = {
            "family": socket.AF_INET if r["family"] == 4 else socket.AF_INET6,
            "dst": r["dst"].split("/")[0],
            "dst_len": int(r["dst"].split("/")[1]),
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

    def _apply_routes(self, ipr, live, desired):
        done = []
        links = self._links(ipr)
        have = dict((route_key(r), r) for r in live["routes"])
        want = dict((route_key(r), r) for r in desired["routes"])
        # add/replace before removing stale ones so a moved prefix never has a gap
        for key in sorted(want):
            r = want[key]
            if key in have and _route_attrs(have[key]) == _route_attrs(r):
                continue
            foreign = _clashing(live["_foreign"].get(_fkey(key)), r)
            if key not in have and foreign and self.route_conflict == "fail":
                raise NetStateError(
                    "route %s: a foreign route (proto %s) already holds %s in table %s; remove "
                    "it or set route_conflict: replace" % (route_str(r), foreign[0]["proto"],
                                                           r["dst"], _table_name(r["table"])))
            try:
                ipr.route("replace", **self._route_kw(links, r))
            except NetStateError:
                raise
            except Exception as exc:
                raise NetStateError("cannot set route %s: %s" % (route_str(r), exc))
            done.append(("replace route %s" if key in have else "add route %s") % route_str(r))
        for key in sorted(have):
            if key not in want:
                self._del_route(ipr, links, have[key])
                done.append("remove route %s" % route_str(have[key]))
        return done

    def _del_route(self, ipr, links, r):
        kw = {
            "family": socket.AF_INET if r["family"] == 4 else socket.AF_INET6,
            "dst": r["dst"].split("/")[0],
            "dst_len": int(r["dst"].split("/")[1]),
            "table": r["table"],
            "proto": ROUTE_PROTO,
            "scope": 255,  # RT_SCOPE_NOWHERE: match any scope, as `ip route del` does
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

    def _rule_kw(self, r):
        kw = {
            "family": socket.AF_INET if r["family"] == 4 else socket.AF_INET6,
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
        done = []
        have_k = set(_rule_key(r) for r in have)
        want_k = set(_rule_key(r) for r in want)
        for r in want:
            if _rule_key(r) not in have_k:
                try:
                    ipr.rule("add", **self._rule_kw(r))
                except Exception as exc:
                    raise NetStateError("cannot add rule %s: %s" % (rule_str(r), exc))
                done.append("add rule %s" % rule_str(r))
        for r in have:
            if _rule_key(r) not in want_k:
                try:
                    ipr.rule("del", **self._rule_kw(r))
                except Exception as exc:
                    raise NetStateError("cannot remove rule %s: %s" % (rule_str(r), exc))
                done.append("remove rule %s" % rule_str(r))
        return done

    def remove(self):
        """Remove our routes, rules and the addresses on our interface. Returns changes."""
        cur = self.current()
        empty = dict(cur, addresses=[], routes=[], rules=[], tunl0=None, tunnel_address=None)
        return self.apply(cur, empty)


def _addr_list(value):
    """tunnel_address as a list: None, one address, or (after a foreign edit) several."""
    if not value:
        return []
    return [value] if isinstance(value, str) else list(value)


def ipip_supported():
    """Best-effort check without side effects (for check mode)."""
    if os.path.isdir("/sys/module/ipip"):
        return True
    try:
        return subprocess.call(["modprobe", "-n", "-q", "ipip"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) == 0
    except OSError:
        return False
