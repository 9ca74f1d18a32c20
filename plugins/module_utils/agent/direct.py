# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Direct paths between two leaders behind NAT, in agent mode (docs/DESIGN.md, "Direct paths").

The engine (``engine/relays.py``) decides from the path states both ends publish: a pair is
*probing* while both publish one and a relay has seen a mapping of each (a probe entry each way:
the mapping, no allowed IPs), *direct* from 5 s after both publish ``direct[V] = since``, and back
on the relay while either publishes ``held[V]``. This module is what an agent sees to publish:

* ``since``: the first fresh handshake of the probe entry (a handshake is mutual, so both ends see
  it within a second);
* re-arm: a probe without a fresh handshake gets a keepalive every ``REARM`` s (WireGuard's own
  retries stop after 90 s), by the keepalive toggle (``WireGuardBackend.rearm``): no converge;
* fall back: a direct pair's far WireGuard IP is pinged every second through the direct entry;
  silent ``DEAD_AFTER`` s (or ``FIRST_ANSWER`` s from the switch): ``held[V]`` for ``HOLD_DOWN`` s,
  doubled per failure up to ``HOLD_MAX``, the count reset after ``RESET_AFTER`` s up;
* mapping: the endpoints WireGuard learned of roaming peers (Kilo's ``discovered-endpoints``) are
  read every second; a change wakes the reconcile, so a relay publishes a new mapping in seconds.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.kilo.mesh.plugins.module_utils.agent import health
from ansible_collections.kilo.mesh.plugins.module_utils import nodes as node_table

INTERVAL = 1.0  # one round: pings, handshakes, learned endpoints
REARM = 25.0
FRESH = 180.0  # WireGuard rejects a session this old: a handshake within it is fresh
DEAD_AFTER = 3.0
FIRST_ANSWER = 5.0
HOLD_DOWN = 60.0
HOLD_MAX = 900.0
RESET_AFTER = 1800.0


def hold_for(failures):
    """Hold-down after the ``failures``-th failure in a row (1 = the first)."""
    return min(HOLD_MAX, HOLD_DOWN * 2 ** max(0, failures - 1))


class DirectPaths(object):
    """One agent's view of its direct paths; ``update`` after each plan, ``tick`` every round.
    Not thread-safe on its own: the agent holds its probe lock around each call."""

    def __init__(self, prober=None):
        self.prober = prober or health.Prober(
            dead_after=DEAD_AFTER, hold_down=0, ident=2, first_answer=FIRST_ANSWER
        )
        self.direct = {}  # segment -> since (published)
        self.held = {}  # segment -> until (published)
        self.failures = {}  # segment -> failures in a row
        self.up_since = {}  # segment -> when its direct path began (this agent's plan)
        self.probes = {}  # public key -> [segment, keepalive, last armed]
        self.roaming = set()  # public keys of the peers the plan marks roaming
        self.learned = None  # their learned endpoints, as last read

    def update(self, computed, plan, own, now):
        """Take the engine's answer ``computed`` and our plan: probe entries, direct pairs (pinged),
        pairs back on the relay (their ``since`` goes: a new attempt starts over)."""
        segments = (computed or {}).get("segments") or []
        mine = [
            s["key"] for s in segments if s.get("leader") == own and s.get("reachable") is False
        ]
        states = {}
        if mine:
            for path in (computed or {}).get("paths") or []:
                if mine[0] in (path["a"], path["b"]):
                    states[path["b"] if path["a"] == mine[0] else path["a"]] = path["path"]
        by_key = dict((s["key"], s) for s in segments)
        for seg in [v for v in self.direct if states.get(v) not in ("probing", "direct")]:
            del self.direct[seg]
        targets = {}
        for seg, state in states.items():
            if (
                state == "direct"
                and by_key.get(seg, {}).get("wireguard_ip")
                and by_key[seg].get("reachable") is False
            ):
                targets[seg] = node_table.first_of(by_key[seg]["wireguard_ip"])
                self.up_since.setdefault(seg, now)
            else:
                self.up_since.pop(seg, None)
        self.prober.set_targets(targets, now)
        probes = {}
        for peer in (plan or {}).get("peers") or []:
            if peer.get("probe"):
                old = self.probes.get(peer["public_key"])
                probes[peer["public_key"]] = [
                    peer["name"],
                    peer.get("persistent_keepalive") or 0,
                    old[2] if old and old[0] == peer["name"] else now,
                ]
        self.probes = probes
        self.roaming = set(
            p["public_key"] for p in (plan or {}).get("peers") or [] if p.get("roaming")
        )

    def tick(self, now, current, answered):
        """One round: ``current`` our interface's reading (``WireGuardBackend.current``),
        ``answered`` the direct pairs whose far end answered a ping. Returns (whether what we
        publish or know changed: reconcile now, {public key: keepalive} of the probes to re-arm)."""
        changed = False
        peers = dict((p["public_key"], p) for p in (current or {}).get("peers") or [])
        # a probe's first fresh handshake: ``since``
        rearm = {}
        for key, probe in self.probes.items():
            seg, keepalive, armed = probe
            handshake = (peers.get(key) or {}).get("latest_handshake") or 0
            if handshake and now - handshake < FRESH:
                if seg not in self.direct and not self.held_now(seg, now):
                    self.direct[seg] = int(handshake)
                    changed = True
            elif now - armed >= REARM and keepalive:
                rearm[key] = keepalive
                probe[2] = now
        # fall back: a direct pair silent too long
        self.prober.record(answered, now)
        for seg in self.prober.dead(now):
            if seg in self.held:
                continue
            up = self.up_since.get(seg)
            if up is not None and now - up >= RESET_AFTER:
                self.failures[seg] = 0
            self.failures[seg] = self.failures.get(seg, 0) + 1
            self.held[seg] = int(math.ceil(now + hold_for(self.failures[seg])))
            self.direct.pop(seg, None)
            self.prober.set_targets(
                dict((k, v) for k, v in self.prober.targets.items() if k != seg), now
            )
            self.prober.last_dead.pop(seg, None)
            changed = True
        for seg in [s for s, until in self.held.items() if until <= now]:
            del self.held[seg]
            changed = True
        # the relays' side: a roaming peer's learned endpoint moved (a NAT's new mapping)
        learned = dict(
            (k, p.get("endpoint"))
            for k, p in peers.items()
            if k in self.roaming and p.get("endpoint") and p.get("latest_handshake")
        )
        if self.learned is not None and learned != self.learned:
            changed = True
        self.learned = learned
        return changed, rearm

    def held_now(self, seg, now):
        return self.held.get(seg, 0) > now

    def state(self):
        """The ``direct`` and ``held`` parts of our path state."""
        return dict(self.direct), dict(self.held)
