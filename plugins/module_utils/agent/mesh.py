# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The agent's reading of the cluster: Node and Peer objects -> the engine's nodes and peers,
then this node's plan, through the same functions the controller's push run uses.

Push mode reads the same Nodes through the inventory plugin (``kube_node.host_vars``), turns each
host into an engine node with the inventory reading (``nodes.node_from_host``) and computes the
plans with ``build_plans``. The agent does exactly that for the Node objects its informers hold,
with two differences that are Kilo's agent's: its own node's facts are read on this host (not
from its annotations), and another node takes part only while its ``last-seen`` is fresh.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kilo.mesh.plugins.module_utils.agent import health
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node
from ansible_collections.kilo.mesh.plugins.module_utils import nodes as node_table
from ansible_collections.kilo.mesh.plugins.module_utils.plan import (
    mark_roaming,
    split_preshared_keys,
)


def live(facts, now, window, watching_since=None, lost_at=None):
    """Kilo's liveness: the node checked in (``last-seen``) less than ``window`` seconds ago.
    ``window`` 0 or None: every node with a key and an endpoint counts (push mode's rule).

    Beyond Kilo: check-ins are only judged over time this agent could see them. A node that was
    live when we stopped seeing check-ins (``lost_at``: when our watch of Nodes broke, or when
    the agent started) has its age counted from ``watching_since`` (when the watch began again
    without a break) when that is later, so an API server that was away does not make every
    node look dead the moment it comes back (Kilo's agents then drop each other until they all
    check in again). A node already dead at ``lost_at`` gets no such grace (one dead for days is
    not brought back, nor elected, at every start). ``watching_since`` None judges nobody."""
    if not window:
        return True
    if watching_since is None:
        return True
    return now < stale_at((facts or {}).get("last_seen") or 0, window, watching_since, lost_at)


def stale_at(seen, window, watching_since, lost_at):
    """When a node that last checked in at ``seen`` goes stale (``live`` says how)."""
    graced = lost_at is not None and seen + window > lost_at
    return (max(seen, watching_since) if graced else seen) + window


def mesh_nodes(
    node_objects,
    own,
    own_facts,
    port,
    topology_label,
    now=0,
    window=0,
    watching_since=None,
    lost_at=None,
    ipam=None,
    pod_source=None,
    dual=False,
    own_marks=None,
):
    """(nodes, skipped) of the Node objects: engine nodes, and {name: reason} of those left out.
    ``ipam`` and ``pod_source``: the pod ranges of the IPAM objects watched ({source: {node: [CIDR]}},
    ``kube_node.host_vars``) and the mesh's source of pod ranges (``pod_cidr_source``); ``dual``:
    the mesh is dual-stack (``nodes.node_from_host``). The relays' timed inputs (``relay_since``,
    ``path_state``, ``kg``: ``kube_node.relay_marks``) are what the other Nodes carry, and for our
    own node ``own_marks``: this agent's live state, not its annotation.

    A Node whose data cannot be read is left out with its reason, never fatal: one bad
    annotation on another node must not stop this node's agent."""
    nodes, skipped = [], {}
    for name in sorted(node_objects):
        try:
            hvars = kube_node.host_vars(node_objects[name], topology_label, ipam)
            if name == own:
                facts = own_facts
            else:
                facts = node_table.annotation_facts(hvars)
                if facts is None:
                    skipped[name] = "no key or endpoint written on the Node yet"
                    continue
                if not live(
                    hvars.get("kilo_kubernetes_node"), now, window, watching_since, lost_at
                ):
                    skipped[name] = "last-seen older than %ds" % window
                    continue
            node = node_table.node_from_host(
                name, hvars, facts, "", port, pod_source=pod_source, dual=dual
            )
            node.update(
                own_marks
                if name == own and own_marks is not None
                else kube_node.relay_marks(hvars["kilo_kubernetes_node"])
            )
            nodes.append(node)
        except KiloError as e:
            skipped[name] = str(e)
    return nodes, skipped


def without_conflicts(nodes, peers, own, options, skipped=None, now=None):
    """(nodes, peers, computed): ``build_plans(..., only=[own])``, leaving out each other node or
    peer the engine rejects against the rest (its key is another's, ...) with its reason in
    ``skipped``, as ``mesh_nodes`` leaves out one it cannot read: one node's bad data must not
    stop every agent of the cluster. An error about ``own`` (or no node or peer) is raised."""
    while True:
        try:
            return nodes, peers, build_plans(nodes, peers, options, only=[own], now=now)
        except KiloError as e:
            kind, name = getattr(e, "kind", None), getattr(e, "name", None)
            if kind == "node" and name == own and e.field == "public_key":
                # another node or peer took our key: it is the one left out
                key = dict((n["name"], n.get("public_key")) for n in nodes).get(own)
                drop_nodes = set(
                    n["name"] for n in nodes if n["name"] != own and n.get("public_key") == key
                )
                drop_peers = set(p.get("name") for p in peers if p.get("public_key") == key)
            elif kind == "node" and name and name != own:
                drop_nodes, drop_peers = set([name]), set()
            elif kind == "peer" and name:
                drop_nodes, drop_peers = set(), set([name])
            else:
                raise
            drop_nodes &= set(n["name"] for n in nodes)
            drop_peers &= set(p.get("name") for p in peers)
            if not drop_nodes and not drop_peers:
                raise
            nodes = [n for n in nodes if n["name"] not in drop_nodes]
            peers = [p for p in peers if p.get("name") not in drop_peers]
            if skipped is not None:
                skipped.update((n, str(e)) for n in drop_nodes)
                skipped.update(("peer " + p, str(e)) for p in drop_peers)


def own_plan(
    nodes, peers, own, options, reports=None, skipped=None, settle=None, held=(), now=None
):
    """(plan, preshared keys, computed, deposed) of node ``own``, as the push run hands it to the
    host: roaming peers marked, preshared keys split off; plan is None when ``own`` is not a node.
    Other nodes and peers the engine rejects are left out (``without_conflicts``, into ``skipped``).

    ``reports`` ({node: names it publishes as dead}, with leader health on): leaders every other
    leader sees dead are marked unhealthy, so their location elects another (``health.deposed``);
    ``settle(names)`` keeps those whose deposition has held long enough (``health.Settle``);
    ``held``: nodes whose deposed mark still holds (``health.held``), out of the lead from the start.
    ``now``: the time the relays' timed inputs count at (``build_plans``)."""
    if own not in set(n["name"] for n in nodes):
        return None, {}, None, set()
    nodes, peers, computed = without_conflicts(nodes, peers, own, options, skipped, now)
    out = set()
    if reports is not None:
        held = set(held)
        fresh = deposed_leaders(nodes, peers, own, options, computed, reports, held, now) - held
        out = held | (settle(fresh) if settle is not None else fresh)
        if out:
            computed = build_plans(_unhealthy(nodes, out), peers, options, only=[own], now=now)
    plan = computed["plans"][own]
    mark_roaming([plan], computed)
    return plan, split_preshared_keys(plan), computed, out


def deposed_leaders(nodes, peers, own, options, computed, reports, held=(), now=None):
    """The leaders to depose (``health.deposed``), with those ``held`` (marked) out from the start,
    judged first by the leaders of the mesh with the others healthy, then again by the leaders that replace the deposed ones, until nobody new
    is deposed: a deposed leader leads nothing and so judges nobody, and without the second round
    a second broken leader could not be deposed while the first is held down (10 minutes). Each
    round is computed from the API's state alone, so every agent still reaches the same set."""
    out = set(held)
    # each round reads the segments alone: lazy, its plan is not rendered
    if out:
        computed = build_plans(
            _unhealthy(nodes, out), peers, options, only=[own], now=now, lazy=True
        )
    while True:
        # a deposed node still leads where its location has nobody else; it judges nobody all the same
        judges = [
            s["leader"] for s in computed["segments"] if s.get("leader") and s["leader"] not in out
        ]
        more = health.deposed(judges, reports) - out
        if not more:
            return out
        out |= more
        computed = build_plans(
            _unhealthy(nodes, out), peers, options, only=[own], now=now, lazy=True
        )


def _unhealthy(nodes, names):
    return [dict(n, healthy=False) if n["name"] in names else n for n in nodes]


def marks_of(node_objects, names):
    """{node: its DEPOSED annotation} of the nodes ``names`` that carry one."""
    out = {}
    for name in names:
        annotations = (node_objects.get(name, {}).get("metadata") or {}).get("annotations") or {}
        if health.DEPOSED in annotations:
            out[name] = annotations[health.DEPOSED]
    return out


def reports_of(node_objects, names):
    """{node: names it publishes as dead} of the nodes ``names`` (the live ones)."""
    out = {}
    for name in names:
        annotations = (node_objects.get(name, {}).get("metadata") or {}).get("annotations") or {}
        out[name] = health.parse_names(annotations.get(health.UNREACHABLE))
    return out


def probe_targets(computed, own, field="wireguard_ip"):
    """{leader: its segment's ``field``} of the other segments, when ``own`` leads its own; else {}.
    ``field`` is what the judge needs: the WireGuard address (probes) or the public key
    (handshake ages)."""
    segments = computed["segments"] if computed else []
    if not any(s.get("leader") == own for s in segments):
        return {}
    # a dual-stack segment has a WireGuard IP of each family: probes go to the primary's (Kilo's one)
    return dict(
        (s["leader"], node_table.first_of(s[field]))
        for s in segments
        if s.get("leader") and s["leader"] != own and s.get(field)
    )


def relay_targets(computed, own):
    """{relay segment: its WireGuard IP} of every relay of the mesh (``segments[].relay``) when
    ``own`` leads a segment nobody reaches (it probes them: relay failover); else {}."""
    segments = (computed or {}).get("segments") or []
    if not any(s.get("leader") == own and s.get("reachable") is False for s in segments):
        return {}
    return dict(
        (s["key"], node_table.first_of(s["wireguard_ip"]))
        for s in segments
        if s.get("relay") and s.get("leader") and s.get("wireguard_ip")
    )
