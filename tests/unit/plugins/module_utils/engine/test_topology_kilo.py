# -*- coding: utf-8 -*-
"""Kilo's own four-node example (two locations, one node without internal IP), worked by hand.

The example: nodes a and d in location "1", b and c in location "2"; d has no internal IP; a and b
happen to share the internal IP 192.168.0.1/32 (as in Kilo's fixture); b announces the
allowed-location IP 192.168.178.3/32; a keeps alive every 25 s. Two peers: "a" (10.5.0.1/32,
10.5.0.2/32, no endpoint) and "b" (10.5.0.3/32, endpoint 192.168.0.1:51820). Every endpoint is in
10/8, i.e. private, and nobody asks to lead, so each segment is led by its first node by name.

Expectations below are written out literally, not computed by the engine.
"""

import base64

import pytest

from flat_plans import build_plans


def key(i):
    return base64.b64encode(bytes([i]) * 32).decode()


def fixture_nodes():
    return [
        {
            "name": "a",
            "location": "1",
            "endpoint": "10.1.0.1:51820",
            "internal_ip": "192.168.0.1/32",
            "pod_cidr": "10.2.1.0/24",
            "public_key": key(1),
            "persistent_keepalive": 25,
        },
        {
            "name": "b",
            "location": "2",
            "endpoint": "10.1.0.2:51820",
            "internal_ip": "192.168.0.1/32",
            "pod_cidr": "10.2.2.0/24",
            "public_key": key(2),
            "allowed_location_ips": ["192.168.178.3/32"],
        },
        {
            "name": "c",
            "location": "2",
            "endpoint": "10.1.0.3:51820",
            "internal_ip": "192.168.0.2/32",
            "pod_cidr": "10.2.3.0/24",
            "public_key": key(3),
        },
        {
            "name": "d",
            "location": "1",
            "endpoint": "10.1.0.4:51820",
            "internal_ip": None,
            "pod_cidr": "10.2.4.0/24",
            "public_key": key(4),
        },
    ]


def fixture_peers():
    return [
        {"name": "a", "public_key": key(5), "allowed_ips": ["10.5.0.1/32", "10.5.0.2/32"]},
        {
            "name": "b",
            "public_key": key(6),
            "allowed_ips": ["10.5.0.3/32"],
            "endpoint": "192.168.0.1:51820",
        },
    ]


def via_wg(dst, gateway, source):
    return {
        "dst": dst,
        "gateway": gateway,
        "device": "kilo0",
        "source": source,
        "table": 254,
        "onlink": True,
    }


def to_peer(dst, source):
    return {
        "dst": dst,
        "gateway": None,
        "device": "kilo0",
        "source": source,
        "table": 254,
        "onlink": False,
    }


def via_private(dst, gateway):
    return {
        "dst": dst,
        "gateway": gateway,
        "device": "private",
        "source": None,
        "table": 254,
        "onlink": True,
    }


def via_tunnel(dst, gateway, source, table=254):
    return {
        "dst": dst,
        "gateway": gateway,
        "device": "tunl0",
        "source": source,
        "table": table,
        "onlink": True,
    }


PEER_DSTS = ["10.5.0.1/32", "10.5.0.2/32", "10.5.0.3/32"]


def plans(granularity="location", encapsulate="never", local=False):
    return build_plans(
        fixture_nodes(),
        fixture_peers(),
        {"granularity": granularity, "encapsulate": encapsulate, "local": local},
    )


# --- location granularity: segments -----------------------------------------------------------


def test_location_segments():
    segments = plans()["segments"]
    summary = [
        (
            s["key"],
            s["leader"],
            s["nodes"],
            s["wireguard_ip"],
            s["allowed_ips"],
            s["allowed_location_ips"],
            s["endpoint"],
        )
        for s in segments
    ]
    assert summary == [
        (
            "location:1",
            "a",
            ["a"],
            "10.4.0.1",
            ["10.2.1.0/24", "192.168.0.1/32", "10.4.0.1/32"],
            [],
            "10.1.0.1:51820",
        ),
        (
            "location:2",
            "b",
            ["b", "c"],
            "10.4.0.2",
            ["10.2.2.0/24", "192.168.0.1/32", "10.2.3.0/24", "192.168.0.2/32", "10.4.0.2/32"],
            ["192.168.178.3/32"],
            "10.1.0.2:51820",
        ),
        # d has no internal IP: a segment of its own, sorted after every location:* key
        ("node:d", "d", ["d"], "10.4.0.3", ["10.2.4.0/24", "10.4.0.3/32"], [], "10.1.0.4:51820"),
    ]
    assert [s["location"] for s in segments] == ["1", "2", "1"]


def test_location_leaders_and_addresses():
    result = plans()["plans"]
    assert {n: (p["leader"], p["segment"], p["address"]) for n, p in result.items()} == {
        "a": (True, "location:1", "10.4.0.1/16"),
        "b": (True, "location:2", "10.4.0.2/16"),
        "c": (False, "location:2", None),
        "d": (True, "node:d", "10.4.0.3/16"),
    }
    assert result["c"]["peers"] == []
    assert result["a"]["listen_port"] == 51820
    assert result["d"]["internal_ip"] is None
    assert result["a"]["internal_ip"] == "192.168.0.1/32"


def test_location_wireguard_peers_of_a():
    peers = plans()["plans"]["a"]["peers"]
    # a's own keepalive (25) goes on every peer it configures
    assert peers == [
        {
            "name": "location:2",
            "public_key": key(2),
            "endpoint": "10.1.0.2:51820",
            "allowed_ips": [
                "10.2.2.0/24",
                "192.168.0.1/32",
                "10.2.3.0/24",
                "192.168.0.2/32",
                "10.4.0.2/32",
                "192.168.178.3/32",
            ],
            "persistent_keepalive": 25,
        },
        {
            "name": "node:d",
            "public_key": key(4),
            "endpoint": "10.1.0.4:51820",
            "allowed_ips": ["10.2.4.0/24", "10.4.0.3/32"],
            "persistent_keepalive": 25,
        },
        {
            "name": "a",
            "public_key": key(5),
            "endpoint": None,
            "allowed_ips": ["10.5.0.1/32", "10.5.0.2/32"],
            "persistent_keepalive": 25,
        },
        {
            "name": "b",
            "public_key": key(6),
            "endpoint": "192.168.0.1:51820",
            "allowed_ips": ["10.5.0.3/32"],
            "persistent_keepalive": 25,
        },
    ]


def test_location_wireguard_peers_of_d_have_no_keepalive():
    peers = plans()["plans"]["d"]["peers"]
    assert [(p["name"], p["persistent_keepalive"]) for p in peers] == [
        ("location:1", 0),
        ("location:2", 0),
        ("a", 0),
        ("b", 0),
    ]
    assert peers[0]["allowed_ips"] == ["10.2.1.0/24", "192.168.0.1/32", "10.4.0.1/32"]


# --- location granularity: routes, encapsulation never, local off -----------------------------


def test_location_routes_from_a():
    result = plans()["plans"]["a"]
    src = "192.168.0.1"
    assert result["routes"] == [
        via_wg("10.2.2.0/24", "10.4.0.2", src),
        via_wg("192.168.0.1/32", "10.4.0.2", src),
        via_wg("10.2.3.0/24", "10.4.0.2", src),
        via_wg("192.168.0.2/32", "10.4.0.2", src),
        via_wg("192.168.178.3/32", "10.4.0.2", src),
        via_wg("10.2.4.0/24", "10.4.0.3", src),
    ] + [to_peer(d, src) for d in PEER_DSTS]
    assert result["rules"] == []


def test_location_routes_from_b():
    result = plans()["plans"]["b"]
    src = "192.168.0.1"
    assert result["routes"] == [
        via_wg("10.2.1.0/24", "10.4.0.1", src),
        via_wg("192.168.0.1/32", "10.4.0.1", src),
        via_wg("10.2.4.0/24", "10.4.0.3", src),
    ] + [to_peer(d, src) for d in PEER_DSTS]


def test_location_routes_from_c_non_leader():
    result = plans()["plans"]["c"]
    gw = "192.168.0.1"  # b, c's leader, over the private network
    assert result["routes"] == [
        via_private("10.4.0.1/32", gw),
        via_private("10.2.1.0/24", gw),
        via_private("192.168.0.1/32", gw),
        via_private("10.4.0.2/32", gw),
        via_private("10.4.0.3/32", gw),
        via_private("10.2.4.0/24", gw),
    ] + [via_private(d, gw) for d in PEER_DSTS]
    assert result["rules"] == []


def test_location_routes_from_d_without_internal_ip():
    result = plans()["plans"]["d"]
    assert result["routes"] == [
        via_wg("10.2.1.0/24", "10.4.0.1", None),
        via_wg("192.168.0.1/32", "10.4.0.1", None),
        via_wg("10.2.2.0/24", "10.4.0.2", None),
        via_wg("192.168.0.1/32", "10.4.0.2", None),
        via_wg("10.2.3.0/24", "10.4.0.2", None),
        via_wg("192.168.0.2/32", "10.4.0.2", None),
        via_wg("192.168.178.3/32", "10.4.0.2", None),
    ] + [to_peer(d, None) for d in PEER_DSTS]


# --- location granularity: local routes ---------------------------------------------------------


def test_location_local_never_from_b():
    result = plans(local=True)["plans"]["b"]
    src = "192.168.0.1"
    assert result["routes"] == [
        via_wg("10.2.1.0/24", "10.4.0.1", src),
        via_wg("192.168.0.1/32", "10.4.0.1", src),
        via_private("10.2.3.0/24", "192.168.0.2"),
        via_wg("10.2.4.0/24", "10.4.0.3", src),
    ] + [to_peer(d, src) for d in PEER_DSTS]
    assert result["rules"] == []


def test_location_local_always_from_b():
    result = plans(encapsulate="always", local=True)["plans"]["b"]
    src = "192.168.0.1"
    assert result["routes"] == [
        via_wg("10.2.1.0/24", "10.4.0.1", src),
        via_wg("192.168.0.1/32", "10.4.0.1", src),
        via_tunnel("10.2.3.0/24", "192.168.0.2", src),
        via_tunnel("192.168.0.2/32", "192.168.0.2", src, table=1107),
        via_wg("10.2.4.0/24", "10.4.0.3", src),
    ] + [to_peer(d, src) for d in PEER_DSTS]
    assert result["rules"] == [
        {"src": "10.2.2.0/24", "dst": "192.168.0.2/32", "iif": None, "table": 1107},
        {"src": None, "dst": "192.168.0.2/32", "iif": "kilo0", "table": 1107},
    ]


def test_location_local_never_from_c():
    result = plans(local=True)["plans"]["c"]
    gw = "192.168.0.1"
    assert result["routes"] == [
        via_private("10.4.0.1/32", gw),
        via_private("10.2.1.0/24", gw),
        via_private("192.168.0.1/32", gw),
        via_private("10.4.0.2/32", gw),
        via_private("10.2.2.0/24", gw),  # b's pod CIDR via b: own segment, local
        via_private("10.4.0.3/32", gw),
        via_private("10.2.4.0/24", gw),
    ] + [via_private(d, gw) for d in PEER_DSTS]
    assert result["rules"] == []


def test_location_local_always_from_c():
    result = plans(encapsulate="always", local=True)["plans"]["c"]
    gw, src = "192.168.0.1", "192.168.0.2"
    assert result["routes"] == [
        via_tunnel("10.4.0.1/32", gw, src),
        via_tunnel("10.2.1.0/24", gw, src),
        via_tunnel("192.168.0.1/32", gw, src),
        via_tunnel("10.4.0.2/32", gw, src),
        via_tunnel("10.2.2.0/24", gw, src),
        via_tunnel("192.168.0.1/32", gw, src, table=1107),
        via_tunnel("10.4.0.3/32", gw, src),
        via_tunnel("10.2.4.0/24", gw, src),
    ] + [via_tunnel(d, gw, src) for d in PEER_DSTS]
    # a non-leader has no WireGuard traffic to encapsulate: no iif rule
    assert result["rules"] == [
        {"src": "10.2.3.0/24", "dst": "192.168.0.1/32", "iif": None, "table": 1107}
    ]


def test_location_local_from_a_alone_in_its_segment():
    # a's location has no other member with an internal IP (d is a segment of its own)
    with_local = plans(encapsulate="always", local=True)["plans"]["a"]
    without = plans(encapsulate="always", local=False)["plans"]["a"]
    assert with_local["routes"] == without["routes"]
    assert with_local["rules"] == []


# --- full granularity ---------------------------------------------------------------------------


def test_full_segments():
    segments = plans(granularity="full")["segments"]
    assert [
        (s["key"], s["leader"], s["wireguard_ip"], s["allowed_ips"], s["allowed_location_ips"])
        for s in segments
    ] == [
        ("node:a", "a", "10.4.0.1", ["10.2.1.0/24", "192.168.0.1/32", "10.4.0.1/32"], []),
        (
            "node:b",
            "b",
            "10.4.0.2",
            ["10.2.2.0/24", "192.168.0.1/32", "10.4.0.2/32"],
            ["192.168.178.3/32"],
        ),
        ("node:c", "c", "10.4.0.3", ["10.2.3.0/24", "192.168.0.2/32", "10.4.0.3/32"], []),
        ("node:d", "d", "10.4.0.4", ["10.2.4.0/24", "10.4.0.4/32"], []),
    ]
    assert all(p["leader"] for p in plans(granularity="full")["plans"].values())


@pytest.mark.parametrize("local", [False, True])
def test_full_routes_from_a(local):
    result = plans(granularity="full", local=local)["plans"]["a"]
    src = "192.168.0.1"
    assert result["routes"] == [
        via_wg("10.2.2.0/24", "10.4.0.2", src),
        via_wg("192.168.0.1/32", "10.4.0.2", src),
        via_wg("192.168.178.3/32", "10.4.0.2", src),
        via_wg("10.2.3.0/24", "10.4.0.3", src),
        via_wg("192.168.0.2/32", "10.4.0.3", src),
        via_wg("10.2.4.0/24", "10.4.0.4", src),
    ] + [to_peer(d, src) for d in PEER_DSTS]
    assert result["rules"] == []


def test_full_routes_from_c():
    result = plans(granularity="full", encapsulate="always", local=True)["plans"]["c"]
    src = "192.168.0.2"
    assert result["routes"] == [
        via_wg("10.2.1.0/24", "10.4.0.1", src),
        via_wg("192.168.0.1/32", "10.4.0.1", src),
        via_wg("10.2.2.0/24", "10.4.0.2", src),
        via_wg("192.168.0.1/32", "10.4.0.2", src),
        via_wg("192.168.178.3/32", "10.4.0.2", src),
        via_wg("10.2.4.0/24", "10.4.0.4", src),
    ] + [to_peer(d, src) for d in PEER_DSTS]
    assert [p["name"] for p in result["peers"]] == ["node:a", "node:b", "node:d", "a", "b"]


# --- firewall of the example --------------------------------------------------------------------


def test_firewall_of_b_always_local():
    fw = plans(encapsulate="always", local=True)["plans"]["b"]["firewall"]
    assert fw["nat_sources"] == ["10.2.2.0/24"] + PEER_DSTS
    assert fw["nat_destinations"] == ["192.168.178.3/32"]
    assert (
        fw["nat_exempt_destinations"]
        == [
            "10.4.0.1/32",
            "10.2.1.0/24",
            "192.168.0.1/32",
            "10.4.0.2/32",
            "10.2.2.0/24",
            "10.2.3.0/24",
            "192.168.0.2/32",
            "10.4.0.3/32",
            "10.2.4.0/24",
        ]
        + PEER_DSTS
    )
    assert fw["forward_accept"] == []  # forward_rules is off by default
    assert fw["ipip_filter"] is True
    assert fw["ipip_accept_sources"] == ["192.168.0.1/32", "192.168.0.2/32"]


def test_firewall_of_d_never():
    fw = plans()["plans"]["d"]["firewall"]
    assert fw["ipip_filter"] is False
    assert fw["ipip_accept_sources"] == []
    assert fw["nat_destinations"] == []
    assert fw["nat_sources"] == ["10.2.4.0/24"] + PEER_DSTS


def test_ipip_sources_of_node_without_internal_ip_come_from_its_location():
    # Kilo looks up the segment "location:<own location>", even for a node that is its own segment
    fw = plans(encapsulate="always", local=True)["plans"]["d"]["firewall"]
    assert fw["ipip_accept_sources"] == ["192.168.0.1/32"]


def test_ipip_sources_are_empty_under_full_granularity():
    fw = plans(granularity="full", encapsulate="always", local=True)["plans"]["b"]["firewall"]
    assert fw["ipip_filter"] is True
    assert fw["ipip_accept_sources"] == []
