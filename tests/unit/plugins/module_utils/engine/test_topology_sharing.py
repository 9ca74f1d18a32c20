"""Plans share what segment members share (issue 8): memory follows the distinct data."""

import base64

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.nodes import TopologyError
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan, flat_routes
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans


def key(i):
    return base64.b64encode(bytes([i + 1]) * 32).decode()


def mesh(count=12, locations=3):
    return [
        {
            "name": "n%02d" % i,
            "location": "l%d" % (i % locations),
            "public_key": key(i),
            "endpoint": "203.0.113.%d:51820" % (i + 1),
            "internal_ip": "10.0.0.%d/24" % (i + 1),
            "pod_cidr": "10.244.%d.0/24" % i,
        }
        for i in range(count)
    ]


def test_non_leaders_of_a_segment_share_their_route_lists():
    result = build_plans(
        mesh(), [{"name": "p", "public_key": key(99), "allowed_ips": ["10.9.0.0/24"]}]
    )
    plans = result["plans"]
    for segment in result["segments"]:
        others = [plans[n] for n in segment["nodes"] if n != segment["leader"]]
        assert len(others) >= 2
        first, second = (
            max(
                (r for r in plan["routes"] if isinstance(r["dst"], list)),
                key=lambda r: len(r["dst"]),
            )
            for plan in others[:2]
        )
        # one list object for every member, not a copy each
        assert first["dst"] is second["dst"]
        # the routes via the leader to other segments' WireGuard IPs, pods and internal IPs
        assert len(first["dst"]) > 6
        assert (
            others[0]["firewall"]["nat_exempt_destinations"]
            is others[1]["firewall"]["nat_exempt_destinations"]
        )
    leaders = [plans[s["leader"]] for s in result["segments"]]
    peer_lists = [dict((p["name"], p["allowed_ips"]) for p in plan["peers"]) for plan in leaders]
    assert peer_lists[0]["p"] is peer_lists[1]["p"]


def test_grouped_routes_expand_in_order_and_pass_the_check():
    plans = build_plans(mesh(), [])["plans"]
    for plan in plans.values():
        flat = flat_routes(plan["routes"])
        assert all(isinstance(r["dst"], str) for r in flat)
        assert len(flat) >= len(plan["routes"])
        checked = check_plan(plan, plan["interface"])
        assert [r["dst"] for r in checked["routes"]] == [r["dst"] for r in flat]


def test_check_plan_names_the_bad_destination_of_a_group():
    plan = {
        "name": "a",
        "segment": "location:x",
        "leader": False,
        "listen_port": 51820,
        "routes": [
            {"dst": ["10.1.0.0/24", "nonsense"], "gateway": "10.0.0.1", "device": "private"}
        ],
    }
    try:
        check_plan(plan, "kilo0")
    except Exception as e:  # KiloError
        assert "plan.routes[0].dst[1]" in str(e) and "nonsense" in str(e)
    else:
        raise AssertionError("accepted a bad destination")


def test_plans_are_rendered_when_asked_and_kept_by_nobody():
    plans = build_plans(mesh(), [], lazy=True)["plans"]
    assert list(plans) == ["n%02d" % i for i in range(12)] and len(plans) == 12
    first, again = plans["n01"], plans["n01"]
    # rendered afresh each time: equal, and a reader's change stays in its own copy
    assert first == again and first is not again
    first["routes"].clear()
    first["peers"].append("mine")
    assert plans["n01"] == again
    assert dict(plans) == dict((name, plans[name]) for name in plans)
    assert "nobody" not in plans
    with pytest.raises(KeyError):
        plans["nobody"]  # pylint: disable=pointless-statement
    only = build_plans(mesh(), [], only=["n03"], lazy=True)["plans"]
    assert list(only) == ["n03"] and only["n03"] == plans["n03"]


def test_a_plan_that_refuses_the_mesh_refuses_it_in_build_plans():
    # flannel routes to a node of the location through its pod network address: a node without
    # a pod CIDR refuses the plans that route to it, and build_plans, which renders no plan to
    # return it, still refuses the mesh there, as the first such plan does
    nodes = mesh()
    nodes[4]["pod_cidr"] = None
    for lazy in (False, True):
        with pytest.raises(TopologyError) as e:
            build_plans(nodes, [], {"compatibility": "flannel"}, lazy=lazy)
        assert (e.value.name, e.value.field) == ("n04", "pod_cidr")
