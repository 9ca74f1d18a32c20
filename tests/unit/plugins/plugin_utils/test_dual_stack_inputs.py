# -*- coding: utf-8 -*-
"""Dual-stack meshes on the controller's input side (issue 23): ``kilo_subnet`` as a list of two,
``kilo_force_internal_ip`` of two, the key step's host checks with two subnets, discovery of an
internal IP of each family, and the node a host becomes (inventory, registry facts) - which the
engine then takes as its dual-stack node. Single-stack values read exactly as before."""

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.kilo.mesh.plugins.module_utils import nodes
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host import discovery, host_checks
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node
from ansible_collections.kilo.mesh.plugins.module_utils.options import argument_spec
from ansible_collections.kilo.mesh.plugins.plugin_utils import inputs
from test_missing_warning import validate as validate_action
from flat_plans import build_plans

KEY = "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="
KEY2 = "kXp0cNZ3nE4x7Q0a1Ttn8E0tH1QKjvQm4dmaT1nKc1U="
DUAL = ["10.4.0.0/16", "fd04::/64"]
FACTS = {
    "public_key": KEY,
    "internal_ip": ["10.1.0.5/24", "fd00:1::5/64"],
    "external_ip": "203.0.113.5",
    "discovered_endpoints": {},
    "mtu": 1500,
}


# --- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["10.4.0.0/16", DUAL])
def test_subnet_option_takes_one_cidr_or_a_list_as_given(value):
    for scope in ("mesh", "key"):
        checked = ArgumentSpecValidator({"subnet": argument_spec(scope)["subnet"]}).validate(
            {"subnet": value}
        )
        assert not checked.error_messages and checked.validated_parameters["subnet"] == value


def test_force_internal_ip_option_keeps_a_list():
    spec = {"force_internal_ip": argument_spec("key")["force_internal_ip"]}
    value = ["10.1.0.5/24", "fd00:1::5/64"]
    assert ArgumentSpecValidator(spec).validate(
        {"force_internal_ip": value}
    ).validated_parameters == {"force_internal_ip": value}


def test_parse_subnets_one_or_two_families():
    assert [str(n) for n in nodes.parse_subnets("10.4.0.0/16", "options")] == ["10.4.0.0/16"]
    assert [str(n) for n in nodes.parse_subnets(DUAL, "options")] == DUAL
    with pytest.raises(
        KiloError, match="options: subnet: 10.4.0.0/16 and 10.5.0.0/16 are both IPv4"
    ):
        nodes.parse_subnets(["10.4.0.0/16", "10.5.0.0/16"], "options")
    assert nodes.mesh_families(DUAL) == (4, 6)
    assert nodes.mesh_families(["fd04::/64", "10.4.0.0/16"]) == (6, 4)
    assert nodes.mesh_families("10.4.0.0/16") == () and nodes.mesh_families(["10.4.0.0/16"]) == ()


# --- kilo_force_internal_ip: the node table's row ------------------------------------------------


def test_forced_internal_ips_of_two_families():
    hvars = {"kilo_force_internal_ip": ["10.1.0.9/24", "fd00:1::9/64"]}
    assert nodes.check_host_vars(hvars, "host 'a'") == {
        "internal_ip": ["10.1.0.9/24", "fd00:1::9/64"]
    }
    node = inputs.node_from_host("a", hvars, FACTS, "x", 51820)
    assert node["internal_ip"] == ["10.1.0.9/24", "fd00:1::9/64"]
    # one forced stays text, as before
    assert (
        inputs.node_from_host("a", {"kilo_force_internal_ip": "10.1.0.9/24"}, FACTS, "x", 51820)[
            "internal_ip"
        ]
        == "10.1.0.9/24"
    )


@pytest.mark.parametrize(
    "value, message",
    [
        (["10.1.0.9/24", "10.1.0.8/24"], "10.1.0.9/24 and 10.1.0.8/24 are both IPv4"),
        (["10.1.0.9/24", "fd00::1/64", "10.2.0.1/24"], "3 internal IPs; at most two"),
        (["10.1.0.9/24", "bogus"], "'bogus' is not an address in CIDR form"),
    ],
)
def test_bad_forced_internal_ips_name_host_and_variable(value, message, tmp_path):
    hostvars = {"h": {"kilo_location": "x", "kilo_force_internal_ip": value}}
    with pytest.raises(KiloError) as e:
        validate_action(hostvars, ["h"], tmp_path)
    assert (e.value.kind, e.value.name, e.value.field) == ("host", "h", "kilo_force_internal_ip")
    assert message in str(e.value)


def test_force_internal_ip_annotation_of_two():
    node = {
        "metadata": {
            "name": "n",
            "annotations": {kube_node.FORCE_INTERNAL_IP: "10.1.0.9/24, fd00:1::9/64"},
        }
    }
    assert kube_node.host_vars(node)["kilo_force_internal_ip"] == ["10.1.0.9/24", "fd00:1::9/64"]
    node["metadata"]["annotations"][kube_node.FORCE_INTERNAL_IP] = "10.1.0.9/24,10.1.0.8/24"
    with pytest.raises(
        KiloError, match="node 'n': kilo.squat.ai/force-internal-ip: .* are both IPv4"
    ):
        kube_node.host_vars(node)


def test_kilos_internal_ip_annotation_gets_the_first():
    written = kube_node.write_back(
        {"name": "n", "public_key": KEY, "internal_ip": ["10.1.0.5/24", "fd00:1::5/64"]},
        None,
        "location",
        1,
    )
    assert written[kube_node.INTERNAL_IP] == "10.1.0.5/24"


# --- the key step's checks with two subnets ----------------------------------------------------

HOST = {
    "links": {1: {"name": "lo"}, 2: {"name": "eth0"}, 3: {"name": "kilo0"}},
    "addrs": [
        {"ifname": "lo", "cidr": "127.0.0.1/8"},
        {"ifname": "eth0", "cidr": "10.1.0.5/24"},
        {"ifname": "eth0", "cidr": "fd00:1::5/64"},
        {"ifname": "kilo0", "cidr": "10.4.0.1/16"},
        {"ifname": "kilo0", "cidr": "fd04::1/64"},
    ],
}


def test_each_subnet_is_checked_for_a_lan_in_the_way():
    assert host_checks.host_problems(HOST, "kilo0", DUAL, 51820, None) == ([], [])
    errors, warnings = host_checks.host_problems(
        HOST, "kilo0", ["10.1.0.0/16", "fd00:1::/48"], 51820, None
    )
    assert errors == [
        "kilo_subnet: 10.1.0.0/16 overlaps a network this host is on (10.1.0.5/24 on eth0);"
        " choose another subnet",
        "kilo_subnet: fd00:1::/48 overlaps a network this host is on (fd00:1::5/64 on eth0);"
        " choose another subnet",
    ]
    assert warnings == []


def test_each_forced_internal_ip_is_looked_for():
    assert host_checks.host_problems(
        HOST, "kilo0", DUAL, 51820, ["10.1.0.5/24", "fd00:1::5/64"]
    ) == ([], [])
    assert host_checks.host_problems(
        HOST, "kilo0", DUAL, 51820, ["10.1.0.5/24", "fd00:9::5/64"]
    ) == ([], ["kilo_force_internal_ip: no interface of this host has fd00:9::5"])


# --- discovery: an internal IP of each family ----------------------------------------------------


def lan_host(*extra):
    addrs = [
        ("lo", 1, "127.0.0.1/8"),
        ("eth0", 2, "10.1.0.5/24"),
        ("eth0", 2, "fd00:1::5/64"),
        ("eth0", 2, "fe80::5/64"),
        ("eth0", 2, "203.0.113.5/24"),
    ] + list(extra)
    return {
        "links": dict((i, {"name": n, "mtu": 1500}) for n, i, dummy in addrs),
        "addrs": [{"index": i, "ifname": n, "cidr": c} for n, i, c in addrs],
        "default_index": 2,
    }


def test_single_stack_discovery_unchanged():
    ips = discovery.choose_ips(lan_host())
    assert ips["internal_ip"] == "10.1.0.5/24" and ips["external_ip"] == "203.0.113.5"
    assert discovery.choose_ips(lan_host(), families=()) == ips


def test_dual_stack_discovery_one_of_each_family_on_the_lan_interface():
    ips = discovery.choose_ips(lan_host(), families=(4, 6))
    assert ips["internal_ip"] == ["10.1.0.5/24", "fd00:1::5/64"]
    assert ips["external_ip"] == "203.0.113.5"  # one endpoint, as Kilo picks it
    # an IPv6-primary mesh: its family first
    assert discovery.choose_ips(lan_host(), families=(6, 4))["internal_ip"] == [
        "fd00:1::5/64",
        "10.1.0.5/24",
    ]


def test_dual_stack_discovery_takes_no_second_family_from_another_interface():
    host = lan_host(("eth1", 3, "fd00:2::5/64"))
    host["addrs"] = [a for a in host["addrs"] if a["cidr"] != "fd00:1::5/64"]
    assert discovery.choose_ips(host, families=(4, 6))["internal_ip"] == "10.1.0.5/24"
    # no primary family at all: the other alone
    only6 = lan_host()
    only6["addrs"] = [a for a in only6["addrs"] if a["cidr"] != "10.1.0.5/24"]
    assert discovery.choose_ips(only6, families=(4, 6))["internal_ip"] == "fd00:1::5/64"


# --- what the host reported, into the node and the engine ---------------------------------------


def test_reported_internal_ips_of_two_make_a_dual_stack_node():
    facts = nodes.facts_from_result(dict(FACTS, failed=False))
    assert facts["internal_ip"] == ["10.1.0.5/24", "fd00:1::5/64"]  # the registry keeps both
    node = inputs.node_from_host("a", {}, facts, "x", 51820, dual=True)
    assert (
        node["internal_ip"] == ["10.1.0.5/24", "fd00:1::5/64"]
        and node["endpoint"] == "203.0.113.5:51820"
    )
    # no external IP: the endpoint is the first internal IP's, as Kilo's one
    assert (
        inputs.node_from_host("a", {}, dict(facts, external_ip=None), "x", 51820, dual=True)[
            "endpoint"
        ]
        == "10.1.0.5:51820"
    )
    # a single-stack mesh (a registry entry of a dual-stack past): the first alone
    assert inputs.node_from_host("a", {}, facts, "x", 51820)["internal_ip"] == "10.1.0.5/24"


def test_bad_reported_internal_ips_name_the_host():
    with pytest.raises(KiloError) as e:
        inputs.node_from_host(
            "a", {}, dict(FACTS, internal_ip=["10.1.0.5/24", "10.1.0.6/24"]), "x", 51820
        )
    assert (e.value.subject, e.value.field) == (
        "host 'a'",
        "internal_ip (reported by kilo.mesh.key)",
    )
    assert "both IPv4" in str(e.value)


def test_nodes_from_hosts_feed_a_dual_stack_mesh():
    a = inputs.node_from_host(
        "a", {"kilo_pod_cidr": ["10.2.0.0/24", "fd10::/64"]}, FACTS, "x", 51820, dual=True
    )
    b = inputs.node_from_host(
        "b",
        {
            "kilo_force_internal_ip": ["10.1.1.5/24", "fd00:2::5/64"],
            "kilo_pod_cidr": ["10.2.1.0/24", "fd10:0:0:1::/64"],
        },
        dict(FACTS, public_key=KEY2, external_ip="198.51.100.5"),
        "y",
        51820,
        dual=True,
    )
    plans = build_plans([a, b], [], {"subnet": DUAL})["plans"]
    assert plans["a"]["address"] == ["10.4.0.1/16", "fd04::1/64"]
    assert plans["a"]["internal_ip"] == ["10.1.0.5/24", "fd00:1::5/64"]
    assert plans["a"]["peers"][0]["allowed_ips"] == [
        "10.2.1.0/24",
        "fd10:0:0:1::/64",
        "10.1.1.5/32",
        "fd00:2::5/128",
        "10.4.0.2/32",
        "fd04::2/128",
    ]
    # the same hosts in a single-stack mesh: refused, naming the node and the field
    with pytest.raises(KiloError, match="node 'a'"):
        build_plans([a, b], [], {"subnet": "10.4.0.0/16"})


# --- Kubernetes: spec.podCIDRs, write-back of both families and their reading back ------------------

from ansible_collections.kilo.mesh.plugins.module_utils.agent import mesh as agent_mesh  # noqa: E402


def kube(annotations=None, spec=None):
    return {
        "metadata": {"name": "n", "annotations": dict(annotations or {})},
        "spec": dict(spec or {}),
    }


def test_pod_cidrs_of_both_families_only_in_a_dual_stack_mesh():
    obj = kube(
        {kube_node.KEY: KEY, kube_node.ENDPOINT: "203.0.113.5:51820"},
        {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd10:244:1::/64"]},
    )
    hvars = kube_node.host_vars(obj)
    assert hvars["kilo_kubernetes_node"]["pod_cidrs"]["node"] == [
        "10.244.1.0/24",
        "fd10:244:1::/64",
    ]
    facts = nodes.annotation_facts(hvars)
    assert (
        nodes.node_from_host("n", hvars, facts, "", 51820)["pod_cidr"] == "10.244.1.0/24"
    )  # Kilo's
    assert nodes.node_from_host("n", hvars, facts, "", 51820, dual=True)["pod_cidr"] == [
        "10.244.1.0/24",
        "fd10:244:1::/64",
    ]
    # one family only, as before
    single = kube_node.host_vars(
        kube(spec={"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]})
    )
    assert single["kilo_kubernetes_node"]["pod_cidrs"]["node"] == ["10.244.1.0/24"]


def test_write_back_keeps_kilos_annotations_and_adds_both_families_in_ours():
    node = {
        "name": "n",
        "public_key": KEY,
        "endpoint": "203.0.113.5:51820",
        "internal_ip": ["10.1.0.5/24", "fd00:1::5/64"],
        "discovered_endpoints": {},
    }
    plan = {"address": ["10.4.0.1/16", "fd04::1/64"]}
    written = kube_node.write_back(node, plan, "location", 7)
    assert (
        written[kube_node.WIREGUARD_IP] == "10.4.0.1/16"
        and written[kube_node.INTERNAL_IP] == "10.1.0.5/24"
    )
    assert written[kube_node.WIREGUARD_IPS] == "10.4.0.1/16,fd04::1/64"
    assert written[kube_node.INTERNAL_IPS] == "10.1.0.5/24,fd00:1::5/64"
    # single-stack: exactly Kilo's keys, as before
    single = kube_node.write_back(
        dict(node, internal_ip="10.1.0.5/24"), {"address": "10.4.0.1/16"}, "location", 7
    )
    assert not set(single) & set(kube_node.DUAL_ANNOTATIONS) and set(written) - set(single) == set(
        kube_node.DUAL_ANNOTATIONS
    )
    assert single[kube_node.WIREGUARD_IP] == "10.4.0.1/16"
    # what a writer removes: ours the Node has that it does not write
    assert kube_node.dual_removals(single, written) == dict.fromkeys(kube_node.DUAL_ANNOTATIONS)
    assert (
        kube_node.dual_removals(written, written) == {}
        and kube_node.dual_removals(single, {}) == {}
    )


def test_both_families_read_back():
    written = kube_node.write_back(
        {
            "name": "n",
            "public_key": KEY,
            "endpoint": "203.0.113.5:51820",
            "internal_ip": ["10.1.0.5/24", "fd00:1::5/64"],
            "discovered_endpoints": {},
        },
        {"address": ["10.4.0.1/16", "fd04::1/64"]},
        "location",
        7,
    )
    hvars = kube_node.host_vars(kube(written))
    seen = hvars["kilo_kubernetes_node"]
    assert seen["internal_ip"] == ["10.1.0.5/24", "fd00:1::5/64"]
    assert seen["wireguard_ip"] == ["10.4.0.1/16", "fd04::1/64"]
    facts = nodes.annotation_facts(hvars)
    assert facts["internal_ip"] == ["10.1.0.5/24", "fd00:1::5/64"]
    assert (
        nodes.node_from_host("n", hvars, facts, "", 51820, dual=True)["internal_ip"]
        == facts["internal_ip"]
    )
    # ours left from a dual-stack past, Kilo's rewritten since by Kilo's agent: Kilo's counts
    stale = dict(written, **{kube_node.INTERNAL_IP: "10.1.0.9/24", kube_node.WIREGUARD_IP: ""})
    seen = kube_node.host_vars(kube(stale))["kilo_kubernetes_node"]
    assert seen["internal_ip"] == "10.1.0.9/24" and seen["wireguard_ip"] is None


def test_leader_probes_go_to_the_primary_wireguard_ip():
    computed = {
        "segments": [
            {"leader": "a", "wireguard_ip": ["10.4.0.1", "fd04::1"]},
            {"leader": "c", "wireguard_ip": ["10.4.0.2", "fd04::2"]},
        ]
    }
    assert agent_mesh.probe_targets(computed, "a") == {"c": "10.4.0.2"}


# --- readers of the lists: graph, showconf ----------------------------------------------------------

from ansible_collections.kilo.mesh.plugins.plugin_utils.showconf import showconf  # noqa: E402
from ansible_collections.kilo.mesh.plugins.module_utils.engine.graph import to_dot  # noqa: E402
from test_topology_dual_stack import dual_mesh  # noqa: E402


def test_graph_labels_carry_both_families():
    dot = to_dot(dual_mesh())
    assert '\tlabel="10.4.0.0/16, fd04::/64";' in dot
    assert (
        '"location:x\\na\\n10.2.0.0/24\\nfd10:0:0:1::/64\\n10.1.0.1\\nfd00:1::1\\n10.4.0.1\\nfd04::1\\n'
        in dot
    )
    assert "[" not in dot.replace("[label", "").replace("[dir", "").replace("[style", "").replace(
        "[shape", ""
    )


def test_showconf_allowed_ips_of_both_families():
    from test_topology_features import key, node

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
            "c",
            "y",
            ["172.16.0.3/24", "fd00:2::3/64"],
            ["10.3.0.0/24", "fd10:0:0:3::/64"],
            "198.51.100.3:51820",
            3,
        ),
    ]
    text = showconf(nodes, [], {"subnet": DUAL}, node="a")["config"]
    assert (
        "AllowedIPs = 10.3.0.0/24, fd10:0:0:3::/64, 172.16.0.3/32, fd00:2::3/128, 10.4.0.2/32, fd04::2/128"
        in text
    )
    assert "PublicKey = %s" % key(3) in text
    peer = showconf(nodes, [], {"subnet": DUAL}, node="a", as_peer=True, output="yaml")["data"]
    assert peer["spec"]["allowedIPs"] == [
        "10.2.0.0/24",
        "fd10:0:0:1::/64",
        "10.1.0.1/32",
        "fd00:1::1/128",
        "10.4.0.1/32",
        "fd04::1/128",
    ]
