# -*- coding: utf-8 -*-
"""A single-stack mesh with a node address of the other IP family (review of issue 23).

Kilo's engine takes such a mesh and computes routes pairing a destination of one family with a
gateway of the other, which netlink refuses when its agent sets them; our engine keeps Kilo's
output, so plan.check_plan refused these plans only at each host's converge, naming the host
whose plan broke rather than the node at fault. kilo.mesh.validate now refuses them before any
host changes, naming the offending host and its variable.
"""

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import (
    build_plans as raw_plans,
)
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan
from ansible_collections.kilo.mesh.plugins.plugin_utils import validate
from test_topology_dual_stack import dual_mesh_inputs, two_nodes


def refusal(nodes, options, hostvars):
    with pytest.raises(KiloError) as error:
        validate.check_topology(nodes, [], options, hostvars, "a")
    return error.value


def test_the_engine_keeps_kilos_output_and_the_converge_blamed_another_host():
    """What the validate step now catches: Kilo's plans, refused later at host a's converge."""
    nodes = two_nodes("10.1.0.1/24", "10.2.0.0/24", "10.1.0.2/24", "fd10::/64")
    plans = raw_plans(nodes, [], {})["plans"]
    with pytest.raises(KiloError, match="differ in IP version"):
        check_plan(plans["a"], "kilo0")


def test_a_pod_range_of_the_other_family_names_the_node_and_its_variable():
    nodes = two_nodes("10.1.0.1/24", "10.2.0.0/24", "10.1.0.2/24", "fd10::/64")
    error = refusal(nodes, {}, {"a": {}, "b": {"kilo_pod_cidr": "fd10::/64"}})
    assert (error.kind, error.name, error.field) == ("host", "b", "kilo_pod_cidr")
    assert error.message == (
        "fd10::/64 is IPv6 but the mesh's subnet 10.4.0.0/16 is IPv4: a single-stack mesh routes"
        " one family (for both, set a subnet of each)"
    )


def test_a_pod_range_from_the_hosts_source_names_its_source():
    nodes = two_nodes("10.1.0.1/24", "10.2.0.0/24", "10.1.0.2/24", "fd10::/64")
    error = refusal(nodes, {}, {"a": {}, "b": {}})
    assert (error.name, error.field) == ("b", "pod_cidr (kilo_pod_cidr_source node)")


@pytest.mark.parametrize(
    "hostvars, field",
    [
        ({"a": {}, "b": {"kilo_force_internal_ip": "fd00:1::2/64"}}, "kilo_force_internal_ip"),
        ({"a": {}, "b": {}}, "internal_ip (reported by kilo.mesh.key)"),
    ],
)
def test_an_internal_ip_of_the_other_family_names_the_node(hostvars, field):
    nodes = two_nodes("10.1.0.1/24", "10.2.0.0/24", "fd00:1::2/64", "10.2.1.0/24")
    error = refusal(nodes, {}, hostvars)
    assert (error.name, error.field) == ("b", field)
    assert error.message.startswith(
        "fd00:1::2/64 is IPv6 but the mesh's subnet 10.4.0.0/16 is IPv4"
    )


def test_a_subnet_of_the_other_family_than_every_node_names_the_subnet():
    nodes = two_nodes("10.1.0.1/24", "10.2.0.0/24", "10.1.0.2/24", "10.2.1.0/24")
    raw_plans(nodes, [], {"subnet": "fd04::/64"})  # Kilo's engine takes it: so does ours
    error = refusal(nodes, {"subnet": "fd04::/64"}, {"a": {"kilo_subnet": "fd04::/64"}, "b": {}})
    assert (error.name, error.field) == ("a", "kilo_subnet")
    assert error.message == (
        "fd04::/64 is IPv6 but every node's internal IPs and pod ranges are IPv4: the mesh's"
        " routes would mix both families"
    )


@pytest.mark.parametrize(
    "nodes, options",
    [
        (two_nodes("10.1.0.1/24", "10.2.0.0/24", "10.1.0.2/24", "10.2.1.0/24"), {}),
        (
            two_nodes("fd00:1::1/64", "fd10:0:0:1::/64", "fd00:1::2/64", None),
            {"subnet": "fd04::/64"},
        ),
        (two_nodes(None, None, None, None), {"subnet": "fd04::/64"}),
        dual_mesh_inputs()[::2],
    ],
)
def test_meshes_of_one_family_or_dual_stack_pass(nodes, options):
    validate.check_topology(nodes, [], options, {"a": {}, "b": {}}, "a")
