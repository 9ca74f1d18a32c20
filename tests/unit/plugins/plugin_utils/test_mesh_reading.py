"""The controller's one reading of the mesh (plugin_utils/mesh.py) and the actions that ask it.

The actions are driven here without a play: a stand-in task and templar, and the module call
replaced by a function, so what is tested is the action's own controller work."""

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError

KEY_A = "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="
KEY_B = "aNdi7F94dUaB6O9ScwgibmXpFk7PcQSX2C5Hzcc0b2M="


class FakeTask(object):
    def __init__(self, args=None, check_mode=False):
        self.args = dict(args or {})
        self.check_mode = check_mode
        self.async_val = 0
        self.diff = False


class FakeTemplar(object):
    @staticmethod
    def template(value):
        return value


class FakeHostvars(dict):
    """Ansible's HostVars without an inventory behind it: locations come from kilo_location."""


def make_action(module, args=None, module_result=None, check_mode=False):
    # (shared_loader_obj: a required positional argument on ansible-core 2.17)
    action = module.ActionModule(FakeTask(args, check_mode), None, None, None, FakeTemplar(), None)
    calls = []

    def execute_module(module_name=None, module_args=None, task_vars=None):
        calls.append((module_name, module_args))
        return dict(module_result or {})

    action._execute_module = execute_module
    action.calls = calls
    return action


def task_vars_of(hostvars, host, groups=None, registry=None):
    task_vars = dict(
        hostvars[host],
        inventory_hostname=host,
        hostvars=FakeHostvars(hostvars),
        groups=groups or {"kilo": sorted(hostvars)},
    )
    if registry:
        task_vars["kilo_registry"] = registry
        for h in hostvars.values():
            h["kilo_registry"] = registry
    return task_vars


def two_nodes(tmp_path, internal_a="-"):
    """a and b in location x, both pinned (key and endpoint); a has no internal IP when
    ``internal_a`` is "-", which makes it a segment of its own in the engine."""
    hostvars = {
        "a": {
            "kilo_location": "x",
            "kilo_public_key": KEY_A,
            "kilo_force_endpoint": "203.0.113.1:51820",
            "kilo_force_internal_ip": internal_a,
        },
        "b": {
            "kilo_location": "x",
            "kilo_public_key": KEY_B,
            "kilo_force_endpoint": "203.0.113.2:51820",
            "kilo_force_internal_ip": "10.0.0.2/24",
        },
    }
    return hostvars, str(tmp_path / "registry.json")


def test_status_takes_the_segment_of_a_node_without_internal_ip_from_the_engine(tmp_path):
    from ansible_collections.kilo.mesh.plugins.action import status

    hostvars, registry = two_nodes(tmp_path)
    action = make_action(status, module_result={"interface": "kilo0", "leader": True})
    args = dict(
        summary=False,
        mesh_nodes=None,
        mesh_peers=None,
        interface="kilo0",
        stale_after=180,
        textfile=None,
        status_var="kilo_status",
    )
    result = action.run_kilo(args, task_vars_of(hostvars, "a", registry=registry))
    assert result["location"] == "x"
    # the engine makes a node without an internal IP its own segment, whatever its location
    assert result["segment"] == "node:a"
    result = action.run_kilo(dict(args), task_vars_of(hostvars, "b", registry=registry))
    assert result["segment"] == "location:x"


def test_the_engine_segment_of_one_node_is_the_one_build_plans_gives():
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import (
        build_plans,
        node_segment,
    )

    nodes = [
        {"name": "a", "location": "x", "public_key": KEY_A, "endpoint": "203.0.113.1:51820"},
        {
            "name": "b",
            "location": "x",
            "public_key": KEY_B,
            "endpoint": "203.0.113.2:51820",
            "internal_ip": "10.0.0.2/24",
        },
    ]
    for granularity in ("location", "full", "cross"):
        options = {"granularity": granularity}
        plans = build_plans(nodes, [], options)["plans"]
        assert [node_segment(n, options) for n in nodes] == [
            plans["a"]["segment"],
            plans["b"]["segment"],
        ]


def test_status_of_a_host_that_is_no_node_has_no_segment(tmp_path):
    from ansible_collections.kilo.mesh.plugins.action import status

    hostvars, registry = two_nodes(tmp_path)
    hostvars["c"] = {"kilo_location": "x"}  # never reported a key, pins nothing
    action = make_action(status, module_result={"interface": "kilo0"})
    args = dict(
        summary=False,
        mesh_nodes=None,
        mesh_peers=None,
        interface="kilo0",
        stale_after=180,
        textfile=None,
        status_var="kilo_status",
    )
    result = action.run_kilo(args, task_vars_of(hostvars, "c", registry=registry))
    assert result["location"] == "x" and result["segment"] is None


KEY_RESULT = {
    "public_key": KEY_A,
    "internal_ip": "10.0.0.1/24",
    "external_ip": None,
    "discovered_endpoints": {},
    "mtu": 1500,
    "changed": False,
}


def test_key_fails_when_the_engine_would_give_the_host_no_endpoint(tmp_path):
    from ansible_collections.kilo.mesh.plugins.action import key

    args = {"port": 51820}
    # a discovered internal IP makes the endpoint ...
    action = make_action(key, module_result=KEY_RESULT)
    assert action.run_kilo(dict(args), task_vars_of({"a": {}}, "a"))["public_key"] == KEY_A
    # ... unless kilo_force_internal_ip "-" says the host has none (the old check counted it)
    with pytest.raises(KiloError) as e:
        action.run_kilo(dict(args), task_vars_of({"a": {"kilo_force_internal_ip": "-"}}, "a"))
    assert (e.value.subject, e.value.field) == ("host 'a'", "kilo_force_endpoint")
    pinned = {"kilo_force_internal_ip": "-", "kilo_force_endpoint": "198.51.100.1:51999"}
    assert action.run_kilo(dict(args), task_vars_of({"a": pinned}, "a"))["public_key"] == KEY_A
    # the port the key step checks is where the engine makes the host listen
    assert action.calls[-1][1]["port"] == 51999


def test_listen_port_is_the_endpoints_else_the_meshs():
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import (
        build_plans,
        listen_port,
    )

    assert listen_port(None, 51820) == 51820 and listen_port(" ", 51820) == 51820
    assert listen_port("[2001:db8::1]:4000", 51820) == 4000
    node = {"name": "a", "public_key": KEY_A, "endpoint": "203.0.113.1:4000"}
    assert build_plans([node], [], {"port": 51820})["plans"]["a"]["listen_port"] == listen_port(
        node["endpoint"], 51820
    )
    with pytest.raises(KiloError):
        listen_port("203.0.113.1", 51820, "host 'a'", "kilo_force_endpoint")


def test_join_and_annotate_take_one_plan_from_the_reading(tmp_path):
    from ansible_collections.kilo.mesh.plugins.action import annotate, join
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans
    from ansible_collections.kilo.mesh.plugins.module_utils.options import defaults
    from ansible_collections.kilo.mesh.plugins.plugin_utils.mesh import MeshReading, engine_options

    hostvars, registry = two_nodes(tmp_path, internal_a="10.0.0.1/24")
    task_vars = task_vars_of(hostvars, "a", registry=registry)
    args = dict(defaults("mesh", "inputs"), registry=registry)
    plans = [
        MeshReading(make_action(module), task_vars, args).plan("a") for module in (join, annotate)
    ]
    reading = MeshReading(make_action(join), task_vars, args)
    assert (
        plans[0] == plans[1] == build_plans(reading.nodes, [], engine_options(args))["plans"]["a"]
    )
    assert reading.segment("a") == plans[0]["segment"] == "location:x"
    # neither action borrows the other's methods any more
    assert not hasattr(join.ActionModule, "compute") and not hasattr(annotate, "JoinAction")


def test_status_takes_the_location_the_node_has(tmp_path):
    """kilo_location set to "" is the node's location (the engine's segment location:), not the
    location group; status says what the node has."""
    from ansible_collections.kilo.mesh.plugins.action import status
    from ansible_collections.kilo.mesh.plugins.module_utils.nodes import host_location

    hostvars, registry = two_nodes(tmp_path, internal_a="10.0.0.1/24")
    hostvars["a"]["kilo_location"] = ""
    action = make_action(status, module_result={"interface": "kilo0"})
    args = dict(
        summary=False,
        mesh_nodes=None,
        mesh_peers=None,
        interface="kilo0",
        stale_after=180,
        textfile=None,
        status_var="kilo_status",
    )
    result = action.run_kilo(args, task_vars_of(hostvars, "a", registry=registry))
    assert result["location"] == "" and result["segment"] == "location:"
    assert (
        host_location({}, "x", None) == "x"
        and host_location({"kilo_location": None}, "x", None) == ""
    )
