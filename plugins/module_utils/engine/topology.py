# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Kilo's topology, computed on the controller: segments, leaders, WireGuard IPs and one plan per node.

Pure Python (stdlib ``ipaddress``), no Ansible. ``build_plans(nodes, peers, options)`` validates
everything first (TopologyError names the node/peer and the field), computes the shared structure
once and then renders each node's plan cheaply.

Granularities:

* ``location`` (Kilo's default): one segment per location (``location:<name>``); a node without an
  internal IP is its own segment ``node:<name>``. One leader per segment carries WireGuard.
* ``full`` (Kilo): every node is its own segment ``node:<name>`` and its own leader.
* ``cross`` (beyond Kilo): every node is its own segment ``node:<name>`` with its own WireGuard IP,
  so every node leads itself, but WireGuard links exist only between nodes of *different*
  locations. Nodes of one location ("location group") reach each other over the private network,
  exactly like Kilo's own-segment local routes (pod CIDR via the member's internal IP, IPIP per
  ``encapsulate``), plus a route to each same-location member's WireGuard IP via its internal IP
  so every WireGuard IP answers from everywhere. A node without an internal IP cannot use the
  private network, so it forms a location group of its own and links to every other node.

Where Kilo's code and its documentation differ, the code is followed; departures from Kilo are
deliberate and marked "beyond Kilo" below:

* plain hosts without a pod CIDR: the segment's allowed IPs are the internal IPs and the WireGuard
  IP; no pod routes; the ``from <pod CIDR>`` IPIP rule is left out (Kilo always has a pod CIDR).
* nodes without an endpoint may join a location (as non-leaders); a segment with no endpoint at
  all (Kilo would simply skip such nodes), or whose nodes are all marked ``behind_nat``, is
  reached through a relay (``engine/relays.py``), or the mesh is refused there.

Beyond Kilo: a node may have several pod ranges (Calico's IPAM blocks, Cilium's pool CIDRs).
Each is an allowed IP, a route, a ``from`` rule, a NAT source and a forward range wherever Kilo
has the one pod CIDR, in the node's order; the first is Kilo's pod CIDR where only one can
count (tunl0's address, the add-on gateway, the CNI conflist). No two ranges may overlap. A node of
one range gives exactly Kilo's output.

Beyond Kilo: a dual-stack mesh: option ``subnet`` a list of two CIDRs of different
families, the first the primary (Kilo's one WireGuard IP). Each segment gets a WireGuard IP from
each subnet; a node may have an internal IP of each family and pod ranges of both; its endpoint
stays one address. Every IP family is routed on its own, as its single-stack mesh would be (the
primary's routes first): through the WireGuard IP, internal IP and source of the destination's
family; a node without an internal IP of a family routes none of it inside its location (and
must then have no ranges of it there, refused by ``routes.check_gateways``). IPIP carries IPv4 only:
tunl0's address, table-1107 rules and the IPIP filter are IPv4's, and IPv6 goes over the
private network unencapsulated. Allowed IPs and firewall sets carry both families. So a plan's
IPv4 entries are those of the IPv4-only mesh of the same nodes, and its IPv6 entries those of
the IPv6-only mesh that never encapsulates. Plan fields of which Kilo has one (``address``,
``internal_ip``; a segment's ``wireguard_ip``, the result's ``subnet``) are a list of two only in
a dual-stack mesh (``nodes.one_or_list``), so a single-stack mesh's output is unchanged. A
single-stack mesh takes addresses of the other family as Kilo does (unsplit).

Each plan's routes and rules are Kilo's ``Routes()``: ``engine/routes.py``.

Outputs are JSON-able dicts; CIDRs are normalised strings (network address for networks, /32 or
/128 for single addresses, compressed IPv6). Lists keep Kilo's order (segments by key, members by
name, peers by name), so the output is deterministic and independent of input order.

Plans share what segment members share: a route entry's ``dst`` may be a list of destinations
(``plan.flat_routes`` gives one route each, in Kilo's order), and those lists, the peers' allowed
IPs and the firewall's exempt list are the same objects in every plan that has them. Memory and
time therefore follow the distinct data, not nodes x nodes. Never mutate a plan in place.

Beyond the plan shape of docs/DESIGN.md a plan carries ``tunnel_address`` (Kilo gives tunl0 the
first address of the pod CIDR as /32 when encapsulating with local routes; None otherwise) and
its ``firewall`` carries ``nat_destinations`` (own-segment allowed-location IPs that Kilo sends
through KILO-NAT) and ``ipip_filter`` (True when Kilo installs its IPIP chain: accept
``ipip_accept_sources``, drop other IPIP, even when that list is empty). A segment also carries
``public_key``, ``persistent_keepalive`` (its leader's), ``group`` (segments of one group do not
peer: the segment itself, or under ``cross`` the location) and ``members`` (name, pod CIDR,
internal IP, endpoint). The result also has ``peers`` (without preshared keys) and ``subnet``.
"""

from __future__ import absolute_import, division, print_function

import gc
import ipaddress
from collections.abc import Mapping

from ansible_collections.kilo.mesh.plugins.module_utils.common import is_public, peer_subject
from ansible_collections.kilo.mesh.plugins.module_utils.common import dedup
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import NO_ENDPOINT, split_endpoint
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import one_or_list, pod_cidr_value
from ansible_collections.kilo.mesh.plugins.module_utils.engine import relays
from ansible_collections.kilo.mesh.plugins.module_utils.engine.routes import Routes, check_gateways
from ansible_collections.kilo.mesh.plugins.module_utils.engine.parse import (
    OPTIONS_SUBJECT,
    TopologyError,
    node_subject,
    parse_inputs,
    parse_node,
    parse_options,
)


def find_leader(members):
    """Index of the leader: hinted+public, else hinted, else public, else first (Kilo's order).

    Beyond Kilo: members without an endpoint are never chosen (Kilo never sees them), and
    members marked unhealthy only when no healthy member has an endpoint (every node is
    healthy unless kilo_leader_health marked it, so Kilo's choice is unchanged by default).
    """
    healthy = [node.healthy for node in members]
    if not all(healthy) and any(
        ok and node.endpoint is not None for ok, node in zip(healthy, members)
    ):
        index = find_leader([node for node in members if node.healthy])
        return [i for i, ok in enumerate(healthy) if ok][index]
    hinted = public = None
    for i, node in enumerate(members):
        if node.endpoint is None:
            continue
        if node.leader_hint:
            if is_public(node.endpoint.ip):
                return i
            if hinted is None:
                hinted = i
        if public is None and is_public(node.endpoint.ip):
            public = i
    if hinted is not None:
        return hinted
    if public is not None:
        return public
    for i, node in enumerate(members):
        if node.endpoint is not None:
            return i
    return None


class Segment(object):
    __slots__ = (
        "key",
        "location",
        "group",
        "members",
        "leader",
        "index",
        "wg_ip",
        "wg_str",
        "wg_host",
        "wg_ips",
        "wg_by",
        "allowed",
        "alips",
        "alip_strs",
        "wg_allowed",
        "privates",
        "remote_dsts",
        "_leader_dsts",
        "pod_texts",
    )

    def leader_dsts(self, endpoint_ip):
        """Destinations a leader elsewhere routes to this segment over WireGuard, in Kilo's order.

        A member's internal IP is skipped when it equals the leader's endpoint IP: that address is
        reached as the tunnel endpoint itself and cannot be routed through the tunnel.
        """
        cached = self._leader_dsts
        if cached is not None and cached[0] == endpoint_ip:
            return cached[1]
        dsts = []
        for node in self.members:
            dsts.extend(text for dummy, text in node.pods)
            for internal in node.internals:
                if internal.ip != endpoint_ip:
                    dsts.append(internal.host)
        dsts.extend(self.alip_strs)
        if cached is None:
            self._leader_dsts = (endpoint_ip, dsts)
        return dsts


def segment_key(node, granularity):
    """The key of the segment a parsed node falls into: under ``location`` its location's, unless
    it has no internal IP (then, as under ``full`` and ``cross``, a segment of its own)."""
    if granularity == "location" and node.internals:
        return "location:" + node.location
    return "node:" + node.name


class Topology(object):
    """The shared structure of one mesh; ``plan(name)`` renders one node's plan."""

    def __init__(self, nodes, peers, options=None, now=None):
        self.opts, self.nodes, self.peers = parse_inputs(nodes, peers, options)
        self.now = (
            now  # beyond Kilo: the time timed inputs count at (engine/relays.py); None: none count
        )
        self.compat = self.opts["compatibility"]
        # a dual-stack mesh routes each IP family on its own, primary first; a single-stack mesh
        # routes as Kilo does, whatever the families of its addresses (family None: unsplit)
        self.dual = len(self.opts["subnets"]) == 2
        self.families = tuple(net.version for net in self.opts["subnets"]) if self.dual else (None,)
        self.by_name = dict((n.name, n) for n in self.nodes)
        self._segments()
        # beyond Kilo: segments nobody reaches, through relays (None: every segment is reachable)
        self.relays = relays.plan(self, find_leader)
        if self.dual:
            check_gateways(self)
        self._peers()
        self._allocate()
        self._filter_allowed_location_ips()
        self._discovered()
        self._shared_firewall()
        # each plan's routes and rules (Kilo's Routes(): engine/routes.py)
        self.routing = Routes(self)

    # --- shared structure -------------------------------------------------------------

    def _segments(self):
        granularity = self.opts["granularity"]
        groups = {}
        for node in self.nodes:  # sorted by name, so members come out in name order
            groups.setdefault(segment_key(node, granularity), []).append(node)
        self.segments = []
        for index, key in enumerate(sorted(groups)):
            seg = Segment()
            seg.key = key
            seg.index = index
            seg.members = groups[key]
            seg.location = seg.members[0].location
            if granularity == "cross" and seg.members[0].internals:
                seg.group = "location:" + seg.location
            else:
                seg.group = key
            leader = find_leader(seg.members)
            # no member with an endpoint: relays.plan chooses its leader, or refuses the mesh
            seg.leader = None if leader is None else seg.members[leader]
            allowed = []
            alips = {}
            for node in seg.members:
                node.segment = seg
                allowed.extend([text for dummy, text in node.pods])
                for net in node.alips:
                    alips.setdefault(str(net), net)
                allowed.extend([internal.host for internal in node.internals])
            seg.allowed = allowed
            seg.alips = [alips[k] for k in sorted(alips)]
            seg.privates = [internal.host for n in seg.members for internal in n.internals]
            seg.pod_texts = [text for n in seg.members for dummy, text in n.pods]
            seg._leader_dsts = None
            self.segments.append(seg)
        self.segment_by_key = dict((s.key, s) for s in self.segments)
        # Internal IPs allowed to send IPIP to a node: its location's nodes (Kilo looks up the
        # segment "location:<own location>", which never exists under full granularity).
        self.location_privates = {}
        if granularity != "full":
            for node in self.nodes:
                # IPIP carries IPv4 only: a dual-stack mesh accepts it from IPv4 internal IPs
                host = node.side(4 if self.dual else None).host
                if host is not None:
                    self.location_privates.setdefault(node.location, []).append(host)

    def _peers(self):
        """A CIDR claimed by two peers stays with the first peer by name (Kilo dedups defensively)."""
        seen = set()
        for peer in self.peers:
            allowed = []
            for cidr in peer.allowed:
                if cidr.text not in seen:
                    seen.add(cidr.text)
                    allowed.append(cidr)
            peer.allowed = allowed
        # each peer's allowed IPs as the leaders' entries give them: one list a peer, which every
        # leader's plan shares (the texts of its Cidrs, made once)
        self.peer_texts = [[text for dummy, text in peer.allowed] for peer in self.peers]
        self.peer_allowed = [text for texts in self.peer_texts for text in texts]

    def _allocate(self):
        """One WireGuard IP per segment from each subnet, by the same rule (a dual-stack mesh's
        segment has one of each family; the primary's is Kilo's ``wg_ip``)."""
        for seg in self.segments:
            seg.wg_ips, seg.wg_by = [], {}
        self.wg_prefixes = []
        for subnet in self.opts["subnets"]:
            capacity = subnet.num_addresses - 1  # network+1 .. last address, no skipping (Kilo)
            if len(self.segments) > capacity:
                raise TopologyError(
                    "%s holds %d WireGuard IPs, %d segments need one each"
                    % (subnet, capacity, len(self.segments)),
                    OPTIONS_SUBJECT,
                    "subnet",
                )
            base = subnet.network_address
            bits = subnet.max_prefixlen
            self.wg_prefixes.append(subnet.prefixlen)
            for seg in self.segments:
                ip = base + seg.index + 1
                text = str(ip)
                seg.wg_ips.append((ip, text, "%s/%d" % (text, bits)))
                seg.wg_by[ip.version] = seg.wg_ips[-1]
        self.wg_prefix = self.wg_prefixes[0]
        for seg in self.segments:
            seg.wg_ip, seg.wg_str, seg.wg_host = seg.wg_ips[0]
            seg.allowed.extend(host for dummy, dummy, host in seg.wg_ips)

    def _filter_allowed_location_ips(self):
        """Kilo's filter, including its order effects.

        Kilo filters segment by segment while allocating, so a segment sees the *filtered* lists
        of earlier segments and the raw lists of later ones, and only the WireGuard IPs allocated
        so far (its own included). Dropped: an IP intersecting another segment's list, one whose
        network address lies in any segment's allowed IP, one intersecting a peer's allowed IP.
        """
        # prefix index: (version, prefixlen) -> {masked int: earliest segment index visible}
        index = {}

        def add(net, stage):
            table = index.setdefault((net.version, net.prefixlen), {})
            key = int(net.network_address)
            if table.get(key, stage + 1) > stage:
                table[key] = stage

        has_alips = any(seg.alips for seg in self.segments)
        if has_alips:
            for seg in self.segments:
                for node in seg.members:
                    for pod, dummy in node.pods:
                        add(pod, -1)
                    for internal in node.internals:
                        add(_host_net(internal.ip), -1)
                for wg_ip, dummy, dummy in seg.wg_ips:
                    add(_host_net(wg_ip), seg.index)
        current = [list(seg.alips) for seg in self.segments]
        for seg in self.segments:
            kept = []
            for net in current[seg.index]:
                if self._alip_rejected(net, seg.index, current, index):
                    continue
                kept.append(net)
            current[seg.index] = kept
            seg.alips = kept
            seg.alip_strs = [str(n) for n in kept]
            seg.wg_allowed = seg.allowed + seg.alip_strs
            seg.remote_dsts = seg.pod_texts + seg.privates + seg.alip_strs

    def _alip_rejected(self, net, position, current, index):
        for other, nets in enumerate(current):
            if other != position:
                for candidate in nets:
                    if candidate.version == net.version and net.overlaps(candidate):
                        return True
        address = int(net.network_address)
        bits = net.max_prefixlen
        for (version, prefixlen), table in index.items():
            if version != net.version:
                continue
            stage = table.get(address >> (bits - prefixlen) << (bits - prefixlen))
            if stage is not None and stage <= position:
                return True
        for peer in self.peers:
            for candidate, dummy in peer.allowed:
                if candidate.version == net.version and net.overlaps(candidate):
                    return True
        return False

    def _discovered(self):
        """Discovered endpoints, first claim wins in segment and node order (Kilo)."""
        found = {}
        for seg in self.segments:
            for node in seg.members:
                for key, value in node.discovered.items():
                    found.setdefault(key, value)
        self.discovered = found

    def _shared_firewall(self):
        exempt = []
        for seg in self.segments:
            exempt.extend(host for dummy, dummy, host in seg.wg_ips)
            exempt.extend(seg.allowed)
        exempt.extend(self.peer_allowed)
        exempt.extend(str(n) for n in self.opts["service_cidrs"])
        self.nat_exempt = dedup(exempt)

    def segment_endpoint(self, seg, viewer=None):
        """A leader's endpoint as seen from ``viewer`` (an ``Endpoint``; ``NO_ENDPOINT`` for
        none): its discovered one when it keeps alive. Its ``text`` is the entry's endpoint, its
        ``ip`` the address the routes leave to the underlay (relays.Relays.endpoint: the one may
        be None without the other)."""
        leader = seg.leader
        endpoint = leader.endpoint or NO_ENDPOINT
        if leader.persistent_keepalive > 0:
            found = viewer.discovered.get(leader.key) if viewer is not None else None
            if found is None:
                found = self.discovered.get(leader.key)
            if found is not None:
                endpoint = found
        return endpoint if self.relays is None else self.relays.endpoint(seg, viewer, endpoint)

    def peer_endpoint(self, peer, viewer=None):
        if peer.persistent_keepalive > 0:
            found = viewer.discovered.get(peer.key) if viewer is not None else None
            if found is None:
                found = self.discovered.get(peer.key)
            if found is not None:
                return found.text
        return peer.endpoint.text if peer.endpoint else None

    # --- per-node plan ----------------------------------------------------------------

    def plan(self, name):
        node = self.by_name.get(name)
        if node is None:
            raise TopologyError("no such node", node_subject(name), "only")
        seg = node.segment
        leader = seg.leader is node
        opts = self.opts
        plan = {
            "name": node.name,
            "leader": leader,
            "segment": seg.key,
            "interface": opts["interface"],
            "address": one_or_list(
                "%s/%d" % (text, prefix)
                for (dummy, text, dummy), prefix in zip(seg.wg_ips, self.wg_prefixes)
            )
            if leader
            else None,
            "internal_ip": one_or_list(internal.text for internal in node.internals),
            "listen_port": node.port,
        }
        rules = []
        routes = self.routing.routes(node, rules)
        plan["peers"] = self._wireguard_peers(node) if leader else []
        plan["routes"] = routes
        plan["rules"] = rules
        plan["firewall"] = self._firewall(node, leader)
        if self.relays is not None:
            self.relays.firewall(node, plan["firewall"])
        # Kilo's enc.Set(): flannel's does nothing
        encapsulating = (
            opts["encapsulate"] != "never" and opts["local"] and self.compat != "flannel"
        )
        # IPIP carries IPv4 only: a dual-stack mesh's tunl0 takes its address from the first IPv4 range
        pod = (
            next((net for net, dummy in node.pods if net.version == 4), None)
            if self.dual
            else node.pod
        )
        plan["tunnel_address"] = (
            "%s/%d" % (pod.network_address + 1, pod.max_prefixlen)
            if encapsulating and pod is not None and pod.prefixlen < pod.max_prefixlen
            else None
        )
        plan["pod_cidr"] = pod_cidr_value([text for dummy, text in node.pods])
        plan["cni"] = bool(opts["cni"])
        plan["compatibility"] = self.compat
        return plan

    def _remote_segments(self, node):
        """Segments this leader reaches over WireGuard."""
        group = node.segment.group
        return [s for s in self.segments if s.group != group]

    def _wireguard_peers(self, node):
        keepalive = node.persistent_keepalive
        out = []
        for seg in self._remote_segments(node):
            out.append(
                {
                    "name": seg.key,
                    "public_key": seg.leader.key,
                    "endpoint": self.segment_endpoint(seg, node).text,
                    "allowed_ips": seg.wg_allowed,
                    "persistent_keepalive": keepalive,
                }
            )
        for peer, texts in zip(self.peers, self.peer_texts):
            entry = {
                "name": peer.name,
                "public_key": peer.key,
                "endpoint": self.peer_endpoint(peer, node),
                "allowed_ips": texts,
                "persistent_keepalive": keepalive,
            }
            if peer.psk:
                entry["preshared_key"] = peer.psk
            out.append(entry)
        return out if self.relays is None else self.relays.wireguard_peers(node, out)

    def _firewall(self, node, leader):
        opts = self.opts
        seg = node.segment
        nat_sources = []
        forward = []
        if opts["cni"]:
            nat_sources.extend(text for dummy, text in node.pods)
            if opts["forward_rules"]:
                if leader:
                    forward = dedup(seg.pod_texts + seg.alip_strs + seg.privates)
                elif node.pods:
                    forward = [text for dummy, text in node.pods]
        nat_sources = dedup(nat_sources + self.peer_allowed)
        # Kilo's enc.Rules(): flannel's is empty, cilium's is IPIP's
        ipip = opts["encapsulate"] != "never" and opts["local"] and self.compat != "flannel"
        return {
            "nat_sources": nat_sources,
            # beyond the brief's shape: Kilo also sends traffic *to* own allowed-location IPs
            # through the NAT chain, so replies from those hosts find their way back.
            "nat_destinations": seg.alip_strs,
            "nat_exempt_destinations": self.nat_exempt,
            "forward_accept": forward,
            "ipip_filter": ipip,
            # shared by the plans of a location, as the lists above
            "ipip_accept_sources": self.location_privates.get(node.location, []) if ipip else [],
        }

    # --- outputs ----------------------------------------------------------------------

    def segments_out(self):
        out = []
        for seg in self.segments:
            out.append(
                {
                    "key": seg.key,
                    "location": seg.location,
                    "leader": seg.leader.name,
                    "nodes": [n.name for n in seg.members],
                    "wireguard_ip": one_or_list(text for dummy, text, dummy in seg.wg_ips),
                    "allowed_ips": list(seg.allowed),
                    "allowed_location_ips": list(seg.alip_strs),
                    "endpoint": seg.leader.endpoint.text if seg.leader.endpoint else None,
                    "public_key": seg.leader.key,
                    "persistent_keepalive": seg.leader.persistent_keepalive,
                    "group": seg.group,
                    "members": [
                        {
                            "name": n.name,
                            # one pod range, one internal IP: the value itself (one_or_list's
                            # rule, written out for the many nodes of a big mesh)
                            "pod_cidr": n.pods[0][1]
                            if len(n.pods) == 1
                            else pod_cidr_value([text for dummy, text in n.pods]),
                            "internal_ip": n.internals[0].ip_text
                            if len(n.internals) == 1
                            else one_or_list([internal.ip_text for internal in n.internals]),
                            "endpoint": n.endpoint.text if n.endpoint else None,
                        }
                        for n in seg.members
                    ],
                }
            )
        return out

    def peers_out(self):
        """Peers without their preshared keys (for graphs and reports)."""
        return [
            {
                "name": p.name,
                "public_key": p.key,
                "endpoint": p.endpoint.text if p.endpoint else None,
                "allowed_ips": [text for dummy, text in p.allowed],
                "persistent_keepalive": p.persistent_keepalive,
            }
            for p in self.peers
        ]

    def peer_config(self, name):
        """Like ``kgctl showconf peer NAME``: the [Peer] sections of that peer's own config."""
        me = None
        for peer in self.peers:
            if peer.name == name:
                me = peer
        if me is None:
            raise TopologyError("no such peer", peer_subject(name), "name")
        out = []
        for seg in self.segments:
            entry = {
                "name": seg.key,
                "public_key": seg.leader.key,
                "endpoint": self.segment_endpoint(seg).text,
                "allowed_ips": list(seg.wg_allowed),
                "persistent_keepalive": me.persistent_keepalive,
            }
            if me.psk:
                entry["preshared_key"] = me.psk
            out.append(entry)
        for peer in self.peers:
            if peer is not me:
                out.append(
                    {
                        "name": peer.name,
                        "public_key": peer.key,
                        "endpoint": self.peer_endpoint(peer),
                        "allowed_ips": [text for dummy, text in peer.allowed],
                        "persistent_keepalive": me.persistent_keepalive,
                    }
                )
        return out if self.relays is None else self.relays.peer_entries(me, out)


def _host_net(ip):
    return ipaddress.ip_network(ip)


def build_plans(nodes, peers, options=None, only=None, check=None, now=None, lazy=False):
    """Validate, compute the mesh once; the plans of ``only`` (default: every node).
    ``check(topology)``, when given, is called on the mesh first (a caller's own checks of the
    same computation: kilo.mesh.topology's conflicts between parties). ``now`` (seconds): the time
    the nodes' timed inputs count at (``engine/relays.py``); None: none do. ``lazy``: the plans as
    ``Plans``, each rendered when asked, for a reader that takes them one by one (the push run's
    ``plan_store.save``: a mesh of N nodes holds N x N route entries in all its plans).

    Returns plain data (JSON as it is): {"plans": {name: plan} (``Plans`` when ``lazy``),
    "segments": [...], "peers": [...], "subnet": str}; "peers" carries no preshared keys (only the
    plans' WireGuard peer entries do).
    """
    # The parsed mesh and its plans are millions of small containers for big meshes; the cyclic
    # collector would rescan them over and over (a node and its segment refer to each other: the
    # collector frees them once it runs again).
    enabled = gc.isenabled()
    gc.disable()
    try:
        topology = Topology(nodes, peers or [], options, now)
        if check is not None:
            check(topology)
        names = [n.name for n in topology.nodes] if only is None else list(only)
        for name in names:
            if name not in topology.by_name:
                raise TopologyError("no such node", node_subject(name), "only")
        plans = Plans(topology, names)
        if not lazy:
            plans = dict(plans)  # each rendered in order: the first that refuses the mesh, here
        elif topology.routing.may_refuse():
            # a plan may refuse a mesh (a gateway it lacks): render each now, in order, so the
            # mesh is refused here, by the first plan that does, as when every plan was kept
            for name in names:
                topology.plan(name)
        result = {
            "plans": plans,
            "segments": topology.segments_out(),
            "peers": topology.peers_out(),
            "subnet": one_or_list(str(net) for net in topology.opts["subnets"]),
        }
        if (
            topology.relays is not None
        ):  # beyond Kilo: a relayed mesh says which pairs go through whom
            topology.relays.segments_out(result["segments"])
            result["paths"] = topology.relays.paths()
            peer_paths = topology.relays.peer_paths()
            if peer_paths:
                result["peer_paths"] = peer_paths
            result["next_change"] = topology.relays.next_change()
        return result
    finally:
        if enabled:
            gc.enable()


class Plans(Mapping):
    """``build_plans(..., lazy=True)``' plans: {name: plan} of the names asked for, in their
    order, each plan rendered when it is asked for and kept by nobody. A mesh of N nodes holds
    N x N route entries in its plans, but one plan holds N: a reader that takes the plans one by
    one (``plan_store.save`` writes each to its file) never holds them all, and one that reads no
    plan (a picture: segments and peers alone) renders none. Each access renders the plan afresh,
    equal to the last; a reader that changes its plan (``plan.mark_roaming``,
    ``split_preshared_keys``) changes its own copy. The cyclic collector is off while a plan is
    rendered, as in ``build_plans``."""

    __slots__ = ("_topology", "_names")

    def __init__(self, topology, names):
        self._topology = topology
        self._names = dict.fromkeys(names)

    def __getitem__(self, name):
        if name not in self._names:
            raise KeyError(name)
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._topology.plan(name)
        finally:
            if enabled:
                gc.enable()

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)

    def __repr__(self):
        return "Plans(%r)" % list(self._names)


def listen_port(endpoint, port, subject=None, field="endpoint"):
    """The UDP port a node listens on (its plan's ``listen_port``): the port of its endpoint when
    it has one, else the mesh's ``port``. For steps before any mesh is computed: kilo.mesh.key
    checks that port on the host, and a connecting machine listens where its key step checked."""
    if endpoint is None or not str(endpoint).strip():
        return port
    return split_endpoint(str(endpoint), subject, field)[1]


def node_segment(node, options=None):
    """The segment key of one node (an input node, as for ``build_plans``) without computing the
    mesh: a controller step about one host (kilo.mesh.status) asks this instead of the whole mesh.
    Raises TopologyError for a node ``build_plans`` would refuse on its own."""
    opts = parse_options(options)
    return segment_key(parse_node(node, 0, opts["port"], opts["subnets"]), opts["granularity"])


def peer_config(nodes, peers, peer_name, options=None):
    """The WireGuard [Peer] sections of peer ``peer_name``'s own configuration (kgctl showconf peer)."""
    return Topology(nodes, peers or [], options).peer_config(peer_name)
