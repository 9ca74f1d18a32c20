# -*- coding: utf-8 -*-
"""Nodes of several pod ranges (issue 23: Calico's IPAM blocks, Cilium's pool CIDRs).

Mesh: location x = a (leader, public endpoint) and b; location y = c alone. a owns two Calico
blocks (10.2.0.0/26, 10.2.0.64/26), b one range, c three blocks. Expectations are written out by
hand: every block is its own allowed IP and its own route, in the order the node lists them; the
first range is what Kilo's one pod CIDR was (tunnel address, CNI, the add-on gateway).
"""

import base64

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.plugin_utils.showconf import showconf
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import (
    build_plans as raw_plans,
)
from ansible_collections.kilo.mesh.plugins.module_utils.engine.graph import to_dot
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan
from flat_plans import build_plans


def key(i):
    return base64.b64encode(bytes([i]) * 32).decode()


A_PODS = ["10.2.0.0/26", "10.2.0.64/26"]
C_PODS = ["10.3.0.0/26", "10.3.1.0/26", "10.3.0.128/26"]


def mesh(a_pods=None, c_pods=None):
    return [
        {
            "name": "a",
            "location": "x",
            "internal_ip": "10.1.0.1/24",
            "pod_cidr": A_PODS if a_pods is None else a_pods,
            "endpoint": "203.0.113.1:51820",
            "public_key": key(1),
        },
        {
            "name": "b",
            "location": "x",
            "internal_ip": "10.1.0.2/24",
            "pod_cidr": "10.2.1.0/24",
            "endpoint": "10.1.0.2:51820",
            "public_key": key(2),
        },
        {
            "name": "c",
            "location": "y",
            "internal_ip": "172.16.0.3/24",
            "pod_cidr": C_PODS if c_pods is None else c_pods,
            "endpoint": "198.51.100.3:51820",
            "public_key": key(3),
        },
    ]


def route(dst, gateway, device, source, table=254, onlink=True):
    return {
        "dst": dst,
        "gateway": gateway,
        "device": device,
        "source": source,
        "table": table,
        "onlink": onlink,
    }


def test_every_block_is_an_allowed_ip_of_its_segment():
    segments = dict(
        (s["key"], s) for s in build_plans(mesh(), [], {"encapsulate": "never"})["segments"]
    )
    assert segments["location:x"]["allowed_ips"] == [
        "10.2.0.0/26",
        "10.2.0.64/26",
        "10.1.0.1/32",
        "10.2.1.0/24",
        "10.1.0.2/32",
        "10.4.0.1/32",
    ]
    assert segments["location:y"]["allowed_ips"] == [
        "10.3.0.0/26",
        "10.3.1.0/26",
        "10.3.0.128/26",
        "172.16.0.3/32",
        "10.4.0.2/32",
    ]
    assert segments["location:x"]["members"][0]["pod_cidr"] == A_PODS
    assert segments["location:x"]["members"][1]["pod_cidr"] == "10.2.1.0/24"


def test_every_block_is_a_route_leader_and_member():
    plans = build_plans(mesh(), [], {"encapsulate": "never"})["plans"]
    assert [p["allowed_ips"] for p in plans["a"]["peers"]] == [
        ["10.3.0.0/26", "10.3.1.0/26", "10.3.0.128/26", "172.16.0.3/32", "10.4.0.2/32"]
    ]
    assert plans["a"]["routes"] == [route("10.2.1.0/24", "10.1.0.2", "private", None)] + [
        route(dst, "10.4.0.2", "kilo0", "10.1.0.1") for dst in C_PODS + ["172.16.0.3/32"]
    ]
    assert plans["b"]["routes"] == [route("10.4.0.1/32", "10.1.0.1", "private", None)] + [
        route(dst, "10.1.0.1", "private", None) for dst in A_PODS
    ] + [
        route(dst, "10.1.0.1", "private", None)
        for dst in ["10.4.0.2/32"] + C_PODS + ["172.16.0.3/32"]
    ]
    assert plans["c"]["routes"] == [
        route(dst, "10.4.0.1", "kilo0", "172.16.0.3")
        for dst in A_PODS + ["10.1.0.1/32", "10.2.1.0/24", "10.1.0.2/32"]
    ]


def test_ipip_rules_and_firewall_per_block():
    plans = build_plans(mesh(), [], {"encapsulate": "always", "forward_rules": True})["plans"]
    # a's own blocks each send IPIP towards b through table 1107
    assert [r for r in plans["a"]["rules"] if r["iif"] is None] == [
        {"src": pod, "dst": "10.1.0.2/32", "iif": None, "table": 1107} for pod in A_PODS
    ]
    assert plans["a"]["tunnel_address"] == "10.2.0.1/32"  # the first range, as Kilo's one pod CIDR
    assert plans["a"]["firewall"]["nat_sources"] == A_PODS
    assert plans["a"]["firewall"]["forward_accept"] == A_PODS + [
        "10.2.1.0/24",
        "10.1.0.1/32",
        "10.1.0.2/32",
    ]
    assert plans["c"]["firewall"]["forward_accept"] == C_PODS + ["172.16.0.3/32"]
    assert plans["a"]["pod_cidr"] == A_PODS and plans["b"]["pod_cidr"] == "10.2.1.0/24"


def test_one_range_as_a_list_gives_the_same_output_as_the_cidr_itself():
    for options in (
        {},
        {"encapsulate": "never"},
        {"granularity": "full"},
        {"granularity": "cross"},
        {"compatibility": "flannel", "local": False},
    ):
        single = raw_plans(mesh("10.2.0.0/24", "10.3.0.0/24"), [], options)
        listed = raw_plans(mesh(["10.2.0.0/24"], ["10.3.0.0/24"]), [], options)
        text = raw_plans(mesh("10.2.0.0/24,", " 10.3.0.0/24"), [], options)
        assert single == listed == text
        assert single["plans"]["a"]["pod_cidr"] == "10.2.0.0/24"


def test_checked_plan_keeps_the_form():
    for name, plan in raw_plans(mesh(), [], {})["plans"].items():
        assert check_plan(plan, "kilo0")["pod_cidr"] == plan["pod_cidr"]


def test_graph_and_showconf_list_every_block():
    result = raw_plans(mesh(), [], {})
    dot = to_dot(result)
    assert (
        '"location:x\\na\\n10.2.0.0/26\\n10.2.0.64/26\\n10.1.0.1\\n10.4.0.1\\n203.0.113.1:51820"'
        in dot
    )
    conf = showconf(mesh(), [], {}, node="a")["config"]
    assert (
        "AllowedIPs = 10.3.0.0/26, 10.3.1.0/26, 10.3.0.128/26, 172.16.0.3/32, 10.4.0.2/32" in conf
    )


@pytest.mark.parametrize(
    "a_pods, c_pods, message",
    [
        (
            ["10.2.0.0/26", "10.2.9.0/26"],
            ["10.2.0.0/26"],
            "10.2.0.0/26 is also the pod range 10.2.0.0/26 of node 'a'",
        ),
        (
            ["10.2.0.0/24", "10.2.9.0/26"],
            ["10.2.0.64/26"],
            "10.2.0.64/26 lies inside the pod range 10.2.0.0/24 of node 'a'",
        ),
        (
            ["10.2.0.64/26", "10.2.0.0/25"],
            ["10.3.0.0/26"],
            "10.2.0.64/26 lies inside its own pod range 10.2.0.0/25",
        ),
        (
            ["10.2.0.0/26"],
            ["10.3.0.0/26", "10.2.1.128/25"],
            "10.2.1.128/25 lies inside the pod range 10.2.1.0/24 of node 'b'",
        ),
    ],
)
def test_overlapping_pod_ranges_are_refused_naming_node_and_field(a_pods, c_pods, message):
    with pytest.raises(KiloError) as error:
        raw_plans(mesh(a_pods, c_pods), [], {})
    assert error.value.field == "pod_cidr" and message in str(error.value)
    assert error.value.kind == "node"


def test_two_nodes_of_one_range_each_may_overlap_as_kilo_takes_them():
    """Kilo accepts two Nodes whose spec.podCIDR overlap; its output is matched on what it accepts."""
    plans = raw_plans(mesh(["10.2.0.0/24"], ["10.2.0.64/26"]), [], {})["plans"]
    assert plans["a"]["pod_cidr"] == "10.2.0.0/24"


def test_a_second_family_is_refused_in_a_single_stack_mesh():
    with pytest.raises(KiloError) as error:
        raw_plans(mesh(c_pods=["10.3.0.0/26", "fd10::/64"]), [], {})
    assert str(error.value).startswith(
        "node 'c': pod_cidr: fd10::/64 is IPv6 but 10.3.0.0/26 is IPv4"
    )


def test_a_malformed_range_is_refused():
    with pytest.raises(KiloError) as error:
        raw_plans(mesh(c_pods=["10.3.0.0/26", "10.3.0.300/26"]), [], {})
    assert str(error.value) == "node 'c': pod_cidr: '10.3.0.300/26' is not a CIDR"
