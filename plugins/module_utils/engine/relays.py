# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Beyond Kilo: segments no other segment can reach, connected through relays.

A segment is *unreachable* when its leader has no endpoint or the ``behind_nat`` mark (node
field, annotation ``kilo.mesh/behind-nat``): it sits behind NAT, and other locations reach it
only at the address its keepalives come from (WireGuard roaming). Two unreachable segments of
different groups and locations never reach each other directly; their traffic goes through a
*relay*: the leader of a reachable segment of a location option ``relays`` names (``[]``: every
location), which forwards it between its own peers, through its WireGuard interface and back
out of it. Two segments of one location (granularity ``full``; a node without an internal IP)
reach each other at their endpoints, as in Kilo: the mark says no *other location* can.

``plan(topology)`` is called by ``Topology.__init__`` right after the segments are formed. It
returns None unless a segment is unreachable, and then nothing else here runs: no mark exists in
Kilo and an endpoint-less segment was refused before, so every mesh Kilo builds stays Kilo's
(``tests/unit/plugins/module_utils/engine/test_topology_kilo_digest.py``). Otherwise it returns a ``Relays`` that the
topology asks while rendering:

* leaders: healthy members first (Kilo's order with health: unhealthy ones only when no healthy
  one has an endpoint), reachable ones first among those (Kilo's order among them); else Kilo's
  order; else the hinted member, else the first by name (healthy ones first). When that choice
  would refuse the mesh, a segment whose healthy leader is unreachable takes its reachable (down)
  member back: a down leader cuts off its location until it returns, a refusal every host;
* an unreachable leader keeps alive (its own ``persistent_keepalive``, else 25 s), so every peer
  learns its mapping and publishes it as Kilo does (discovered endpoints);
* the relay of a pair (U, V) of unreachable segments is the eligible relay with the largest
  ``sha256("kilo.mesh relay\\0a\\0b\\0r")`` (a < b their keys, r the relay's key): the same at
  both ends, spread over the relays, and a relay that leaves moves only its own pairs. Relays
  whose leader is marked unhealthy (``healthy``) or down as a relay (``relay_down``, push runs)
  leave the hash unless every relay is;
* U's entry for V goes away; V's allowed IPs join U's entry for relay(U, V), whose ``relayed``
  lists V. U's routes stay Kilo's (into the interface; WireGuard picks the entry by allowed IP);
* an unreachable segment's leader has no endpoint in other locations' plans but the mapping
  discovered for it (Kilo's discovered endpoints), so every leader waits for its keepalives. Its
  routes leave to the underlay the address those keepalives come from, as Kilo leaves the
  endpoint's: the mapping once known, before that the configured endpoint's address when it is
  public (a host behind a stateful firewall keeps alive from it; a private one is behind NAT, so
  routed through the tunnel, often the leader's internal IP); none where the pair is relayed (no
  entry sends there). Its own location's leaders take its configured endpoint (an endpoint-less
  leader keeps alive from its internal IP when the viewer's endpoint is on its network);
* every eligible relay's firewall has ``relay_accept`` (used or not: failover never needs to
  converge a relay); its peers and routes are Kilo's;
* an outside peer without endpoint (a laptop) and an unreachable segment cannot send to each other
  first: the peer's own sections (``Topology.peer_config``: showconf, kilo.mesh.connect) carry the
  segment's allowed IPs on the section of their relay (``peer_relay``: the hash of ``peer:NAME``
  and the segment's key), and the segment's leader carries the peer's on its entry for that relay
  (its entry for the peer goes); the relay reaches both (the peer learned by roaming). The result's
  ``peer_paths`` lists them.

Refused (TopologyError naming the marked node, else the endpoint-less leader, and the field;
the message names the segments): a mesh with no reachable segment at all, and a pair of
unreachable segments of different locations with no eligible relay of a third group.

Timed inputs count only at a time (``build_plans(..., now=...)``; without one every pair of two
unreachable segments is relayed, as a push run computes it): a node's ``path_state`` (what its
agent published: ``down`` relays until a time, a ``direct`` handshake with a segment since a time,
a segment ``held`` on the relay until a time; None for a Kilo end or a push run) and a relay's
``relay_since`` (its agent's start; 0 for push runs). A relay counts from ``relay_since`` + 5 s; a
relay either end names down leaves that pair's hash (all count again when every one is named); a
pair whose ends both publish path states and have a mapping each (discovered endpoints) is
*probing*: each end has a probe entry for the other (the mapping as endpoint, no allowed IPs, so
nothing moves off the relay); it is *direct* from 5 s after both ends publish a direct handshake
with each other, unless either holds it: each end then has Kilo's entry for the other, its
endpoint the mapping. ``next_change`` is the first time a decision flips by time alone. Agents
publish them as annotations (``kube_node.RELAY``, ``kube_node.PATH_STATE``; ``agent/mesh.py``).

Agent mode also knows which nodes Kilo's own agent (``kg``) runs (node field ``kg``: their Node
carries none of our agents' marks): such a leader never relays (unless no leader is marked at all,
so that a mesh whose agents are starting still computes), and a pair of unreachable segments with
a ``kg`` end keeps Kilo's entries both ways (its end knows nothing of relays; relaying only ours
would break the rule that a packet's inner source maps to the peer it came from).
"""

from __future__ import absolute_import, division, print_function

import hashlib

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    Subject,
    is_public,
    node_subject,
    text_list,
)
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import (
    NO_ENDPOINT,
    Endpoint,
    TopologyError,
)

# an unreachable leader's keepalive when it sets none (seconds)
DEFAULT_KEEPALIVE = 25
# seconds after a relay starts, or after both ends of a pair saw a direct handshake, before either counts
SETTLE = 5
RELAYED, PROBING, DIRECT = "relayed", "probing", "direct"


def reachable(node):
    """Others can reach this node at its endpoint: it has one and no ``behind_nat`` mark."""
    return node.endpoint is not None and not node.behind_nat


def choose_leader(members, find_leader, health=True):
    """The leader of a segment with a mark or without any endpoint (see the module's doc);
    ``find_leader`` is Kilo's choice (``topology.find_leader``). ``health`` False: reachable
    members first whatever their health (``plan``'s way out of a refusal)."""
    pool = (
        [node for node in members if node.healthy and node.endpoint is not None] if health else []
    )
    pool = pool or members
    usable = [node for node in pool if reachable(node)]
    if usable:
        return usable[find_leader(usable)]
    index = find_leader(pool)
    if index is not None:
        return pool[index]
    candidates = [node for node in members if node.healthy] or members
    return next((node for node in candidates if node.leader_hint), candidates[0])


def pair_key(a, b):
    """The pair of segment keys ``a``, ``b`` in one order, whichever end asks."""
    return (a, b) if a <= b else (b, a)


def one_site(a, b):
    """Segments ``a`` and ``b`` of one location reach each other directly when either leader has
    an endpoint: ``behind_nat`` says no *other* location can reach it (their LAN, Kilo's ``full``)."""
    return a.location == b.location and (
        a.leader.endpoint is not None or b.leader.endpoint is not None
    )


def rendezvous(a, b, relays):
    """The relay of the pair of segment keys (a, b) out of ``relays`` (segments): the largest hash."""
    a, b = pair_key(a, b)
    prefix = ("kilo.mesh relay\0%s\0%s\0" % (a, b)).encode("utf-8")
    return max(relays, key=lambda r: hashlib.sha256(prefix + r.key.encode("utf-8")).digest())


def relay_locations(value, subject):
    """Option ``relays``: a list of location names (or text separated by commas); [] for every location."""
    what = "a list of location names"
    items = text_list(value, subject, "relays", what)
    if not all(isinstance(item, str) for item in items):
        raise TopologyError("expected %s, got %r" % (what, value), subject, "relays")
    return items


def unreachable_cause(seg):
    """(subject, field, text) of what leaves unreachable segment ``seg`` so: its first member
    marked ``behind_nat`` (the inventory's or the annotation's mark), else its leader, which has
    no endpoint (nor has any member); ``text`` says it of every member that counts."""
    marked = [node.name for node in seg.members if node.behind_nat]
    bare = [node.name for node in seg.members if node.endpoint is None]
    text = "; ".join(
        part
        for part in (
            "behind_nat: %s" % ", ".join(marked) if marked else "",
            "no endpoint: %s" % ", ".join(bare) if bare else "",
        )
        if part
    )
    if marked:
        return node_subject(marked[0]), "behind_nat", text
    return node_subject(seg.leader.name), "endpoint", text


class Relays(object):
    """The relayed topology of one mesh (see the module's doc)."""

    def __init__(self, topology, unreachable, eligible, kept_alive=()):
        self.topology = topology
        # names of the unreachable leaders whose keepalive is the engine's (they set none)
        self.kept_alive = frozenset(kept_alive)
        self.now = topology.now
        self.unreachable = unreachable  # segment keys
        self.eligible = eligible  # segments, in key order
        self.eligible_keys = set(seg.key for seg in eligible)
        self._relay_of, self._state_of = {}, {}
        self._changes = set()  # times after now at which a decision flips by time alone

    def _later(self, when):
        """``when`` is after now: a decision flips then (``next_change``); returns whether it is."""
        if when > self.now:
            self._changes.add(when)
            return True
        return False

    def relay(self, a, b):
        """The relay segment of the pair of unreachable segments ``a``, ``b`` (of different groups):
        the rendezvous hash over the eligible relays of a third group, healthy ones, and with a time
        (``now``) those counted (``relay_since`` + 5 s) and named down by neither end (``down``);
        each filter only where it leaves one."""
        pair = pair_key(a.key, b.key)
        found = self._relay_of.get(pair)
        if found is None:
            usable = self._usable((a, b))
            found = self._relay_of[pair] = rendezvous(a.key, b.key, usable)
        return found

    def _usable(self, ends):
        """The eligible relays of a third group to the segments ``ends`` (see ``relay``)."""
        usable = [r for r in self.eligible if all(r.group != end.group for end in ends)]
        usable = [r for r in usable if r.leader.healthy and not r.leader.relay_down] or usable
        if self.now is not None:
            usable = [r for r in usable if not self._later(r.leader.relay_since + SETTLE)] or usable
            down = set(
                name
                for seg in ends
                for name, until in self._published(seg, "down").items()
                if self._later(until)
            )
            usable = [r for r in usable if r.key not in down] or usable
        return usable

    def peer_relay(self, peer, seg):
        """The relay segment between outside peer ``peer`` and unreachable segment ``seg`` when the
        peer has no endpoint (a laptop): neither can send to the other first, so both reach each
        other through a relay, which the peer reaches at its endpoint and which learns the peer's
        by roaming. The rendezvous hash of (``peer:NAME``, the segment's key) over the eligible
        relays of another group than ``seg``: static inputs only (no health, ``relay_down``, time
        or path state), since the peer's own configuration (``peer_entries``: showconf,
        kilo.mesh.connect) is fixed until it is made again and both ends must name one relay.
        None when the peer has an endpoint, ``seg`` is reachable or led by Kilo's own agent
        (``kg``: it knows nothing of relays), or no relay of another group than ``seg`` is
        eligible: then Kilo's entries stay."""
        if peer.endpoint is not None or seg.key not in self.unreachable or seg.leader.kg:
            return None
        key = ("peer:" + peer.name, seg.key)
        found = self._relay_of.get(key)
        if found is None:
            usable = [r for r in self.eligible if r.group != seg.group]
            found = self._relay_of[key] = rendezvous(key[0], key[1], usable) if usable else None
        return found

    def _published(self, seg, what):
        """What the leader of ``seg`` published of its paths (``path_state``): {} when nothing."""
        state = seg.leader.path_state
        return state[what] if state else {}

    def mapping(self, seg, viewer=None):
        """The endpoint a relay saw the unreachable leader of ``seg`` at (Kilo's discovered endpoints)."""
        key = seg.leader.key
        found = viewer.discovered.get(key) if viewer is not None else None
        return found if found is not None else self.topology.discovered.get(key)

    def probe_mapping(self, seg, viewer):
        """The endpoint of leader ``viewer``'s probe for ``seg`` (a probing pair): the viewer's own
        mapping while it publishes a fresh direct handshake with ``seg`` (``direct``: that mapping
        works), else the mapping an eligible relay saw (the first in key order that saw one). A
        relay receives the leader's keepalives all the time, so it has the current one after a NAT
        remapping, when the viewer's interface still shows the old endpoint of its entry (a direct
        path that fell back leaves a probe there, and a push run reads it back). Else ``mapping``."""
        if seg.key in self._published(viewer.segment, "direct"):
            return self.mapping(seg, viewer)
        key = seg.leader.key
        for relay in self.eligible:
            found = relay.leader.discovered.get(key)
            if found is not None:
                return found
        return self.mapping(seg, viewer)

    def state(self, a, b):
        """The path of a pair of unreachable segments of different groups: RELAYED; PROBING while both
        ends publish path states and a mapping each; DIRECT from 5 s after both ends publish a direct
        handshake with each other (``direct``), unless either holds the pair on the relay (``held``).
        Only with a time (``now``): without one, every pair is relayed."""
        pair = pair_key(a.key, b.key)
        found = self._state_of.get(pair)
        if found is None:
            found = RELAYED
            if a.leader.kg or b.leader.kg:
                # Kilo's agent at an end knows nothing of relays: both ends keep Kilo's entries
                found = DIRECT
            elif (
                self.now is not None
                and a.leader.path_state is not None
                and b.leader.path_state is not None
            ):
                held = [
                    self._later(self._published(x, "held").get(y.key, 0))
                    for x, y in ((a, b), (b, a))
                ]
                since = [self._published(x, "direct").get(y.key) for x, y in ((a, b), (b, a))]
                if not any(held):
                    if None not in since and not self._later(max(since) + SETTLE):
                        found = DIRECT
                    elif self.mapping(a) is not None and self.mapping(b) is not None:
                        found = PROBING
            self._state_of[pair] = found
        return found

    def relayed(self, seg, viewer):
        """Whether the leader ``viewer`` reaches segment ``seg`` through a relay (probing or not)."""
        own = viewer.segment if viewer is not None else None
        return (
            own is not None
            and seg.key in self.unreachable
            and own.key in self.unreachable
            and seg.group != own.group
            and not one_site(seg, own)
            and self.state(seg, own) != DIRECT
        )

    def endpoint(self, seg, viewer, kilo):
        """``segment_endpoint``'s answer ``kilo`` for an unreachable segment, an ``Endpoint``: its
        ``text`` the endpoint of the viewer's entry (None: none), its ``ip`` the address its routes
        leave to the underlay (None: none). Its own location: its
        configured endpoint, as Kilo (an endpoint-less leader keeps alive from its internal IP when
        the viewer's endpoint is on that IP's network).
        Elsewhere its leader's endpoint is no way to it: its mapping where one was discovered, else
        none, and the viewer waits for its keepalives; the address they come from (the mapping,
        else a public configured endpoint's: a host behind a stateful firewall) is left to the
        underlay, as Kilo leaves an endpoint's, since the entry's packets to it must not enter the
        tunnel. A relayed pair has no entry sending there: every address goes through the tunnel."""
        if seg.key not in self.unreachable:
            return kilo
        leader = seg.leader
        if viewer is not None and one_site(seg, viewer.segment):
            if leader.endpoint is not None:
                return leader.endpoint
            # an endpoint-less leader keeps alive from its address on the viewer's network, if any
            at = viewer.endpoint.ip if viewer.endpoint is not None else None
            return Endpoint(
                None,
                next(
                    (
                        internal.ip
                        for internal in leader.internals
                        if at is not None and at in internal.interface.network
                    ),
                    None,
                ),
                None,
            )
        if self.relayed(seg, viewer):
            if self.state(seg, viewer.segment) == RELAYED:
                return NO_ENDPOINT
            found = self.probe_mapping(seg, viewer)  # the probe's endpoint
        else:
            found = self.mapping(seg, viewer)
        if found is not None:
            return found
        if leader.endpoint is not None and is_public(leader.endpoint.ip):
            return Endpoint(None, leader.endpoint.ip, None)
        return NO_ENDPOINT

    def wireguard_peers(self, node, entries):
        """A leader's Kilo entries (``Topology._wireguard_peers``) with the relayed moves: an entry of
        a relayed segment goes (a probing one becomes a probe entry), its allowed IPs join the relay's."""
        own = node.segment
        if own.key not in self.unreachable:
            return entries
        entries = self._peers_through_relays(own, entries)
        by_key = self.topology.segment_by_key
        moves, through = {}, {}  # relay key -> [relayed segments]; segment key -> its relay
        for entry in entries:
            seg = by_key.get(entry["name"])
            if (
                seg is not None
                and seg.leader.key == entry["public_key"]
                and self.relayed(seg, node)
            ):
                moves.setdefault(self.relay(own, seg).key, []).append(seg)
                through[seg.key] = seg
        if not moves:
            return entries
        out = []
        for entry in entries:
            seg = by_key.get(entry["name"])
            if seg is not None and seg.leader.key == entry["public_key"]:
                if seg.key in through:
                    if self.state(own, seg) == PROBING:
                        out.append(
                            {
                                "name": seg.key,
                                "public_key": seg.leader.key,
                                "endpoint": self.probe_mapping(seg, node)[0],
                                "allowed_ips": [],
                                "persistent_keepalive": node.persistent_keepalive,
                                "probe": True,
                            }
                        )
                    continue
                carried = moves.get(seg.key)
                if carried:
                    # after the outside peers _peers_through_relays put there
                    entry = _carrying(
                        entry,
                        [ip for other in carried for ip in other.wg_allowed],
                        [other.key for other in carried],
                    )
            out.append(entry)
        return out

    def _peers_through_relays(self, own, entries):
        """An unreachable leader's entries with each endpoint-less outside peer's (``peer_relay``)
        gone and its allowed IPs on the entry of its relay, whose ``relayed`` names the peer."""
        peers = dict((peer.name, peer) for peer in self.topology.peers)
        carried = {}  # relay segment key -> [peers]
        for entry in entries:
            peer = peers.get(entry["name"])
            if peer is not None and peer.key == entry["public_key"]:
                relay = self.peer_relay(peer, own)
                if relay is not None:
                    carried.setdefault(relay.key, []).append(peer)
        if not carried:
            return entries
        gone = set(peer.name for moved in carried.values() for peer in moved)
        by_key = self.topology.segment_by_key
        out = []
        for entry in entries:
            if entry["name"] in gone and entry["name"] not in by_key:
                continue
            moved = carried.get(entry["name"])
            seg = by_key.get(entry["name"])
            if moved and seg is not None and seg.leader.key == entry["public_key"]:
                entry = _carrying(
                    entry,
                    [text for peer in moved for dummy, text in peer.allowed],
                    [peer.name for peer in moved],
                )
            out.append(entry)
        return out

    def peer_entries(self, peer, entries):
        """Outside peer ``peer``'s own [Peer] sections (``Topology.peer_config``) with the relayed
        moves: without an endpoint, an unreachable segment's section goes and its allowed IPs join
        the section of that pair's relay (``peer_relay``), whose ``relayed`` names the segment."""
        if peer.endpoint is not None:
            return entries
        by_key = self.topology.segment_by_key
        carried, gone = {}, set()
        for entry in entries:
            seg = by_key.get(entry["name"])
            if seg is not None and seg.leader.key == entry["public_key"]:
                relay = self.peer_relay(peer, seg)
                if relay is not None:
                    carried.setdefault(relay.key, []).append(seg)
                    gone.add(seg.key)
        if not carried:
            return entries
        out = []
        for entry in entries:
            seg = by_key.get(entry["name"])
            if seg is None or seg.leader.key != entry["public_key"]:
                out.append(entry)
                continue
            if seg.key in gone:
                continue
            moved = carried.get(seg.key)
            if moved:
                entry = _carrying(
                    entry,
                    [ip for other in moved for ip in other.wg_allowed],
                    [other.key for other in moved],
                )
            out.append(entry)
        return out

    def firewall(self, node, firewall):
        """A relay leader's firewall accepts what it forwards between its peers."""
        if node.segment.leader is node and node.segment.key in self.eligible_keys:
            firewall["relay_accept"] = True
        return firewall

    def segments_out(self, out):
        """The result's segments with ``reachable`` and ``relay``."""
        for item in out:
            item["reachable"] = item["key"] not in self.unreachable
            item["relay"] = item["key"] in self.eligible_keys
        return out

    def paths(self):
        """[{a, b, path, via}]: every pair of segments of different groups with an unreachable end."""
        segments = self.topology.segments
        out = []
        for i, a in enumerate(segments):
            for b in segments[i + 1 :]:
                if a.group == b.group or (
                    a.key not in self.unreachable and b.key not in self.unreachable
                ):
                    continue
                if a.key in self.unreachable and b.key in self.unreachable and not one_site(a, b):
                    path = self.state(a, b)
                    out.append(
                        {
                            "a": a.key,
                            "b": b.key,
                            "path": path,
                            "via": None if path == DIRECT else self.relay(a, b).key,
                        }
                    )
                else:
                    out.append({"a": a.key, "b": b.key, "path": DIRECT, "via": None})
        return out

    def peer_paths(self):
        """[{segment, peer, via}]: each unreachable segment and endpoint-less outside peer that
        reach each other through a relay (``peer_relay``)."""
        out = []
        for peer in self.topology.peers:
            for seg in self.topology.segments:
                relay = self.peer_relay(peer, seg)
                if relay is not None:
                    out.append({"segment": seg.key, "peer": peer.name, "via": relay.key})
        return out

    def next_change(self):
        """The first time after now at which a decision flips by time alone (a relay counted, a
        down or hold ending, a pair going direct): when to compute again; None without one.
        Complete once ``paths`` has decided every pair."""
        return min(self._changes) if self._changes else None


def _carrying(entry, allowed_ips, names):
    """A relay's entry also carrying others (segments or outside peers): their ``allowed_ips``
    added, their ``names`` appended to ``relayed``."""
    return dict(
        entry,
        allowed_ips=list(entry["allowed_ips"]) + list(allowed_ips),
        relayed=list(entry.get("relayed") or ()) + list(names),
    )


def plan(topology, find_leader):
    """The relayed topology of ``topology`` (its segments formed, leaders chosen by Kilo's rule,
    None for a segment without any endpoint), or None when every segment is reachable."""
    marked = [
        seg
        for seg in topology.segments
        if seg.leader is None or any(node.behind_nat for node in seg.members)
    ]
    if not marked:
        return None
    for seg in marked:
        seg.leader = choose_leader(seg.members, find_leader)
    names = topology.opts["relays"]
    refusal = _refusal(topology.segments, names)
    if refusal is not None:
        # health never refuses the mesh: a down leader cuts off one location until it returns
        demoted = False
        for seg in marked:
            if not reachable(seg.leader):
                down = choose_leader(seg.members, find_leader, health=False)
                if reachable(down):
                    seg.leader, demoted = down, True
        if demoted:
            refusal = _refusal(topology.segments, names)
    if refusal is not None:
        raise refusal
    unreachable = [seg for seg in topology.segments if not reachable(seg.leader)]
    if not unreachable:
        return None
    kept_alive = []
    for seg in unreachable:
        # keeps alive towards every peer, so each learns its mapping (WireGuard roaming)
        if seg.leader.persistent_keepalive <= 0:
            seg.leader.persistent_keepalive = DEFAULT_KEEPALIVE
            kept_alive.append(seg.leader.name)
    return Relays(
        topology,
        set(seg.key for seg in unreachable),
        _eligible(topology.segments, names),
        kept_alive,
    )


def _eligible(segments, names):
    """The segments that may relay: reachable ones of a location ``names`` lists ([]: any). In agent
    mode not one led by Kilo's own agent (``kg``: its Node has no ``kilo.mesh/relay``), but while
    none of ours is marked yet (their agents starting) every one counts, so the mesh computes."""
    out = [
        seg for seg in segments if reachable(seg.leader) and (not names or seg.location in names)
    ]
    return [seg for seg in out if not seg.leader.kg] or out


def _refusal(segments, names):
    """The TopologyError refusing the mesh of ``segments`` (their leaders chosen) with option
    ``relays`` = ``names``, or None: no reachable segment at all, or a pair of unreachable segments
    of different groups and locations without an eligible relay of a third group."""
    unreachable = [seg for seg in segments if not reachable(seg.leader)]
    if not unreachable:
        return None
    usable = [seg for seg in segments if reachable(seg.leader)]
    if not usable:
        subject, field, why = unreachable_cause(unreachable[0])
        return TopologyError(
            "no segment of the mesh is reachable (every node is behind_nat or has no endpoint), so %s (%s) has no"
            " leader to connect to or relay through: give a node an endpoint the others can reach"
            % (unreachable[0].key, why),
            subject,
            field,
        )
    eligible = _eligible(segments, names)
    for i, a in enumerate(unreachable):
        for b in unreachable[i + 1 :]:
            if (
                a.group == b.group
                or one_site(a, b)
                or any(r.group != a.group and r.group != b.group for r in eligible)
            ):
                continue
            between = (
                "neither %s nor %s can be reached (every node of each is behind_nat or has no endpoint)"
                % (a.key, b.key)
            )
            if any(r.group != a.group and r.group != b.group for r in usable):
                return TopologyError(
                    "%s, and %s names no location with a reachable leader to relay between them: add one (%s)"
                    % (
                        between,
                        ", ".join(names),
                        ", ".join(
                            sorted(
                                set(
                                    r.location
                                    for r in usable
                                    if r.group != a.group and r.group != b.group
                                )
                            )
                        ),
                    ),
                    Subject("options"),
                    "relays",
                )
            subject, field, why = unreachable_cause(b)
            return TopologyError(
                "%s, and no other segment has a reachable leader to relay between them: give a node of one of"
                " them an endpoint the others can reach (without behind_nat; %s: %s)"
                % (between, b.key, why),
                subject,
                field,
            )
    return None
