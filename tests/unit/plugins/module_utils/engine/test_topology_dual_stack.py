# -*- coding: utf-8 -*-
"""Dual-stack meshes (issue 23): two subnets, one of each IP family; nodes of two internal IPs and
pod ranges of both families; one endpoint each.

Hand-worked mesh: location x = a (leader, public endpoint) and b; location y = c alone. Every node
has an IPv4 and an IPv6 internal IP and pod range. Expected: each family routed on its own (the
primary's routes first), through the WireGuard IP or internal IP of the destination's family;
IPIP (tunl0, table 1107 rules, the IPIP filter) for IPv4 only, IPv6 inside a location straight
over the private network. Then properties: the IPv4 half of a random dual-stack mesh is the
IPv4-only mesh of the same nodes, and the IPv6 half the IPv6-only mesh (without IPIP, which has
no IPv6 half).
"""

import ipaddress

import pytest
from hypothesis import given

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import (
    build_plans as raw_plans,
)
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan
from flat_plans import build_plans
from test_topology_features import key, node, route
from test_topology_properties import SETTINGS, build, meshes

DUAL = {"subnet": ["10.4.0.0/16", "fd04::/64"]}


def dual_mesh(**options):
    nodes = [
        node(
            "a",
            "x",
            ["10.1.0.1/24", "fd00:1::1/64"],
            ["10.2.0.0/24", "fd10:0:0:1::/64"],
            "203.0.113.1:51820",
            1,
        ),
        node(
            "b",
            "x",
            ["10.1.0.2/24", "fd00:1::2/64"],
            ["10.2.1.0/24", "fd10:0:0:2::/64"],
            "10.1.0.2:51820",
            2,
        ),
        node(
            "c",
            "y",
            ["172.16.0.3/24", "fd00:2::3/64"],
            ["10.3.0.0/24", "fd10:0:0:3::/64"],
            "198.51.100.3:51820",
            3,
        ),
    ]
    peers = [{"name": "p", "public_key": key(9), "allowed_ips": ["10.9.0.0/24", "fd99::/64"]}]
    return build_plans(nodes, peers, dict(DUAL, **options))


def test_segments_get_a_wireguard_ip_of_each_family():
    result = dual_mesh()
    assert result["subnet"] == ["10.4.0.0/16", "fd04::/64"]
    assert [(s["key"], s["leader"], s["wireguard_ip"]) for s in result["segments"]] == [
        ("location:x", "a", ["10.4.0.1", "fd04::1"]),
        ("location:y", "c", ["10.4.0.2", "fd04::2"]),
    ]
    assert result["segments"][1]["members"][0]["internal_ip"] == ["172.16.0.3", "fd00:2::3"]
    plans = result["plans"]
    assert plans["a"]["address"] == ["10.4.0.1/16", "fd04::1/64"]
    assert plans["c"]["address"] == ["10.4.0.2/16", "fd04::2/64"]
    assert plans["b"]["address"] is None
    assert plans["b"]["internal_ip"] == ["10.1.0.2/24", "fd00:1::2/64"]


def test_allowed_ips_carry_both_families():
    plans = dual_mesh()["plans"]
    assert [(p["name"], p["endpoint"], p["allowed_ips"]) for p in plans["a"]["peers"]] == [
        (
            "location:y",
            "198.51.100.3:51820",
            [
                "10.3.0.0/24",
                "fd10:0:0:3::/64",
                "172.16.0.3/32",
                "fd00:2::3/128",
                "10.4.0.2/32",
                "fd04::2/128",
            ],
        ),
        ("p", None, ["10.9.0.0/24", "fd99::/64"]),
    ]
    assert plans["c"]["peers"][0]["allowed_ips"] == [
        "10.2.0.0/24",
        "fd10:0:0:1::/64",
        "10.1.0.1/32",
        "fd00:1::1/128",
        "10.2.1.0/24",
        "fd10:0:0:2::/64",
        "10.1.0.2/32",
        "fd00:1::2/128",
        "10.4.0.1/32",
        "fd04::1/128",
    ]
    assert plans["b"]["peers"] == []


def test_leader_routes_per_family():
    plans = dual_mesh()["plans"]
    assert plans["a"]["routes"] == [
        # IPv4: Kilo's routes (IPIP to b inside x, table 1107 to b's internal IP)
        route("10.2.1.0/24", "10.1.0.2", "tunl0", "10.1.0.1"),
        route("10.1.0.2/32", "10.1.0.2", "tunl0", "10.1.0.1", table=1107),
        route("10.3.0.0/24", "10.4.0.2", "kilo0", "10.1.0.1"),
        route("172.16.0.3/32", "10.4.0.2", "kilo0", "10.1.0.1"),
        route("10.9.0.0/24", None, "kilo0", "10.1.0.1", onlink=False),
        # IPv6: b over the private network (no IPIP), y via its IPv6 WireGuard IP
        route("fd10:0:0:2::/64", "fd00:1::2", "private", None),
        route("fd10:0:0:3::/64", "fd04::2", "kilo0", "fd00:1::1"),
        route("fd00:2::3/128", "fd04::2", "kilo0", "fd00:1::1"),
        route("fd99::/64", None, "kilo0", "fd00:1::1", onlink=False),
    ]
    assert plans["c"]["routes"] == [
        route("10.2.0.0/24", "10.4.0.1", "kilo0", "172.16.0.3"),
        route("10.1.0.1/32", "10.4.0.1", "kilo0", "172.16.0.3"),
        route("10.2.1.0/24", "10.4.0.1", "kilo0", "172.16.0.3"),
        route("10.1.0.2/32", "10.4.0.1", "kilo0", "172.16.0.3"),
        route("10.9.0.0/24", None, "kilo0", "172.16.0.3", onlink=False),
        route("fd10:0:0:1::/64", "fd04::1", "kilo0", "fd00:2::3"),
        route("fd00:1::1/128", "fd04::1", "kilo0", "fd00:2::3"),
        route("fd10:0:0:2::/64", "fd04::1", "kilo0", "fd00:2::3"),
        route("fd00:1::2/128", "fd04::1", "kilo0", "fd00:2::3"),
        route("fd99::/64", None, "kilo0", "fd00:2::3", onlink=False),
    ]


def test_non_leader_routes_per_family_via_the_leaders_internal_ip_of_that_family():
    plans = dual_mesh()["plans"]
    assert plans["b"]["routes"] == [
        route("10.4.0.1/32", "10.1.0.1", "tunl0", "10.1.0.2"),
        route("10.2.0.0/24", "10.1.0.1", "tunl0", "10.1.0.2"),
        route("10.1.0.1/32", "10.1.0.1", "tunl0", "10.1.0.2", table=1107),
        route("10.4.0.2/32", "10.1.0.1", "tunl0", "10.1.0.2"),
        route("10.3.0.0/24", "10.1.0.1", "tunl0", "10.1.0.2"),
        route("172.16.0.3/32", "10.1.0.1", "tunl0", "10.1.0.2"),
        route("10.9.0.0/24", "10.1.0.1", "tunl0", "10.1.0.2"),
        route("fd04::1/128", "fd00:1::1", "private", None),
        route("fd10:0:0:1::/64", "fd00:1::1", "private", None),
        route("fd04::2/128", "fd00:1::1", "private", None),
        route("fd10:0:0:3::/64", "fd00:1::1", "private", None),
        route("fd00:2::3/128", "fd00:1::1", "private", None),
        route("fd99::/64", "fd00:1::1", "private", None),
    ]


def test_rules_and_tunnel_are_ipv4_only():
    plans = dual_mesh()["plans"]
    assert plans["a"]["rules"] == [
        {"src": "10.2.0.0/24", "dst": "10.1.0.2/32", "iif": None, "table": 1107},
        {"src": None, "dst": "10.1.0.2/32", "iif": "kilo0", "table": 1107},
    ]
    assert plans["b"]["rules"] == [
        {"src": "10.2.1.0/24", "dst": "10.1.0.1/32", "iif": None, "table": 1107}
    ]
    assert plans["c"]["rules"] == []
    assert [plans[n]["tunnel_address"] for n in "abc"] == [
        "10.2.0.1/32",
        "10.2.1.1/32",
        "10.3.0.1/32",
    ]
    assert plans["a"]["firewall"]["ipip_filter"] is True
    assert plans["a"]["firewall"]["ipip_accept_sources"] == ["10.1.0.1/32", "10.1.0.2/32"]
    assert plans["c"]["firewall"]["ipip_accept_sources"] == ["172.16.0.3/32"]


def test_tunnel_address_from_the_first_ipv4_range_when_ipv6_comes_first():
    nodes = [
        node(
            "a",
            "x",
            ["fd00:1::1/64", "10.1.0.1/24"],
            ["fd10:0:0:1::/64", "10.2.0.0/24"],
            "203.0.113.1:51820",
            1,
        )
    ]
    plan = build_plans(nodes, [], {"subnet": ["fd04::/64", "10.4.0.0/16"]})["plans"]["a"]
    assert plan["tunnel_address"] == "10.2.0.1/32"
    assert plan["address"] == ["fd04::1/64", "10.4.0.1/16"]


def test_firewall_sets_carry_both_families():
    plans = dual_mesh(forward_rules=True, service_cidrs=["10.96.0.0/12", "fd96::/108"])["plans"]
    fw = plans["a"]["firewall"]
    assert fw["nat_sources"] == ["10.2.0.0/24", "fd10:0:0:1::/64", "10.9.0.0/24", "fd99::/64"]
    assert fw["forward_accept"] == [
        "10.2.0.0/24",
        "fd10:0:0:1::/64",
        "10.2.1.0/24",
        "fd10:0:0:2::/64",
        "10.1.0.1/32",
        "fd00:1::1/128",
        "10.1.0.2/32",
        "fd00:1::2/128",
    ]
    assert plans["b"]["firewall"]["forward_accept"] == ["10.2.1.0/24", "fd10:0:0:2::/64"]
    assert fw["nat_exempt_destinations"] == [
        "10.4.0.1/32",
        "fd04::1/128",
        "10.2.0.0/24",
        "fd10:0:0:1::/64",
        "10.1.0.1/32",
        "fd00:1::1/128",
        "10.2.1.0/24",
        "fd10:0:0:2::/64",
        "10.1.0.2/32",
        "fd00:1::2/128",
        "10.4.0.2/32",
        "fd04::2/128",
        "10.3.0.0/24",
        "fd10:0:0:3::/64",
        "172.16.0.3/32",
        "fd00:2::3/128",
        "10.9.0.0/24",
        "fd99::/64",
        "10.96.0.0/12",
        "fd96::/108",
    ]


def test_a_member_without_ipv6_routes_ipv4_only():
    """An IPv4-only member of a dual-stack location (one internal IP, IPv4 ranges) routes no IPv6;
    the leader routes it none either."""
    nodes = [
        node(
            "a",
            "x",
            ["10.1.0.1/24", "fd00:1::1/64"],
            ["10.2.0.0/24", "fd10:0:0:1::/64"],
            "203.0.113.1:51820",
            1,
        ),
        node("b", "x", "10.1.0.2/24", "10.2.1.0/24", None, 2),
        node(
            "c", "y", "172.16.0.3/24", ["10.3.0.0/24", "fd10:0:0:3::/64"], "198.51.100.3:51820", 3
        ),
    ]
    plans = build_plans(nodes, [], dict(DUAL, encapsulate="never"))["plans"]
    assert plans["b"]["routes"] == [
        route(dst, "10.1.0.1", "private", None)
        for dst in ("10.4.0.1/32", "10.2.0.0/24", "10.4.0.2/32", "10.3.0.0/24", "172.16.0.3/32")
    ]
    assert [r for r in plans["a"]["routes"] if r["device"] == "private"] == [
        route("10.2.1.0/24", "10.1.0.2", "private", None)
    ]
    # c (alone in y, an IPv4 internal IP) reaches x's IPv6 ranges with no IPv6 source of its own
    assert [r for r in plans["c"]["routes"] if r["gateway"] == "fd04::1"] == [
        route("fd10:0:0:1::/64", "fd04::1", "kilo0", None),
        route("fd00:1::1/128", "fd04::1", "kilo0", None),
    ]


def test_dual_stack_plans_pass_the_plan_check():
    for plan in raw_plans(*dual_mesh_inputs())["plans"].values():
        checked = check_plan(plan, "kilo0")
        assert checked["internal_ip"] == plan["internal_ip"]
        assert checked["address"] == plan["address"]


def dual_mesh_inputs():
    nodes = [
        node(
            "a",
            "x",
            ["10.1.0.1/24", "fd00:1::1/64"],
            ["10.2.0.0/24", "fd10:0:0:1::/64"],
            "203.0.113.1:51820",
            1,
        ),
        node("b", "x", ["10.1.0.2/24", "fd00:1::2/64"], "10.2.1.0/24", "10.1.0.2:51820", 2),
    ]
    return nodes, [], DUAL


@pytest.mark.parametrize(
    "address", [["10.4.0.1/16", "10.4.0.2/16"], ["10.4.0.1/16", "fd04::1/64", "fd04::2/64"], []]
)
def test_plan_check_refuses_two_addresses_of_one_family(address):
    plan = raw_plans(*dual_mesh_inputs())["plans"]["a"]
    with pytest.raises(KiloError) as error:
        check_plan(dict(plan, address=address), "kilo0")
    assert error.value.field == "plan.address"


def test_one_subnet_in_a_list_is_the_single_stack_mesh():
    nodes, peers, dummy = dual_mesh_inputs()
    nodes = [
        dict(n, internal_ip=n["internal_ip"][0], pod_cidr="10.2.%d.0/24" % i)
        for i, n in enumerate(nodes)
    ]
    assert raw_plans(nodes, peers, {"subnet": ["10.4.0.0/16"]}) == raw_plans(nodes, peers, {})


# --- errors: naming node (or options) and field, before any plan ---------------------------------


def error_of(nodes, options):
    with pytest.raises(KiloError) as error:
        raw_plans(nodes, [], options)
    return str(error.value)


def two_nodes(a_internal, a_pods, b_internal, b_pods):
    return [
        node("a", "x", a_internal, a_pods, "203.0.113.1:51820", 1),
        node("b", "x", b_internal, b_pods, "10.1.0.2:51820", 2),
    ]


BOTH = ["10.1.0.1/24", "fd00:1::1/64"]


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"subnet": ["10.4.0.0/16", "10.5.0.0/16"]},
            "options: subnet: 10.4.0.0/16 and 10.5.0.0/16 are both IPv4: a dual-stack mesh has one subnet of each IP family",
        ),
        (
            {"subnet": ["10.4.0.0/16", "fd04::/64", "fd05::/64"]},
            "options: subnet: 3 subnets; one, or two of different IP families (dual-stack)",
        ),
        (
            {"subnet": []},
            "options: subnet: 0 subnets; one, or two of different IP families (dual-stack)",
        ),
        (
            {"subnet": ["10.4.0.0/16", "fd04::/64/1"]},
            "options: subnet: 'fd04::/64/1' is not a CIDR",
        ),
        (
            dict(DUAL, compatibility="flannel"),
            "options: compatibility: flannel in a dual-stack mesh: its encapsulation"
            " is modelled for one IP family only; use none",
        ),
        (
            {"subnet": ["10.4.0.0/30", "fd04::/64"]},
            "options: subnet: 10.4.0.0/30 holds 3 WireGuard IPs, 4 segments need one each",
        ),
    ],
)
def test_bad_subnets_are_refused(options, message):
    nodes = [
        node("n%d" % i, "l%d" % i, None, None, "203.0.113.%d:51820" % (i + 1), i + 1)
        for i in range(4)
    ]
    assert error_of(nodes, options) == message


@pytest.mark.parametrize(
    "nodes, options, message",
    [
        # a second family in a single-stack mesh
        (
            two_nodes(BOTH, None, "10.1.0.2/24", None),
            {},
            "node 'a': internal_ip: fd00:1::1/64 is IPv6 but the mesh is single-stack (subnet 10.4.0.0/16): a second IP"
            " family needs a second subnet",
        ),
        (
            two_nodes("10.1.0.1/24", ["10.2.0.0/24", "fd10::/64"], "10.1.0.2/24", None),
            {},
            "node 'a': pod_cidr: fd10::/64 is IPv6 but 10.2.0.0/24 is IPv4: a node's pod ranges are of one family in a"
            " single-stack mesh",
        ),
        # internal IPs: one of each family
        (
            two_nodes(["10.1.0.1/24", "10.1.1.1/24"], None, "10.1.0.2/24", None),
            DUAL,
            "node 'a': internal_ip: 10.1.0.1/24 and 10.1.1.1/24 are both IPv4: two internal IPs are one of each IP family",
        ),
        (
            two_nodes(BOTH + ["fd00:1::9/64"], None, "10.1.0.2/24", None),
            DUAL,
            "node 'a': internal_ip: 3 internal IPs; at most two, one of each IP family",
        ),
        # a route whose gateway would be an internal IP of a family the node lacks
        (
            two_nodes("10.1.0.1/24", "10.2.0.0/24", ["10.1.0.2/24", "fd00:1::2/64"], None),
            DUAL,
            "node 'a': internal_ip: leads segment location:x, whose node 'b' routes IPv6 through it: it needs an IPv6"
            " internal IP",
        ),
        (
            two_nodes(BOTH, None, "10.1.0.2/24", ["10.2.1.0/24", "fd10:0:0:2::/64"]),
            DUAL,
            "node 'b': internal_ip: has the IPv6 pod range fd10:0:0:2::/64 and routes them through its leader 'a': it"
            " needs an IPv6 internal IP",
        ),
        (
            two_nodes("10.1.0.1/24", ["10.2.0.0/24", "fd10:0:0:1::/64"], "10.1.0.2/24", None),
            DUAL,
            "node 'a': internal_ip: has the IPv6 pod range fd10:0:0:1::/64 and its location's nodes route them over the"
            " private network: it needs an IPv6 internal IP",
        ),
    ],
)
def test_families_the_mesh_or_the_gateway_lacks_are_refused(nodes, options, message):
    assert error_of(nodes, options) == message


def test_cross_needs_every_member_of_a_location_on_each_family():
    nodes = two_nodes(BOTH, None, "10.1.0.2/24", None)
    assert error_of(nodes, dict(DUAL, granularity="cross")) == (
        "node 'b': internal_ip: its location's nodes reach its IPv6 WireGuard IP over the private network: it needs"
        " an IPv6 internal IP"
    )
    # without local routes nothing goes over the private network
    assert build_plans(nodes, [], dict(DUAL, granularity="cross", local=False))["plans"]["b"][
        "leader"
    ]


# --- properties: each family's half is that family's single-stack mesh ---------------------------

V6_BASE = int(ipaddress.ip_address("fd6e::"))


def v6(text):
    """The IPv4 CIDR or address-with-prefix ``text`` embedded in fd6e::/96: overlaps, containment
    and order are those of the IPv4 original, so the IPv6-only mesh is the IPv4 one's image."""
    interface = ipaddress.ip_interface(text)
    return str(
        ipaddress.ip_interface((V6_BASE | int(interface.ip), 96 + interface.network.prefixlen))
    )


def v6_net(text):
    return str(ipaddress.ip_interface(v6(text)).network)


def mapped(mesh, families):
    """The mesh with its addresses in ``families`` (4: as drawn, 6: the image), endpoints unchanged."""
    nodes, peers, options = mesh

    def both(value, convert):
        out = ([value] if 4 in families else []) + ([convert(value)] if 6 in families else [])
        return out if len(out) > 1 else out[0]

    out_nodes = []
    for item in nodes:
        item = dict(item)
        if item["internal_ip"]:
            item["internal_ip"] = both(item["internal_ip"], v6)
        if item["pod_cidr"]:
            item["pod_cidr"] = both(item["pod_cidr"], v6_net)
        item["allowed_location_ips"] = [
            c
            for a in item["allowed_location_ips"]
            for c in ([a] if 4 in families else []) + ([v6_net(a)] if 6 in families else [])
        ]
        out_nodes.append(item)
    out_peers = [
        dict(
            p,
            allowed_ips=[
                c
                for a in p["allowed_ips"]
                for c in ([a] if 4 in families else []) + ([v6_net(a)] if 6 in families else [])
            ],
        )
        for p in peers
    ]
    subnet = both("10.4.0.0/16", v6_net)
    return out_nodes, out_peers, dict(options, subnet=subnet)


def version(cidr):
    return ipaddress.ip_interface(cidr).version


def half(result, family, ipip=True):
    """Every entry of ``family`` out of a result: routes, rules, peers' allowed IPs, firewall sets,
    the addresses; ``ipip`` False leaves out what only IPIP has (tunl0, its filter)."""

    def only(values):
        if values is None:
            return None
        values = values if isinstance(values, list) else [values]
        return [v for v in values if version(v) == family]

    out = {
        "segments": [
            (s["key"], s["leader"], s["nodes"], only(s["wireguard_ip"])) for s in result["segments"]
        ]
    }
    for name, plan in result["plans"].items():
        firewall = dict((k, only(v)) for k, v in plan["firewall"].items() if k != "ipip_filter")
        entry = {
            "leader": plan["leader"],
            "segment": plan["segment"],
            "listen_port": plan["listen_port"],
            "address": only(plan["address"]),
            "internal_ip": only(plan["internal_ip"]),
            "pod_cidr": only(plan["pod_cidr"]),
            "peers": [dict(p, allowed_ips=only(p["allowed_ips"])) for p in plan["peers"]],
            "routes": [r for r in plan["routes"] if version(r["dst"]) == family],
            "rules": [r for r in plan["rules"] if version(r["src"] or r["dst"]) == family],
            "firewall": firewall,
        }
        if ipip:
            entry["tunnel_address"] = plan["tunnel_address"]
            entry["ipip_filter"] = plan["firewall"]["ipip_filter"]
        out[name] = entry
    return out


@SETTINGS
@given(meshes())
def test_ipv4_half_is_the_ipv4_only_mesh(mesh):
    dual = build(mapped(mesh, (4, 6)))
    assert half(dual, 4) == half(build(mapped(mesh, (4,))), 4)


@SETTINGS
@given(meshes())
def test_ipv6_half_is_the_ipv6_only_mesh_without_ipip(mesh):
    """IPIP carries IPv4 only, so the IPv6 half is the IPv6-only mesh that never encapsulates."""
    dual = build(mapped(mesh, (4, 6)))
    nodes, peers, options = mapped(mesh, (6,))
    single = build((nodes, peers, dict(options, encapsulate="never")))
    assert half(dual, 6, ipip=False) == half(single, 6, ipip=False)


@SETTINGS
@given(meshes())
def test_single_stack_inputs_in_a_list_of_one_give_the_same_plans(mesh):
    nodes, peers, options = mesh
    as_lists = [
        dict(n, internal_ip=[n["internal_ip"]] if n["internal_ip"] else None) for n in nodes
    ]
    assert build((as_lists, peers, dict(options, subnet=["10.4.0.0/16"]))) == build(mesh)
