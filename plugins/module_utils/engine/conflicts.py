# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Addresses and ranges two parties of one mesh claim at once, refused naming both.

Kilo takes such a mesh and quietly makes it wrong: two nodes of one pod range (or one internal
IP) each get the same allowed IP on a leader's WireGuard peer, where WireGuard keeps it on one
peer only; a peer whose allowed IPs hold a node's pod range takes that range over; two peers of
one allowed IP keep it on the first by name (Kilo dedups); an allowed location IP that meets
another segment's ranges is dropped by Kilo's filter; a WireGuard IP inside a LAN is routed into
the tunnel from every host of that LAN. The engine matches Kilo's output on every input Kilo
accepts (``topology.py``), so it computes such meshes as Kilo does; ``kilo.mesh.validate`` (every
playbook that reads a mesh, ``plugin_utils/validate.py``) refuses them with this check, before
any host changes.

What is compared (``Claim``): every node's internal IPs, pod ranges, allowed location IPs and
CNI compatibility IP; the mesh's subnets and service CIDRs; every segment's WireGuard IPs; every
peer's allowed IPs; and endpoints (two nodes, or a peer and a node, at one ``host:port``; a
node's endpoint at another node's internal IP; an endpoint inside the mesh's subnet; not the
endpoint of a node marked ``behind_nat``, which nobody sends to: two homes behind NAT may both
report 192.168.1.2:51820). Values that
are stand-ins for what a host has not reported yet (``standins``: node name -> its stand-in
fields) take no part. The first conflict in
address order raises a TopologyError whose subject is the party at fault as ``SUBJECT_RANK`` says
(a peer before a node, a node before a mesh-wide option; of two nodes, the later by name) and
whose message names the other party.
"""

from __future__ import absolute_import, division, print_function

from ansible_collections.kilo.mesh.plugins.module_utils.common import node_subject, peer_subject
from ansible_collections.kilo.mesh.plugins.module_utils.engine.parse import (
    OPTIONS_SUBJECT,
    TopologyError,
    parse_peer,
    relation,
)

# Kinds of claim; which pairs conflict is CONFLICTS; who is named as at fault, SUBJECT_RANK (lower first).
PEER, ALIP, POD, CNI, INTERNAL, SERVICE, SUBNET, WIREGUARD = (
    "peer",
    "alip",
    "pod",
    "cni",
    "internal",
    "service",
    "subnet",
    "wireguard",
)
SUBJECT_RANK = {PEER: 0, ALIP: 1, POD: 2, CNI: 3, INTERNAL: 4, SERVICE: 5, SUBNET: 6, WIREGUARD: 7}


class Claim(object):
    """One network one party holds: ``kind``, the network (an ``ipaddress`` network, or an address
    for a single one), its owner (a parsed node, a peer, a segment, or None for the mesh's
    options), the field it comes from and how to say it."""

    __slots__ = ("kind", "version", "prefixlen", "owner", "field", "text", "start", "end")

    def __init__(self, kind, net, owner, field):
        self.kind, self.owner, self.field, self.version = kind, owner, field, net.version
        self.text = str(net)
        if hasattr(net, "network_address"):
            self.start, self.end, self.prefixlen = (
                int(net.network_address),
                int(net.broadcast_address),
                net.prefixlen,
            )
        else:  # one address
            self.start = self.end = int(net)
            self.prefixlen = net.max_prefixlen

    def said(self):
        """The claim as another party's error names it."""
        owner = self.owner
        if self.kind == INTERNAL:
            return "the internal IP %s of node %r" % (self.text, owner.name)
        if self.kind == POD:
            return "the pod range %s of node %r" % (self.text, owner.name)
        if self.kind == ALIP:
            return "the allowed location IP %s of node %r (location %r)" % (
                self.text,
                owner.name,
                owner.location,
            )
        if self.kind == CNI:
            return "the CNI compatibility IP %s of node %r" % (self.text, owner.name)
        if self.kind == SUBNET:
            return "the mesh's subnet %s (the WireGuard IPs come from it)" % self.text
        if self.kind == SERVICE:
            return "the service CIDR %s" % self.text
        if self.kind == WIREGUARD:
            return "the WireGuard IP %s of segment %s (led by node %r)" % (
                self.text,
                owner.key,
                owner.leader.name,
            )
        return "the allowed IP %s of peer %r" % (self.text, owner.name)

    def subject(self):
        if self.kind == PEER:
            return peer_subject(self.owner.name)
        if self.kind in (SUBNET, SERVICE, WIREGUARD):
            return OPTIONS_SUBJECT
        return node_subject(self.owner.name)


def _conflict(a, b):
    """Do claims ``a`` and ``b`` (overlapping networks) conflict?"""
    kinds = frozenset((a.kind, b.kind))
    if a.owner is b.owner and a.kind == b.kind:
        return (
            False  # a node's own ranges are the engine's check; a peer repeating itself is harmless
        )
    if kinds == frozenset((INTERNAL,)) or kinds == frozenset((POD,)) or kinds == frozenset((CNI,)):
        return True  # two nodes
    if kinds == frozenset((ALIP,)) or kinds == frozenset((ALIP, INTERNAL)):
        # a location's ranges may hold its own nodes' internal IPs (its LAN); not another location's
        return a.owner.location != b.owner.location
    if PEER in kinds:
        return not kinds & frozenset(
            (SUBNET, CNI)
        )  # a peer meets the subnet at its WireGuard IPs alone
    if SUBNET in kinds:
        return bool(kinds & frozenset((INTERNAL, POD, ALIP, SERVICE, CNI)))
    if SERVICE in kinds:
        return bool(kinds & frozenset((INTERNAL, POD, ALIP)))
    if POD in kinds:
        return bool(kinds & frozenset((INTERNAL, ALIP)))
    return False


def _raise(a, b):
    """The error of the conflicting claims ``a`` and ``b``, said of the one at fault."""
    ra, rb = SUBJECT_RANK[a.kind], SUBJECT_RANK[b.kind]
    if ra == rb:  # two of one kind: the later owner by name is the one named
        own, other = (a, b) if a.owner.name > b.owner.name else (b, a)
    else:
        own, other = (a, b) if ra < rb else (b, a)
    equal = (own.start, own.end) == (other.start, other.end)
    raise TopologyError(
        "%s %s %s" % (own.text, relation(equal, own.prefixlen, other.prefixlen), other.said()),
        own.subject(),
        own.field,
    )


def claims(topology, peers, standins):
    """Every claim of the mesh (``topology``: the engine's ``Topology``; ``peers``: the peers as
    given, before the engine's dedup of allowed IPs between peers)."""
    out = []
    for node in topology.nodes:
        standin = standins.get(node.name, ())
        if "internal_ip" not in standin:
            out.extend(Claim(INTERNAL, i.ip, node, "internal_ip") for i in node.internals)
        out.extend(Claim(POD, net, node, "pod_cidr") for net, dummy in node.pods)
        out.extend(Claim(ALIP, net, node, "allowed_location_ips") for net in node.alips)
        if node.cni_ip is not None:
            out.append(Claim(CNI, node.cni_ip, node, "cni_compatibility_ip"))
    opts = topology.opts
    out.extend(Claim(SUBNET, net, None, "subnet") for net in opts["subnets"])
    out.extend(Claim(SERVICE, net, None, "service_cidrs") for net in opts["service_cidrs"])
    for seg in topology.segments:
        out.extend(Claim(WIREGUARD, ip, seg, "subnet") for ip, dummy, dummy in seg.wg_ips)
    for index, item in enumerate(peers):
        peer = parse_peer(item, index)
        out.extend(Claim(PEER, net, peer, "allowed_ips") for net, dummy in peer.allowed)
    return out


def check_overlaps(found):
    """Raise for the first pair of conflicting claims in address order (one sweep per IP family)."""
    order = sorted(
        found,
        key=lambda c: (
            c.version,
            c.start,
            -c.end,
            SUBJECT_RANK[c.kind],
            getattr(c.owner, "name", "") or "",
        ),
    )
    open_claims, version = [], None
    for claim in order:
        if claim.version != version:
            open_claims, version = [], claim.version
        open_claims = [c for c in open_claims if c.end >= claim.start]
        for other in open_claims:
            if _conflict(other, claim):
                _raise(other, claim)
        open_claims.append(claim)


def _in_subnet(topology, ip):
    for net in topology.opts["subnets"]:
        if ip is not None and ip.version == net.version and ip in net:
            return net
    return None


def check_endpoints(topology, peers, standins):
    """Two nodes at one endpoint, a node's endpoint at another node's internal IP, a peer at a
    node's endpoint, an endpoint inside the mesh's subnet (stand-ins left out)."""
    seen, internals = {}, {}
    for node in topology.nodes:
        if "internal_ip" not in standins.get(node.name, ()):
            for internal in node.internals:
                internals.setdefault(internal.ip, node)
    for node in topology.nodes:  # sorted by name
        if node.endpoint is None or node.behind_nat or "endpoint" in standins.get(node.name, ()):
            continue  # a node behind NAT is reached at its mapping, never at its endpoint (engine/relays.py)
        endpoint = node.endpoint
        if endpoint.text in seen:
            raise TopologyError(
                "%s is also the endpoint of node %r" % (endpoint.text, seen[endpoint.text].name),
                node_subject(node.name),
                "endpoint",
            )
        seen[endpoint.text] = node
        subnet = _in_subnet(topology, endpoint.ip)
        if subnet is not None:
            raise TopologyError(
                "%s lies inside the mesh's subnet %s (the WireGuard"
                " IPs come from it)" % (endpoint.text, subnet),
                node_subject(node.name),
                "endpoint",
            )
        owner = internals.get(endpoint.ip)
        if owner is not None and owner is not node:
            raise TopologyError(
                "%s is at the internal IP %s of node %r" % (endpoint.text, endpoint.ip, owner.name),
                node_subject(node.name),
                "endpoint",
            )
    for index, item in enumerate(peers):
        peer = parse_peer(item, index)
        endpoint = peer.endpoint
        if endpoint is None:
            continue
        if endpoint.text in seen:
            raise TopologyError(
                "%s is the endpoint of node %r" % (endpoint.text, seen[endpoint.text].name),
                peer_subject(peer.name),
                "endpoint",
            )
        subnet = _in_subnet(topology, endpoint.ip)
        if subnet is not None:
            raise TopologyError(
                "%s lies inside the mesh's subnet %s (the WireGuard"
                " IPs come from it)" % (endpoint.text, subnet),
                peer_subject(peer.name),
                "endpoint",
            )


def check_conflicts(topology, peers=None, standins=None):
    """Refuse what two parties of the mesh claim at once (see the module's doc); ``topology`` is
    the engine's ``Topology`` of the mesh, ``peers`` the peers it was given, ``standins`` node name
    -> the fields that stand in for what the host has not reported yet."""
    peers, standins = list(peers or ()), standins or {}
    check_overlaps(claims(topology, peers, standins))
    check_endpoints(topology, peers, standins)
