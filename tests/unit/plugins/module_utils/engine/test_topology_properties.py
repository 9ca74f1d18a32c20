# -*- coding: utf-8 -*-
"""Property tests of the topology engine on random meshes (hypothesis)."""

import base64
import json

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from flat_plans import build_plans

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def key(i):
    return base64.b64encode(bytes([i % 256, i // 256]) * 16).decode()


# Address pools are disjoint from each other and from the WireGuard subnet 10.4.0.0/16 on
# purpose, except allowed-location IPs, which may clash with peers to exercise the filter.
ALIP_POOL = ["192.168.%d.0/24" % i for i in range(6)] + ["192.168.0.0/23", "10.9.1.0/24"]
PEER_POOL = ["10.9.%d.0/24" % i for i in range(5)] + ["10.9.0.7/32"]


@st.composite
def meshes(draw):
    locations = draw(
        st.lists(
            st.sampled_from(["", "aws", "gcp", "home", "lab"]), min_size=1, max_size=4, unique=True
        )
    )
    count = draw(st.integers(min_value=1, max_value=9))
    numbers = draw(st.permutations(range(20)))  # names in random order against the addresses
    nodes = []
    for i in range(count):
        internal = draw(st.booleans()) or draw(st.booleans())  # mostly with an internal IP
        endpoint = draw(
            st.sampled_from(
                ["public", "private", "private", "public6", "dns"]
                + ["none"] * (not draw(st.integers(0, 3)))
            )
        )
        address = {
            "public": "203.0.113.%d:51820" % (i + 1),
            "private": "10.1.%d.1:51820" % i,
            "public6": "[2001:db8::%x]:51820" % (i + 1),
            "dns": "n%d.example.org:51820" % i,
            "none": None,
        }[endpoint]
        nodes.append(
            {
                "name": "n%02d" % numbers[i],
                "location": draw(st.sampled_from(locations)),
                "endpoint": address,
                "internal_ip": ("10.1.%d.1/%d" % (i, draw(st.sampled_from([16, 24, 32]))))
                if internal
                else None,
                "pod_cidr": "10.2.%d.0/24" % i
                if draw(st.booleans()) or draw(st.booleans())
                else None,
                "public_key": key(i + 1),
                "leader": draw(st.booleans()),
                "persistent_keepalive": draw(st.sampled_from([0, 0, 25])),
                "allowed_location_ips": draw(st.lists(st.sampled_from(ALIP_POOL), max_size=2)),
                "discovered_endpoints": {},
            }
        )
    names = [n["name"] for n in nodes]
    peers = []
    for j in range(draw(st.integers(min_value=0, max_value=3))):
        peers.append(
            {
                "name": "peer-%d" % j,
                "public_key": key(500 + j),
                "allowed_ips": draw(st.lists(st.sampled_from(PEER_POOL), min_size=1, max_size=3)),
                "endpoint": draw(st.sampled_from([None, "198.51.100.%d:51820" % (j + 1)])),
                "persistent_keepalive": draw(st.sampled_from([0, 10])),
                "preshared_key": draw(st.sampled_from([None, key(900 + j)])),
            }
        )
    # some nodes report what they learned about others
    for item in nodes:
        if draw(st.booleans()):
            other = draw(st.sampled_from(nodes))
            if other is not item:
                item["discovered_endpoints"] = {
                    other["public_key"]: "198.51.100.%d:4%04d" % (len(names), 1)
                }
    options = {
        "granularity": draw(st.sampled_from(["location", "full", "cross"])),
        "encapsulate": draw(st.sampled_from(["always", "crosssubnet", "never"])),
        "local": draw(st.booleans()),
        "forward_rules": draw(st.booleans()),
    }
    return nodes, peers, options


def build(mesh):
    nodes, peers, options = mesh
    try:
        result = build_plans(nodes, peers, options)
    except KiloError as e:
        # the only legitimate refusal of a generated mesh: segments nobody can reach, none to relay
        assert e.field == "endpoint", str(e)
        assume(False)
    # a segment without any endpoint is reached through a relay (beyond Kilo, engine/relays.py):
    # its own properties are test_topology_relays.py's packet walk
    assume("paths" not in result)
    return result


@SETTINGS
@given(meshes())
def test_deterministic(mesh):
    first = build(mesh)
    second = build(mesh)
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


@SETTINGS
@given(meshes(), st.randoms(use_true_random=False))
def test_node_and_peer_order_do_not_matter(mesh, rnd):
    nodes, peers, options = mesh
    first = build(mesh)
    nodes, peers = list(nodes), list(peers)
    rnd.shuffle(nodes)
    rnd.shuffle(peers)
    assert build((nodes, peers, options)) == first


def segment_of(result):
    out = {}
    for seg in result["segments"]:
        for name in seg["nodes"]:
            out[name] = seg
    return out


@SETTINGS
@given(meshes())
def test_every_leader_reachable(mesh):
    result = build(mesh)
    segments = result["segments"]
    own = segment_of(result)
    for name, plan in result["plans"].items():
        seg = own[name]
        assert plan["segment"] == seg["key"]
        assert plan["leader"] == (seg["leader"] == name)
        if plan["leader"]:
            by_key = dict((p["public_key"], p) for p in plan["peers"])
            for other in segments:
                if other["group"] == seg["group"]:
                    assert other["public_key"] not in by_key
                    continue
                peer = by_key[other["public_key"]]
                assert peer["allowed_ips"] == other["allowed_ips"] + other["allowed_location_ips"]
                wg_routes = [
                    r["dst"] for r in plan["routes"] if r["gateway"] == other["wireguard_ip"]
                ]
                for member in other["members"]:
                    if member["pod_cidr"]:
                        assert member["pod_cidr"] in wg_routes
            assert plan["address"] == "%s/16" % seg["wireguard_ip"]
        else:
            assert plan["peers"] == [] and plan["address"] is None
            leader_ip = own[seg["leader"]]["members"][seg["nodes"].index(seg["leader"])][
                "internal_ip"
            ]
            via_leader = set(
                r["dst"] for r in plan["routes"] if r["gateway"] == leader_ip and r["table"] == 254
            )
            for other in segments:
                assert other["wireguard_ip"] + "/32" in via_leader
                if other is seg:
                    continue
                for dst in other["allowed_ips"] + other["allowed_location_ips"]:
                    assert dst in via_leader, (name, dst)
            for peer in result["peers"]:
                for dst in peer["allowed_ips"]:
                    assert dst in via_leader


@SETTINGS
@given(meshes())
def test_no_cidr_in_two_wireguard_peers(mesh):
    result = build(mesh)
    for plan in result["plans"].values():
        seen = {}
        for peer in plan["peers"]:
            for cidr in peer["allowed_ips"]:
                assert cidr not in seen, (plan["name"], cidr, seen.get(cidr), peer["name"])
                seen[cidr] = peer["name"]


@SETTINGS
@given(meshes())
def test_routes_and_rules_well_formed(mesh):
    result = build(mesh)
    interface = "kilo0"
    for plan in result["plans"].values():
        for r in plan["routes"]:
            assert r["device"] in (interface, "tunl0", "private")
            assert r["table"] in (254, 1107)
            if r["device"] == "tunl0":
                assert r["source"] == plan["internal_ip"].split("/")[0]
            if r["table"] == 1107:
                assert any(rule["dst"] == r["dst"] for rule in plan["rules"])
        for rule in plan["rules"]:
            assert rule["table"] == 1107
            assert any(r["table"] == 1107 and r["dst"] == rule["dst"] for r in plan["routes"])
        if not plan["leader"]:
            assert all(rule["iif"] is None for rule in plan["rules"])
