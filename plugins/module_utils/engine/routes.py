# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The routes and rules of a node's plan (Kilo's ``routes.go``, its ``Routes()``) over a computed
mesh (``topology.Topology``): a leader's towards every other segment over WireGuard and towards
its location's members over the private network; a non-leader's towards everything through its
leader, its location's members directly; each family of a dual-stack mesh on its own, through its
addresses of that family (family None: a single-stack mesh, every address as Kilo takes it).

Kilo's encapsulator decides the next hop towards a member of the location (``Routes.gateway``,
Kilo's ``Encapsulator.Gw``) and whether a route is encapsulated (its ``encapsulateRoute``); the
local routes write that test out per member for speed (``Routes._local_routes``). What every plan
of a segment routes the same way is built once and shared: the destinations of a remote segment,
grouped in one entry (``_group``; ``plan.flat_routes`` gives one route each), a segment's members
as the local routes need them (``_Locals``), and the unencapsulated local routes themselves.

Routes and rules are Kilo's Routes() lists, duplicates included (e.g. a peer's allowed IP equal to
a pod CIDR); Kilo's route table collapses entries equal in (dst, gateway, source, device) when it
applies them, which is the applier's job here. A node without an internal IP is treated like a
Kilo host that uses the IPIP encapsulator (force-internal-ip "-"): IPIP filter and tunl0 address
as for any node. Kilo on a host that has no private address at all swaps in a no-op
encapsulator instead (no IPIP chain, no tunl0 address).

Add-on mode (option ``compatibility``, Kilo's ``--compatibility``) swaps the encapsulator used
inside a location, as Kilo's ``pkg/encapsulation``: its ``Gw`` picks the next hop towards a
same-location node (none: the internal IP; flannel: the node's pod network address; cilium: its
``cni_compatibility_ip``, else its pod network address), and encapsulated routes leave through
``flannel.1`` (flannel) or ``tunl0`` (cilium; Kilo reuses ``cilium_tunl`` when Cilium renamed the
tunnel, not modelled here). Kilo's ``encapsulateRoute`` tests that gateway against the node's
private subnet, while the table-1107 route and its rules test the member's *internal IP*, so
under ``crosssubnet`` a member on the same subnet gets an encapsulated pod route but no rules
(the spec's "crosssubnet behaves like always" holds for the pod routes only). A leader with
``local`` off and encapsulation on routes each same-location internal IP whose gateway differs
from it through the device in table 1107, for traffic from the WireGuard interface (Kilo's
``Routes``, the ``!local`` branch). Flannel's encapsulator has no firewall rules and no tunnel
address (``Rules``/``Set`` do nothing); cilium's are IPIP's.
"""

from __future__ import absolute_import, division, print_function

import itertools

from ansible_collections.kilo.mesh.plugins.module_utils.common import node_subject
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import TopologyError
from ansible_collections.kilo.mesh.plugins.module_utils.plan import (
    FLANNEL,
    KILO_TABLE,
    MAIN_TABLE,
    PRIVATE,
    TUNNEL,
)


class Routes(object):
    """The routes and rules of each node's plan over one mesh (``topology``), with what the plans
    of a segment share, computed once (``Topology.plan`` asks ``routes``)."""

    def __init__(self, topology):
        self.topology = topology
        self.opts = topology.opts
        self.compat = self.opts["compatibility"]
        # the device Kilo's encapsulator hands to Routes() as tunlIface (enc.Index())
        self.tunnel_device = FLANNEL if self.compat == "flannel" else TUNNEL
        self._family_cache = {}
        self._nonleader_cache = {}
        self._locals_cache = {}

    def routes(self, node, rules):
        """``node``'s routes (its rules appended to ``rules``): a dual-stack mesh's of each family,
        the primary's first."""
        out = []
        leader = node.segment.leader is node
        for family in self.topology.families:
            out.extend(
                self._leader_routes(node, rules, family)
                if leader
                else self._nonleader_routes(node, rules, family)
            )
        return out

    def _of_family(self, cidrs, family):
        """The CIDRs of ``family`` out of ``cidrs``, in order; ``cidrs`` itself when None. Cached per
        list object (the shared lists of a segment stay shared per family across plans)."""
        if family is None:
            return cidrs
        cache_key = (id(cidrs), family)
        hit = self._family_cache.get(cache_key)
        if hit is None or hit[0] is not cidrs:  # the list is kept, so its id is not reused
            hit = self._family_cache[cache_key] = (
                cidrs,
                [c for c in cidrs if (6 if ":" in c else 4) == family],
            )
        return hit[1]

    def may_refuse(self):
        """Whether rendering a plan may refuse the mesh: under an add-on's compatibility a node
        without a pod CIDR (nor, under cilium, a CNI compatibility IP) has no gateway (``gateway``)
        for the plans that route to it. Nothing else in a plan refuses: every other check is the
        mesh's, done when it is computed."""
        if self.compat == "none":
            return False
        return any(
            node.pod is None and not (self.compat == "cilium" and node.cni_ip is not None)
            for node in self.topology.nodes
        )

    def gateway(self, member, family=None):
        """Next hop towards a same-location ``member``: Kilo's ``Encapsulator.Gw``.

        IPIP: the member's internal IP (of ``family``); flannel: its pod network address; cilium:
        its CNI compatibility IP, else its pod network address (single-stack meshes only).
        """
        if self.compat == "none":
            return member.side(family).ip
        if self.compat == "cilium" and member.cni_ip is not None:
            return member.cni_ip
        if member.pod is None:
            raise TopologyError(
                "compatibility %s routes to this node through its pod network address;"
                " it needs a pod CIDR" % self.compat,
                node_subject(member.name),
                "pod_cidr",
            )
        return member.pod.network_address

    def _encapsulates(self, node, gateway_ip, family=None):
        """Kilo's encapsulateRoute test for a route via ``gateway_ip`` on the private network;
        never for a dual-stack mesh's IPv6 (IPIP carries IPv4 only)."""
        if family == 6:
            return False
        strategy = self.opts["encapsulate"]
        if strategy == "always":
            return True
        side = node.side(family)
        if strategy == "crosssubnet" and side.ip is not None:
            net = side.interface.network
            return gateway_ip.version != net.version or gateway_ip not in net
        return False

    def _locals(self, seg, family):
        """What every same-location route towards a member of ``seg`` needs, once per segment and
        family, for the members with an internal IP of the family, in member order, each with its
        address text (a plan leaves out the member of its own address): ``members``, a tuple per
        member (gateway text, gateway, whether the gateway is the internal IP, internal IP, pod
        ranges of the family, host CIDR, WireGuard host CIDR); ``errors``, a member's error
        (raised when a plan routes to it: Kilo's order of errors); and flat for the plans where
        the test of the gateway is the same for every member: ``encapsulated`` (gateway, then
        each pod range in the main table and the host CIDR in table 1107), ``hosts`` (the host
        CIDRs, for the rules) and ``direct`` (the unencapsulated routes themselves: the same in
        every plan, so every plan holds these very entries)."""
        cached = self._locals_cache.get((seg.key, family))
        if cached is None:
            cached = _Locals()
            for member in seg.members:
                side = member.side(family)
                if side.ip is None:
                    continue
                text = side.ip_text
                gateway_ip = gateway = None
                try:
                    gateway_ip = self.gateway(member, family)
                    gateway = side.ip_text if gateway_ip is side.ip else str(gateway_ip)
                except TopologyError as e:
                    cached.errors.append((text, e))
                pods = [pod for net, pod in member.pods if family is None or net.version == family]
                cached.members.append(
                    (
                        text,
                        gateway,
                        gateway_ip,
                        gateway_ip is side.ip,
                        side.ip,
                        pods,
                        side.host,
                        _wg(member.segment, family)[2],
                    )
                )
                cached.add(
                    text,
                    "encapsulated",
                    [(gateway, pod, MAIN_TABLE) for pod in pods]
                    + [(gateway, side.host, KILO_TABLE)],
                )
                cached.add(text, "pods", [(gateway, pod) for pod in pods])
                cached.add(text, "hosts", [side.host])
                cached.add(
                    text,
                    "direct",
                    [
                        {
                            "dst": pod,
                            "gateway": gateway,
                            "device": PRIVATE,
                            "source": None,
                            "table": MAIN_TABLE,
                            "onlink": True,
                        }
                        for pod in pods
                    ],
                )
            self._locals_cache[(seg.key, family)] = cached
        return cached

    def _local_routes(self, node, seg, routes, rules, leader, cross, family=None):
        """Routes (and IPIP rules) to the other members of ``seg`` (of the node's location) over
        the private network, in member order: Kilo's, with its encapsulateRoute test of the gateway
        (``_encapsulates``) written out for speed; the table-1107 route and its rules test the
        member's internal IP."""
        own = node.side(family)
        me = own.ip_text
        strategy = "never" if family == 6 else self.opts["encapsulate"]  # IPIP carries IPv4 only
        net = own.interface.network if strategy == "crosssubnet" and own.ip is not None else None
        tunnel = self.tunnel_device
        own_pods = [text for pod, text in node.pods if family is None or pod.version == family]
        iface = self.opts["interface"]
        local = self._locals(seg, family)
        for text, error in local.errors:
            if text != me:
                raise error
        if net is None and not cross:
            # the test is the same for every member (always, or never): one loop each
            if strategy != "always":
                routes.extend(local.others("direct", me))
            elif not (own_pods or leader):
                routes.extend(
                    [
                        {
                            "dst": pod,
                            "gateway": gateway,
                            "device": tunnel,
                            "source": me,
                            "table": MAIN_TABLE,
                            "onlink": True,
                        }
                        for gateway, pod in local.others("pods", me)
                    ]
                )
            else:
                # the most entries of a big mesh (a route to each pod range and one in table 1107,
                # a rule, per pair of a location's nodes): copies of one entry, a key or three
                # set (a dict's copy is cheaper than its display, in the same key order)
                append = routes.append
                copy = {
                    "dst": None,
                    "gateway": None,
                    "device": tunnel,
                    "source": me,
                    "table": None,
                    "onlink": True,
                }.copy
                for gateway, dst, table in local.others("encapsulated", me):
                    route = copy()
                    route["dst"] = dst
                    route["gateway"] = gateway
                    route["table"] = table
                    append(route)
                sources = [(pod, None) for pod in own_pods] + ([(None, iface)] if leader else [])
                hosts = local.others("hosts", me)
                append = rules.append
                if len(sources) == 1:
                    ((src, iif),) = sources
                    copy = {"src": src, "dst": None, "iif": iif, "table": KILO_TABLE}.copy
                    for host in hosts:
                        rule = copy()
                        rule["dst"] = host
                        append(rule)
                else:
                    rules.extend(
                        [
                            {"src": src, "dst": host, "iif": iif, "table": KILO_TABLE}
                            for host in hosts
                            for src, iif in sources
                        ]
                    )
            return
        for text, gateway, gateway_ip, direct, ip, pods, host, wg_host in local.members:
            if text == me:
                continue
            if strategy == "always":
                encap = via_tunnel = True
            elif net is not None:
                encap = gateway_ip.version != net.version or gateway_ip not in net
                via_tunnel = encap if direct else ip.version != net.version or ip not in net
            else:
                encap = via_tunnel = False
            device, source = (tunnel, me) if encap else (PRIVATE, None)
            if cross:
                # beyond Kilo: the member's WireGuard IP answers over the private network too
                routes.append(
                    {
                        "dst": wg_host,
                        "gateway": gateway,
                        "device": device,
                        "source": source,
                        "table": MAIN_TABLE,
                        "onlink": True,
                    }
                )
            for pod in pods:
                routes.append(
                    {
                        "dst": pod,
                        "gateway": gateway,
                        "device": device,
                        "source": source,
                        "table": MAIN_TABLE,
                        "onlink": True,
                    }
                )
            if via_tunnel and (own_pods or leader):
                routes.append(
                    {
                        "dst": host,
                        "gateway": gateway,
                        "device": tunnel,
                        "source": me,
                        "table": KILO_TABLE,
                        "onlink": True,
                    }
                )
                for pod in own_pods:
                    rules.append({"src": pod, "dst": host, "iif": None, "table": KILO_TABLE})
                if leader:
                    rules.append({"src": None, "dst": host, "iif": iface, "table": KILO_TABLE})

    def _unmanaged_local_routes(self, node, seg, routes, rules):
        """Kilo's Routes(), leader with ``local`` off and encapsulation on: each same-location
        internal IP whose gateway is not that IP (flannel, cilium) goes through the encapsulation
        device in table 1107, for traffic coming in from the WireGuard interface."""
        iface = self.opts["interface"]
        own = node.first.ip
        for member in seg.members:
            internal = member.first
            if internal.ip == own:
                continue
            gateway_ip = self.gateway(member)
            if gateway_ip == internal.ip:
                continue
            dst = internal.host
            routes.append(
                {
                    "dst": dst,
                    "gateway": str(gateway_ip),
                    "device": self.tunnel_device,
                    "source": None,
                    "table": KILO_TABLE,
                    "onlink": True,
                }
            )
            rules.append({"src": None, "dst": dst, "iif": iface, "table": KILO_TABLE})

    def _leader_routes(self, node, rules, family=None):
        opts = self.opts
        iface = opts["interface"]
        own = node.side(family)
        source = own.ip_text
        own_group = node.segment.group
        cross = opts["granularity"] == "cross"
        local = opts["local"] and own.ip is not None
        routes = []
        for seg in self.topology.segments:
            if seg.group == own_group:
                if local:
                    # a member without an internal IP of a dual-stack family has no ranges of it
                    # (check_gateways); a single-stack member always has one
                    self._local_routes(node, seg, routes, rules, True, cross, family)
                elif (
                    self.compat != "none"
                    and not opts["local"]
                    and node.internals
                    and opts["encapsulate"] != "never"
                ):
                    self._unmanaged_local_routes(node, seg, routes, rules)
                continue
            _group(
                routes,
                self._of_family(
                    seg.leader_dsts(self.topology.segment_endpoint(seg, node).ip), family
                ),
                _wg(seg, family)[1],
                iface,
                source,
                True,
            )
        _group(
            routes, self._of_family(self.topology.peer_allowed, family), None, iface, source, False
        )
        return routes

    def _nonleader_dsts(self, seg, family=None):
        """(before, after): destinations every non-leader of ``seg`` routes via its leader,
        split around the place where its own segment's local routes go (Kilo's order)."""
        cached = self._nonleader_cache.get((seg.key, family))
        if cached is None:
            before, after = [], []
            target = before
            for other in self.topology.segments:
                target.append(_wg(other, family)[2])
                if other is seg:
                    target = after
                    continue
                target.extend(self._of_family(other.remote_dsts, family))
            after.extend(self._of_family(self.topology.peer_allowed, family))
            cached = self._nonleader_cache[(seg.key, family)] = (before, after)
        return cached

    def _nonleader_routes(self, node, rules, family=None):
        seg = node.segment
        leader = seg.leader
        own = node.side(family)
        if own.ip is None:
            # a dual-stack family the node has no internal IP of (nor ranges: check_gateways):
            # it is not on that family's private network, so it routes none of it
            return []
        side = leader.side(family)
        gateway_ip = self.gateway(leader, family)  # Kilo: enc.Gw of the segment's leader
        gateway = side.ip_text if gateway_ip is side.ip else str(gateway_ip)
        encap = self._encapsulates(node, gateway_ip, family)
        device = self.tunnel_device if encap else PRIVATE
        source = own.ip_text if encap else None
        before, after = self._nonleader_dsts(seg, family)
        routes = []
        _group(routes, before, gateway, device, source, True)
        if self.opts["local"]:
            self._local_routes(node, seg, routes, rules, False, False, family)
        _group(routes, after, gateway, device, source, True)
        return routes


def check_gateways(topology):
    """A dual-stack mesh routes each family between the nodes of a private network through
    their internal IPs of that family; refuse, before any plan, a route of a family whose
    gateway would be missing (naming the node that lacks the internal IP)."""
    local = topology.opts["local"]
    cross = topology.opts["granularity"] == "cross"
    groups = {}
    for seg in topology.segments:
        groups.setdefault(seg.group, []).extend(seg.members)
    for seg in topology.segments:
        leader = seg.leader
        for member in seg.members:
            for family in topology.families:
                if member is leader or _has(member, family) and _has(leader, family):
                    continue
                if _has(member, family):
                    raise TopologyError(
                        "leads segment %s, whose node %r routes IPv%s through it: it needs an IPv%s internal IP"
                        % (seg.key, member.name, family, family),
                        node_subject(leader.name),
                        "internal_ip",
                    )
                _need_internal(member, family, "routes them through its leader %r" % leader.name)
    for members in groups.values():
        if len(members) < 2 or not local:
            continue
        for member in members:
            for family in topology.families:
                if not _has(member, family):
                    _need_internal(
                        member,
                        family,
                        "its location's nodes route them over the private network",
                    )
                    if cross and any(_has(other, family) for other in members):
                        raise TopologyError(
                            "its location's nodes reach its IPv%s WireGuard IP over the private network: it"
                            " needs an IPv%s internal IP" % (family, family),
                            node_subject(member.name),
                            "internal_ip",
                        )


def _wg(seg, family):
    """(ip, text, host CIDR) of the segment's WireGuard IP of ``family`` (None: the primary)."""
    return seg.wg_ips[0] if family is None else seg.wg_by[family]


class _Locals(object):
    """``Routes._locals``: a segment's members as the local routes of one family need them;
    the flat lists by name (``add``, ``others``), each item with its member's address text."""

    __slots__ = ("members", "errors", "flat", "owners", "spans")

    def __init__(self):
        self.members, self.errors = [], []
        self.flat, self.owners = {}, {}
        self.spans = {}  # address text -> {name: (start, end)}; None once two members share one

    def add(self, text, name, items):
        """``items`` of the member at ``text`` to the flat list ``name``."""
        flat = self.flat.setdefault(name, [])
        if self.spans is not None:
            spans = self.spans.setdefault(text, {})
            if name in spans:  # a second member of this address: plans filter by address
                self.spans = None
            else:
                spans[name] = (len(flat), len(flat) + len(items))
        flat.extend(items)
        self.owners.setdefault(name, []).extend([text] * len(items))

    def others(self, name, me):
        """The flat list ``name`` without the items of the members at address ``me``, in order."""
        flat = self.flat.get(name, [])
        if self.spans is None:
            return list(itertools.compress(flat, [owner != me for owner in self.owners[name]]))
        span = self.spans.get(me, {}).get(name)
        if span is None:
            return flat
        return flat[: span[0]] + flat[span[1] :]


def _group(routes, dsts, gateway, device, source, onlink):
    """One main-table route entry for every destination in ``dsts`` (shared, never copied:
    the members of a segment route the same destinations, so their plans share one list)."""
    if dsts:
        routes.append(
            {
                "dst": dsts,
                "gateway": gateway,
                "device": device,
                "source": source,
                "table": MAIN_TABLE,
                "onlink": onlink,
            }
        )


def _need_internal(node, family, why):
    """Refuse a dual-stack node that has ranges of ``family`` but no internal IP of it."""
    pods = [text for net, text in node.pods if net.version == family]
    if pods:
        raise TopologyError(
            "has the IPv%d pod range %s and %s: it needs an IPv%d internal IP"
            % (family, pods[0], why, family),
            node_subject(node.name),
            "internal_ip",
        )


def _has(node, family):
    """Whether ``node`` has an internal IP of ``family``."""
    return node.side(family).ip is not None
