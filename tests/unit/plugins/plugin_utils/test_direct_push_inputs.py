"""Push runs with ``direct_paths: always`` (inputs.direct_path_states): who counts as in the run.

Every pair of NAT'd leaders must be planned alike at both ends: a pair moved at one end only is a
black hole until the next run."""

from ansible_collections.kilo.mesh.plugins.plugin_utils import inputs

from flat_plans import build_plans
from test_topology_relays import entries, key, timed_mesh

NOW = 5000.0
BOUND = 180


def three_natted():
    """timed_mesh (relays r, s; u, v behind NAT) and a third NAT'd location w, r saw its mapping."""
    nodes, by = timed_mesh()
    nodes.append(
        {
            "name": "w",
            "location": "w",
            "internal_ip": "10.24.0.1/24",
            "pod_cidr": "10.100.5.0/24",
            "public_key": key(5),
        }
    )
    by["r"]["discovered_endpoints"][key(5)] = "198.51.100.5:40005"
    return nodes


def computed_with(nodes, reports):
    base = build_plans(nodes, [], {}, only=[])
    fresh = [dict(n) for n in nodes]
    states, live, warnings = inputs.direct_path_states(reports, fresh, base, NOW, BOUND)
    for node in fresh:
        if node["name"] in states:
            node["path_state"] = states[node["name"]]
    computed = build_plans(fresh, [], {}, now=NOW)
    paths = dict(((p["a"], p["b"]), p["path"]) for p in computed["paths"])
    return computed, paths, live, warnings


def test_a_leader_left_out_stays_out_for_every_pair():
    """--limit u,w with every pair of u, v, w direct: v is out; the pair v - w must stay as w runs
    it (direct), and a pair v had no say in must not count v as reporting because another pair
    (u - v) gave it a path state."""
    nodes = three_natted()
    # all three pairs direct and fresh at u and w; v left out
    u = {"handshakes": {key(1): 3, key(2): 4, key(4): 30, key(5): 30}, "probes": []}
    w = {"handshakes": {key(1): 3, key(2): 4, key(3): 30, key(4): 30}, "probes": []}
    r = {"handshakes": {key(3): 3, key(4): 3, key(5): 3}}
    computed, paths, live, warnings = computed_with(nodes, {"u": u, "w": w, "r": r})
    print(paths, warnings)
    assert paths[("location:u", "location:v")] == "direct"
    assert paths[("location:u", "location:w")] == "direct"
    # w runs a direct entry for v: the pair stays direct (it was computed probing before the fix:
    # w converged onto a probe, v kept its direct entry, a black hole)
    assert paths[("location:v", "location:w")] == "direct"
    leaders = {"location:u": "u", "location:v": "v", "location:w": "w"}
    assert inputs.direct_switchers(live, computed, leaders) == []
    assert entries(computed, "w")["location:v"]["allowed_ips"]
    assert len(warnings) == 2 and all("v (leader of location:v)" in w for w in warnings)


def test_a_failed_wireguard_reading_is_out_of_the_run():
    """A key step that could not read its interface reports no handshakes: its pairs are judged by
    the other end's interface, as if the host were left out, not moved back to the relay."""
    nodes, by = timed_mesh()
    u = {"handshakes": {key(1): 3, key(2): 4, key(4): 30}, "probes": []}
    v = {"handshakes": {}, "probes": [], "wireguard_read": False}
    computed, paths, live, warnings = computed_with(nodes, {"u": u, "v": v})
    assert paths[("location:u", "location:v")] == "direct"
    assert "v" not in live
    assert inputs.direct_switchers(live, computed, {"location:u": "u", "location:v": "v"}) == []
    assert len(warnings) == 1 and "v (leader of location:v)" in warnings[0]


def test_a_key_rotation_keeps_a_direct_pair():
    """v rotates its key in this run: u's interface still runs v's old key, and its handshake under
    that key counts for v."""
    nodes, by = timed_mesh()
    old_v = key(4)
    by["v"]["public_key"] = key(44)  # the new key, planned; v's interface runs the old one
    u = {"handshakes": {key(1): 3, key(2): 4, old_v: 30}, "probes": []}
    v = {
        "handshakes": {key(1): 3, key(2): 4, key(3): 30},
        "probes": [],
        "rotating": True,
        "previous_public_key": old_v,
    }
    computed, paths, live, warnings = computed_with(nodes, {"u": u, "v": v})
    assert paths[("location:u", "location:v")] == "direct"
    assert live["u"] == {"location:v": "direct"}
    assert warnings == []
