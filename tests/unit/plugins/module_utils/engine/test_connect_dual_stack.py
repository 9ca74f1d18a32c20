# -*- coding: utf-8 -*-
"""connect in a dual-stack mesh (issue 23): a machine outside the mesh holding an address of each
IP family gets both - its interface both addresses, a route of each family to the mesh leaving
from its address of that family, and the leaders' allowed IPs for it both. A second family in a
single-stack mesh, two of one family, a network, three: refused, naming host and variable.

Hand-worked mesh (as test_topology_dual_stack's): location x = a (leader, public) and b, location
y = c alone, each with internal IPs and pod ranges of both families; subnets 10.4.0.0/16 and
fd04::/64; the laptop 10.5.0.1 and fd05::1.
"""

import pytest

from ansible_collections.kilo.mesh.plugins.action.connect import ActionModule
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.engine.connect import connect_plan
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans
from ansible_collections.kilo.mesh.plugins.module_utils.kube.kube_node import desired_peer, spec_of
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan
from test_topology_features import key, node

DUAL = {"subnet": ["10.4.0.0/16", "fd04::/64"], "interface": "kilo0"}
LAPTOP = ["10.5.0.1/32", "fd05::1/128"]


def mesh(laptop=None):
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
    peers = [
        {
            "name": "laptop",
            "public_key": key(9),
            "allowed_ips": list(laptop or LAPTOP),
            "persistent_keepalive": 10,
        }
    ]
    return nodes, peers


X = [
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
Y = [
    "10.3.0.0/24",
    "fd10:0:0:3::/64",
    "172.16.0.3/32",
    "fd00:2::3/128",
    "10.4.0.2/32",
    "fd04::2/128",
]


def test_the_laptop_gets_both_families():
    nodes, peers = mesh()
    # given IPv6 first: the plan puts the mesh's primary family first, as a node's address
    plan = connect_plan(
        nodes, peers, DUAL, "lap", "laptop", ["fd05::1/128", "10.5.0.1/32"], port=51820
    )
    assert plan["address"] == ["10.5.0.1/32", "fd05::1/128"]
    assert [(p["name"], p["endpoint"], p["allowed_ips"]) for p in plan["peers"]] == [
        ("location:x", "203.0.113.1:51820", X),
        ("location:y", "198.51.100.3:51820", Y),
    ]
    assert plan["routes"] == [
        {
            "dst": [d for d in X + Y if ":" not in d],
            "gateway": None,
            "device": "kilo0",
            "source": "10.5.0.1",
            "table": 254,
            "onlink": False,
        },
        {
            "dst": [d for d in X + Y if ":" in d],
            "gateway": None,
            "device": "kilo0",
            "source": "fd05::1",
            "table": 254,
            "onlink": False,
        },
    ]
    assert plan["internal_ip"] is None and plan["rules"] == [] and plan["firewall"] == {}
    check_plan(plan, "kilo0")  # what kilo.mesh.converge takes at its boundary


def test_the_mesh_takes_both_of_its_addresses():
    """The leaders allow both, the members route each family via their leader's address of it."""
    nodes, peers = mesh()
    plans = build_plans(nodes, peers, DUAL)["plans"]
    for leader in ("a", "c"):
        assert [p["allowed_ips"] for p in plans[leader]["peers"] if p["name"] == "laptop"] == [
            LAPTOP
        ]
    routes = [
        (d, r["gateway"])
        for r in plans["b"]["routes"]
        for d in (r["dst"] if isinstance(r["dst"], list) else [r["dst"]])
    ]
    assert ("10.5.0.1/32", "10.1.0.1") in routes and ("fd05::1/128", "fd00:1::1") in routes


def test_one_family_in_a_dual_stack_mesh_routes_both_from_none_but_its_own():
    nodes, peers = mesh(["10.5.0.1/32"])
    plan = connect_plan(nodes, peers, DUAL, "lap", "laptop", "10.5.0.1/32")
    assert plan["address"] == "10.5.0.1/32"
    assert [r["source"] for r in plan["routes"]] == ["10.5.0.1", None]


def test_the_peer_step_registers_both():
    args = dict(
        connect_name="laptop",
        connect_state="present",
        connect_store=None,
        kubernetes=False,
        connect_persistent_keepalive=10,
        connect_allowed_ip=["fd05::1/128", "10.5.0.1/32"],
    )
    assert ActionModule.peer(args, "lap", (4, 6))["allowed_ips"] == LAPTOP
    # what kilo.mesh.peer keeps: the registry's entry and the Peer resource's allowedIPs hold both
    peer = desired_peer(
        dict(
            ActionModule.peer(args, "lap", (4, 6)),
            public_key=key(9),
            endpoint=None,
            preshared_key=None,
        )
    )
    assert peer["allowed_ips"] == LAPTOP and spec_of(peer)["allowedIPs"] == LAPTOP
    with pytest.raises(KiloError) as e:
        ActionModule.peer(args, "lap", ())
    assert str(e.value).startswith(
        "host 'lap': kilo_connect_allowed_ip: fd05::1/128 and 10.5.0.1/32: two IP"
        " families, but the mesh is single-stack"
    ), str(e.value)


@pytest.mark.parametrize(
    "allowed_ip, options, message",
    [
        (
            LAPTOP,
            {"interface": "kilo0"},
            "10.5.0.1/32 and fd05::1/128: two IP families, but the mesh is single-stack",
        ),
        (["10.5.0.1/32", "10.5.0.2/32"], DUAL, "10.5.0.1/32 and 10.5.0.2/32 are both IPv4"),
        (["10.5.0.1/32", "fd05::/64"], DUAL, "fd05::/64 is a network"),
        (LAPTOP + ["10.5.0.2/32"], DUAL, "3 addresses"),
        ([], DUAL, "0 addresses"),
    ],
)
def test_refusals_name_the_host_and_the_variable(allowed_ip, options, message):
    nodes, peers = mesh()
    if "subnet" not in options:  # the same mesh single-stack: IPv4 alone
        nodes = [dict(n, internal_ip=n["internal_ip"][0], pod_cidr=n["pod_cidr"][0]) for n in nodes]
        peers[0]["allowed_ips"] = LAPTOP[:1]
    with pytest.raises(KiloError) as e:
        connect_plan(nodes, peers, options, "lap", "laptop", allowed_ip)
    assert str(e.value).startswith("host 'lap': kilo_connect_allowed_ip: " + message), str(e.value)
