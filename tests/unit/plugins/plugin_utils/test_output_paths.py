# -*- coding: utf-8 -*-
"""Where the controller writes the files it makes for people (plugin_utils/output.py), graph's
formats, and the preview of a mesh before any host has a key (stand-ins), through the actions
themselves (driven without a play, as in test_mesh_reading.py)."""

import ipaddress
import os

import pytest

from ansible_collections.kilo.mesh.plugins.action import graph, showconf, topology
from ansible_collections.kilo.mesh.plugins.filter.plan_table import plan_table
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, parse_key
from ansible_collections.kilo.mesh.plugins.plugin_utils.mesh import MeshReading, stand_in_facts
from ansible_collections.kilo.mesh.plugins.plugin_utils.output import output_path
from test_mesh_reading import KEY_A, KEY_B, make_action, task_vars_of

# README.md's quick start: nobody has a key yet
QUICK_START = {
    "aws-1": {"kilo_location": "aws"},
    "aws-2": {"kilo_location": "aws"},
    "nas": {"kilo_location": "home", "kilo_persistent_keepalive": 25},
    "pi": {"kilo_location": "home", "kilo_persistent_keepalive": 25, "kilo_leader": True},
}


def pinned():
    return {
        "a": {
            "kilo_location": "x",
            "kilo_public_key": KEY_A,
            "kilo_force_endpoint": "203.0.113.1:51820",
            "kilo_force_internal_ip": "10.0.0.1/24",
        },
        "b": {
            "kilo_location": "x",
            "kilo_public_key": KEY_B,
            "kilo_force_endpoint": "203.0.113.2:51820",
            "kilo_force_internal_ip": "10.0.0.2/24",
        },
    }


def run(module, args, hostvars, host=None, sources=None, check_mode=False):
    action = make_action(module, args, check_mode=check_mode)
    task_vars = task_vars_of(hostvars, host or sorted(hostvars)[0])
    task_vars["ansible_inventory_sources"] = sources or []
    return action.run_kilo(action.options_of(task_vars), task_vars)


def files(directory):
    return sorted(os.listdir(str(directory)))


# --- the rule ---------------------------------------------------------------------------------


def test_a_relative_path_is_taken_from_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert output_path("m.svg") == str(tmp_path / "m.svg")
    assert output_path("sub/../m.svg") == str(tmp_path / "m.svg")
    assert output_path("m.svg", "out") == str(
        tmp_path / "out" / "m.svg"
    )  # kilo_output_dir, itself relative
    assert output_path("/abs/m.svg", "out") == "/abs/m.svg"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert output_path("~/m.svg") == str(tmp_path / "home" / "m.svg")


def test_a_file_inside_a_directory_inventory_is_refused(tmp_path, monkeypatch):
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    monkeypatch.chdir(inventory)
    for dest, out in (("m.dot", None), ("group_vars/m.dot", None), ("m.dot", str(inventory))):
        with pytest.raises(KiloError) as e:
            output_path(dest, out, [str(inventory)])
        assert (
            e.value.field == "dest"
            and "inventory source" in str(e.value)
            and "kilo_output_dir" in str(e.value)
        )
    # beside it, or beside a file inventory, is fine
    assert output_path("../m.dot", None, [str(inventory)]) == str(tmp_path / "m.dot")
    assert output_path("m.dot", None, [str(inventory / "hosts.yml")]) == str(inventory / "m.dot")


# --- the actions ------------------------------------------------------------------------------


def test_graph_writes_a_relative_dest_in_the_current_directory(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = run(graph, {"dest": "m.dot"}, pinned())
    assert result["dest"] == str(work / "m.dot") and result["format"] == "dot" and result["changed"]
    assert (work / "m.dot").read_text().startswith("digraph kilo {")
    assert result["lines"][1] == "written: %s (dot)" % (work / "m.dot")
    assert not any("\n" in line for line in result["lines"])
    # kilo_output_dir (a variable of the mesh's hosts) takes the relative paths
    hostvars = pinned()
    for h in hostvars.values():
        h["kilo_output_dir"] = "pictures"
    (work / "pictures").mkdir()
    assert run(graph, {"dest": "m.gv"}, hostvars)["dest"] == str(work / "pictures" / "m.gv")
    assert files(work / "pictures") == ["m.gv"]


@pytest.mark.parametrize(
    "args",
    [
        {"dest": "m.jpg"},
        {"dest": "m.jpg", "format": "png"},
        {"dest": "m"},
        {"dest": "m.svg", "format": "dot"},
    ],
)
def test_graph_refuses_a_name_that_does_not_say_its_format(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KiloError) as e:
        run(graph, args, pinned())
    assert e.value.field == "dest" and args["dest"] in str(e.value)
    assert files(tmp_path) == []  # nothing written, not even DOT text under a .jpg name


def test_graph_in_check_mode_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run(graph, {"dest": "m.dot"}, pinned(), check_mode=True)
    assert (
        result["changed"]
        and files(tmp_path) == []
        and result["lines"][1].startswith("would be written: ")
    )


def test_graph_refuses_the_inventory_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KiloError) as e:
        run(graph, {"dest": "m.dot"}, pinned(), sources=[str(tmp_path)])
    assert "inventory source" in str(e.value) and files(tmp_path) == []


def test_showconf_prints_lines_and_writes_a_relative_dest_in_the_current_directory(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    result = run(showconf, {"node": "a", "dest": "a.conf"}, pinned())
    assert result["lines"] == result["config"].splitlines() and result["lines"][0] == "[Interface]"
    assert (
        result["dest"] == str(tmp_path / "a.conf")
        and (tmp_path / "a.conf").read_text() == result["config"]
    )
    assert "dest" not in run(showconf, {"node": "a"}, pinned())


# --- the first command shows the mesh -----------------------------------------------------------


def test_before_any_key_the_plan_shows_every_location_segment_and_leader(tmp_path):
    result = run(topology, {"stand_ins": True}, QUICK_START)
    assert (
        result["stand_ins"] == ["aws-1", "aws-2", "nas", "pi"]
        and "missing" not in result
        and "warnings" not in result
    )
    assert dict((s["location"], s["leader"]) for s in result["segments"]) == {
        "aws": "aws-1",
        "home": "pi",
    }
    assert sorted(result["plans"]) == ["aws-1", "aws-2", "nas", "pi"]
    # the picture draws them dashed, without stand-in addresses
    assert result["graph"].count("(no key yet") == 4 and "100.96." not in result["graph"]
    for seg in result["segments"]:
        assert seg["endpoint"] is None and seg["public_key"] is None and seg["leader_stand_in"]
        assert all(m["stand_in"] and m["internal_ip"] is None for m in seg["members"])
    lines = plan_table(result)
    assert lines[0] == "4 nodes in 2 locations, 2 segments; leaders: aws-1 (aws), pi (home)"
    assert [line.split()[:2] for line in lines[3:7]] == [
        ["aws-1", "*"],
        ["aws-2", "*"],
        ["nas", "*"],
        ["pi", "*"],
    ]
    assert "aws-1, aws-2, nas, pi still need their first run" in lines[7]
    assert not any("\n" in line for line in lines)


def test_without_stand_ins_hosts_without_a_key_are_left_out():
    result = run(topology, {}, QUICK_START)
    assert result["plans"] == {} and result["missing"] == ["aws-1", "aws-2", "nas", "pi"]
    assert "left out, no key or endpoint known: aws-1, aws-2, nas, pi" in plan_table(result)


def test_stand_ins_fill_only_the_hosts_that_reported_nothing():
    hostvars = dict(
        pinned(), c={"kilo_location": "x"}, d={"kilo_location": "y", "kilo_leader": True}
    )
    result = run(topology, {"stand_ins": True}, hostvars)
    assert result["stand_ins"] == ["c", "d"]
    segments = dict((s["location"], s) for s in result["segments"])
    # a pinned host with a public endpoint keeps the lead; the stand-in is its member
    assert segments["x"]["leader"] == "a" and segments["x"]["endpoint"] == "203.0.113.1:51820"
    assert segments["y"]["leader"] == "d"
    a_peers = dict((p["name"], p) for p in result["plans"]["a"]["peers"])
    assert a_peers["location:y"]["public_key"].startswith("kiloMeshStandInNoKeyYet")


@pytest.mark.parametrize(
    "args", [{"stand_ins": True, "save_plans": True}, {"stand_ins": True, "peer": "p"}]
)
def test_stand_ins_never_reach_a_host_or_a_peer(args):
    with pytest.raises(KiloError) as e:
        run(topology, args, QUICK_START)
    assert e.value.field == "stand_ins"


def test_a_reading_without_stand_ins_has_none(tmp_path):
    action = make_action(topology)
    task_vars = task_vars_of(QUICK_START, "aws-1")
    reading = MeshReading(action, task_vars, action.options_of(task_vars))
    assert (
        reading.nodes == []
        and reading.stand_ins == []
        and reading.missing == ["aws-1", "aws-2", "nas", "pi"]
    )


def test_stand_in_addresses_keep_clear_of_every_network_the_mesh_names():
    nodes = [
        {
            "name": "a",
            "internal_ip": "100.64.0.1/24",
            "pod_cidr": ["100.64.0.128/25"],
            "endpoint": "100.96.0.1:51820",
            "allowed_location_ips": ["100.96.0.2/31"],
        }
    ]
    peers = [{"name": "p", "allowed_ips": ["100.64.1.0/24"]}]
    options = {"subnet": "100.64.2.0/24", "service_cidrs": ["100.64.3.0/24"]}
    facts = stand_in_facts(["h%d" % i for i in range(300)], nodes, peers, options)
    taken = [
        ipaddress.ip_network(n)
        for n in (
            "100.64.0.0/24",
            "100.64.1.0/24",
            "100.64.2.0/24",
            "100.64.3.0/24",
            "100.96.0.0/30",
        )
    ]
    internal = [ipaddress.ip_interface(f["internal_ip"]).ip for f in facts.values()]
    external = [ipaddress.ip_address(f["external_ip"]) for f in facts.values()]
    assert len(set(internal)) == len(set(external)) == 300
    assert not any(ip in net for ip in internal + external for net in taken)
    assert len(set(parse_key(f["public_key"]) for f in facts.values())) == 300
    dual = stand_in_facts(
        ["h"], [], [], {"subnet": ["10.4.0.0/16", "fd6b:696c:6f00::/80"]}, dual=True
    )["h"]
    assert [ipaddress.ip_interface(i).version for i in dual["internal_ip"]] == [4, 6]
    assert ipaddress.ip_interface(dual["internal_ip"][1]).ip not in ipaddress.ip_network(
        "fd6b:696c:6f00::/80"
    )


@pytest.mark.parametrize(
    "extra, leaders",
    [
        (
            {"kilo_subnet": ["10.4.0.0/16", "fd04::/64"]},
            {"location:aws": "aws-1", "location:home": "pi"},
        ),
        (
            {"kilo_granularity": "full"},
            {"node:aws-1": "aws-1", "node:aws-2": "aws-2", "node:nas": "nas", "node:pi": "pi"},
        ),
    ],
)
def test_stand_ins_in_a_dual_stack_mesh_and_under_full_granularity(extra, leaders):
    hostvars = dict((h, dict(v, **extra)) for h, v in QUICK_START.items())
    result = run(topology, {"stand_ins": True}, hostvars)
    assert dict((s["key"], s["leader"]) for s in result["segments"]) == leaders
    if "kilo_subnet" in extra:
        assert result["plans"]["pi"]["address"] == ["10.4.0.2/16", "fd04::2/64"]
