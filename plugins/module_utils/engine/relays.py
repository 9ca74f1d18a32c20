# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Beyond Kilo: segments no other segment can reach, connected through relays.

A segment is *unreachable* when none of its members has an endpoint without the ``behind_nat``
mark (node field, annotation ``kilo.mesh/behind-nat``): it sits behind NAT, and others reach it
only at the address its keepalives come from (WireGuard roaming). Two unreachable segments of
different groups never reach each other directly; their traffic goes through a *relay*: the
leader of a reachable segment of a location option ``relays`` names (``[]``: every location),
which forwards it between its own peers, through its WireGuard interface and back out of it.

``plan(topology)`` is called by ``Topology.__init__`` right after the segments are formed. It
returns None unless a segment is unreachable, and then nothing else here runs: no mark exists in
Kilo and an endpoint-less segment was refused before, so every mesh Kilo builds stays Kilo's
(``tests/unit/test_topology_kilo_digest.py``). Otherwise it returns a ``Relays`` that the
topology asks while rendering:

* leaders: reachable members first (Kilo's order among them); else Kilo's order among members
  with an endpoint; else the hinted member, else the first by name (healthy ones first);
* an unreachable leader keeps alive (its own ``persistent_keepalive``, else 25 s), so every peer
  learns its mapping and publishes it as Kilo does (discovered endpoints);
* the relay of a pair (U, V) of unreachable segments is the eligible relay with the largest
  ``sha256("kilo.mesh relay\\0a\\0b\\0r")`` (a < b their keys, r the relay's key): the same at
  both ends, spread over the relays, and a relay that leaves moves only its own pairs. Relays
  whose leader is marked unhealthy (``healthy``) leave the hash unless every relay is;
* U's entry for V goes away; V's allowed IPs join U's entry for relay(U, V), whose ``relayed``
  lists V. U's routes stay Kilo's (into the interface; WireGuard picks the entry by allowed IP);
* an unreachable segment's leader has no endpoint in other plans but the mapping discovered for
  it (Kilo's discovered endpoints), so every leader waits for its keepalives, and routes even the
  address of its configured endpoint through the tunnel, where Kilo leaves it to the underlay;
* every eligible relay's firewall has ``relay_accept`` (used or not: failover never needs to
  converge a relay); its peers and routes are Kilo's.

Refused (TopologyError naming the segment's location or node, and the field): a mesh with no
reachable segment at all, and a pair of unreachable segments with no eligible relay of a third
group.

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
endpoint the mapping. ``next_change`` is the first time a decision flips by time alone. How
agents publish these (stages 4 to 6 of docs/DESIGN.md) is not built yet.
"""

from __future__ import absolute_import, division, print_function

import hashlib

from ansible_collections.kilo.mesh.plugins.module_utils.common import Subject, node_subject
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import TopologyError

# an unreachable leader's keepalive when it sets none (seconds)
DEFAULT_KEEPALIVE = 25
# seconds after a relay starts, or after both ends of a pair saw a direct handshake, before either counts
SETTLE = 5
RELAYED, PROBING, DIRECT = "relayed", "probing", "direct"


def reachable(node):
    """Others can reach this node at its endpoint: it has one and no ``behind_nat`` mark."""
    return node.endpoint is not None and not node.behind_nat


def choose_leader(members, find_leader):
    """The leader of a segment with a mark or without any endpoint (see the module's doc);
    ``find_leader`` is Kilo's choice (``topology.find_leader``)."""
    usable = [node for node in members if reachable(node)]
    if usable:
        return usable[find_leader(usable)]
    index = find_leader(members)
    if index is not None:
        return members[index]
    candidates = [node for node in members if node.healthy] or members
    return next((node for node in candidates if node.leader_hint), candidates[0])


def rendezvous(a, b, relays):
    """The relay of the pair of segment keys (a, b) out of ``relays`` (segments): the largest hash."""
    if b < a:
        a, b = b, a
    prefix = ("kilo.mesh relay\0%s\0%s\0" % (a, b)).encode("utf-8")
    return max(relays, key=lambda r: hashlib.sha256(prefix + r.key.encode("utf-8")).digest())


def relay_locations(value, subject):
    """Option ``relays``: a list of location names (or text separated by commas); [] for every location."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",") if item.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise TopologyError("expected a list of location names, got %r" % (value,), subject, "relays")
    return list(value)


def segment_subject(seg):
    """Who an error about segment ``seg`` names: its leader (a host the inventory can point at; the
    message names the segment, so its location)."""
    return node_subject(seg.leader.name)


def _unreachable_field(seg):
    return "behind_nat" if any(node.behind_nat for node in seg.members) else "endpoint"


class Relays(object):
    """The relayed topology of one mesh (see the module's doc)."""

    def __init__(self, topology, unreachable, eligible):
        self.topology = topology
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
        pair = (a.key, b.key) if a.key < b.key else (b.key, a.key)
        found = self._relay_of.get(pair)
        if found is None:
            usable = [r for r in self.eligible if r.group != a.group and r.group != b.group]
            usable = [r for r in usable if r.leader.healthy] or usable
            if self.now is not None:
                usable = [r for r in usable if not self._later(r.leader.relay_since + SETTLE)] or usable
                down = set(name for seg in (a, b) for name, until in self._published(seg, "down").items()
                           if self._later(until))
                usable = [r for r in usable if r.key not in down] or usable
            found = self._relay_of[pair] = rendezvous(a.key, b.key, usable)
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

    def state(self, a, b):
        """The path of a pair of unreachable segments of different groups: RELAYED; PROBING while both
        ends publish path states and a mapping each; DIRECT from 5 s after both ends publish a direct
        handshake with each other (``direct``), unless either holds the pair on the relay (``held``).
        Only with a time (``now``): without one, every pair is relayed."""
        pair = (a.key, b.key) if a.key < b.key else (b.key, a.key)
        found = self._state_of.get(pair)
        if found is None:
            found = RELAYED
            if self.now is not None and a.leader.path_state is not None and b.leader.path_state is not None:
                held = [self._later(self._published(x, "held").get(y.key, 0)) for x, y in ((a, b), (b, a))]
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
        return (viewer is not None and seg.key in self.unreachable and viewer.segment.key in self.unreachable
                and seg.group != viewer.segment.group and self.state(seg, viewer.segment) != DIRECT)

    def endpoint(self, seg, viewer, kilo):
        """``segment_endpoint``'s answer ``kilo`` for an unreachable segment: its mapping where one
        was discovered and the viewer reaches it directly; else none (its leader's own endpoint is no
        way to it, so the viewer waits for its keepalives and routes even that address through the
        tunnel)."""
        if seg.key not in self.unreachable:
            return kilo
        if not self.relayed(seg, viewer) and self.mapping(seg, viewer) is not None:
            return kilo
        return None, None

    def wireguard_peers(self, node, entries):
        """A leader's Kilo entries (``Topology._wireguard_peers``) with the relayed moves: an entry of
        a relayed segment goes (a probing one becomes a probe entry), its allowed IPs join the relay's."""
        own = node.segment
        if own.key not in self.unreachable:
            return entries
        by_key = self.topology.segment_by_key
        moves, through = {}, {}  # relay key -> [relayed segments]; segment key -> its relay
        for entry in entries:
            seg = by_key.get(entry["name"])
            if seg is not None and seg.leader.key == entry["public_key"] and self.relayed(seg, node):
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
                        out.append({"name": seg.key, "public_key": seg.leader.key,
                                    "endpoint": self.mapping(seg, node)[0], "allowed_ips": [],
                                    "persistent_keepalive": node.keepalive, "probe": True})
                    continue
                carried = moves.get(seg.key)
                if carried:
                    allowed = list(entry["allowed_ips"])
                    for other in carried:
                        allowed.extend(other.wg_allowed)
                    entry = dict(entry, allowed_ips=allowed, relayed=[other.key for other in carried])
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
            for b in segments[i + 1:]:
                if a.group == b.group or (a.key not in self.unreachable and b.key not in self.unreachable):
                    continue
                if a.key in self.unreachable and b.key in self.unreachable:
                    path = self.state(a, b)
                    out.append({"a": a.key, "b": b.key, "path": path,
                                "via": None if path == DIRECT else self.relay(a, b).key})
                else:
                    out.append({"a": a.key, "b": b.key, "path": DIRECT, "via": None})
        return out

    def next_change(self):
        """The first time after now at which a decision flips by time alone (a relay counted, a
        down or hold ending, a pair going direct): when to compute again; None without one.
        Complete once ``paths`` has decided every pair."""
        return min(self._changes) if self._changes else None


def plan(topology, find_leader):
    """The relayed topology of ``topology`` (its segments formed, leaders chosen by Kilo's rule,
    None for a segment without any endpoint), or None when every segment is reachable."""
    marked = False
    for seg in topology.segments:
        if seg.leader is None or any(node.behind_nat for node in seg.members):
            marked = True
            seg.leader = choose_leader(seg.members, find_leader)
    if not marked:
        return None
    unreachable = [seg for seg in topology.segments if not reachable(seg.leader)]
    if not unreachable:
        return None
    usable = [seg for seg in topology.segments if reachable(seg.leader)]
    if not usable:
        seg = unreachable[0]
        raise TopologyError(
            "no segment of the mesh is reachable (every node is behind_nat or has no endpoint), so %s has no"
            " leader to connect to or relay through: give a node an endpoint the others can reach" % seg.key,
            segment_subject(seg), _unreachable_field(seg))
    names = topology.opts["relays"]
    eligible = [seg for seg in usable if not names or seg.location in names]
    for seg in unreachable:
        # keeps alive towards every peer, so each learns its mapping (WireGuard roaming)
        if seg.leader.keepalive <= 0:
            seg.leader.keepalive = DEFAULT_KEEPALIVE
    relays = Relays(topology, set(seg.key for seg in unreachable), eligible)
    for i, a in enumerate(unreachable):
        for b in unreachable[i + 1:]:
            if a.group == b.group or any(r.group != a.group and r.group != b.group for r in eligible):
                continue
            between = "neither %s nor %s can be reached (every node of each is behind_nat or has no endpoint)" % (
                a.key, b.key)
            if any(r.group != a.group and r.group != b.group for r in usable):
                raise TopologyError(
                    "%s, and %s names no location with a reachable leader to relay between them: add one (%s)"
                    % (between, ", ".join(names), ", ".join(sorted(set(
                        r.location for r in usable if r.group != a.group and r.group != b.group)))),
                    Subject("options"), "relays")
            raise TopologyError(
                "%s, and no other segment has a reachable leader to relay between them: give a node of one of"
                " them an endpoint the others can reach (without behind_nat)" % between,
                segment_subject(b), _unreachable_field(b))
    return relays
