"""Pick a node's internal (private) and external (public) IP the way Kilo does.

Kilo looks at three sources, in this order of preference, and keeps private and public
addresses apart:
  1. addresses the hostname resolves to that are assigned to a local interface,
  2. addresses on the interface holding the default route,
  3. addresses on every interface.
Loopback and link-local addresses never count. Inside each source IPv4 sorts before IPv6,
then by the CIDR text. Addresses found on ignored interfaces (Kilo ignores its own WireGuard
interface, the IPIP tunnel and the CNI bridge; we add `ignore_interfaces`, e.g. a lab's
management NIC) are dropped from every source. The internal IP is the first private one
(or none); the external IP the first public one, else the first private one.

Kilo's flags: ``--internal-cidr`` (``allowed_cidrs``) keeps only private addresses inside one
of the CIDRs (public ones are never filtered); ``--prioritise-private-addresses``
(``prioritise_private``) makes the chosen internal IP the external one too, when there is one.

"Public" uses Kilo's test: IPv4 outside 10/8, 172.16/12, 192.168/16 (so 100.64/10 and
198.18/15 are public); IPv6 not starting with fd00.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import socket

from ansible_collections.kilo.mesh.plugins.module_utils.host.cni import BRIDGE
from ansible_collections.kilo.mesh.plugins.module_utils.common import is_public
from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink.links import open_reader
from ansible_collections.kilo.mesh.plugins.module_utils.plan import (
    CILIUM_TUNNEL,
    MAIN_TABLE,
    TUNNEL,
)

DEFAULT_MTU = 1420
WIREGUARD_OVERHEAD = 80
# Interfaces Kilo itself never takes an address from: its IPIP tunnel (cilium_tunl where Cilium
# renamed it) and its CNI bridge (the pods' gateway address there, once a pod ran, would
# otherwise become the node's internal IP).
ALWAYS_IGNORED = (TUNNEL, CILIUM_TUNNEL, BRIDGE)
_ZERO = {socket.AF_INET: "0.0.0.0/0", socket.AF_INET6: "::/0"}  # the default route of each family


def is_local(ip):
    ip = ipaddress.ip_address(ip)
    if ip.is_loopback or ip.is_link_local:
        return True
    # Go's IsLinkLocalMulticast: 224.0.0.0/24 and ff02::/16.
    if ip.version == 4:
        return ip in ipaddress.ip_network("224.0.0.0/24")
    return ip in ipaddress.ip_network("ff02::/16")


def _sort_key(iface):
    return (0 if iface.version == 4 else 1, str(iface))


def read_host():
    """Snapshot of links, addresses and the default route: {'links': {index: {'name', 'mtu'}},
    'addrs': [{'index', 'ifname', 'cidr'}], 'default_index': index or None}.

    Read with the standard library's netlink (``open_reader``: pyroute2's import cost about a
    third of the key call); through pyroute2 where the kernel refuses strict route dumps."""
    reader, strict = open_reader()
    try:
        return snapshot(reader, lambda family: _default_routes(reader, strict, family))
    finally:
        reader.close()


def read_host_pyroute2():
    """read_host() through pyroute2 (0.7.2 and 0.9.x), as on a kernel without strict checking."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return snapshot(ipr, lambda family: _default_routes(ipr, False, family))


def _default_routes(reader, strict, family):
    """The main table's default routes of ``family``: a strict reader gets the main table alone
    from the kernel and decodes only the messages at the default's key; pyroute2's main table
    is filtered here."""
    if strict:
        return reader.routes(family, table=MAIN_TABLE, keys=[(_ZERO[family], MAIN_TABLE)])
    return [r for r in reader.get_routes(family=family, table=MAIN_TABLE) if r["dst_len"] == 0]


def snapshot(ipr, default_routes):
    """read_host() out of ``ipr`` (an IPRoute or a NetlinkReader); ``default_routes(family)``
    gives the main table's default routes of a family."""
    links = {}
    for link in list(ipr.get_links()):
        links[link["index"]] = {
            "name": link.get_attr("IFLA_IFNAME"),
            "mtu": link.get_attr("IFLA_MTU"),
        }
    addrs = []
    for a in list(ipr.get_addr()):
        ip = a.get_attr("IFA_ADDRESS")
        if a["family"] == socket.AF_INET and a.get_attr("IFA_LOCAL"):
            ip = a.get_attr("IFA_LOCAL")  # on point-to-point links IFA_ADDRESS is the peer
        if ip is None:
            continue
        addrs.append(
            {
                "index": a["index"],
                "ifname": links.get(a["index"], {}).get("name"),
                "cidr": "%s/%d" % (ip.split("%")[0], a["prefixlen"]),
            }
        )
    default_index = None
    for family in (socket.AF_INET, socket.AF_INET6):
        for route in list(default_routes(family)):
            oif = route.get_attr("RTA_OIF")
            if oif is None:
                hops = route.get_attr("RTA_MULTIPATH")
                if hops:
                    oif = hops[0]["oif"]
            if oif:
                default_index = oif
                break
        if default_index is not None:
            break
    return {"links": links, "addrs": addrs, "default_index": default_index}


def _hostname_ips(hostname):
    try:
        infos = socket.getaddrinfo(hostname, None)
    except (socket.gaierror, UnicodeError):
        return []
    seen = []
    for info in infos:
        ip = info[4][0].split("%")[0]
        if ip not in seen:
            seen.append(ip)
    return seen


def parse_cidrs(values, field="internal_cidrs"):
    """CIDRs (host bits allowed, as Go's ParseCIDR) -> networks; ValueError names the bad one."""
    out = []
    for value in values or ():
        try:
            if "/" not in str(value):
                raise ValueError
            out.append(ipaddress.ip_network(str(value).strip(), strict=False))
        except ValueError:
            raise ValueError("%s: %r is not a CIDR" % (field, value))
    return out


def choose_ips(
    host,
    hostname=None,
    ignore_interfaces=(),
    allowed_cidrs=(),
    prioritise_private=False,
    families=(),
):
    """Pure selection over a read_host() snapshot; see the module docstring.

    Returns {'internal_ip': CIDR or None, 'external_ip': IP or None,
             'candidates': {'internal': [...], 'external': [...]}}.
    ``families``: the IP versions of a dual-stack mesh's subnets, primary first (beyond Kilo);
    then 'internal_ip' is one of each family where the host has both (``internal_pair``).
    """
    ignored_names = set(ignore_interfaces or ()) | set(ALWAYS_IGNORED)
    ignored = set()
    for a in host["addrs"]:
        if a["ifname"] in ignored_names:
            iface = ipaddress.ip_interface(a["cidr"])
            ignored.add(str(iface))
            ignored.add(str(ipaddress.ip_interface(iface.ip)))
    allowed = parse_cidrs(allowed_cidrs)

    def split(cidrs):
        priv, pub = [], []
        for c in cidrs:
            iface = ipaddress.ip_interface(c)
            if is_local(iface.ip):
                continue
            (pub if is_public(iface.ip) else priv).append(iface)
        return sorted(priv, key=_sort_key), sorted(pub, key=_sort_key)

    # 1. hostname addresses, only if assigned here (with the mask they are assigned with).
    by_ip = {}
    for a in sorted(host["addrs"], key=lambda a: (str(a["ifname"]), a["cidr"])):
        by_ip.setdefault(str(ipaddress.ip_interface(a["cidr"]).ip), a["cidr"])
    host_cidrs = []
    if hostname:
        for ip in _hostname_ips(hostname):
            if ip in by_ip:
                host_cidrs.append(by_ip[ip])
    # 2. default-route interface, 3. all interfaces.
    default_cidrs = [a["cidr"] for a in host["addrs"] if a["index"] == host["default_index"]]
    all_cidrs = [a["cidr"] for a in host["addrs"]]

    priv, pub = [], []
    for source in (host_cidrs, default_cidrs, all_cidrs):
        p, q = split(source)
        priv.extend(p)
        pub.extend(q)

    def keep(iface, private):
        if str(iface) in ignored:
            return False
        if private and allowed and not any(iface.ip in n for n in allowed):
            return False
        return True

    def dedup(seq):
        out = []
        for s in seq:
            if s not in out:
                out.append(s)
        return out

    internal = dedup([str(i) for i in priv if keep(i, True)])
    external = dedup([str(i) for i in pub if keep(i, False)])
    chosen_external = external[0] if external else internal[0] if internal else None
    if prioritise_private and internal:
        chosen_external = internal[0]  # Kilo's mesh.New: externalIP = privateIP
    internal_ip = internal[0] if internal else None
    if len(families) == 2:
        internal_ip = internal_pair(internal, host["addrs"], families)
    return {
        "internal_ip": internal_ip,
        # the endpoint host: an address, not a CIDR
        "external_ip": str(ipaddress.ip_interface(chosen_external).ip) if chosen_external else None,
        "candidates": {"internal": internal, "external": external},
    }


def internal_pair(internal, addrs, families):
    """A dual-stack mesh's internal IPs out of the private candidates (``internal``, in order): the
    first of the primary family, then the first of the other family on that same interface - the
    routes of both families go through the one private interface, which the host finds by the
    first. One alone (text) where the host has no such second, as a single-stack node."""
    ifname = {}
    for a in addrs:
        ifname.setdefault(str(ipaddress.ip_interface(a["cidr"])), a["ifname"])
    primary = [c for c in internal if ipaddress.ip_interface(c).version == families[0]]
    other = [c for c in internal if ipaddress.ip_interface(c).version == families[1]]
    if not primary:
        return other[0] if other else None
    second = [c for c in other if ifname.get(c) == ifname.get(primary[0])]
    return [primary[0], second[0]] if second else primary[0]


def default_route_mtu(host=None):
    """MTU of the interface holding the default route, or None when there is none."""
    if host is None:
        host = read_host()
    idx = host.get("default_index")
    if idx is None or idx not in host["links"]:
        return None
    return host["links"][idx]["mtu"]


def wireguard_mtu(configured=0, host=None):
    """Kilo's MTU rule: the configured MTU, else default-route MTU - 80, else 1420."""
    if configured:
        return int(configured)
    try:
        base = default_route_mtu(host)
    except Exception:  # no netlink access: fall back like Kilo does
        base = None
    if not base:
        return DEFAULT_MTU
    return int(base) - WIREGUARD_OVERHEAD
