"""engine/relays.py: choices both ends of a path must make alike, whatever only one end knows.

An endpoint-less outside peer (a laptop) is given its relay once (showconf, kilo.mesh.connect);
the segments' plans must name that relay whatever time, health or path state say later. A probe's
endpoint after a NAT remapping is the relays' mapping, not the viewer's stale one."""

from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import peer_config

from flat_plans import build_plans
from test_topology_relays import entries, key, timed_mesh

LAPTOP = {
    "name": "laptop",
    "public_key": key(900),
    "allowed_ips": ["10.5.0.1/32"],
    "persistent_keepalive": 25,
}


def laptop_relay(nodes):
    """The relay the laptop's own configuration carries u's ranges on."""
    sections = peer_config(nodes, [dict(LAPTOP)], "laptop", {})
    found = [e["name"] for e in sections if "location:u" in (e.get("relayed") or [])]
    assert len(found) == 1
    return found[0]


def carrying_laptop(result, host):
    return [n for n, e in entries(result, host).items() if "10.5.0.1/32" in e["allowed_ips"]]


def test_a_laptops_relay_is_what_it_was_given_whatever_time_and_health_say():
    nodes, by = timed_mesh()
    given = laptop_relay(nodes)
    chosen = given.split(":")[1]
    now = 10000.0
    # agent mode: the chosen relay's agent restarted 2 s ago
    for n in nodes:
        n["relay_since"] = 0
    by[chosen]["relay_since"] = now - 2
    by["u"]["path_state"] = {"direct": {}, "down": {}, "held": {}}
    result = build_plans(nodes, [dict(LAPTOP)], {}, now=now)
    assert carrying_laptop(result, "u") == [given]
    assert all(p["via"] == given for p in result["peer_paths"])
    # u names the relay down
    by[chosen]["relay_since"] = 0
    by["u"]["path_state"]["down"] = {given: now + 60}
    assert carrying_laptop(build_plans(nodes, [dict(LAPTOP)], {}, now=now), "u") == [given]
    # push: the relay failed its key step in this run, or is unhealthy
    del by["u"]["path_state"]
    by[chosen]["relay_down"] = True
    assert carrying_laptop(build_plans(nodes, [dict(LAPTOP)], {}), "u") == [given]
    by[chosen]["healthy"] = False
    assert carrying_laptop(build_plans(nodes, [dict(LAPTOP)], {}), "u") == [given]
    # ... and the laptop's configuration made now still names it
    assert laptop_relay(nodes) == given


def test_a_relay_entry_lists_the_laptop_and_the_segments_it_carries():
    """u's entry for the relay that carries both v (relayed pair) and the laptop names both."""
    nodes, by = timed_mesh()
    result = build_plans(nodes, [dict(LAPTOP)], {})
    pair_via = [
        p["via"] for p in result["paths"] if {p["a"], p["b"]} == {"location:u", "location:v"}
    ]
    laptop_via = laptop_relay(nodes)
    relayed = dict((n, e.get("relayed")) for n, e in entries(result, "u").items())
    print(pair_via, laptop_via, relayed)
    assert "laptop" in relayed[laptop_via]
    assert "location:v" in relayed[pair_via[0]]
    if laptop_via == pair_via[0]:
        assert relayed[laptop_via] == ["laptop", "location:v"]


def test_the_same_relay_carries_the_laptop_and_a_segment():
    """Force one relay (s out of the relays): its entry at u lists the laptop and v."""
    nodes, by = timed_mesh()
    result = build_plans(nodes, [dict(LAPTOP)], {"relays": ["r"]})
    assert entries(result, "u")["location:r"]["relayed"] == ["laptop", "location:v"]
    assert "10.5.0.1/32" in entries(result, "u")["location:r"]["allowed_ips"]


def test_a_probe_after_a_nat_remapping_takes_the_relays_mapping():
    """v's NAT remapped: r sees v at a new port; u's interface still shows the old one (its probe
    entry, read back by the push run). u's probe must go to the new one, else the pair never
    handshakes again and stays relayed."""
    nodes, by = timed_mesh()
    by["r"]["discovered_endpoints"][key(4)] = "198.51.100.4:50000"
    by["u"]["discovered_endpoints"] = {key(4): "198.51.100.4:40004"}
    for n in ("u", "v"):
        by[n]["path_state"] = {"direct": {}, "down": {}, "held": {}}
    result = build_plans(nodes, [], {}, now=5000.0)
    assert result["paths"][-1]["path"] == "probing"
    assert entries(result, "u")["location:v"]["endpoint"] == "198.51.100.4:50000"


def test_a_live_direct_path_keeps_the_viewers_own_mapping():
    """While the viewer publishes a fresh direct handshake with v, its own mapping is the one that
    works (a held pair probes over it)."""
    nodes, by = timed_mesh()
    by["r"]["discovered_endpoints"][key(4)] = "198.51.100.4:50000"
    by["u"]["discovered_endpoints"] = {key(4): "198.51.100.4:40004"}
    by["u"]["path_state"] = {"direct": {"location:v": 100.0}, "down": {}, "held": {}}
    by["v"]["path_state"] = {"direct": {}, "down": {}, "held": {}}
    result = build_plans(nodes, [], {}, now=5000.0)
    assert result["paths"][-1]["path"] == "probing"
    assert entries(result, "u")["location:v"]["endpoint"] == "198.51.100.4:40004"
