# -*- coding: utf-8 -*-
"""kilo.mesh.plan_table (playbooks/plan.yml's output) on single-stack and dual-stack plans."""

from ansible_collections.kilo.mesh.plugins.filter.plan_table import plan_table
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans
from test_topology_dual_stack import dual_mesh_inputs, two_nodes


def rows(table):
    """node -> its line (after the summary, the header and its rule; before the notes)."""
    assert isinstance(table, list) and not any("\n" in line for line in table)
    return dict(
        (line.split()[0], line)
        for line in table[3:]
        if line and not line.startswith(("*", " ", "left out"))
    )


def test_a_dual_stack_plan_shows_both_wireguard_ips():
    table = rows(plan_table(build_plans(*dual_mesh_inputs())))
    assert "10.4.0.1/16, fd04::1/64" in table["a"]
    assert "10.4.0.1" not in table["b"]  # a member has no WireGuard IP


def test_a_single_stack_plan_shows_its_one_wireguard_ip():
    nodes = two_nodes("10.1.0.1/24", "10.2.0.0/24", "172.16.0.2/24", "10.2.1.0/24")
    nodes[1]["location"] = "y"
    table = rows(plan_table(build_plans(nodes, [], {})))
    assert (
        table["a"].split()[4:6] == ["10.4.0.1/16", "location:y"]
        and table["b"].split()[4] == "10.4.0.2/16"
    )
