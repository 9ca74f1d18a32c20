# -*- coding: utf-8 -*-
"""Agent relays (engine/relays.py's timed inputs from the agents' annotations): what the agent reads
of the Nodes (kilo.mesh/relay, kilo.mesh/path-state, Kilo's own agent's Nodes), its own live state
in place of its annotation, the plan at a time, and whom a leader behind NAT probes."""

import json

from ansible_collections.kilo.mesh.plugins.module_utils.agent import health, mesh
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

KEYS = [
    "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls=",
    "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw=",
    "oObRzkG9nVLwEmidmeGu3Bj4/Ur70h0R5+1u57CfvWA=",
    "iSm+opx1YpiKTO+teM5tyj4hsAERBsl0FYTrAOvRGVY=",
]
NAMES = ("r", "s", "u", "v")  # r and s public (relays), u and v behind NAT
OPTIONS = {"port": 51820}


def node_object(i, annotations):
    name = NAMES[i]
    notes = {
        kn.KEY: KEYS[i],
        kn.LOCATION: name,
        kn.INTERNAL_IP: "172.16.%d.1/24" % i,
        kn.ENDPOINT: ("203.0.113.%d:51820" if i < 2 else "172.16.%d.1:51820") % i,
    }
    if i >= 2:
        notes[kn.FIELDS["behind_nat"].annotation] = "true"
    notes.update(annotations)
    return {
        "metadata": {"name": name, "annotations": notes},
        "spec": {"podCIDR": "10.50.%d.0/24" % i},
    }


def cluster(marks):
    """Node objects with our agents' marks ({name: annotations}); u's facts as its agent reads them."""
    objects = dict((NAMES[i], node_object(i, marks.get(NAMES[i], {}))) for i in range(4))
    own = {"public_key": KEYS[2], "internal_ip": "172.16.2.1/24"}
    return objects, own


STATE = kn.path_state_text({})


def test_the_agent_reads_relay_marks_and_takes_its_own_live_state():
    objects, own = cluster(
        {
            "r": {kn.RELAY: "1000"},
            "s": {kn.RELAY: "1000"},
            "v": {kn.PATH_STATE: STATE},
            "u": {kn.PATH_STATE: kn.path_state_text({"down": {"location:r": 5000}})},
        }
    )
    live = {"relay_since": None, "path_state": {"down": {}, "direct": {}, "held": {}}, "kg": False}
    nodes, skipped = mesh.mesh_nodes(objects, "u", own, 51820, kn.REGION_LABEL, own_marks=live)
    assert skipped == {}
    by = dict((n["name"], n) for n in nodes)
    assert (
        by["r"]["relay_since"] == 1000 and by["r"]["kg"] is False and by["r"]["path_state"] is None
    )
    assert (
        by["v"]["path_state"] == {"down": {}, "direct": {}, "held": {}} and by["v"]["kg"] is False
    )
    assert by["u"]["path_state"]["down"] == {}  # its live state, not the annotation
    # relayed at a time; the relay's start counts 5 s later
    plan, _psk, computed, _deposed = mesh.own_plan(nodes, [], "u", OPTIONS, now=1003)
    pair = computed["paths"][-1]
    assert (pair["a"], pair["b"]) == ("location:u", "location:v") and pair["path"] == "relayed"
    assert computed["next_change"] == 1005
    assert [p["name"] for p in plan["peers"] if p.get("relayed")] == [pair["via"]]
    # u names the pair's relay down: the other one carries it, until then
    relay = pair["via"]
    live["path_state"]["down"] = {relay: 2000}
    nodes, _skipped = mesh.mesh_nodes(objects, "u", own, 51820, kn.REGION_LABEL, own_marks=live)
    computed = mesh.own_plan(nodes, [], "u", OPTIONS, now=1010)[2]
    assert computed["paths"][-1]["via"] not in (relay, None) and computed["next_change"] == 2000
    # whom u probes: every relay of the mesh, at its WireGuard IP
    targets = mesh.relay_targets(computed, "u")
    assert sorted(targets) == ["location:r", "location:s"]
    assert mesh.relay_targets(mesh.own_plan(nodes, [], "r", OPTIONS, now=1010)[2], "r") == {}


def test_a_node_without_our_marks_is_kilos_own_agent():
    """v carries no path state (Kilo's kg behind NAT): the pair keeps Kilo's entries; r without
    kilo.mesh/relay (kg) never relays while s may."""
    objects, own = cluster({"s": {kn.RELAY: "1000"}})
    live = {"relay_since": None, "path_state": {"down": {}, "direct": {}, "held": {}}, "kg": False}
    nodes, _skipped = mesh.mesh_nodes(objects, "u", own, 51820, kn.REGION_LABEL, own_marks=live)
    by = dict((n["name"], n) for n in nodes)
    assert by["v"]["kg"] and by["r"]["kg"] and not by["s"]["kg"]
    computed = mesh.own_plan(nodes, [], "u", OPTIONS, now=1010)[2]
    assert computed["paths"][-1]["path"] == "direct"
    objects["v"] = node_object(3, {kn.PATH_STATE: STATE})
    nodes, _skipped = mesh.mesh_nodes(objects, "u", own, 51820, kn.REGION_LABEL, own_marks=live)
    computed = mesh.own_plan(nodes, [], "u", OPTIONS, now=1010)[2]
    assert computed["paths"][-1]["via"] == "location:s"
    assert [s["key"] for s in computed["segments"] if s.get("relay")] == ["location:s"]
    # a bad path state leaves that node out, with the annotation named
    objects["v"] = node_object(3, {kn.PATH_STATE: json.dumps({"down": []})})
    _nodes, skipped = mesh.mesh_nodes(objects, "u", own, 51820, kn.REGION_LABEL, own_marks=live)
    assert kn.PATH_STATE + ".down" in skipped["v"]


def test_a_relay_seen_dead_is_down_until_a_minute_after():
    prober = health.Prober(dead_after=health.RELAY_DEAD_AFTER, hold_down=health.RELAY_DOWN, ident=1)
    prober.set_targets({"location:r": "10.4.0.1", "location:s": "10.4.0.2"}, 100.0)
    prober.record({"location:r", "location:s"}, 101.0)
    prober.record({"location:s"}, 103.5)
    assert prober.down(103.5) == {}
    prober.record({"location:s"}, 104.5)
    assert prober.down(104.5) == {"location:r": 165}
    prober.record(
        {"location:r", "location:s"}, 106.0
    )  # back: down until a minute after last seen dead
    assert prober.down(150.0) == {"location:r": 165} and prober.down(165.5) == {}


def test_a_relay_that_never_answered_gets_time_for_its_tunnel():
    prober = health.Prober(
        dead_after=health.RELAY_DEAD_AFTER,
        hold_down=health.RELAY_DOWN,
        ident=1,
        first_answer=health.RELAY_FIRST_ANSWER,
    )
    prober.set_targets({"location:r": "10.4.0.1"}, 100.0)
    prober.record(set(), 110.0)
    assert prober.down(110.0) == {}
    prober.record(set(), 121.0)
    assert prober.down(121.0) == {"location:r": 181}


def test_a_relay_keeps_its_start_only_when_its_agent_restarts_on_a_host_that_kept_running():
    import types
    from ansible_collections.kilo.mesh.plugins.module_utils.agent import main

    node = {"metadata": {"annotations": {kn.RELAY: "1000"}}}
    agent = types.SimpleNamespace(_relay_watch=None, _in_place=True)
    assert main.Agent.relay_start(agent, node, 2000.5) == 1000
    assert main.Agent.relay_start(agent, {"metadata": {}}, 2000.5) == 2000  # never marked: now
    agent._in_place = False  # a reboot, a first start: the boot restore changed the host
    assert main.Agent.relay_start(agent, node, 2000.5) == 2000
    agent._in_place, agent._relay_watch = True, 1500.0  # a reconnect of the watch: now
    assert main.Agent.relay_start(agent, node, 2000.5) == 2000


def test_a_dark_relays_end_moves_in_steps():
    """Seen dead every round, a relay's published end moves on only every 15 s (else every agent
    reconciles each second for our Node's new annotation)."""
    import types
    import threading
    from ansible_collections.kilo.mesh.plugins.module_utils.agent import main

    prober = health.Prober(dead_after=3, hold_down=60, ident=1)
    prober.set_targets({"location:r": "10.4.0.1"}, 0.0)
    from ansible_collections.kilo.mesh.plugins.module_utils.agent.direct import DirectPaths

    agent = types.SimpleNamespace(
        relay_prober=prober, _probe_lock=threading.Lock(), _down={}, direct=DirectPaths()
    )
    published = []
    for now in range(4, 40):
        prober.record(set(), float(now))
        published.append(main.Agent.path_state(agent, float(now))["down"]["location:r"])
    assert sorted(set(published)) == [64, 79, 94]
