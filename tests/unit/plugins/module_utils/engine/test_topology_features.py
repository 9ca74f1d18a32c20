# -*- coding: utf-8 -*-
"""Branches of the topology engine, each on a small mesh worked out by hand."""

import base64
import json
import shutil
import subprocess

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.common import is_public
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import peer_config
from flat_plans import build_plans
from ansible_collections.kilo.mesh.plugins.module_utils.engine.graph import to_dot
from ansible_collections.kilo.mesh.plugins.module_utils.engine.parse import parse_endpoint


def key(i):
    return base64.b64encode(bytes([i]) * 32).decode()


def node(name, location, internal=None, pod=None, endpoint=None, number=None, **extra):
    item = {
        "name": name,
        "location": location,
        "internal_ip": internal,
        "pod_cidr": pod,
        "endpoint": endpoint,
        "public_key": key(number if number is not None else sum(name.encode()) % 250 + 1),
    }
    item.update(extra)
    return item


def route(dst, gateway, device, source, table=254, onlink=True):
    return {
        "dst": dst,
        "gateway": gateway,
        "device": device,
        "source": source,
        "table": table,
        "onlink": onlink,
    }


def leaders(result):
    return dict((s["key"], s["leader"]) for s in result["segments"])


# --- leader choice ------------------------------------------------------------------------------


def leader_mesh(*specs, **healthy):
    nodes = []
    for i, (name, endpoint, hint) in enumerate(specs):
        nodes.append(
            node(
                name,
                "x",
                "10.0.0.%d/24" % (i + 1),
                "10.2.%d.0/24" % i,
                endpoint,
                i + 1,
                leader=hint,
            )
        )
        if name in healthy:
            nodes[-1]["healthy"] = healthy[name]
    return leaders(build_plans(nodes, []))["location:x"]


def test_leader_health_passes_over_a_node_down_this_run_while_another_can_lead():
    specs = (
        ("n1", "10.0.0.1:51820", False),
        ("n2", "203.0.113.2:51820", True),
        ("n3", "203.0.113.3:51820", False),
    )
    assert leader_mesh(*specs) == "n2"
    assert leader_mesh(*specs, n2=False) == "n3"  # Kilo's order among the healthy ones
    assert leader_mesh(*specs, n2=False, n3=False) == "n1"
    # nobody healthy with an endpoint: Kilo's choice, as without the option
    assert leader_mesh(*specs, n1=False, n2=False, n3=False) == "n2"
    assert leader_mesh(("n1", None, False), ("n2", "203.0.113.2:51820", False), n2=False) == "n2"


def test_leader_hinted_and_public_wins():
    assert (
        leader_mesh(
            ("n1", "10.0.0.1:51820", False),
            ("n2", "203.0.113.2:51820", False),
            ("n3", "10.0.0.3:51820", True),
            ("n4", "203.0.113.4:51820", True),
        )
        == "n4"
    )


def test_leader_hint_beats_public():
    assert (
        leader_mesh(
            ("n1", "10.0.0.1:51820", False),
            ("n2", "203.0.113.2:51820", False),
            ("n3", "10.0.0.3:51820", True),
        )
        == "n3"
    )


def test_leader_first_hinted_by_name():
    assert (
        leader_mesh(
            ("n1", "10.0.0.1:51820", False),
            ("n2", "10.0.0.2:51820", True),
            ("n3", "10.0.0.3:51820", True),
        )
        == "n2"
    )


def test_leader_public_beats_private():
    assert (
        leader_mesh(
            ("n1", "10.0.0.1:51820", False),
            ("n2", "192.168.1.2:51820", False),
            ("n3", "203.0.113.3:51820", False),
        )
        == "n3"
    )


def test_leader_falls_back_to_first_by_name():
    assert leader_mesh(("n2", "172.16.0.2:51820", False), ("n1", "10.0.0.1:51820", False)) == "n1"


def test_leader_never_a_node_without_endpoint():
    assert leader_mesh(("n1", None, True), ("n2", "10.0.0.2:51820", False)) == "n2"


@pytest.mark.parametrize(
    "address,public",
    [
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("172.31.255.1", False),
        ("172.32.0.1", True),
        ("172.15.0.1", True),
        ("192.168.3.4", False),
        ("192.169.0.1", True),
        ("100.64.0.1", True),
        ("203.0.113.9", True),
        ("fd00::1", False),
        ("fd00:ffff::1", False),
        ("fd12::1", True),
        ("fc00::1", True),
        ("2001:db8::1", True),
    ],
)
def test_is_public_follows_kilo(address, public):
    import ipaddress

    assert is_public(ipaddress.ip_address(address)) is public


# --- WireGuard IPs ------------------------------------------------------------------------------


def test_wireguard_ips_follow_segment_key_order():
    nodes = [
        node("p", "b", "10.0.1.1/24", "10.2.1.0/24", "10.0.1.1:51820", 1),
        node("q", "a", "10.0.2.1/24", "10.2.2.0/24", "10.0.2.1:51820", 2),
        node("r", "", "10.0.3.1/24", "10.2.3.0/24", "10.0.3.1:51820", 3),
        node("s", "a", None, "10.2.4.0/24", "203.0.113.4:51820", 4),
    ]
    result = build_plans(nodes, [], {"subnet": "10.4.0.0/16"})
    assert [(s["key"], s["wireguard_ip"]) for s in result["segments"]] == [
        ("location:", "10.4.0.1"),
        ("location:a", "10.4.0.2"),
        ("location:b", "10.4.0.3"),
        ("node:s", "10.4.0.4"),
    ]
    # a segment sorting earlier renumbers every later one (Kilo behaviour)
    nodes.append(node("t", "0", "10.0.5.1/24", "10.2.5.0/24", "10.0.5.1:51820", 5))
    result = build_plans(nodes, [], {"subnet": "10.4.0.0/16"})
    assert [(s["key"], s["wireguard_ip"]) for s in result["segments"]] == [
        ("location:", "10.4.0.1"),
        ("location:0", "10.4.0.2"),
        ("location:a", "10.4.0.3"),
        ("location:b", "10.4.0.4"),
        ("node:s", "10.4.0.5"),
    ]
    assert result["plans"]["p"]["address"] == "10.4.0.4/16"


def test_subnet_uses_every_address_after_the_network():
    nodes = [
        node("n%d" % i, "l%d" % i, "10.0.%d.1/24" % i, None, "10.0.%d.1:51820" % i, i + 1)
        for i in range(3)
    ]
    result = build_plans(nodes, [], {"subnet": "10.9.0.0/30"})
    assert [s["wireguard_ip"] for s in result["segments"]] == ["10.9.0.1", "10.9.0.2", "10.9.0.3"]
    assert result["plans"]["n2"]["address"] == "10.9.0.3/30"


# --- peers --------------------------------------------------------------------------------------


def test_peer_cidrs_deduplicated_first_name_wins():
    nodes = [node("n", "x", "10.0.0.1/24", "10.2.0.0/24", "10.0.0.1:51820", 1)]
    peers = [
        {"name": "zeta", "public_key": key(20), "allowed_ips": ["10.9.0.0/24", "10.9.2.1/32"]},
        {
            "name": "alpha",
            "public_key": key(21),
            "allowed_ips": ["10.9.0.5/24", "10.9.1.0/24", "10.9.1.0/24"],
        },
    ]
    plan = build_plans(nodes, peers)["plans"]["n"]
    assert [(p["name"], p["allowed_ips"]) for p in plan["peers"]] == [
        ("alpha", ["10.9.0.0/24", "10.9.1.0/24"]),  # host bits cleared, own duplicate dropped
        ("zeta", ["10.9.2.1/32"]),  # 10.9.0.0/24 stays with alpha
    ]
    assert [r["dst"] for r in plan["routes"]] == ["10.9.0.0/24", "10.9.1.0/24", "10.9.2.1/32"]


def test_preshared_key_only_in_wireguard_peer_entries():
    psk = key(99)
    nodes = [
        node("n", "x", "10.0.0.1/24", "10.2.0.0/24", "10.0.0.1:51820", 1),
        node("m", "y", "10.1.0.1/24", "10.3.0.0/24", "10.1.0.1:51820", 2),
    ]
    peers = [
        {
            "name": "laptop",
            "public_key": key(30),
            "allowed_ips": ["10.9.0.1/32"],
            "preshared_key": psk,
        },
        {"name": "phone", "public_key": key(31), "allowed_ips": ["10.9.0.2/32"]},
    ]
    result = build_plans(nodes, peers)
    entries = result["plans"]["n"]["peers"]
    assert entries[1]["name"] == "laptop" and entries[1]["preshared_key"] == psk
    assert "preshared_key" not in entries[0] and "preshared_key" not in entries[2]
    elsewhere = dict(result)
    elsewhere["plans"] = dict((n, dict(p, peers=[])) for n, p in result["plans"].items())
    assert psk not in json.dumps(elsewhere)
    assert psk not in to_dot(result)


def test_peer_endpoint_and_keepalive_pass_through():
    nodes = [
        node("n", "x", "10.0.0.1/24", "10.2.0.0/24", "10.0.0.1:51820", 1, persistent_keepalive=15)
    ]
    peers = [
        {
            "name": "p",
            "public_key": key(30),
            "allowed_ips": ["10.9.0.1/32"],
            "endpoint": "[2001:DB8::0:1]:4000",
            "persistent_keepalive": 5,
        }
    ]
    entry = build_plans(nodes, peers)["plans"]["n"]["peers"][0]
    assert entry["endpoint"] == "[2001:db8::1]:4000"
    assert entry["persistent_keepalive"] == 15  # the node's own keepalive, as Kilo does


# --- discovered endpoints (NAT) ------------------------------------------------------------------


def nat_mesh(keepalive_b=25, discovered_a=None, discovered_c2=None, peer_keepalive=0):
    nodes = [
        node(
            "a",
            "1",
            "10.1.0.1/16",
            "10.2.1.0/24",
            "203.0.113.1:51820",
            1,
            discovered_endpoints=discovered_a or {},
        ),
        node(
            "b",
            "2",
            "10.20.0.1/16",
            "10.2.2.0/24",
            "203.0.113.2:51820",
            2,
            persistent_keepalive=keepalive_b,
        ),
        node("c1", "3", "10.30.0.1/16", "10.2.3.0/24", "203.0.113.3:51820", 3),
        node(
            "c2",
            "3",
            "10.30.0.2/16",
            "10.2.4.0/24",
            "10.30.0.2:51820",
            4,
            discovered_endpoints=discovered_c2 or {},
        ),
    ]
    peers = [
        {
            "name": "roamer",
            "public_key": key(40),
            "allowed_ips": ["10.9.0.1/32"],
            "endpoint": "198.51.100.40:51820",
            "persistent_keepalive": peer_keepalive,
        }
    ]
    return build_plans(nodes, peers)["plans"]


def endpoints(plan):
    return dict((p["name"], p["endpoint"]) for p in plan["peers"])


def test_discovered_endpoint_replaces_configured_when_remote_keeps_alive():
    plans = nat_mesh(discovered_a={key(2): "198.51.100.7:40000"})
    assert endpoints(plans["a"])["location:2"] == "198.51.100.7:40000"
    # c1 discovered nothing itself: it uses the mesh-wide record (a's, first in segment order)
    assert endpoints(plans["c1"])["location:2"] == "198.51.100.7:40000"


def test_discovered_endpoint_ignored_without_keepalive():
    plans = nat_mesh(keepalive_b=0, discovered_a={key(2): "198.51.100.7:40000"})
    assert endpoints(plans["a"])["location:2"] == "203.0.113.2:51820"


def test_own_discovered_endpoints_win_over_others():
    plans = nat_mesh(
        discovered_a={key(2): "198.51.100.7:40000"}, discovered_c2={key(2): "198.51.100.8:50000"}
    )
    assert endpoints(plans["a"])["location:2"] == "198.51.100.7:40000"
    # c1 leads location 3; a's record comes first (segment location:1 before location:3)
    assert endpoints(plans["c1"])["location:2"] == "198.51.100.7:40000"


def test_peer_discovered_endpoint_needs_peer_keepalive():
    found = {key(40): "198.51.100.99:1234"}
    assert endpoints(nat_mesh(discovered_a=found)["a"])["roamer"] == "198.51.100.40:51820"
    assert (
        endpoints(nat_mesh(discovered_a=found, peer_keepalive=10)["a"])["roamer"]
        == "198.51.100.99:1234"
    )


def test_internal_ip_equal_to_discovered_endpoint_is_not_routed_over_wireguard():
    plain = nat_mesh()["a"]
    assert "10.20.0.1/32" in [r["dst"] for r in plain["routes"]]
    plans = nat_mesh(discovered_a={key(2): "10.20.0.1:51820"})
    assert "10.20.0.1/32" not in [r["dst"] for r in plans["a"]["routes"]]


def test_internal_ip_equal_to_configured_endpoint_is_not_routed():
    # c2's own endpoint is its internal IP, but c1 leads location 3 (public endpoint): routed.
    dsts = [r["dst"] for r in nat_mesh()["a"]["routes"]]
    assert "10.30.0.2/32" in dsts and "10.30.0.1/32" in dsts
    nodes = [
        node("a", "1", "10.1.0.1/16", "10.2.1.0/24", "203.0.113.1:51820", 1),
        node("b", "2", "10.20.0.1/16", "10.2.2.0/24", "10.20.0.1:51820", 2),
    ]
    dsts = [r["dst"] for r in build_plans(nodes, [])["plans"]["a"]["routes"]]
    assert dsts == ["10.2.2.0/24"]


# --- allowed-location IPs -------------------------------------------------------------------------


def alip_mesh(alips_1=(), alips_2=(), alips_3=(), peer_ips=("10.9.0.0/24",)):
    nodes = [
        node(
            "a",
            "1",
            "10.1.0.1/16",
            "10.2.1.0/24",
            "203.0.113.1:51820",
            1,
            allowed_location_ips=list(alips_1),
        ),
        node(
            "b",
            "2",
            "10.20.0.1/16",
            "10.2.2.0/24",
            "203.0.113.2:51820",
            2,
            allowed_location_ips=list(alips_2),
        ),
        node(
            "c",
            "3",
            "10.30.0.1/16",
            "10.2.3.0/24",
            "203.0.113.3:51820",
            3,
            allowed_location_ips=list(alips_3),
        ),
    ]
    peers = [{"name": "p", "public_key": key(40), "allowed_ips": list(peer_ips)}]
    return build_plans(nodes, peers)


def kept(result):
    return [s["allowed_location_ips"] for s in result["segments"]]


def test_alips_deduplicated_and_sorted_as_strings():
    nodes = [
        node(
            "a",
            "1",
            "10.1.0.1/16",
            "10.2.1.0/24",
            "203.0.113.1:51820",
            1,
            allowed_location_ips=["192.168.9.0/24", "192.168.10.0/24"],
        ),
        node(
            "a2",
            "1",
            "10.1.0.2/16",
            "10.2.9.0/24",
            "10.1.0.2:51820",
            9,
            allowed_location_ips=["192.168.9.7/24"],
        ),
    ]
    assert kept(build_plans(nodes, [])) == [["192.168.10.0/24", "192.168.9.0/24"]]


def test_alip_overlapping_another_segment_only_the_later_keeps_it():
    # Kilo filters segment by segment: location:1 sees location:2's raw list and drops its
    # entry; location:2 then sees location:1's already filtered (empty) list and keeps its own.
    assert kept(alip_mesh(["192.168.50.0/24"], ["192.168.50.128/25"])) == [
        [],
        ["192.168.50.128/25"],
        [],
    ]


def test_alip_inside_an_allowed_ip_dropped_but_a_wider_one_kept():
    result = alip_mesh(["10.2.2.0/25", "10.20.0.1/32", "10.2.0.0/16"])
    assert kept(result) == [["10.2.0.0/16"], [], []]


def test_alip_overlapping_a_peer_dropped():
    assert kept(alip_mesh(["10.9.0.128/25", "10.8.0.0/16"])) == [["10.8.0.0/16"], [], []]


def test_alip_and_wireguard_ips_allocated_so_far():
    # WireGuard IPs 10.4.0.1-3; location:2 sees 10.4.0.1 (allocated) but not yet 10.4.0.3.
    assert kept(alip_mesh([], ["10.4.0.1/32", "10.4.0.3/32"])) == [[], ["10.4.0.3/32"], []]


def test_alip_routes_and_nat():
    result = alip_mesh([], ["192.168.50.0/24"])
    a = result["plans"]["a"]
    assert route("192.168.50.0/24", "10.4.0.2", "kilo0", "10.1.0.1") in a["routes"]
    assert a["peers"][0]["allowed_ips"][-1] == "192.168.50.0/24"
    assert result["plans"]["b"]["firewall"]["nat_destinations"] == ["192.168.50.0/24"]
    assert a["firewall"]["nat_destinations"] == []
    # not exempt from NAT: the printer behind b must see b's address
    assert "192.168.50.0/24" not in a["firewall"]["nat_exempt_destinations"]


# --- encapsulation ------------------------------------------------------------------------------


def cross_subnet_mesh(strategy):
    nodes = [
        node("l", "x", "10.1.0.1/24", "10.2.1.0/24", "203.0.113.1:51820", 1, leader=True),
        node("m1", "x", "10.1.0.2/24", "10.2.2.0/24", "10.1.0.2:51820", 2),
        node("m2", "x", "10.1.1.2/24", "10.2.3.0/24", "10.1.1.2:51820", 3),
        node("o", "y", "10.9.0.1/24", "10.2.9.0/24", "203.0.113.9:51820", 9),
    ]
    return build_plans(nodes, [], {"encapsulate": strategy})["plans"]


def test_crosssubnet_leader_local_routes():
    plan = cross_subnet_mesh("crosssubnet")["l"]
    assert plan["routes"][:3] == [
        route("10.2.2.0/24", "10.1.0.2", "private", None),
        route("10.2.3.0/24", "10.1.1.2", "tunl0", "10.1.0.1"),
        route("10.1.1.2/32", "10.1.1.2", "tunl0", "10.1.0.1", table=1107),
    ]
    assert plan["rules"] == [
        {"src": "10.2.1.0/24", "dst": "10.1.1.2/32", "iif": None, "table": 1107},
        {"src": None, "dst": "10.1.1.2/32", "iif": "kilo0", "table": 1107},
    ]


def test_crosssubnet_non_leaders():
    plans = cross_subnet_mesh("crosssubnet")
    # m1 shares the leader's subnet: plain routes; m2 does not: everything through tunl0
    assert plans["m1"]["routes"][0] == route("10.4.0.1/32", "10.1.0.1", "private", None)
    assert plans["m1"]["routes"][1:3] == [
        route("10.2.1.0/24", "10.1.0.1", "private", None),
        route("10.2.3.0/24", "10.1.1.2", "tunl0", "10.1.0.2"),
    ]
    assert plans["m1"]["rules"] == [
        {"src": "10.2.2.0/24", "dst": "10.1.1.2/32", "iif": None, "table": 1107}
    ]
    assert plans["m2"]["routes"][0] == route("10.4.0.1/32", "10.1.0.1", "tunl0", "10.1.1.2")
    assert [r["device"] for r in plans["m2"]["routes"]] == ["tunl0"] * len(plans["m2"]["routes"])
    assert len(plans["m2"]["rules"]) == 2


def test_never_has_no_tunnel_and_no_rules():
    plans = cross_subnet_mesh("never")
    for plan in plans.values():
        assert plan["rules"] == []
        assert "tunl0" not in [r["device"] for r in plan["routes"]]
        assert plan["tunnel_address"] is None
        assert plan["firewall"]["ipip_filter"] is False


def test_always_tunnel_address_and_ipip_sources():
    plans = cross_subnet_mesh("always")
    assert plans["m1"]["tunnel_address"] == "10.2.2.1/32"
    assert plans["m1"]["firewall"]["ipip_accept_sources"] == [
        "10.1.0.1/32",
        "10.1.0.2/32",
        "10.1.1.2/32",
    ]
    assert plans["o"]["firewall"]["ipip_accept_sources"] == ["10.9.0.1/32"]


def test_local_off_drops_own_segment_routes():
    nodes = [
        node("l", "x", "10.1.0.1/24", "10.2.1.0/24", "203.0.113.1:51820", 1),
        node("m", "x", "10.1.0.2/24", "10.2.2.0/24", "10.1.0.2:51820", 2),
    ]
    plans = build_plans(nodes, [], {"local": False})["plans"]
    assert plans["l"]["routes"] == [] and plans["l"]["rules"] == []
    assert plans["m"]["routes"] == [route("10.4.0.1/32", "10.1.0.1", "tunl0", "10.1.0.2")]
    assert plans["m"]["firewall"]["ipip_filter"] is False
    plans = build_plans(nodes, [], {"local": True})["plans"]
    assert plans["m"]["routes"] == [
        route("10.4.0.1/32", "10.1.0.1", "tunl0", "10.1.0.2"),
        route("10.2.1.0/24", "10.1.0.1", "tunl0", "10.1.0.2"),
        route("10.1.0.1/32", "10.1.0.1", "tunl0", "10.1.0.2", table=1107),
    ]


# --- plain hosts, IPv6 --------------------------------------------------------------------------


def test_plain_hosts_without_pod_cidr():
    nodes = [
        node("h1", "dc", "10.1.0.1/24", None, "203.0.113.1:51820", 1),
        node("h2", "dc", "10.1.0.2/24", None, "10.1.0.2:51820", 2),
        node("h3", "cloud", "10.8.0.1/24", None, "203.0.113.3:51820", 3),
    ]
    result = build_plans(nodes, [])
    assert [(s["key"], s["allowed_ips"]) for s in result["segments"]] == [
        ("location:cloud", ["10.8.0.1/32", "10.4.0.1/32"]),
        ("location:dc", ["10.1.0.1/32", "10.1.0.2/32", "10.4.0.2/32"]),
    ]
    h1, h2 = result["plans"]["h1"], result["plans"]["h2"]
    assert h1["routes"] == [
        route("10.8.0.1/32", "10.4.0.1", "kilo0", "10.1.0.1"),
        route("10.1.0.2/32", "10.1.0.2", "tunl0", "10.1.0.1", table=1107),
    ]
    # only the WireGuard-side rule: there is no pod CIDR to take traffic from
    assert h1["rules"] == [{"src": None, "dst": "10.1.0.2/32", "iif": "kilo0", "table": 1107}]
    assert h2["routes"] == [
        route("10.4.0.1/32", "10.1.0.1", "tunl0", "10.1.0.2"),
        route("10.8.0.1/32", "10.1.0.1", "tunl0", "10.1.0.2"),
        route("10.4.0.2/32", "10.1.0.1", "tunl0", "10.1.0.2"),
    ]
    assert h2["rules"] == []
    assert h2["tunnel_address"] is None
    assert h2["firewall"]["nat_sources"] == []


def test_ipv6_mesh():
    nodes = [
        node("a", "x", "fd00:1::1/64", "fd10:0:0:1::/64", "[2001:db8::1]:51820", 1),
        node("b", "x", "fd00:1::2/64", "fd10:0:0:2::/64", "[fd00:1::2]:51820", 2),
        node("c", "y", "fd00:2::1/64", "fd10:0:0:3::/64", "[2001:db8::3]:51821", 3),
    ]
    result = build_plans(nodes, [], {"subnet": "fd04::/64", "encapsulate": "never"})
    assert [
        (s["key"], s["leader"], s["wireguard_ip"], s["allowed_ips"]) for s in result["segments"]
    ] == [
        (
            "location:x",
            "a",
            "fd04::1",
            ["fd10:0:0:1::/64", "fd00:1::1/128", "fd10:0:0:2::/64", "fd00:1::2/128", "fd04::1/128"],
        ),
        ("location:y", "c", "fd04::2", ["fd10:0:0:3::/64", "fd00:2::1/128", "fd04::2/128"]),
    ]
    a, b, c = (result["plans"][n] for n in "abc")
    assert a["address"] == "fd04::1/64" and c["listen_port"] == 51821
    assert a["peers"][0]["endpoint"] == "[2001:db8::3]:51821"
    assert a["routes"][0] == route("fd10:0:0:2::/64", "fd00:1::2", "private", None)
    assert a["routes"][1:] == [
        route("fd10:0:0:3::/64", "fd04::2", "kilo0", "fd00:1::1"),
        route("fd00:2::1/128", "fd04::2", "kilo0", "fd00:1::1"),
    ]
    assert b["routes"][0] == route("fd04::1/128", "fd00:1::1", "private", None)


def test_ipv6_allocation_stays_in_subnet():
    nodes = [
        node(
            "n%d" % i,
            "l%d" % i,
            "fd00::%x/64" % (i + 1),
            None,
            "[2001:db8::%x]:51820" % (i + 1),
            i + 1,
        )
        for i in range(3)
    ]
    result = build_plans(nodes, [], {"subnet": "fd04::/126"})
    assert [s["wireguard_ip"] for s in result["segments"]] == ["fd04::1", "fd04::2", "fd04::3"]


# --- cross granularity ----------------------------------------------------------------------------


def cross_mesh(local=True, encapsulate="never"):
    nodes = [
        node(
            "a1", "a", "10.1.0.1/24", "10.2.1.0/24", "203.0.113.1:51820", 1, persistent_keepalive=5
        ),
        node("a2", "a", "10.1.0.2/24", "10.2.2.0/24", "10.1.0.2:51820", 2),
        node("b1", "b", "10.8.0.1/24", "10.2.3.0/24", "203.0.113.3:51820", 3),
        node("z", "a", None, "10.2.4.0/24", "203.0.113.4:51820", 4),
    ]
    return build_plans(
        nodes, [], {"granularity": "cross", "local": local, "encapsulate": encapsulate}
    )


def test_cross_segments_one_per_node():
    result = cross_mesh()
    assert [
        (s["key"], s["location"], s["wireguard_ip"], s["allowed_ips"]) for s in result["segments"]
    ] == [
        ("node:a1", "a", "10.4.0.1", ["10.2.1.0/24", "10.1.0.1/32", "10.4.0.1/32"]),
        ("node:a2", "a", "10.4.0.2", ["10.2.2.0/24", "10.1.0.2/32", "10.4.0.2/32"]),
        ("node:b1", "b", "10.4.0.3", ["10.2.3.0/24", "10.8.0.1/32", "10.4.0.3/32"]),
        ("node:z", "a", "10.4.0.4", ["10.2.4.0/24", "10.4.0.4/32"]),
    ]
    assert all(p["leader"] for p in result["plans"].values())
    assert result["plans"]["a2"]["address"] == "10.4.0.2/16"


def test_cross_wireguard_only_between_locations():
    plans = cross_mesh()["plans"]
    names = dict((n, [p["name"] for p in plan["peers"]]) for n, plan in plans.items())
    assert names == {
        "a1": ["node:b1", "node:z"],
        "a2": ["node:b1", "node:z"],
        "b1": ["node:a1", "node:a2", "node:z"],
        # z has no internal IP, so it cannot use location a's private network: it links to all
        "z": ["node:a1", "node:a2", "node:b1"],
    }
    assert plans["a2"]["peers"][0]["endpoint"] == "203.0.113.3:51820"
    assert plans["b1"]["peers"][1]["endpoint"] == "10.1.0.2:51820"


def test_cross_routes_of_a2():
    plan = cross_mesh()["plans"]["a2"]
    src = "10.1.0.2"
    assert plan["routes"] == [
        route("10.4.0.1/32", "10.1.0.1", "private", None),  # a1: same location, private network
        route("10.2.1.0/24", "10.1.0.1", "private", None),
        route("10.2.3.0/24", "10.4.0.3", "kilo0", src),  # b1 over WireGuard
        route("10.8.0.1/32", "10.4.0.3", "kilo0", src),
        route("10.2.4.0/24", "10.4.0.4", "kilo0", src),  # z over WireGuard
    ]


def test_cross_always_and_local_off():
    plan = cross_mesh(encapsulate="always")["plans"]["a1"]
    assert plan["routes"][:3] == [
        route("10.4.0.2/32", "10.1.0.2", "tunl0", "10.1.0.1"),
        route("10.2.2.0/24", "10.1.0.2", "tunl0", "10.1.0.1"),
        route("10.1.0.2/32", "10.1.0.2", "tunl0", "10.1.0.1", table=1107),
    ]
    assert plan["firewall"]["ipip_accept_sources"] == ["10.1.0.1/32", "10.1.0.2/32"]
    plan = cross_mesh(local=False)["plans"]["a1"]
    assert [r["gateway"] for r in plan["routes"]] == ["10.4.0.3", "10.4.0.3", "10.4.0.4"]


# --- firewall -----------------------------------------------------------------------------------


def firewall_mesh(**options):
    nodes = [
        node(
            "l",
            "x",
            "10.1.0.1/24",
            "10.2.1.0/24",
            "203.0.113.1:51820",
            1,
            allowed_location_ips=["192.168.7.0/24"],
        ),
        node("m", "x", "10.1.0.2/24", "10.2.2.0/24", "10.1.0.2:51820", 2),
        node("o", "y", "10.9.0.1/24", "10.2.9.0/24", "203.0.113.9:51820", 9),
    ]
    peers = [{"name": "p", "public_key": key(40), "allowed_ips": ["10.9.9.0/24"]}]
    return build_plans(nodes, peers, options)["plans"]


def test_forward_rules_on():
    plans = firewall_mesh(forward_rules=True)
    assert plans["l"]["firewall"]["forward_accept"] == [
        "10.2.1.0/24",
        "10.2.2.0/24",
        "192.168.7.0/24",
        "10.1.0.1/32",
        "10.1.0.2/32",
    ]
    assert plans["m"]["firewall"]["forward_accept"] == ["10.2.2.0/24"]
    assert plans["o"]["firewall"]["forward_accept"] == ["10.2.9.0/24", "10.9.0.1/32"]


def test_forward_rules_off_and_cni_off():
    assert firewall_mesh()["l"]["firewall"]["forward_accept"] == []
    plans = firewall_mesh(forward_rules=True, cni=False)
    assert plans["l"]["firewall"]["forward_accept"] == []
    assert plans["l"]["firewall"]["nat_sources"] == ["10.9.9.0/24"]


def test_nat_exemptions_and_service_cidrs():
    fw = firewall_mesh(service_cidrs=["10.96.0.0/12", "fd96::/108"])["m"]["firewall"]
    assert fw["nat_sources"] == ["10.2.2.0/24", "10.9.9.0/24"]
    assert fw["nat_exempt_destinations"] == [
        "10.4.0.1/32",
        "10.2.1.0/24",
        "10.1.0.1/32",
        "10.2.2.0/24",
        "10.1.0.2/32",
        "10.4.0.2/32",
        "10.2.9.0/24",
        "10.9.0.1/32",
        "10.9.9.0/24",
        "10.96.0.0/12",
        "fd96::/108",
    ]
    assert fw["nat_destinations"] == ["192.168.7.0/24"]


# --- outputs: only, DOT, peer config ------------------------------------------------------------


def test_only_renders_the_named_plans_from_the_same_structure():
    full = firewall_mesh()
    nodes = [
        node(
            "l",
            "x",
            "10.1.0.1/24",
            "10.2.1.0/24",
            "203.0.113.1:51820",
            1,
            allowed_location_ips=["192.168.7.0/24"],
        ),
        node("m", "x", "10.1.0.2/24", "10.2.2.0/24", "10.1.0.2:51820", 2),
        node("o", "y", "10.9.0.1/24", "10.2.9.0/24", "203.0.113.9:51820", 9),
    ]
    peers = [{"name": "p", "public_key": key(40), "allowed_ips": ["10.9.9.0/24"]}]
    only = build_plans(nodes, peers, only=["m"])
    assert list(only["plans"]) == ["m"]
    assert only["plans"]["m"] == full["m"]
    assert len(only["segments"]) == 2


def test_to_dot_is_valid_graphviz():
    result = cross_mesh()
    text = to_dot(
        build_plans(
            [
                node("l", "x", "10.1.0.1/24", "10.2.1.0/24", "203.0.113.1:51820", 1),
                node("m", "x", "10.1.0.2/24", "10.2.2.0/24", "10.1.0.2:51820", 2),
                node("o", 'y"q', "10.9.0.1/24", "10.2.9.0/24", "203.0.113.9:51820", 9),
            ],
            [
                {
                    "name": "l",
                    "public_key": key(40),
                    "allowed_ips": ["10.9.9.0/24"],
                    "endpoint": "198.51.100.1:1",
                }
            ],
        )
    )
    assert 'subgraph "cluster_location_location:x"' in text
    assert '"node/l" -> "node/m" [dir=both];' in text
    assert '"node/l" -> "node/o" [dir=both];' in text
    assert '"node/o" -> "peer/l" [dir=both, style=dashed];' in text
    assert "10.4.0.1" in text and "rank=1" in text
    cross = to_dot(result)
    assert '"node/a1" -> "node/a2" [dir=both];' not in cross
    assert '"node/a1" -> "node/b1" [dir=both];' in cross
    if shutil.which("dot"):
        for graph in (text, cross):
            done = subprocess.run(
                ["dot", "-Tcanon"],
                input=graph.encode(),
                capture_output=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stderr.decode()


def test_peer_config_like_kgctl_showconf():
    psk = key(77)
    nodes = [
        node("l", "x", "10.1.0.1/24", "10.2.1.0/24", "203.0.113.1:51820", 1),
        node("o", "y", "10.9.0.1/24", "10.2.9.0/24", "203.0.113.9:51820", 9),
    ]
    peers = [
        {
            "name": "me",
            "public_key": key(40),
            "allowed_ips": ["10.9.9.1/32"],
            "persistent_keepalive": 10,
            "preshared_key": psk,
        },
        {
            "name": "other",
            "public_key": key(41),
            "allowed_ips": ["10.9.9.2/32"],
            "preshared_key": key(78),
            "endpoint": "198.51.100.2:51820",
        },
    ]
    sections = peer_config(nodes, peers, "me")
    assert sections == [
        {
            "name": "location:x",
            "public_key": key(1),
            "endpoint": "203.0.113.1:51820",
            "allowed_ips": ["10.2.1.0/24", "10.1.0.1/32", "10.4.0.1/32"],
            "persistent_keepalive": 10,
            "preshared_key": psk,
        },
        {
            "name": "location:y",
            "public_key": key(9),
            "endpoint": "203.0.113.9:51820",
            "allowed_ips": ["10.2.9.0/24", "10.9.0.1/32", "10.4.0.2/32"],
            "persistent_keepalive": 10,
            "preshared_key": psk,
        },
        # Kilo puts the asking peer's keepalive, but no preshared key, on the other peers
        {
            "name": "other",
            "public_key": key(41),
            "endpoint": "198.51.100.2:51820",
            "allowed_ips": ["10.9.9.2/32"],
            "persistent_keepalive": 10,
        },
    ]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("203.0.113.1:51820", "203.0.113.1:51820"),
        ("[2001:DB8:0::1]:1", "[2001:db8::1]:1"),
        ("Edge-1.Example.ORG:65535", "edge-1.example.org:65535"),
    ],
)
def test_endpoint_normalisation(text, expected):
    assert parse_endpoint(text, "node 'n'", "endpoint").text == expected


def test_the_answer_is_plain_data_and_lazy_plans_are_the_same():
    """build_plans gives JSON as it is (a dict of plans); ``lazy`` gives the same plans, each
    rendered when asked (the push run writes them one by one)."""
    from ansible_collections.kilo.mesh.plugins.module_utils.engine import topology

    nodes = [
        node("a", "x", "10.0.0.1/24", "10.1.0.0/24", "203.0.113.1:51820"),
        node("b", "x", "10.0.0.2/24", "10.1.1.0/24"),
        node("c", "y", "10.0.1.3/24", "10.1.2.0/24", "203.0.113.3:51820"),
    ]
    whole = topology.build_plans(nodes, [])
    assert isinstance(whole["plans"], dict)  # Plans is no dict
    text = json.dumps(whole, sort_keys=True)
    lazy = topology.build_plans(nodes, [], lazy=True)
    assert isinstance(lazy["plans"], topology.Plans) and list(lazy["plans"]) == ["a", "b", "c"]
    assert lazy["plans"]["a"] is not lazy["plans"]["a"]  # rendered afresh, kept by nobody
    assert json.dumps(dict(lazy, plans=dict(lazy["plans"])), sort_keys=True) == text
