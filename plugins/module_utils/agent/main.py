# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""kilo-mesh-agent: keep this node in the mesh between Ansible runs, as Kilo's ``kg`` does.

Watches Nodes and Peers (``informer.Informer``), and on every change, every resync period, and
when another node's ``last-seen`` is about to go stale, computes this node's plan with the
topology engine (``agent.mesh``) and converges the host by difference with the same backends the
``kilo.mesh.converge`` module uses. It writes its own Node's annotations as
``kilo.mesh.annotate`` does and refreshes ``last-seen`` every check-in, so Kilo's ``kgctl`` and
Kilo's agents on other nodes see this node as live.

When the API server is away the host keeps its last configuration: nothing is removed because
a list failed. A failed converge is counted, logged and retried at the next wake-up.

Run: ``python3 kilo-mesh-agent.pyz --config /etc/kilo-mesh/agent.json`` (the role kilo.mesh.agent
writes the file and the zip application). The configuration is JSON:
``node`` (this Node's name), ``kubernetes`` (client options: kubeconfig, host, ...),
``options`` (the engine's options), ``settings`` (the host backends' options), ``key`` (key and
discovery options), ``resync_period`` (30), ``checkin_period`` (30), ``liveness`` (seconds; 0
off, default twice the resync period), ``listen`` (":1107"), ``topology_label``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import functools
import hashlib
import json
import os
import signal
import sys
import threading
import time

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.plan import AGENT_PLAN_FILE

DEFAULTS = {
    "resync_period": 30,
    "checkin_period": 30,
    "listen": ":1107",
    "topology_label": "topology.kubernetes.io/region",
    "debounce": 0.2,
    "pod_cidr_source": "node",
    # this node's plan as last computed (public data: preshared keys are split off first), for
    # operators and tests: `cat` it to see what the agent wants the host to be
    "plan_file": AGENT_PLAN_FILE,
}
# After a failed reconcile, try again this soon (then at every wake-up).
RETRY = 5.0
# A check-in (our Node's PATCH) must come back on the watch of Nodes within this many seconds
# (it takes milliseconds), else the watch is taken for silently dead and reopened: the copy is
# then stale for at most a check-in period plus this (the read timeout alone: 330 s).
ECHO_TIMEOUT = 10.0
# A relay named down keeps its published end until it is this many seconds later (path_state).
DOWN_STEP = 15


def log(message):
    sys.stderr.write("%s kilo-mesh-agent: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), message))
    sys.stderr.flush()


def load_config(path):
    with open(path) as f:
        config = json.load(f)
    for key, value in DEFAULTS.items():
        config.setdefault(key, value)
    if not config.get("node"):
        raise KiloError("missing", "agent configuration %s" % path, "node")
    config.setdefault("liveness", 2 * int(config["resync_period"]))
    config.setdefault("kubernetes", {})
    # every option the config leaves out takes the table's default, as in a push run
    from ansible_collections.kilo.mesh.plugins.module_utils.options import defaults

    for part, scope in (("options", "mesh"), ("settings", "host"), ("key", "key")):
        filled = defaults(scope)
        filled.update((k, v) for k, v in (config.get(part) or {}).items() if v is not None)
        config[part] = filled
    # the key step and the backends name the same interface
    config["key"]["interface"] = config["settings"]["interface"]
    return config


def _digest(*values):
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


class Agent(object):
    """The reconcile loop of one node."""

    def __init__(self, config, client, metrics, clock=time.time):
        from kubernetes import client as k8s  # the host's python3-kubernetes
        from ansible_collections.kilo.mesh.plugins.module_utils.agent.informer import Informer

        self.config = config
        self.name = config["node"]
        self.client = client
        self.metrics = metrics
        self.clock = clock
        self.wakeup = threading.Event()
        self.stop_event = threading.Event()
        core, custom = k8s.CoreV1Api(client), k8s.CustomObjectsApi(client)
        # by kind, so no reader depends on an order (the IPAM source's kind joins them below)
        self.informers = {}
        self.informers["nodes"] = Informer(
            "nodes",
            core.list_node,
            self.changed,
            log,
            on_error=self.api_error,
            relevant=self.node_changed,
        )
        self.informers["peers"] = Informer(
            "peers",
            functools.partial(
                custom.list_cluster_custom_object, "kilo.squat.ai", "v1alpha1", "peers"
            ),
            self.changed,
            log,
            on_error=self.api_error,
        )
        from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node

        # beyond Kilo: the objects of the mesh's IPAM source, watched as Nodes are, so a
        # block that moves reaches the plan on the next event
        self.ipam = {}
        source = config.get("pod_cidr_source")
        if source in kube_node.IPAM_KINDS:
            self.ipam[source] = Informer(
                kube_node.IPAM_KINDS[source][2],
                functools.partial(custom.list_cluster_custom_object, *kube_node.IPAM_KINDS[source]),
                self.changed,
                log,
                on_error=self.api_error,
            )
            self.informers[source] = self.ipam[source]
        self.applied = None  # digest of the plan last converged
        self.next_checkin = 0.0  # when last-seen is written again (Kilo's agent: every 30 s)
        self.skipped = {}
        self.next_expiry = None
        self.retry_at = None
        self._kept = None  # the plan file's text as last written
        self._noted = None  # the last message of note()
        self._peer_names = {}  # public key -> the peer's name in the last plan (metrics labels)
        # beyond Kilo (leader_health): probe the other leaders through the tunnels
        self.prober = None
        self._probe_lock = threading.Lock()
        self._probe_field = "wireguard_ip"
        self._deposed = set()  # the leaders deposed in the last reconcile (our own mark follows)
        self._rotated = (
            False  # our interface runs another key than our key file: announce, then switch
        )
        # beyond Kilo, relays (engine/relays.py): when this node started relaying (its agent's
        # start, again at each reconnect of its watch), and the watch's start it counts from
        self.relay_since = None
        self._relay_watch = None
        self._in_place = False  # the boot restore found the host as its last plan left it
        self._down = {}  # relay -> until, as published (path_state)
        self.next_change = None  # when the engine's timed decisions flip next (a reconcile then)
        # relay failover: a leader behind NAT probes its relays every second (agent/health.py)
        from ansible_collections.kilo.mesh.plugins.module_utils.agent import health as _health

        self.relay_prober = _health.Prober(
            dead_after=_health.RELAY_DEAD_AFTER,
            hold_down=_health.RELAY_DOWN,
            ident=1,
            first_answer=_health.RELAY_FIRST_ANSWER,
        )
        # direct paths between leaders behind NAT (agent/direct.py): probes' handshakes, fallback
        # pings, the learned endpoints of roaming peers (a relay's mappings)
        from ansible_collections.kilo.mesh.plugins.module_utils.agent.direct import DirectPaths

        self.direct = DirectPaths()
        if config.get("leader_health"):
            from ansible_collections.kilo.mesh.plugins.module_utils.agent import health

            self.settle = health.Settle()
            if config.get("leader_handshake_timeout"):
                # handshake ages alone: no probe leaves the host
                self.prober = health.HandshakeWatch(
                    config["key"]["interface"],
                    config["leader_handshake_timeout"],
                    hold_down=self.name_hold(config),
                )
                self._probe_field = "public_key"
            else:
                self.prober = health.Prober(hold_down=self.name_hold(config))

    @staticmethod
    def name_hold(config):
        """How long a judge names a leader after it last saw it dead: until the deposed node's own
        mark lands, and at least as long as a node dark to the API still counts as live (it
        cannot write its mark; without the names it would be elected again and again)."""
        from ansible_collections.kilo.mesh.plugins.module_utils.agent import health

        return max(health.NAME_HOLD, float(config.get("liveness") or 0))

    # -- events ----------------------------------------------------------------------------------
    def changed(self, kind):
        self.wakeup.set()

    def node_changed(self, old, new):
        """Whether a changed Node needs a reconcile: not when a node in the mesh only checked in
        (last-seen; next_expiry wakes us before it goes stale). Among 1,000 Nodes that is ~33
        events a second, each a full reconcile before (bench/bench_agent.py)."""
        from ansible_collections.kilo.mesh.plugins.module_utils.agent.informer import (
            only_checked_in,
        )
        from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node

        name = (new.get("metadata") or {}).get("name")
        return name in self.skipped or not only_checked_in(old, new, (kube_node.LAST_SEEN,))

    def api_error(self, kind, exc):
        self.metrics.errors.inc()

    def stop(self, *_args):
        self.stop_event.set()
        self.wakeup.set()

    # -- the loop --------------------------------------------------------------------------------
    def restore(self):
        """The host as the last converge left it (``host/boot.py``), before the API server is asked
        anything: after a reboot the node is back in the mesh while the API server is away."""
        from ansible_collections.kilo.mesh.plugins.module_utils.host import boot

        if not (self.config.get("settings") or {}).get("boot_restore", True) or not os.path.exists(
            boot.PLAN_PATH
        ):
            return False
        try:
            result = boot.restore(boot.PLAN_PATH)
        except Exception as e:  # pylint: disable=broad-exception-caught
            # whatever breaks here, the agent goes on to the API server, which can mend it
            log("cannot restore the last plan: %s: %s" % (type(e).__name__, e))
            return False
        changes = result.get("changes") or {}
        self._in_place = not changes
        log(
            "restored the last plan (%s)"
            % (
                "; ".join("%s: %d" % (k, len(v)) for k, v in sorted(changes.items()))
                or "already in place"
            )
        )
        return True

    def run(self):
        from ansible_collections.kilo.mesh.plugins.module_utils.agent.informer import wait_synced

        self.restore()
        for informer in self.informers.values():
            informer.start()
        if self.prober:
            thread = threading.Thread(target=self.probe_loop, name="probe")
            thread.daemon = True
            thread.start()
        from ansible_collections.kilo.mesh.plugins.module_utils.agent.health import (
            RELAY_PROBE_INTERVAL,
        )

        thread = threading.Thread(
            target=functools.partial(
                self.probe_loop, "relay_prober", RELAY_PROBE_INTERVAL, "relays"
            ),
            name="relay-probe",
        )
        thread.daemon = True
        thread.start()
        thread = threading.Thread(target=self.direct_loop, name="direct")
        thread.daemon = True
        thread.start()
        period = float(self.config["resync_period"])
        deadline = self.clock() + period
        # the first lists, in short waits so that a stop request is seen at once
        while not self.stop_event.is_set() and not wait_synced(self.informers.values(), 0.5):
            if deadline and self.clock() > deadline:
                log(
                    "the API server did not answer within %ds; keeping the host as it is until it does"
                    % period
                )
                deadline = None
        next_resync = self.clock()
        # After a pass that failed or could not run, a deadline already past (a check-in that
        # was due, a retry) would make the wait below return at once: wait RETRY s at least
        # (an event still wakes the loop at once).
        floor = 0.0
        while not self.stop_event.is_set():
            now = self.clock()
            settles = self.settle.due(now) if self.prober else None
            timed = (self.next_expiry, self.retry_at, settles, self.next_change)
            deadlines = [next_resync, self.next_checkin] + [t for t in timed if t]
            echo = self.informers["nodes"].echo_due()
            if echo is not None:
                deadlines.append(echo + ECHO_TIMEOUT)
            timeout = max(floor, min(deadlines) - now)
            if self.wakeup.wait(timeout):
                # a burst of events (a Node and its Peers, a rolling update) is one reconcile
                self.stop_event.wait(float(self.config["debounce"]))
            self.wakeup.clear()
            if self.stop_event.is_set():
                break
            now = self.clock()
            resync = now >= next_resync
            if resync:
                next_resync = now + period
            if not all(i.synced.is_set() for i in self.informers.values()):
                continue
            self.check_echo(now)
            if not self.informers["nodes"].connected:
                # The API server is away: keep the host as the last reconcile left it (no node
                # can be judged, and nothing new can be learned) until the watch is back.
                self.metrics.health = (
                    False,
                    "API server unreachable: %s" % self.informers["nodes"].error,
                )
                floor = RETRY
                continue
            floor = 0.0 if self.reconcile(force=resync) else RETRY
        for informer in self.informers.values():
            informer.stop()

    def check_echo(self, now):
        """Reopen the watch of Nodes when our last check-in has not come back on it in time."""
        watching = self.informers["nodes"]
        sent = watching.echo_due()
        if sent is not None and now - sent > ECHO_TIMEOUT:
            watching.reopen(
                "our check-in of %.0f s ago never came back on the watch (silently dead)"
                % (now - sent)
            )

    def reconcile(self, force=False):
        """One pass: compute this node's plan, converge when it differs (or on resync), write
        back. Returns True when it succeeded."""
        from ansible_collections.kilo.mesh.plugins.module_utils.agent import health, mesh, rotation
        from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import converge
        from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node

        self.metrics.reconciles.inc()
        now = self.clock()
        self.retry_at = None
        try:
            node_objects = self.informers["nodes"].snapshot()
            # other nodes' announced keys, applied a step after their switch (agent/rotation.py);
            # our own rotation waits while another is under way
            node_objects, switch_at = rotation.pending(node_objects, self.name, now)
            facts = self.own_facts(hold_rotation=switch_at is not None)
            if self._rotated:
                # ours: announced first, switched at the moment, then Kilo's key annotation (write_back)
                switch_at = self.clock() + rotation.LEAD
                self.check_in(
                    {rotation.NEXT_KEY: rotation.announcement(facts["public_key"], switch_at)}
                )
            peer_objects = self.informers["peers"].snapshot()
            options = self.config["options"]
            watching = self.informers["nodes"]
            # a source whose type the API server does not serve (404) was not read: its nodes are left
            # out with that reason (source_pod_cidrs), never routed without their ranges
            ipam, ipam_errors = {}, {}
            for source, informer in self.ipam.items():
                if informer.installed:
                    ipam[source] = kube_node.IPAM_READERS[source](
                        informer.snapshot().values(), ipam_errors
                    )
            from ansible_collections.kilo.mesh.plugins.module_utils.nodes import mesh_families

            if watching.connected_since != self._relay_watch:
                # a relay counts from its agent's start, and again from a reconnect of its watch
                # (kube_node.RELAY): both ends of a pair then take it back from the same instant
                self.relay_since = self.relay_start(node_objects.get(self.name), now)
                self._relay_watch = watching.connected_since
            nodes, skipped = mesh.mesh_nodes(
                node_objects,
                self.name,
                facts,
                options["port"],
                self.config["topology_label"],
                now,
                self.config["liveness"],
                watching.connected_since if watching.connected else None,
                watching.lost_at,
                ipam=ipam,
                pod_source=self.config.get("pod_cidr_source"),
                dual=bool(mesh_families(options.get("subnet"))),
                own_marks=self.relay_marks(now),
            )
            peers, peer_errors = kube_node.peers_of(peer_objects.values())
            skipped.update(("peer " + name, str(e)) for name, e in peer_errors)
            for name, reason in ipam_errors.items():
                # a node one of whose IPAM objects is malformed is left out, as a malformed Node is
                # (an object naming no node is only reported)
                skipped[name] = "its pod ranges: %s" % reason
            nodes = [n for n in nodes if n["name"] not in ipam_errors]
            self.next_expiry = (
                self.expiry(node_objects, now, watching.connected_since, watching.lost_at)
                if watching.connected
                else None
            )
            reports = (
                mesh.reports_of(node_objects, [n["name"] for n in nodes]) if self.prober else None
            )
            settle = functools.partial(self.settle, now=now) if self.prober else None
            held = (
                health.held(mesh.marks_of(node_objects, [n["name"] for n in nodes]), now)
                if self.prober
                else ()
            )
            plan, preshared, computed, deposed = mesh.own_plan(
                nodes, peers, self.name, options, reports, skipped, settle, held, now=now
            )
            # a relay counted, a pair going direct, a down relay back: the engine says when
            self.next_change = (computed or {}).get("next_change")
            with self._probe_lock:
                self.relay_prober.set_targets(mesh.relay_targets(computed, self.name), self.clock())
                self.direct.update(computed, plan, self.name, self.clock())
            self._deposed = deposed
            self.report_skipped(skipped)
            nodes = [n for n in nodes if n["name"] not in skipped]
            peers = [p for p in peers if "peer " + str(p.get("name")) not in skipped]
            if self.prober:
                self.note(
                    "leaders deposed (every other leader sees them dead): %s"
                    % (", ".join(sorted(deposed)) or "none")
                )
                self.prober_targets(mesh.probe_targets(computed, self.name, self._probe_field))
            if plan is None:
                self.metrics.health = (
                    False,
                    "node %s is not in the mesh: %s"
                    % (self.name, skipped.get(self.name, "no Node of that name")),
                )
                self.note(self.metrics.health[1])
                return False
            self.keep_plan(plan)
            self._peer_names = dict(
                (p["public_key"], p.get("name") or "") for p in plan.get("peers", [])
            )
            # the own key is in the digest: a key the agent just rotated is converged in this pass,
            # before write_back tells the other nodes (they must switch after this host does)
            digest = _digest(plan, preshared, self.config["settings"], facts.get("public_key"))
            if force or digest != self.applied:
                result = converge(
                    plan, self.config["settings"], preshared_keys=preshared, switch_at=switch_at
                )
                if result["changed"]:
                    log("converged: %s" % json.dumps(result["changes"], sort_keys=True))
                self.applied = digest
            self.metrics.paths.applied(plan, self.config["settings"])
            self.write_back(nodes, plan, now)
            self.metrics.nodes.set(len(nodes))
            self.metrics.peers.set(len(peers))
            self.metrics.leader.set(1 if plan.get("leader") else 0)
            self.metrics.last_reconcile.set(now)
            self.metrics.health = (True, "ok")
            return True
        except Exception as e:  # pylint: disable=broad-exception-caught
            # never exit for a failed pass: the host keeps what it has, the next pass retries
            self.metrics.errors.inc()
            self.metrics.health = (False, "last reconcile failed: %s" % e)
            log("reconcile failed: %s: %s; retrying in %ds" % (type(e).__name__, e, RETRY))
            self.applied = None
            self.retry_at = self.clock() + RETRY
            return False

    def relay_start(self, node, now):
        """When this node relays from (``kube_node.RELAY``): ``now``, but for an agent restarted on a
        host that kept running (the boot restore found its plan in place), the start its Node
        already carries: that relay never stopped, and a new start would move its pairs to another
        relay for the 5 s it takes to count again, and back."""
        from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node

        if self._relay_watch is None and self._in_place:
            try:
                return int(
                    ((node or {}).get("metadata") or {}).get("annotations", {})[kube_node.RELAY]
                )
            except (KeyError, TypeError, ValueError):
                pass
        return int(now)

    def relay_marks(self, now):
        """Our own node's relays' timed inputs (``kube_node.relay_marks``): this agent's live state."""
        return {"relay_since": self.relay_since, "path_state": self.path_state(now), "kg": False}

    def path_state(self, now):
        """What this node sees of its paths behind NAT ({"down", "direct", "held"}): the relays its
        probes saw dead (``down``, until 60 s after they last were), its direct paths' handshakes and
        hold-downs (``direct``, ``held``: agent/direct.py)."""
        with self._probe_lock:
            down = self.relay_prober.down(now)
        # a dark relay is seen dead again every round: its ``until`` moves on only in steps of
        # DOWN_STEP, or every agent would reconcile each second for our Node's new annotation
        published = self._down
        self._down = dict(
            (name, published[name] if until - published.get(name, 0) < DOWN_STEP else until)
            for name, until in down.items()
        )
        with self._probe_lock:
            direct, held = self.direct.state()
        return {"down": dict(self._down), "direct": direct, "held": held}

    def prober_targets(self, targets):
        with self._probe_lock:
            self.prober.set_targets(targets, self.clock())

    def probe_loop(self, attribute="prober", interval=None, what="leaders"):
        """Probe with ``self.<attribute>`` every ``interval`` (PROBE_INTERVAL: the other leaders;
        RELAY_PROBE_INTERVAL with ``relay_prober``: a leader behind NAT its relays); a change of
        who is dead wakes the loop (to publish it, and to leave a dead relay)."""
        from ansible_collections.kilo.mesh.plugins.module_utils.agent.health import PROBE_INTERVAL

        seen = set()
        while not self.stop_event.wait(interval or PROBE_INTERVAL):
            try:
                with self._probe_lock:
                    prober = getattr(self, attribute)
                answered = prober.probe() if prober.targets else set()
                with self._probe_lock:
                    prober.record(answered, self.clock())
                    dead = prober.dead(self.clock())
            except Exception as e:  # pylint: disable=broad-exception-caught
                self.metrics.errors.inc()
                self.note("probe of %s failed: %s: %s" % (what, type(e).__name__, e))
                continue
            if dead != seen:
                log(
                    "%s seen dead through the tunnels: %s"
                    % (what, ", ".join(sorted(dead)) or "none")
                )
                seen = dead
                self.wakeup.set()

    def direct_loop(self):
        """Every second (agent/direct.py): ping the direct pairs' far ends, read our interface (probe
        handshakes, learned endpoints), re-arm quiet probes; a change wakes the reconcile."""
        from ansible_collections.kilo.mesh.plugins.module_utils.agent import direct
        from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
        from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.backend import (
            WireGuardBackend,
        )

        # only the interface, as kilo.mesh.key reads it (agents made by unit tests have no key part)
        backend = WireGuardBackend(
            host_settings({"interface": (self.config.get("key") or {}).get("interface")})
        )
        while not self.stop_event.wait(direct.INTERVAL):
            try:
                with self._probe_lock:
                    prober = self.direct.prober
                    pinged = bool(prober.targets)
                answered = prober.probe() if pinged else set()
                current = backend.current()
                self.metrics.paths.current = current  # kilo_path's live peers (agent/metrics.py)
                with self._probe_lock:
                    changed, rearm = self.direct.tick(self.clock(), current, answered)
                    state = self.direct.state()
                if rearm:
                    backend.rearm(rearm)
            except Exception as e:  # pylint: disable=broad-exception-caught
                self.metrics.errors.inc()
                self.note("direct paths: %s: %s" % (type(e).__name__, e))
                continue
            if changed:
                log(
                    "direct paths: direct %s, held %s"
                    % (json.dumps(state[0], sort_keys=True), json.dumps(state[1], sort_keys=True))
                )
                self.wakeup.set()

    def keep_plan(self, plan):
        from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import write_atomic

        text = json.dumps(plan, sort_keys=True, indent=1) + "\n"
        if self.config.get("plan_file") and text != self._kept:
            write_atomic(self.config["plan_file"], text, 0o600, make_dirs=0o755)
            self._kept = text

    def own_facts(self, hold_rotation=False):
        """This host's public facts, as kilo.mesh.key reports them (its WireGuard reading feeds the
        per-peer metrics)."""
        from ansible_collections.kilo.mesh.plugins.module_utils.host import report
        from ansible_collections.kilo.mesh.plugins.module_utils.host.keys import ensure_key

        key_options = self.config["key"]
        # kilo_key_max_age: the agent rotates its own key; reconcile announces it (agent/rotation.py),
        # converges the interface to it at the announced moment, then writes the Node's key annotation
        from ansible_collections.kilo.mesh.plugins.module_utils.agent.rotation import spread

        max_age = 0 if hold_rotation else spread(key_options.get("key_max_age") or 0, self.name)
        key = ensure_key(key_options["key_path"], max_age=max_age)
        if key.get("rotated"):
            log(
                "rotated the WireGuard key (older than kilo_key_max_age): new public key %s"
                % key["public_key"]
            )
        ips, mtu, _host = report.addresses(key_options)
        try:
            current, discovered, _handshakes = report.wireguard_reading(key_options["interface"])
        except Exception as e:  # pylint: disable=broad-exception-caught
            # no interface yet (the first converge makes it), or a broken one: the plan decides
            current, discovered = None, {}
            self.note(
                "WireGuard reading of %s: %s: %s" % (key_options["interface"], type(e).__name__, e)
            )
        # the interface runs another key than the file: rotated now, or by a pass or a push run cut
        # short; announced before the switch either way
        self._rotated = report.switching_from(current, key["public_key"]) is not None
        self.metrics.wireguard.peers = [
            (
                self._peer_names.get(p["public_key"], ""),
                p["public_key"],
                p.get("latest_handshake") or 0,
                p.get("rx_bytes") or 0,
                p.get("tx_bytes") or 0,
            )
            for p in (current or {}).get("peers", [])
        ]
        # the public part of what kilo.mesh.key would report, in the same shape the push run uses
        from ansible_collections.kilo.mesh.plugins.module_utils.nodes import facts_from_result

        return facts_from_result(
            dict(
                public_key=key["public_key"],
                internal_ip=ips["internal_ip"],
                external_ip=ips["external_ip"],
                discovered_endpoints=discovered,
                mtu=mtu,
            )
        )

    def expiry(self, node_objects, now, watching_since, lost_at=None):
        """When the next live node's last-seen goes stale (a reconcile then drops it)."""
        window = self.config["liveness"]
        if not window:
            return None
        from ansible_collections.kilo.mesh.plugins.module_utils.agent.mesh import stale_at
        from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node

        times = []
        for name, obj in node_objects.items():
            if name == self.name:
                continue
            seen = (obj.get("metadata", {}).get("annotations") or {}).get(kube_node.LAST_SEEN)
            try:
                stale = stale_at(int(seen), window, watching_since, lost_at)
            except (TypeError, ValueError):
                continue
            if stale > now:
                times.append(stale)
        return min(times) + 0.5 if times else None

    def note(self, message):
        """Log ``message`` once while it stays the same (a reconcile runs every few seconds)."""
        if message != self._noted:
            log(message)
            self._noted = message

    def report_skipped(self, skipped):
        """Log each object left out once per reason, not at every pass."""
        for name, reason in sorted(skipped.items()):
            if self.skipped.get(name) != reason:
                log(
                    "left out %s: %s"
                    % (name if name.startswith("peer ") else "node " + name, reason)
                )
        for name in sorted(set(self.skipped) - set(skipped)):
            log("%s is back in the mesh" % (name if name.startswith("peer ") else "node " + name))
        self.skipped = dict(skipped)

    def write_back(self, nodes, plan, now):
        """Our Node's agent annotations; patched when they differ, and last-seen every check-in."""
        from ansible_collections.kilo.mesh.plugins.module_utils.agent import rotation
        from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node

        own = [n for n in nodes if n["name"] == self.name][0]
        node = self.informers["nodes"].snapshot().get(self.name) or {}
        have = node.get("metadata", {}).get("annotations") or {}
        wanted = kube_node.node_annotations(
            own, plan, self.config["options"]["granularity"], int(now), have
        )
        if self.prober:
            from ansible_collections.kilo.mesh.plugins.module_utils.agent.health import (
                UNREACHABLE,
                format_names,
            )

            with self._probe_lock:
                wanted[UNREACHABLE] = format_names(self.prober.dead(now)) or None
        from ansible_collections.kilo.mesh.plugins.module_utils.agent import health

        if self.prober:
            wanted[health.DEPOSED] = health.mark(
                self.name, self._deposed, have.get(health.DEPOSED), now
            )
        else:
            # leader health off: what an earlier configuration published goes (a None only
            # patches when the annotation is there)
            wanted[health.UNREACHABLE] = wanted[health.DEPOSED] = None
        wanted[rotation.NEXT_KEY] = (
            None  # a rotation this node announced is done: its key is written
        )
        # relays: a node behind NAT publishes its path state, any other may relay (engine/relays.py)
        behind = bool(own.get("behind_nat"))
        wanted[kube_node.PATH_STATE] = (
            kube_node.path_state_text(self.path_state(now)) if behind else None
        )
        wanted[kube_node.RELAY] = (
            None if behind or self.relay_since is None else str(self.relay_since)
        )
        changes, refreshed = kube_node.annotation_changes(wanted, have)
        # as Kilo's agent: written at once when anything but last-seen differs (newly learned
        # endpoints too, which are no change of the node), last-seen at every check-in
        if not (changes or set(refreshed) - set([kube_node.LAST_SEEN]) or now >= self.next_checkin):
            return
        self.check_in(wanted)
        self.next_checkin = now + float(self.config["checkin_period"])
        if changes:
            log("wrote annotations of node %s" % self.name)

    def check_in(self, annotations):
        """Patch our Node's annotations; the watch of Nodes must then echo the new version
        within ECHO_TIMEOUT (``check_echo``)."""
        from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client

        sent = self.clock()
        after = kube_client.merge_patch_node(
            self.client, self.name, {"metadata": {"annotations": annotations}}
        )
        version = ((after or {}).get("metadata") or {}).get("resourceVersion")
        if version:
            self.informers["nodes"].expect_echo(self.name, version, sent)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="kilo-mesh-agent", description=__doc__.split("\n\n", maxsplit=1)[0]
    )
    parser.add_argument("--config", default="/etc/kilo-mesh/agent.json")
    parser.add_argument(
        "--once", action="store_true", help="one reconcile, then exit (for tests and debugging)"
    )
    args = parser.parse_args(argv)
    # before anything imports the client: only the classes the agent uses get imported (Debian's
    # client imports every API and model class: a third of the agent's memory)
    from ansible_collections.kilo.mesh.plugins.module_utils.kube import lazy_client

    lazy_client.install()
    try:
        config = load_config(args.config)
        from ansible_collections.kilo.mesh.plugins.module_utils.agent.metrics import Metrics, serve
        from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client

        client = kube_client.api_client(config["kubernetes"])
        metrics = Metrics()
        agent = Agent(config, client, metrics)
    except (KiloError, OSError, ValueError) as e:
        log("cannot start: %s" % e)
        return 2
    if args.once:
        from ansible_collections.kilo.mesh.plugins.module_utils.agent.informer import wait_synced

        for informer in agent.informers.values():
            informer.start()
        ok = wait_synced(
            agent.informers.values(), float(config["resync_period"])
        ) and agent.reconcile(force=True)
        for informer in agent.informers.values():
            informer.stop()
        return 0 if ok else 1
    if config.get("listen"):
        serve(metrics, config["listen"])
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    log("node %s: watching the API server %s" % (config["node"], client.configuration.host))
    agent.run()
    log("stopped")
    return 0
