# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.topology: compute every node's plan on the controller.

With ``save_plans`` (run once per play, as the role kilo.mesh.node does) it is the one place a
run computes the mesh: it writes the registry once and keeps each play host's plan for that
host's kilo.mesh.join (plugin_utils/plan_store.py), returning only where they are.
"""

from __future__ import annotations

import time

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.plan import (
    SWITCH_STEP,
    roaming,
    split_preshared_keys,
)
from ansible_collections.kilo.mesh.plugins.plugin_utils.showconf import (
    public_entries,
    wireguard_conf,
)
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import (
    build_plans,
    peer_config,
)
from ansible_collections.kilo.mesh.plugins.module_utils.engine.graph import to_dot
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils import ansible_internals, plan_store
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import (
    direct_path_states,
    direct_switchers,
    missing_result,
    stale_leaders,
    stale_relays,
    update_registry,
)
from ansible_collections.kilo.mesh.plugins.plugin_utils.registry_store import shown
from ansible_collections.kilo.mesh.plugins.plugin_utils.validate import (
    MIN_HANDSHAKE_BOUND,
    as_host_error,
    check_parties,
)


# A key rotation's schedule (``rotation`` in the result; kilo.mesh.join hands each host its moment):
# the rotating hosts switch ROTATION_LEAD seconds after the plans are made, by when every host's
# converge call of the next task is under way, and their peers plan.SWITCH_STEP seconds later.
ROTATION_LEAD = 5.0
# Rotating leaders switch one after another, this far apart: two that switched at one moment would
# each send the other a handshake under the new keys, and when those cross, each end answers the
# other's as responder and drops the answer to its own, so neither has a session until WireGuard
# retries (5 s). Apart by more than a packet's way, the first one's handshake reaches the second
# while that one still runs its old key (dropped), and the second one's handshake then completes.
# What the second sends over its old session in between is lost (the first removed that entry).
ROTATING_GAP = 0.15
# How often registry_wait reads the registry again.
REGISTRY_POLL = 1.0


def this_batch(task_vars):
    """The hosts of this play's batch (``serial``; all of the play without one)."""
    return (
        task_vars.get("ansible_play_batch")
        or task_vars.get("ansible_play_hosts")
        or [task_vars["inventory_hostname"]]
    )


def peer_relay_warnings(mesh, computed):
    """Warnings for the endpoint-less outside peers whose relay to a segment behind NAT
    (``peer_paths``) this run marks down (``relay_down``, or unhealthy): the peer was given that
    relay (kilo.mesh.connect) and both ends keep it; their traffic waits for it to come back."""
    marked = set(n["name"] for n in mesh.nodes if n.get("relay_down") or n.get("healthy") is False)
    down = set(seg["key"] for seg in computed["segments"] if seg["leader"] in marked)
    out = []
    for path in computed.get("peer_paths") or ():
        if path["via"] in down:
            out.append(
                "relay %s of outside peer %s (to %s) is marked down in this run: both keep it,"
                " as the peer's configuration names it; the peer reaches %s again when the relay"
                " returns, or after its configuration is made again (connect.yml) without it"
                " (option relays)" % (path["via"], path["peer"], path["segment"], path["segment"])
            )
    return out


class ActionModule(KiloAction):
    _requires_connection = False
    SCOPES = ("mesh", "plans", "slicing", "inputs")
    EXTRA_SPEC = dict(
        peer=dict(type="str"),
        save_plans=dict(type="bool", default=False),
        stand_ins=dict(type="bool", default=False),
    )

    def run_kilo(self, args, task_vars):
        if args["stand_ins"] and (args["save_plans"] or args["peer"]):
            # stand-in keys are for people to read, never for a host or a peer's configuration
            raise KiloError(
                "a preview for people: not with %s"
                % ("save_plans" if args["save_plans"] else "peer"),
                "task",
                "stand_ins",
            )
        mesh = self.mesh(
            task_vars,
            args,
            earlier=self.earlier_reading(task_vars, args["group"]),
            stand_ins=args["stand_ins"],
        )
        relays_down, direct = self.mark(args, task_vars, mesh)
        if args["save_plans"]:
            return self.save_plans(task_vars, args, mesh, relays_down, direct)
        computed = mesh.computed(now=direct["now"] if direct else None)
        plans = computed["plans"]  # every plan at once: the task's result holds them all
        sections = (
            peer_config(mesh.nodes, mesh.peers, args["peer"], mesh.options)
            if args["peer"]
            else None
        )
        result = dict(
            changed=False,
            plans=plans,
            segments=computed["segments"],
            graph=to_dot(computed),
            registry=shown(mesh.registry_file),
            subnet=args["subnet"],
        )
        if "paths" in computed:  # a relayed mesh (engine/relays.py): which pairs go through whom
            result["paths"] = computed["paths"]
        if "peer_paths" in computed:
            result["peer_paths"] = computed["peer_paths"]
        warnings = (direct["warnings"] if direct else []) + peer_relay_warnings(mesh, computed)
        if warnings:
            result["warnings"] = warnings
        if sections is not None:
            # Like `kgctl showconf peer NAME` (kilo.mesh.showconf): what the peer needs, keys masked.
            sections = public_entries(sections)
            result.update(peer_config=sections, peer_conf=wireguard_conf(sections))
        result.update(missing_result(mesh.missing))
        if args["stand_ins"]:
            result["stand_ins"] = list(mesh.stand_ins)
        # Preshared keys stay off the output; kilo.mesh.join passes them to the host itself.
        for plan in plans.values():
            split_preshared_keys(plan)
        return result

    def mark(self, args, task_vars, mesh):
        """The one place this run's marks go on ``mesh.nodes`` (``healthy``, ``relay_down``,
        ``path_state``); called again after ``registry_wait`` read the nodes anew. Returns
        (names of the relays marked down, ``mark_direct_paths``' answer)."""
        if args["leader_health"]:
            self.mark_down(args, task_vars, mesh.nodes)
        relays_down = self.mark_relays_down(args, task_vars, mesh.nodes)
        direct = self.mark_direct_paths(args, task_vars, mesh)
        return relays_down, direct

    def mark_down(self, args, task_vars, nodes):
        """kilo_leader_health: hosts of the play that failed or went unreachable before this
        step, and (with a handshake bound) those whose tunnels to every other node are stale."""
        down = set(task_vars.get("ansible_play_hosts_all") or []) - set(
            task_vars.get("ansible_play_hosts") or []
        )
        if args["leader_handshake_timeout"] > 0:
            reported = {}
            for host in task_vars.get("ansible_play_hosts") or []:
                found, result = self.variable(task_vars, host, args["facts_var"])
                if found and isinstance(result, dict):
                    reported[host] = result.get("handshakes")
            keys = set(node["public_key"] for node in nodes if node.get("public_key"))
            down |= stale_leaders(reported, keys, args["leader_handshake_timeout"])
        for node in nodes:
            if node["name"] in down:
                node["healthy"] = False

    def mark_relays_down(self, args, task_vars, nodes):
        """Beyond Kilo, push relay failover: a host of the play that failed or went unreachable
        before this step (a dark relay ends its call within the dark-host bound), or whose
        handshakes the leaders behind NAT report stale (``leader_handshake_timeout``, else
        validate's 180 s), is marked ``relay_down``: its pairs leave it for another relay (the
        engine's hash; a mesh without locations behind NAT reads no such mark). Returns their names."""
        down = set(task_vars.get("ansible_play_hosts_all") or []) - set(
            task_vars.get("ansible_play_hosts") or []
        )
        reported = {}
        for host in task_vars.get("ansible_play_hosts") or []:
            found, result = self.variable(task_vars, host, args["facts_var"])
            if found and isinstance(result, dict):
                reported[host] = result.get("handshakes")
        down |= stale_relays(
            reported, nodes, args["leader_handshake_timeout"] or MIN_HANDSHAKE_BOUND
        )
        marked = []
        for node in nodes:
            if node["name"] in down and not node.get("behind_nat") and node.get("endpoint"):
                node["relay_down"] = True
                marked.append(node["name"])
        return sorted(marked)

    def mark_direct_paths(self, args, task_vars, mesh):
        """Beyond Kilo, ``direct_paths: always`` (push): the leaders of NAT'd segments get the path
        states their key step's report in this run gives (``inputs.direct_path_states``), so the
        engine, at this time, probes their pairs and moves those whose two ends handshook to a
        direct path. Returns {now, live, warnings}, or None (no NAT'd pair).

        ``agent`` and ``never`` compute every pair relayed (no time, no path state), as before; when
        a NAT'd leader of the run still runs a direct entry (``always`` before), it returns {now:
        None, live, warnings: []} so that those leaders move back to the relay at one instant
        (``direct_switch``), as ``always`` moves them."""
        always = args.get("direct_paths") == "always"
        if not always and not any(
            node.get("behind_nat") or not node.get("endpoint") for node in mesh.nodes
        ):
            return None  # nobody behind NAT: nothing was ever direct (no extra computation)
        try:
            base = build_plans(mesh.nodes, mesh.peers, mesh.options, only=[])
        except KiloError:
            return None  # the computation itself says why, as without this option
        if "paths" not in base:
            return None
        # this batch's reports only (serial): a host of an earlier batch keeps its key step's
        # result in hostvars, but converges no more in this one; it is out of the run here
        reports = {}
        for host in this_batch(task_vars):
            found, result = self.variable(task_vars, host, args["facts_var"])
            if found and isinstance(result, dict) and "handshakes" in result:
                reports[host] = result
        now = time.time()
        states, live, warnings = direct_path_states(
            reports,
            mesh.nodes,
            base,
            now,
            args["leader_handshake_timeout"] or MIN_HANDSHAKE_BOUND,
        )
        if not always:
            running = any(path == "direct" for paths in live.values() for path in paths.values())
            return dict(now=None, live=live, warnings=[]) if running else None
        for node in mesh.nodes:
            if node["name"] in states:
                node["path_state"] = states[node["name"]]
        return dict(now=now, live=live, warnings=warnings)

    def direct_switch(self, play, direct, computed):
        """The one instant (``at``) at which the NAT'd leaders of the play whose pairs move between a
        relay and a direct path (``hosts``) converge, as a key rotation's peers do (kilo.mesh.join's
        ``switch_at``): when the task runs on every host of the play at once (forks); else each
        moves when its converge comes (a pair cut for the moments between)."""
        leaders = dict(
            (seg["key"], seg["leader"])
            for seg in computed["segments"]
            if seg.get("reachable") is False
        )
        hosts = [h for h in direct_switchers(direct["live"], computed, leaders) if h in play]
        forks = ansible_internals.forks()
        if not hosts or self._task.check_mode or forks is None or len(play) > forks:
            return dict(hosts=hosts, scheduled=False) if hosts else None
        return dict(hosts=hosts, scheduled=True, at=round(time.time() + ROTATION_LEAD, 3))

    def moved_pairs_warnings(self, task_vars, mesh, computed, relays_down, now=None):
        """Warnings naming the hosts left out of this run (``--limit``) that lead an end of a pair
        the marked relays' failover moved: they keep sending through the old relay until a run
        includes them. Compares with the mesh computed without the marks (paths only, no plans)."""
        if "paths" not in computed:
            return []
        unmarked = [
            dict((k, v) for k, v in node.items() if k != "relay_down") for node in mesh.nodes
        ]
        before = dict(
            ((p["a"], p["b"]), p["via"])
            for p in build_plans(unmarked, mesh.peers, mesh.options, only=[], now=now).get(
                "paths", ()
            )
        )
        leaders = dict((seg["key"], seg["leader"]) for seg in computed["segments"])
        in_run = set(task_vars.get("ansible_play_hosts_all") or [])
        out = []
        for path in computed["paths"]:
            old = before.get((path["a"], path["b"]))
            if path["via"] == old or old is None:
                continue
            for end in (path["a"], path["b"]):
                if end in leaders and leaders[end] not in in_run:
                    out.append(
                        "relay %s is down (%s): the pair %s - %s moves to relay %s, but %s (leader of %s)"
                        " is not in this run (--limit): it sends through %s until a run includes it"
                        % (
                            old,
                            ", ".join(relays_down),
                            path["a"],
                            path["b"],
                            path["via"],
                            leaders.get(end),
                            end,
                            old,
                        )
                    )
        return out

    def save_plans(self, task_vars, args, mesh, relays_down=(), direct=None):
        """The mesh once for the whole play: plans of the play's hosts kept for their joins."""
        names = set(n["name"] for n in mesh.nodes)
        # this batch's hosts (serial), so a rolling run does not compute every host's plan per batch
        batch = this_batch(task_vars)
        play = [h for h in batch if h in names]
        waited = (
            self.wait_for_hosts(mesh)
            if mesh.args.get("registry_wait") and not self._task.check_mode
            else None
        )
        if waited is not None:
            # the nodes were read anew: their marks with them
            relays_down, direct = self.mark(args, task_vars, mesh)
            names = set(n["name"] for n in mesh.nodes)
            play = [h for h in batch if h in names]
        now = direct["now"] if direct else None
        computed = mesh.computed(
            only=play,
            check=lambda topology: self.check_parties(task_vars, mesh, topology),
            now=now,
            lazy=True,
        )
        if not self._task.check_mode:
            update_registry(mesh.registry_file, mesh.fresh)
        # the engine renders each plan when asked: one at a time, marked and written, so the run
        # never holds every plan of the mesh at once
        plans, roam = computed["plans"], roaming(computed)
        leaders = sorted(s["leader"] for s in computed["segments"])
        result = dict(
            changed=False,
            plan_store=plan_store.save((host, roam(plans[host])) for host in plans),
            nodes=len(mesh.nodes),
            segments=len(computed["segments"]),
            plans=len(play),
            leaders=leaders,
            rotation=self.rotation(play, mesh.rotating, set(leaders)),
        )
        if waited is not None:
            result["registry_waited"] = waited
        result.update(missing_result(mesh.missing))
        if relays_down:
            result["relays_down"] = list(relays_down)
            warnings = self.moved_pairs_warnings(task_vars, mesh, computed, relays_down, now)
            if warnings:
                result["warnings"] = result.get("warnings", []) + warnings
        if "paths" in computed:  # a relayed mesh: what this run does with each pair
            result["paths"] = computed["paths"]
        if "peer_paths" in computed:
            result["peer_paths"] = computed["peer_paths"]
            warnings = peer_relay_warnings(mesh, computed)
            if warnings:
                result["warnings"] = result.get("warnings", []) + warnings
        if direct:
            switch = self.direct_switch(play, direct, computed)
            if switch:
                result["direct_switch"] = switch
            if direct["warnings"]:
                result["warnings"] = result.get("warnings", []) + direct["warnings"]
        return result

    @staticmethod
    def wait_for_hosts(mesh):
        """``registry_wait``: this run's hosts written to the registry first, then the registry read
        again every second until every host of the mesh group is known or the bound is reached;
        returns the seconds waited (None when nobody was missing). Slices of one job (concurrent
        ``--limit`` runs) each publish and then find each other's hosts, so each computes the plans
        one run would."""
        if not mesh.missing:
            return None
        update_registry(mesh.registry_file, mesh.fresh)
        started = time.monotonic()
        deadline = started + mesh.args["registry_wait"]
        while mesh.missing and time.monotonic() < deadline:
            time.sleep(min(REGISTRY_POLL, max(0.0, deadline - time.monotonic())))
            mesh.read_registry_again()
        return round(time.monotonic() - started, 1)

    @staticmethod
    def check_parties(task_vars, mesh, topology):
        """What validate checked before the key step with stand-ins, now with what the hosts
        reported (two locations' hosts that found one internal IP, a discovered address inside
        the subnet): refused before any host converges, as validate says it."""
        hostvars = task_vars["hostvars"]
        hosts = task_vars.get("groups", {}).get(mesh.group) or [None]
        try:
            check_parties(topology, mesh.peers)
        except KiloError as e:
            raise as_host_error(e, hostvars, hosts[0])

    def rotation(self, play, reported, leaders):
        """Which hosts of the play switch to a new key in this run (``reported``: the mesh reading's
        ``rotating``), and how: ``scheduled`` (one converge task for every host, each at its
        moment, ``at``) when the task runs on every host of the play at once (forks), else in order
        (the role converges them in a task of their own before the others). Check mode switches
        nothing: no schedule."""
        rotating = [host for host in play if host in reported]
        forks = ansible_internals.forks()
        scheduled = (
            bool(rotating)
            and not self._task.check_mode
            and forks is not None
            and len(play) <= forks
        )
        out = dict(hosts=sorted(rotating), scheduled=scheduled)
        if scheduled:
            at = round(time.time() + ROTATION_LEAD, 3)
            # leaders carry the tunnels: they switch one by one (ROTATING_GAP); a rotating host that
            # leads nothing is nobody's peer and switches at the first moment
            leading = [h for h in sorted(rotating) if h in leaders]
            moments = dict((h, at) for h in rotating)
            moments.update((h, round(at + i * ROTATING_GAP, 3)) for i, h in enumerate(leading))
            out.update(
                at=at,
                step=SWITCH_STEP,
                moments=moments,
                peers_at=round(max(moments.values()) + SWITCH_STEP, 3),
            )
        return out
