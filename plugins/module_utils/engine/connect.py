# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""``kgctl connect`` on the controller: the plan of a machine outside the mesh that joins as a peer.

Pure Python, no Ansible. The engine (``topology.Topology``) gives the peer's [Peer] sections (as
``kgctl showconf peer``); this turns them into a plan of the shape ``plan.SCHEMA`` describes, so
the host converges it with the same backends as a node (``kilo.mesh.converge``):

* the interface carries the peer's own allowed IP (kgctl's ``--allowed-ip``); in a dual-stack mesh
  it may carry one of each IP family, and each family's routes leave from its own;
* every section's allowed IPs are routed through the interface (kgctl's ``PeerRoutes``);
* ``extra`` (kgctl's ``--allowed-ips``) joins the allowed IPs of the segment of node ``via``
  (kgctl: the first node by name), on the peer's side only: the mesh itself never routes them.

A default route among them (``0.0.0.0/0``, ``::/0``: the mesh as the peer's VPN exit) goes in as
its two halves, so the machine's own default route stays as it is and comes back when the peer
leaves. Beyond kgctl, which would replace the default route: every leader endpoint a route through
the interface would cover is pinned to the path the machine's main table gives it now
(``main_routes``, our own routes left out), so WireGuard's packets never loop into their own
tunnel; an endpoint that is itself an allowed IP is then reached directly, not through the tunnel.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    dedup,
    host_subject,
)
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import (
    check_two_families,
    one_or_list,
    split_endpoint,
)
from ansible_collections.kilo.mesh.plugins.module_utils.plan import MAIN_TABLE, ROUTE_PROTO
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import Topology
from ansible_collections.kilo.mesh.plugins.module_utils.engine.parse import TopologyError

OUR_ROUTE_PROTOCOLS = (str(ROUTE_PROTO),)  # as `ip -j route` prints an unnamed protocol


def halves(net):
    """A default route as its two halves (a more specific route than any default route)."""
    if net.prefixlen:
        return [net]
    return list(net.subnets(prefixlen_diff=1))


def via_segment(topology, via, subject):
    """The segment key of node ``via`` (kgctl: the first node by name)."""
    names = sorted(topology.by_name)
    name = via if via else names[0]
    node = topology.by_name.get(name)
    if node is None:
        raise KiloError(
            "no node %r in the mesh (nodes: %s)" % (name, ", ".join(names[:10])),
            subject,
            "kilo_connect_via",
        )
    return node.segment.key


def _networks(values, subject, field):
    out = []
    for value in values or []:
        try:
            out.append(ipaddress.ip_network(str(value).strip(), strict=False))
        except ValueError:
            raise KiloError("%r is not a CIDR" % (value,), subject, field)
    return out


def _route_net(route, hop):
    """The destination of one `ip -j route` entry; "default" takes the family the reader noted
    (``family``), else its gateway's. None when it cannot be told."""
    dst = route.get("dst")
    try:
        if dst != "default":
            return ipaddress.ip_network(dst, strict=False)
        family = route.get("family") or (
            ipaddress.ip_address(hop["gateway"]).version if hop.get("gateway") else None
        )
    except (KeyError, TypeError, ValueError):
        return None
    return {4: ipaddress.ip_network("0.0.0.0/0"), 6: ipaddress.ip_network("::/0")}.get(family)


def best_path(ip, main_routes):
    """(gateway, device) of the main-table route to ``ip`` that is not ours: longest prefix,
    then lowest metric; None when the table has none. ``main_routes`` is `ip -j route show`."""
    best = None
    for route in main_routes or []:
        if (
            str(route.get("protocol")) in OUR_ROUTE_PROTOCOLS
            or route.get("type", "unicast") != "unicast"
        ):
            continue
        hop = (route.get("nexthops") or [route])[0]  # a multipath route: its first hop
        net = _route_net(route, hop)
        if net is None or net.version != ip.version or ip not in net:
            continue
        rank = (net.prefixlen, -int(route.get("metric") or 0))
        if best is None or rank > best[0]:
            best = (rank, hop.get("gateway"), hop.get("dev"))
    return None if best is None else best[1:]


def pinned_routes(entries, covered, main_routes, interface, subject):
    """A /32 (/128) route along today's path for each leader endpoint that a route through the
    interface (``covered``) would capture; KiloError when the machine has no path of its own to
    one. ``main_routes`` is called, once, only when an endpoint is covered (a remote read)."""
    routes, table = [], None
    for entry in entries:
        if not entry.get("endpoint"):
            continue
        host = split_endpoint(entry["endpoint"])[0]
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            continue  # a DNS name: resolved by WireGuard, not pinned (a limit: docs/docsite/rst/guide_connect.rst)
        if not any(ip in net for net in covered):
            continue
        table = main_routes() if table is None else table
        path = best_path(ip, table)
        if path is None or path[1] == interface:
            raise KiloError(
                "no route of this machine's own reaches leader endpoint %s of %s, so the tunnel"
                " would carry its own packets" % (ip, entry["name"]),
                subject,
                "kilo_connect_allowed_ips",
            )
        routes.append(
            {
                "dst": str(ipaddress.ip_network(ip)),
                "gateway": path[0],
                "device": path[1],
                "source": None,
                "table": MAIN_TABLE,
                "onlink": False,
            }
        )
    return routes


def peer_address(allowed_ip, subject):
    """This peer's own address (kgctl's --allowed-ip): one host address, in CIDR form."""
    address = _networks([allowed_ip], subject, "kilo_connect_allowed_ip")[0]
    if address.prefixlen != address.max_prefixlen:
        raise KiloError(
            "%s is a network; give this peer's own address (/%d)"
            % (allowed_ip, address.max_prefixlen),
            subject,
            "kilo_connect_allowed_ip",
        )
    return address


def peer_addresses(allowed_ip, subject, families=()):
    """This peer's own addresses: one (``peer_address``), or in a dual-stack mesh (``families``,
    its two IP versions, primary first: ``nodes.mesh_families``) a list of two of different
    families, put in the mesh's order so the plan's ``address`` reads as a node's does."""
    values = list(allowed_ip) if isinstance(allowed_ip, (list, tuple)) else [allowed_ip]
    field = "kilo_connect_allowed_ip"
    if not 1 <= len(values) <= 2:
        raise KiloError(
            "%d addresses; give one, or in a dual-stack mesh one of each IP family" % len(values),
            subject,
            field,
        )
    addresses = [peer_address(value, subject) for value in values]
    if len(addresses) == 2:
        check_two_families(addresses, subject, field, "two addresses are one of each IP family")
        if not families:
            # the mesh routes one family only: the second would reach no node, so refuse it here
            # rather than hand the leaders an allowed IP their mesh cannot route
            raise KiloError(
                "%s and %s: two IP families, but the mesh is single-stack (kilo_subnet is one CIDR);"
                " give one address" % (addresses[0], addresses[1]),
                subject,
                field,
            )
        addresses.sort(key=lambda a: list(families).index(a.version))
    return addresses


def connect_plan(
    nodes, peers, options, host, name, allowed_ip, extra=None, via=None, port=None, main_routes=None
):
    """The plan of peer ``name`` (inventory host ``host``) and its [Peer] entries.

    ``options`` are the mesh's (the mesh group's first host's); ``interface`` among them is the
    machine's own interface name. ``allowed_ip`` is one address, or in a dual-stack mesh a list of
    one of each family (``peer_addresses``). ``main_routes`` returns the machine's main table
    (`ip -j route show`, each entry with its ``family``); it is called only when needed.
    """
    subject = host_subject(host)
    extra = _networks(extra, subject, "kilo_connect_allowed_ips")
    topology = Topology(nodes, peers, options)
    addresses = peer_addresses(allowed_ip, subject, topology.families if topology.dual else ())
    try:
        entries = topology.peer_config(name)
    except TopologyError:
        raise KiloError(
            "no peer %r in the mesh: register it first (kilo.mesh.peer)" % name,
            subject,
            "kilo_connect_name",
        )
    key = via_segment(topology, via, subject) if extra else None
    entries = [
        dict(
            e,
            allowed_ips=dedup(
                list(e["allowed_ips"]) + ([str(n) for n in extra] if e["name"] == key else [])
            ),
        )
        for e in entries
    ]
    interface = options["interface"]
    dsts = []
    for entry in entries:
        for net in _networks(entry["allowed_ips"], subject, "peers"):
            dsts.extend(str(n) for n in halves(net))
    dsts = dedup(dsts)
    pins = pinned_routes(
        entries,
        [ipaddress.ip_network(d) for d in dsts],
        main_routes or (lambda: []),
        interface,
        subject,
    )
    # an endpoint that is itself an allowed IP (a leader reached at its internal IP) goes direct
    pinned = set(r["dst"] for r in pins)
    # each family's routes leave from this peer's address of that family (none: the kernel picks)
    sources = dict((a.version, str(a.network_address)) for a in addresses)
    routes = []
    for family in (4, 6):
        same = [d for d in dsts if ipaddress.ip_network(d).version == family and d not in pinned]
        if same:
            routes.append(
                {
                    "dst": same,
                    "gateway": None,
                    "device": interface,
                    "source": sources.get(family),
                    "table": MAIN_TABLE,
                    "onlink": False,
                }
            )
    routes.extend(pins)
    plan = {
        "name": host,
        "leader": True,
        "segment": "peer:%s" % name,
        "interface": interface,
        "address": one_or_list(str(ipaddress.ip_interface(str(a))) for a in addresses),
        "internal_ip": None,
        "listen_port": port,
        "tunnel_address": None,
        "pod_cidr": None,
        "cni": False,
        "peers": entries,
        "routes": routes,
        "rules": [],
        "firewall": {},
    }
    return plan
