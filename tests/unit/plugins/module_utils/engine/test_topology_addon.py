# -*- coding: utf-8 -*-
"""Add-on mode (option ``compatibility``, Kilo's ``--compatibility``), worked by hand from Kilo's Go.

Kilo sources read (github.com/squat/kilo, HEAD 944dff5): ``pkg/mesh/routes.go`` (``Routes``,
``encapsulateRoute``), ``pkg/encapsulation/{ipip,flannel,cilium}.go`` (``Gw``, ``Index``,
``Rules``, ``Set``), ``pkg/mesh/mesh.go`` (``applyTopology``: ``Rules``/``Set`` only when
encapsulating with ``local``), ``cmd/kg/main.go`` (the flag values ``flannel`` and ``cilium``).

The mesh: location ``a`` = a1 (leader: public endpoint), a2 (cilium_host 10.2.2.77), a3 (on
another subnet); location ``b`` = b1. WireGuard IPs: location:a 10.4.0.1, location:b 10.4.0.2.
"""

import json
import random

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import (
    build_plans as grouped_plans,
)
from ansible_collections.kilo.mesh.plugins.module_utils.engine.parse import (
    TopologyError,
    parse_inputs,
)
from flat_plans import build_plans
from test_topology_reference import (
    R,
    conf,
    contains,
    encap_route,
    firewall,
    norm_routes,
    norm_rules,
    one,
    random_mesh,
    topology,
)
from test_topology_reference import routes as reference_routes
from test_topology_features import node, route

K = 1107


def mesh():
    return [
        node("a1", "a", "10.0.0.1/24", "10.2.1.0/24", "203.0.113.1:51820", 1),
        node(
            "a2",
            "a",
            "10.0.0.2/24",
            "10.2.2.0/24",
            "10.0.0.2:51820",
            2,
            cni_compatibility_ip="10.2.2.77/32",
        ),
        node("a3", "a", "10.0.1.3/24", "10.2.3.0/24", "10.0.1.3:51820", 3),
        node("b1", "b", "10.1.0.1/24", "10.3.1.0/24", "198.51.100.1:51820", 4),
    ]


def plans(**options):
    return build_plans(mesh(), [], options)["plans"]


def rule(dst, src=None, iif=None):
    return {"src": src, "dst": dst, "iif": iif, "table": K}


# Leader a1 towards location b, in every mode (Routes, leader branch, other segments): via the
# segment's WireGuard IP on kilo0, source = own internal IP. Unchanged by the encapsulator.
A1_REMOTE = [
    route("10.3.1.0/24", "10.4.0.2", "kilo0", "10.0.0.1"),
    route("10.1.0.1/32", "10.4.0.2", "kilo0", "10.0.0.1"),
]


# --- flannel ----------------------------------------------------------------------------------


def test_flannel_always_leader():
    plan = plans(compatibility="flannel")["a1"]
    # Routes, leader, own segment, local: nodeGw = flannel Gw = the member's pod network address;
    # encapsulateRoute (always) moves it to tunlIface = flannel.1 and sets src = own internal IP;
    # then (always) the table-1107 route via the same gateway, and the two rules.
    assert (
        plan["routes"]
        == [
            route("10.2.2.0/24", "10.2.2.0", "flannel.1", "10.0.0.1"),
            route("10.0.0.2/32", "10.2.2.0", "flannel.1", "10.0.0.1", K),
            route("10.2.3.0/24", "10.2.3.0", "flannel.1", "10.0.0.1"),
            route("10.0.1.3/32", "10.2.3.0", "flannel.1", "10.0.0.1", K),
        ]
        + A1_REMOTE
    )
    assert plan["rules"] == [
        rule("10.0.0.2/32", "10.2.1.0/24"),
        rule("10.0.0.2/32", iif="kilo0"),
        rule("10.0.1.3/32", "10.2.1.0/24"),
        rule("10.0.1.3/32", iif="kilo0"),
    ]
    # flannel's Rules() is empty and its Set() does nothing: no IPIP chain, no tunnel address
    assert (
        plan["firewall"]["ipip_filter"] is False and plan["firewall"]["ipip_accept_sources"] == []
    )
    assert plan["tunnel_address"] is None


def test_flannel_always_nonleader():
    plan = plans(compatibility="flannel")["a2"]
    # Routes, non-leader: gw = flannel Gw of the leader = a1's pod network address 10.2.1.0;
    # every route via it is encapsulated (always): flannel.1, src = own internal IP.

    def via(dst):
        return route(dst, "10.2.1.0", "flannel.1", "10.0.0.2")

    assert plan["routes"] == [
        via("10.4.0.1/32"),
        # own segment, local: a1 and a3 through their own pod network addresses
        via("10.2.1.0/24"),
        route("10.0.0.1/32", "10.2.1.0", "flannel.1", "10.0.0.2", K),
        route("10.2.3.0/24", "10.2.3.0", "flannel.1", "10.0.0.2"),
        route("10.0.1.3/32", "10.2.3.0", "flannel.1", "10.0.0.2", K),
        via("10.4.0.2/32"),
        via("10.3.1.0/24"),
        via("10.1.0.1/32"),
    ]
    # a non-leader has no "iif kilo0" rule (Routes, non-leader branch)
    assert plan["rules"] == [rule("10.0.0.1/32", "10.2.2.0/24"), rule("10.0.1.3/32", "10.2.2.0/24")]
    assert plan["tunnel_address"] is None and plan["firewall"]["ipip_filter"] is False


def test_flannel_crosssubnet_tests_the_gateway_for_routes_and_the_internal_ip_for_table_1107():
    plan = plans(compatibility="flannel", encapsulate="crosssubnet")["a2"]
    # encapsulateRoute: 10.2.1.0 / 10.2.3.0 are outside a2's 10.0.0.0/24 -> flannel.1 for all;
    # Routes: the table-1107 route and rule only for a3, whose internal IP is off a2's subnet.
    assert plan["routes"] == [
        route("10.4.0.1/32", "10.2.1.0", "flannel.1", "10.0.0.2"),
        route("10.2.1.0/24", "10.2.1.0", "flannel.1", "10.0.0.2"),
        route("10.2.3.0/24", "10.2.3.0", "flannel.1", "10.0.0.2"),
        route("10.0.1.3/32", "10.2.3.0", "flannel.1", "10.0.0.2", K),
        route("10.4.0.2/32", "10.2.1.0", "flannel.1", "10.0.0.2"),
        route("10.3.1.0/24", "10.2.1.0", "flannel.1", "10.0.0.2"),
        route("10.1.0.1/32", "10.2.1.0", "flannel.1", "10.0.0.2"),
    ]
    assert plan["rules"] == [rule("10.0.1.3/32", "10.2.2.0/24")]


def test_flannel_never_keeps_the_pod_gateway_on_the_private_interface():
    plan = plans(compatibility="flannel", encapsulate="never")["a2"]
    # encapsulateRoute leaves the route alone: privIface, onlink, flannel's gateway, no source
    assert plan["routes"][:3] == [
        route("10.4.0.1/32", "10.2.1.0", "private", None),
        route("10.2.1.0/24", "10.2.1.0", "private", None),
        route("10.2.3.0/24", "10.2.3.0", "private", None),
    ]
    assert plan["rules"] == []


def test_flannel_leader_without_local_routes_internal_ips_through_flannel_in_table_1107():
    result = plans(compatibility="flannel", local=False)
    # Routes, leader, "!local && privateIP != nil && strategy != never": nodeGw (pod network
    # address) differs from the internal IP -> table 1107 via flannel.1, no source, plus the
    # "iif kilo0" rule; nothing in the main table for the own location.
    assert (
        result["a1"]["routes"]
        == [
            route("10.0.0.2/32", "10.2.2.0", "flannel.1", None, K),
            route("10.0.1.3/32", "10.2.3.0", "flannel.1", None, K),
        ]
        + A1_REMOTE
    )
    assert result["a1"]["rules"] == [
        rule("10.0.0.2/32", iif="kilo0"),
        rule("10.0.1.3/32", iif="kilo0"),
    ]
    # non-leaders: only the routes via the leader's pod network address (local off)
    assert [r["dst"] for r in result["a2"]["routes"]] == [
        "10.4.0.1/32",
        "10.4.0.2/32",
        "10.3.1.0/24",
        "10.1.0.1/32",
    ]
    assert result["a2"]["rules"] == []
    # encapsulation without local: mesh.go skips Rules() and Set()
    assert (
        result["a1"]["tunnel_address"] is None and result["a1"]["firewall"]["ipip_filter"] is False
    )


def test_flannel_leader_without_local_and_never_adds_nothing():
    plan = plans(compatibility="flannel", local=False, encapsulate="never")["a1"]
    assert plan["routes"] == A1_REMOTE and plan["rules"] == []


# --- cilium -----------------------------------------------------------------------------------


def test_cilium_always_uses_the_cni_compatibility_ip_else_the_pod_network_address():
    result = plans(compatibility="cilium")
    # cilium Gw: a2's cni-compatibility-ip 10.2.2.77; a3 has none -> its pod network address.
    # The device stays tunl0 (cilium's Init creates tunl0 unless Cilium renamed it cilium_tunl).
    assert (
        result["a1"]["routes"]
        == [
            route("10.2.2.0/24", "10.2.2.77", "tunl0", "10.0.0.1"),
            route("10.0.0.2/32", "10.2.2.77", "tunl0", "10.0.0.1", K),
            route("10.2.3.0/24", "10.2.3.0", "tunl0", "10.0.0.1"),
            route("10.0.1.3/32", "10.2.3.0", "tunl0", "10.0.0.1", K),
        ]
        + A1_REMOTE
    )
    # cilium's Rules() and Set() are IPIP's: the IPIP filter for the location's internal IPs and
    # tunl0 gets the first address of the pod CIDR
    fw = result["a1"]["firewall"]
    assert fw["ipip_filter"] is True and fw["ipip_accept_sources"] == [
        "10.0.0.1/32",
        "10.0.0.2/32",
        "10.0.1.3/32",
    ]
    assert result["a1"]["tunnel_address"] == "10.2.1.1/32"
    # a non-leader's gateway: the leader a1 has no cni-compatibility-ip -> 10.2.1.0
    assert result["a3"]["routes"][0] == route("10.4.0.1/32", "10.2.1.0", "tunl0", "10.0.1.3")
    assert route("10.2.2.0/24", "10.2.2.77", "tunl0", "10.0.1.3") in result["a3"]["routes"]


def test_cilium_gateway_of_a_leader_with_a_cni_compatibility_ip():
    nodes = mesh()
    nodes[0]["cni_compatibility_ip"] = "10.2.1.9/32"
    plan = build_plans(nodes, [], {"compatibility": "cilium", "encapsulate": "never"})["plans"][
        "a3"
    ]
    assert plan["routes"][0] == route("10.4.0.1/32", "10.2.1.9", "private", None)


def test_cilium_leader_without_local():
    plan = plans(compatibility="cilium", local=False)["a1"]
    assert plan["routes"][:2] == [
        route("10.0.0.2/32", "10.2.2.77", "tunl0", None, K),
        route("10.0.1.3/32", "10.2.3.0", "tunl0", None, K),
    ]
    assert plan["tunnel_address"] is None and plan["firewall"]["ipip_filter"] is False


# --- the default stays Kilo's IPIP --------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "none"])
def test_default_compatibility_is_byte_identical(value):
    for extra in ({}, {"local": False}, {"encapsulate": "crosssubnet"}):
        base = grouped_plans(mesh(), [], dict(extra))
        other = grouped_plans(mesh(), [], dict(extra, compatibility=value))
        assert json.dumps(base, sort_keys=True) == json.dumps(other, sort_keys=True)


def test_ipip_leader_without_local_adds_nothing():
    # Routes' "!local" branch: IPIP's Gw is the internal IP itself, so no route is added
    plan = plans(local=False)["a1"]
    assert plan["routes"] == A1_REMOTE and plan["rules"] == []


def test_unknown_compatibility_is_an_error():
    with pytest.raises(TopologyError) as err:
        plans(compatibility="weave")
    assert err.value.field == "compatibility"


def test_gateway_needs_a_pod_cidr():
    nodes = mesh()
    nodes[2]["pod_cidr"] = None
    with pytest.raises(TopologyError) as err:
        build_plans(nodes, [], {"compatibility": "flannel"})
    assert err.value.subject == "node 'a3'" and err.value.field == "pod_cidr"
    # cilium with a cni-compatibility-ip needs none for that node
    nodes[2]["cni_compatibility_ip"] = "10.2.3.5/32"
    build_plans(nodes, [], {"compatibility": "cilium"})


def test_bad_cni_compatibility_ip():
    nodes = mesh()
    nodes[1]["cni_compatibility_ip"] = "nope"
    with pytest.raises(TopologyError) as err:
        build_plans(nodes, [], {})
    assert err.value.field == "cni_compatibility_ip"


# --- a second literal reading of Routes() with each encapsulator, on random meshes -------------------


def gw(compat, n):
    """Encapsulator.Gw(external, internal, cniIP, subnet) of node ``n``."""
    if compat == "flannel":
        return n.pod.network_address
    if compat == "cilium":
        return n.cni_ip if n.cni_ip is not None else n.pod.network_address
    return n.internal.ip


def routes(t, local, strat, compat, iface):
    tun = "flannel.1" if compat == "flannel" else "tunl0"
    rs, rules = [], []

    def enc(r):
        r = encap_route(r, strat, t.private)
        if r["dev"] == "tunl0":
            r["dev"] = tun
        return r

    def table_encap(ip):
        return strat == "always" or (strat == "crosssubnet" and not contains(t.private.network, ip))

    if not t.leader:
        g = None
        for s in t.segs:
            if s.location == t.location:
                g = gw(compat, s.nodes[s.leader_idx])
                break
        for s in t.segs:
            rs.append(enc(R(one(s.wg), g, "private")))
            if s.location == t.location:
                if local:
                    for i, n in enumerate(s.nodes):
                        if s.privs[i] == t.private.ip:
                            continue
                        ngw = gw(compat, n)
                        rs.append(enc(R(s.cidrs[i], ngw, "private")))
                        if table_encap(s.privs[i]):
                            rs.append(R(one(s.privs[i]), ngw, tun, t.private.ip, K))
                            rules.append((t.subnet, one(s.privs[i]), None))
                continue
            for c in s.cidrs:
                rs.append(enc(R(c, g, "private")))
            for p in s.privs:
                rs.append(enc(R(one(p), g, "private")))
            for a in s.alips:
                rs.append(enc(R(a, g, "private")))
        for p, al in t.peers:
            for a in al:
                rs.append(enc(R(a, g, "private")))
        return rs, rules
    for s in t.segs:
        if s.location == t.location and t.private is not None:
            for i, n in enumerate(s.nodes):
                if s.privs[i] == t.private.ip:
                    continue
                ngw = gw(compat, n)
                if local:
                    rs.append(enc(R(s.cidrs[i], ngw, "private")))
                    if table_encap(s.privs[i]):
                        rs.append(R(one(s.privs[i]), ngw, tun, t.private.ip, K))
                        rules.append((t.subnet, one(s.privs[i]), None))
                        rules.append((None, one(s.privs[i]), iface))
                elif strat != "never" and ngw != s.privs[i]:
                    rs.append(R(one(s.privs[i]), ngw, tun, None, K))
                    rules.append((None, one(s.privs[i]), iface))
    # other segments and peers: no encapsulator involved, as the IPIP reading has them
    # (its own-location part is empty with local off); lists are compared sorted
    rs.extend(reference_routes(t, False, strat, iface)[0])
    return rs, rules


def compare(nodes_in, peers_in, options):
    opts, nodes, peers = parse_inputs(nodes_in, peers_in, options)
    result = build_plans(nodes_in, peers_in, options)
    compat = opts["compatibility"]
    problems = []
    for me in nodes:
        t = topology(nodes, peers, opts, me.name)
        plan = result["plans"][me.name]
        rs, rules = routes(t, opts["local"], opts["encapsulate"], compat, opts["interface"])
        got = sorted(
            [
                (r["dst"], r["gateway"], r["device"], r["source"], r["table"], r["onlink"])
                for r in plan["routes"]
            ],
            key=str,
        )
        if norm_routes(rs) != got:
            problems.append((me.name, "routes", norm_routes(rs), got))
        got_rules = sorted([(r["src"], r["dst"], r["iif"]) for r in plan["rules"]], key=str)
        if norm_rules(rules) != got_rules:
            problems.append((me.name, "rules", norm_rules(rules), got_rules))
        if t.leader and conf(t) != sorted(
            [
                (
                    p["public_key"],
                    p["endpoint"],
                    tuple(sorted(p["allowed_ips"])),
                    p["persistent_keepalive"],
                )
                for p in plan["peers"]
            ],
            key=str,
        ):
            problems.append((me.name, "conf"))
        fw = firewall(t, me, opts, nodes)
        if compat == "flannel":  # Rules() empty, Set() a no-op
            fw.update(ipip=False, ipip_src=set(), tun=None)
        pf = plan["firewall"]
        g = {
            "nat_src": set(pf["nat_sources"]),
            "fwd": set(pf["forward_accept"]),
            "exempt": set(pf["nat_exempt_destinations"]),
            "nat_dst": set(pf["nat_destinations"]),
            "ipip": pf["ipip_filter"],
            "ipip_src": set(pf["ipip_accept_sources"]),
            "tun": plan["tunnel_address"],
        }
        if g != fw:
            problems.append((me.name, "firewall", fw, g))
    return problems


@pytest.mark.parametrize("compat", ["flannel", "cilium"])
def test_engine_matches_literal_reading_of_kilo_in_addon_mode(compat):
    for seed in range(200):
        rnd = random.Random(seed)
        nodes, peers, options = random_mesh(rnd)
        options["compatibility"] = compat
        for i, n in enumerate(nodes):
            if rnd.random() < 0.5:
                n["cni_compatibility_ip"] = rnd.choice(
                    [
                        "10.100.%d.77/32" % i,
                        "10.%d.0.%d/24" % (i % 4, 200 + i),
                        "fd10:0:%x::9/128" % i,
                    ]
                )
        problems = compare(nodes, peers, options)
        assert not problems, "seed %d %r: %r" % (seed, options, problems[0])


# --- the host side: flannel.1 must exist (netstate) ----------------------------------------------


def test_host_fails_before_any_change_when_flannel_1_is_absent(monkeypatch):
    import test_netstate_units as tn
    from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import backend as ns

    flannel_plan = tn.plan(
        routes=[
            {
                "dst": "10.2.2.0/24",
                "gateway": "10.2.2.0",
                "device": "flannel.1",
                "source": "10.1.0.1",
                "onlink": True,
            }
        ]
    )
    b = tn.backend()
    b._reader = lambda: (tn.FakeIPRoute(), False)
    monkeypatch.setattr(
        ns, "kernel_module_available", lambda name: pytest.fail("flannel needs no tunl0")
    )
    cur = b.current(flannel_plan)
    assert cur["absent_devices"] == [
        "flannel.1"
    ]  # the fake host has lo, eth1 and the WireGuard link
    with pytest.raises(ns.NetStateError) as err:
        b.desired(flannel_plan, cur)
    assert str(err.value).startswith(
        "host 'a': plan.routes[0].device: device flannel.1 does not exist on this host"
        " (compatibility flannel"
    )
    # present: taken as it is, and tunl0 is not needed
    want = b.desired(flannel_plan, dict(cur, absent_devices=[]))
    assert [r["device"] for r in want["routes"]] == ["flannel.1"] and want["tunl0"] is None
