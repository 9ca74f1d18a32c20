"""What a run says of hosts without a key or endpoint (inputs.missing_result, kilo.mesh.validate):
on a first run the play's hosts get their key in the same run, so only hosts it does not reach
(outside the play or --limit) are warned of as left out."""

from ansible_collections.kilo.mesh.plugins.plugin_utils import inputs

from test_mesh_reading import FakeHostvars, make_action

KEY = "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="


def test_missing_result_warns_only_of_hosts_left_out():
    assert inputs.missing_result([]) == {}
    assert inputs.missing_result(["a", "b"], joining=["a", "b"]) == {"joining": ["a", "b"]}
    assert inputs.missing_result(["a", "b"], joining=["b", "c"]) == {
        "joining": ["b"],
        "missing": ["a"],
        "warnings": [inputs.missing_warning(["a"])],
    }
    # without joining hosts (after the key step: topology, showconf, graph): every missing host
    assert inputs.missing_result(["a"]) == {
        "missing": ["a"],
        "warnings": [inputs.missing_warning(["a"])],
    }


def validate(hostvars, play, tmp_path):
    from ansible_collections.kilo.mesh.plugins.action import validate as module

    hosts = sorted(hostvars)
    for h in hostvars.values():
        h["kilo_registry"] = str(tmp_path / "registry.json")
    task_vars = dict(
        hostvars[hosts[0]],
        inventory_hostname=hosts[0],
        hostvars=FakeHostvars(hostvars),
        groups={"kilo": hosts, "all": hosts},
        ansible_play_hosts=play,
    )
    action = make_action(module)
    return action.run_kilo(action.options_of(task_vars), task_vars)


def test_a_first_run_warns_of_no_host_of_the_play(tmp_path):
    hostvars = dict((h, {"kilo_location": "x"}) for h in ("a", "b", "c"))
    result = validate(hostvars, ["a", "b", "c"], tmp_path)
    assert "warnings" not in result and "missing" not in result, result
    assert result["joining"] == ["a", "b", "c"] and result["nodes"] == 0
    assert "3 join in this run" in result["msg"]


def test_hosts_outside_the_play_or_leaving_are_left_out_with_a_warning(tmp_path):
    hostvars = dict((h, {"kilo_location": "x"}) for h in ("a", "b", "c", "d"))
    hostvars["d"]["kilo_state"] = "absent"
    result = validate(hostvars, ["a", "b", "d"], tmp_path)  # --limit leaves c out
    assert result["joining"] == ["a", "b"] and result["missing"] == ["c", "d"]
    assert result["warnings"] == [inputs.missing_warning(["c", "d"])]


def test_a_known_host_is_neither_joining_nor_missing(tmp_path):
    hostvars = {
        "a": {
            "kilo_location": "x",
            "kilo_public_key": KEY,
            "kilo_force_endpoint": "203.0.113.1:51820",
        },
        "b": {"kilo_location": "x"},
    }
    result = validate(hostvars, ["b"], tmp_path)
    assert result["nodes"] == 1 and result["joining"] == ["b"] and "warnings" not in result
