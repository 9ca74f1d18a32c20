"""agent/direct.py: what an agent publishes of its direct paths (``since``, ``held``), when it re-arms
a probe, and when a learned mapping wakes the reconcile. The real thing: tests/kube/test_agent_direct.py."""

from ansible_collections.kilo.mesh.plugins.module_utils.agent import direct as d

OWN, FAR = "location:gcp", "location:azure"


def computed(state):
    return {
        "segments": [
            {"key": OWN, "leader": "gcp-1", "reachable": False, "wireguard_ip": ["10.4.0.2"]},
            {"key": FAR, "leader": "azure-1", "reachable": False, "wireguard_ip": ["10.4.0.3"]},
            {
                "key": "location:aws",
                "leader": "aws-1",
                "reachable": True,
                "relay": True,
                "wireguard_ip": ["10.4.0.1"],
            },
        ],
        "paths": [
            {
                "a": FAR,
                "b": OWN,
                "path": state,
                "via": None if state == "direct" else "location:aws",
            }
        ],
    }


def plan(probe=True):
    peers = [{"name": "location:aws", "public_key": "R", "roaming": False}]
    if probe:
        peers.append(
            {
                "name": FAR,
                "public_key": "F",
                "allowed_ips": [],
                "persistent_keepalive": 25,
                "probe": True,
                "roaming": True,
            }
        )
    return {"peers": peers}


def reading(handshake=0, endpoint=None):
    return {"peers": [{"public_key": "F", "latest_handshake": handshake, "endpoint": endpoint}]}


def test_a_probes_first_handshake_is_since_and_a_quiet_one_is_rearmed():
    paths = d.DirectPaths()
    paths.update(computed("probing"), plan(), "gcp-1", 100.0)
    assert paths.tick(110.0, reading(), set()) == (False, {})
    assert paths.tick(125.0, reading(), set()) == (False, {"F": 25})  # 25 s without handshake
    assert paths.tick(126.0, reading(), set()) == (False, {})  # re-armed: the next in 25 s
    changed, rearm = paths.tick(127.0, reading(126), set())
    assert changed and not rearm and paths.state() == ({FAR: 126}, {})
    assert paths.tick(128.0, reading(127), set()) == (False, {})  # since stays the first


def test_a_silent_direct_path_is_held_with_doubling_hold_downs():
    paths = d.DirectPaths()
    paths.direct[FAR] = 90
    paths.update(computed("direct"), plan(False), "gcp-1", 100.0)
    assert paths.prober.targets == {FAR: "10.4.0.3"}
    assert paths.tick(101.0, None, {FAR}) == (False, {})
    assert paths.tick(104.0, None, set()) == (False, {})  # silent 3 s: not yet more
    changed = paths.tick(104.5, None, set())[0]
    assert changed and paths.state() == ({}, {FAR: 165})
    # back on the relay: nothing pinged; a second failure holds 120 s, then the count resets after 30 min up
    paths.update(computed("relayed"), plan(False), "gcp-1", 105.0)
    assert paths.prober.targets == {}
    assert paths.tick(165.0, None, set())[0] and paths.state() == ({}, {})  # the hold ends
    paths.update(computed("direct"), plan(False), "gcp-1", 200.0)
    paths.tick(210.0, None, set())
    assert paths.state()[1] == {FAR: 330}
    paths.update(computed("direct"), plan(False), "gcp-1", 400.0)
    paths.tick(401.0, None, {FAR})
    paths.tick(2300.0, None, set())
    assert paths.state()[1] == {FAR: 2360}  # 30 min up: 60 s again


def test_a_pair_back_on_the_relay_drops_its_since():
    paths = d.DirectPaths()
    paths.direct[FAR] = 90
    paths.update(computed("relayed"), plan(False), "gcp-1", 100.0)
    assert paths.state() == ({}, {})


def test_a_roaming_peers_new_mapping_wakes_the_reconcile():
    paths = d.DirectPaths()  # on a relay: the NAT'd leader's entry roams
    paths.update(
        computed("relayed"),
        {"peers": [{"name": FAR, "public_key": "F", "roaming": True}]},
        "aws-1",
        100.0,
    )
    assert not paths.tick(101.0, reading(0, "203.0.113.20:51820"), set())[
        0
    ]  # no handshake: not learned
    assert paths.tick(102.0, reading(101, "203.0.113.20:51820"), set())[0]  # learned now
    assert not paths.tick(103.0, reading(102, "203.0.113.20:51820"), set())[0]
    assert paths.tick(104.0, reading(103, "203.0.113.29:51820"), set())[0]


def test_hold_downs():
    assert [d.hold_for(n) for n in (1, 2, 3, 4, 5, 6)] == [60, 120, 240, 480, 900, 900]
