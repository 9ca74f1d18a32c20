# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Leader health between agents, beyond Kilo (squat/kilo#489): a leader that is Ready and checks
in, but whose tunnels every other location sees dead, loses leadership to a healthy member of its
location. Kilo never fails over in that case; its location is cut off until someone notices.

Each leader probes the other segments' leaders through the tunnel (ICMP echo to their WireGuard
address, which only a working tunnel carries; or, with a handshake timeout set, reads the age of
its latest WireGuard handshake with each: ``HandshakeWatch``) and publishes on its own Node the leaders it has
seen dead (annotation ``UNREACHABLE``, a sorted comma-separated list of node names). Every agent
then decides from what the API holds alone, so all reach the same choice:

* the judges are the leaders of the mesh computed with every node healthy;
* a leader is deposed when every other judge names it, and at least two do (with two locations,
  each end sees the other dead and nobody can tell which end is broken);
* nobody is deposed when every judge is named (an idle or cut-off mesh, not one broken leader);
* a deposition applies once it has held ``SETTLE`` seconds (reports arrive one at a time).

A deposed leader's own agent marks its Node (annotation ``DEPOSED``, the time it was deposed), and
every agent keeps a marked node out of the lead for ``HOLD_DOWN`` seconds from the mark: once
deposed, a leader is no longer probed (it leads nothing), and without the mark it would be chosen
again at once and flap. After the hold-down it leads again, and is deposed again only if it is
still broken. The mark lives on the deposed node, not in the judges' reports: judges change
(a deposed leader's stand-in judges the next failure) and a report from a broken end is worthless,
so a judge names only what it saw dead in the last ``NAME_HOLD`` seconds (time enough for the mark
to land), and a node that leads nothing names nobody.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import math
import os
import select
import socket
import struct
import time

from ansible_collections.kilo.mesh.plugins.module_utils.common import text_list
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node

# our own annotations, never Kilo's (kube_node names every annotation of a Node)
UNREACHABLE = kube_node.UNREACHABLE_LEADERS
DEPOSED = kube_node.DEPOSED_AT

PROBE_INTERVAL = 5.0
PROBE_TIMEOUT = 1.0
DEAD_AFTER = 20.0  # no answer for this long: dead
HOLD_DOWN = 600.0  # a deposed leader stays out of the lead this long from its mark
NAME_HOLD = 60.0  # a judge keeps naming a leader this long after it last saw it dead
SETTLE = 2 * PROBE_INTERVAL  # a deposition applies once it has held this long (Settle)
# Relay failover (engine/relays.py): a leader behind NAT probes its relays faster, and publishes a
# relay it saw dead as down until RELAY_DOWN seconds after it last saw it so (path state ``down``)
RELAY_PROBE_INTERVAL = 1.0
RELAY_DEAD_AFTER = 3.0
RELAY_FIRST_ANSWER = 20.0  # a relay that never answered yet (tunnel coming up) is dead after this
RELAY_DOWN = 60.0


def parse_names(value):
    """The node names of an UNREACHABLE annotation (anything else reads as none)."""
    return set(text_list(value)) if isinstance(value, str) else set()


def format_names(names):
    return ",".join(sorted(names))


def deposed(leaders, reports):
    """The leaders to depose. ``leaders``: names of the leaders of the mesh computed with every
    node healthy (the judges); ``reports``: {node name: set of names it publishes as dead}."""
    judges = set(leaders)
    named = dict(
        (leader, set(j for j in judges - {leader} if leader in reports.get(j, ())))
        for leader in judges
    )
    out = set(leader for leader, by in named.items() if len(by) >= 2 and by == judges - {leader})
    if out and out == judges:
        return set()
    return out


def held(marks, now):
    """The nodes whose deposed mark ({name: annotation value}) is younger than HOLD_DOWN."""
    out = set()
    for name, value in marks.items():
        try:
            # (a mark ahead of our clock counts too: the deposed node's clock may run ahead)
            if abs(now - int(value)) < HOLD_DOWN:
                out.add(name)
        except (TypeError, ValueError):
            continue
    return out


def mark(own, deposed, have, now):
    """The DEPOSED annotation our node should carry: the mark it has while that holds, a new one
    when it is deposed now, else none (None removes it)."""
    if own in held({own: have}, now):
        return have
    return str(int(now)) if own in deposed else None


class Settle(object):
    """Deposition once it has held ``after`` seconds: the reports reach the API one by one, and when
    several tunnels die at once (a cut-off mesh, an idle one) the first reports can name one leader
    by every other judge for the moment before its own report, naming them all, arrives. Without
    the wait that moment deposes it and elects it again a second later. Every agent sees the same
    reports within the watch's latency, so all still decide alike, ``after`` seconds later."""

    def __init__(self, after=SETTLE):
        self.after = after
        self.since = {}  # name -> when this agent first saw it deposable

    def __call__(self, names, now):
        self.since = dict((n, self.since.get(n, now)) for n in names)
        return set(n for n, t in self.since.items() if now - t >= self.after)

    def due(self, now):
        """When the next deposition still pending at ``now`` settles (a reconcile then applies
        it), or None."""
        pending = [t + self.after for t in self.since.values() if t + self.after > now]
        return min(pending) + 0.1 if pending else None


class Prober(object):
    """What this leader sees of the other leaders: ``dead(now)`` names those that did not answer
    for ``dead_after`` seconds while probed, and keeps naming them ``hold_down`` seconds after."""

    def __init__(self, dead_after=DEAD_AFTER, hold_down=NAME_HOLD, ident=0, first_answer=None):
        self.dead_after = dead_after
        # a target that has not answered since probing began: dead only after this (its tunnel
        # may still be coming up: a handshake, the far end's converge)
        self.first_answer = dead_after if first_answer is None else first_answer
        self.hold_down = hold_down
        self.targets = {}  # name -> address
        self.since = {}  # name -> when probing it began
        self.last_ok = {}  # name -> last answer
        self.last_dead = {}  # name -> last time it was seen dead
        # ``ident``: another prober of the same process (relays, leaders) tells its answers apart
        self._ident = (os.getpid() + ident) & 0xFFFF
        self._seq = 0

    def set_targets(self, targets, now):
        """``targets``: {leader name: WireGuard address} to probe from now on. None (this node
        leads nothing, so judges nobody) also forgets whom it saw dead: a deposed leader saw
        every other leader dead from its broken end, and those names, held down, would later
        stand against healthy leaders and stop a second broken one from being deposed."""
        if not targets:
            self.last_dead.clear()
        for name in targets:
            if name not in self.targets or self.targets[name] != targets[name]:
                self.since[name] = now
                self.last_ok.pop(name, None)
        for name in set(self.targets) - set(targets):
            self.since.pop(name, None)
            self.last_ok.pop(name, None)
        self.targets = dict(targets)

    def record(self, answered, now):
        """``answered``: the names that answered now, or {name: when it last answered}."""
        times = answered if isinstance(answered, dict) else dict.fromkeys(answered, now)
        for name, when in times.items():
            self.last_ok[name] = max(when, self.last_ok.get(name, 0))
        for name in self.targets:
            ok = self.last_ok.get(name)
            if (
                (now - self.since[name] > self.first_answer)
                if ok is None
                else (now - max(ok, self.since[name]) > self.dead_after)
            ):
                self.last_dead[name] = now

    def dead(self, now):
        for name in [n for n, t in self.last_dead.items() if now - t > self.hold_down]:
            del self.last_dead[name]
        return set(self.last_dead)

    def down(self, now):
        """{name: until}: those ``dead`` names, each until ``hold_down`` after it was last seen dead."""
        return dict(
            (name, int(math.ceil(self.last_dead[name] + self.hold_down))) for name in self.dead(now)
        )

    def probe(self):
        """One round of ICMP echoes to every target; returns the names that answered."""
        by_family = {}
        for name, address in self.targets.items():
            by_family.setdefault(ipaddress.ip_address(address).version, {})[address] = name
        answered = set()
        for version, names in by_family.items():
            answered |= self._probe_family(version, names)
        return answered

    def _probe_family(self, version, names):
        if version == 4:
            sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            request, reply = 8, 0
        else:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
            request, reply = 128, 129
        answered = set()
        try:
            self._seq = (self._seq + 1) & 0xFFFF
            for address in names:
                sock.sendto(_echo(request, self._ident, self._seq), (address, 0))
            deadline = time.monotonic() + PROBE_TIMEOUT
            while len(answered) < len(names):
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([sock], [], [], left)[0]:
                    break
                data, source = sock.recvfrom(2048)
                if version == 4:
                    data = data[(data[0] & 0x0F) * 4 :]  # raw IPv4 sockets hand over the IP header
                if len(data) >= 8:
                    kind, _code, _sum, ident, seq = struct.unpack("!BBHHH", data[:8])
                    if (
                        kind == reply
                        and ident == self._ident
                        and seq == self._seq
                        and source[0] in names
                    ):
                        answered.add(names[source[0]])
        finally:
            sock.close()
        return answered


class HandshakeWatch(Prober):
    """The same judge by WireGuard handshake ages alone, for meshes where probes cannot pass (ICMP
    filtered) or are not wanted: a leader whose latest handshake with us is older than ``timeout``
    seconds is dead. A live WireGuard session handshakes again every 2 minutes while traffic flows
    (persistent keepalive is traffic), so a timeout of 180 s or more needs keepalive set on the
    leaders and names a dead tunnel within about ``timeout`` + one read.

    Targets are {leader name: its public key}; ``probe`` reads our interface instead of sending."""

    def __init__(self, interface, timeout, hold_down=NAME_HOLD, read=None):
        super(HandshakeWatch, self).__init__(dead_after=timeout, hold_down=hold_down)
        self.interface = interface
        self._read = read or _handshake_times

    def probe(self):
        """{leader name: epoch of its latest handshake with us} (leaders never met are left out)."""
        times = self._read(self.interface)
        return dict((name, times[key]) for name, key in self.targets.items() if times.get(key))


def _handshake_times(interface):
    """{public key: epoch of the latest handshake} of our WireGuard interface."""
    from ansible_collections.kilo.mesh.plugins.module_utils.host import report

    current = report.wireguard_reading(interface)[0]
    return dict(
        (p["public_key"], p["latest_handshake"])
        for p in current.get("peers", [])
        if p.get("latest_handshake")
    )


def _echo(kind, ident, seq):
    header = struct.pack("!BBHHH", kind, 0, 0, ident, seq)
    payload = b"kilo.mesh probe"
    if kind == 128:
        return header + payload  # the kernel fills in the ICMPv6 checksum
    data = header + payload
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data[: len(data) // 2 * 2]))
    if len(data) % 2:
        total += data[-1] << 8
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return struct.pack("!BBHHH", kind, 0, ~total & 0xFFFF, ident, seq) + payload
