"""kilo.mesh.topology (save_plans) in a push run with ``direct_paths: always``: which reports count
(this serial batch's), and marks that survive ``registry_wait``'s re-reading. Driven without a play,
as in test_mesh_reading.py."""

from ansible_collections.kilo.mesh.plugins.action import topology

from test_mesh_reading import make_action, task_vars_of
from test_topology_relays import key


def result_of(k, internal, handshakes=None, probes=(), discovered=None):
    """A kilo.mesh.key result (the registered ``kilo_host``)."""
    return {
        "public_key": key(k),
        "internal_ip": internal,
        "external_ip": None,
        "mtu": 1420,
        "discovered_endpoints": dict(discovered or {}),
        "handshakes": dict(handshakes or {}),
        "probes": list(probes),
    }


def hostvars_of(u_report, v_report):
    """relays r, s; u and v behind NAT (their mappings seen by r); u and v both report a fresh
    direct handshake with each other (their interfaces run probes for each other)."""
    mapped = {key(3): "198.51.100.3:40003", key(4): "198.51.100.4:40004"}
    hostvars = {
        "r": {
            "kilo_location": "r",
            "kilo_force_endpoint": "203.0.113.1:51820",
            "kilo_host": result_of(1, "10.20.0.1/24", {key(3): 3, key(4): 3}, (), mapped),
        },
        "s": {
            "kilo_location": "s",
            "kilo_force_endpoint": "203.0.113.2:51820",
            "kilo_host": result_of(2, "10.21.0.1/24", {key(3): 3, key(4): 3}, (), mapped),
        },
        "u": {"kilo_location": "u", "kilo_behind_nat": True, "kilo_host": u_report},
        "v": {"kilo_location": "v", "kilo_behind_nat": True, "kilo_host": v_report},
    }
    return hostvars


def probing_reports():
    u = result_of(3, "10.22.0.1/24", {key(1): 3, key(2): 4, key(4): 10}, [key(4)])
    v = result_of(4, "10.23.0.1/24", {key(1): 3, key(2): 4, key(3): 10}, [key(3)])
    return u, v


def save_plans(hostvars, tmp_path, batch, args=None):
    action = make_action(topology, dict({"save_plans": True}, **(args or {})))
    task_vars = task_vars_of(hostvars, batch[0], registry=str(tmp_path / "kilo-registry.json"))
    task_vars.update(
        kilo_direct_paths="always",
        ansible_play_hosts_all=sorted(hostvars),
        ansible_play_hosts=sorted(hostvars),
        ansible_play_batch=list(batch),
    )
    for h in hostvars.values():
        h["kilo_direct_paths"] = "always"
    return action.run_kilo(action.options_of(task_vars), task_vars)


def uv_path(result):
    return [p for p in result["paths"] if {p["a"], p["b"]} == {"location:u", "location:v"}][0]


def test_both_in_one_batch_go_direct_together(tmp_path):
    u, v = probing_reports()
    result = save_plans(hostvars_of(u, v), tmp_path, ["r", "s", "u", "v"])
    assert uv_path(result)["path"] == "direct"
    assert result["direct_switch"]["hosts"] == ["u", "v"]


def test_a_serial_batch_reads_only_its_own_hosts_reports(tmp_path):
    """serial: batch 2 = [v]; u's key-step result of batch 1 is still in hostvars (and u in
    ansible_play_hosts), but u does not converge in this batch: the pair must stay as u's
    interface runs it (probing), else v goes direct alone (a black hole)."""
    u, v = probing_reports()
    result = save_plans(hostvars_of(u, v), tmp_path, ["v"])
    print(uv_path(result), result.get("warnings"))
    assert uv_path(result)["path"] == "probing"
    assert "direct_switch" not in result
    assert any("u (leader of location:u) is not in this run" in w for w in result["warnings"])


def test_marks_survive_registry_wait(tmp_path):
    """registry_wait reads the nodes again (a host is missing): the relay marked down before (it
    failed in this run) stays down for the plans, and so do the path states."""
    u = result_of(3, "10.22.0.1/24", {key(1): 3, key(2): 4})
    v = result_of(4, "10.23.0.1/24", {key(1): 3, key(2): 4})
    hostvars = hostvars_of(u, v)
    first = save_plans(hostvars, tmp_path / "a", ["r", "s", "u", "v"])
    chosen = uv_path(first)["via"]
    assert uv_path(first)["path"] == "probing" and chosen
    failed = chosen.split(":")[1]
    hostvars["x"] = {"kilo_location": "x"}  # nobody knows its key: registry_wait waits for it
    action = make_action(topology, {"save_plans": True, "registry_wait": 1})
    task_vars = task_vars_of(hostvars, "u", registry=str(tmp_path / "kilo-registry.json"))
    alive = sorted(h for h in hostvars if h != failed)
    for h in hostvars.values():
        h["kilo_direct_paths"] = "always"
    task_vars.update(
        kilo_direct_paths="always",
        ansible_play_hosts_all=sorted(hostvars),
        ansible_play_hosts=alive,
        ansible_play_batch=alive,
    )
    result = action.run_kilo(action.options_of(task_vars), task_vars)
    print(result.get("registry_waited"), result["relays_down"], uv_path(result))
    assert result["registry_waited"] is not None and result["missing"] == ["x"]
    assert result["relays_down"] == [failed]
    assert uv_path(result)["via"] not in (None, chosen)
    assert uv_path(result)["path"] == "probing"


def test_a_laptops_relay_marked_down_keeps_it_with_a_warning(tmp_path):
    """The relay of an endpoint-less peer fails in this run: u keeps the laptop on it (as the
    laptop's configuration does) and the run says so."""
    u, v = probing_reports()
    hostvars = hostvars_of(u, v)
    laptop = {"name": "laptop", "public_key": key(900), "allowed_ips": ["10.5.0.1/32"]}
    for h in hostvars.values():
        h["kilo_peers"] = [laptop]
    first = save_plans(hostvars, tmp_path / "a", ["r", "s", "u", "v"])
    via = [p["via"] for p in first["peer_paths"] if p["segment"] == "location:u"][0]
    failed = via.split(":")[1]
    action = make_action(topology, {"save_plans": True})
    task_vars = task_vars_of(hostvars, "u", registry=str(tmp_path / "kilo-registry.json"))
    alive = sorted(h for h in hostvars if h != failed)
    task_vars.update(
        ansible_play_hosts_all=sorted(hostvars), ansible_play_hosts=alive, ansible_play_batch=alive
    )
    result = action.run_kilo(action.options_of(task_vars), task_vars)
    assert result["relays_down"] == [failed]
    assert [p["via"] for p in result["peer_paths"] if p["segment"] == "location:u"] == [via]
    assert any(
        "relay %s of outside peer laptop (to location:u) is marked down" % via in w
        for w in result["warnings"]
    ), result.get("warnings")


def test_leaving_always_moves_live_direct_pairs_back_at_one_instant(tmp_path, monkeypatch):
    """always -> agent (or never): u and v run a direct path; the run relays the pair and both ends
    move back at one instant (direct_switch), not one converge after the other."""
    from ansible_collections.kilo.mesh.plugins.plugin_utils import ansible_internals

    monkeypatch.setattr(ansible_internals, "forks", lambda: 5)
    u = result_of(3, "10.22.0.1/24", {key(1): 3, key(2): 4, key(4): 10})
    v = result_of(4, "10.23.0.1/24", {key(1): 3, key(2): 4, key(3): 10})
    for choice in ("agent", "never"):
        hostvars = hostvars_of(dict(u), dict(v))
        action = make_action(topology, {"save_plans": True})
        task_vars = task_vars_of(hostvars, "u", registry=str(tmp_path / "kilo-registry.json"))
        for h in hostvars.values():
            h["kilo_direct_paths"] = choice
        task_vars.update(kilo_direct_paths=choice, ansible_play_batch=sorted(hostvars))
        result = action.run_kilo(action.options_of(task_vars), task_vars)
        assert uv_path(result)["path"] == "relayed"
        assert result["direct_switch"]["hosts"] == ["u", "v"]
        assert result["direct_switch"]["scheduled"] and result["direct_switch"]["at"]
        # relayed at both ends already: nothing to move
        hostvars = hostvars_of(
            result_of(3, "10.22.0.1/24", {key(1): 3, key(2): 4}),
            result_of(4, "10.23.0.1/24", {key(1): 3, key(2): 4}),
        )
        for h in hostvars.values():
            h["kilo_direct_paths"] = choice
        task_vars = task_vars_of(hostvars, "u", registry=str(tmp_path / "kilo-registry.json"))
        task_vars.update(kilo_direct_paths=choice, ansible_play_batch=sorted(hostvars))
        action = make_action(topology, {"save_plans": True})
        assert "direct_switch" not in action.run_kilo(action.options_of(task_vars), task_vars)
