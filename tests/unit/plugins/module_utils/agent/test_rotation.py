"""Key rotation's pure parts: the key file, the schedule's wait, re-keyed peers, the order's
fallback (peers keep the old key of a host that did not switch), and the --limit refusal."""

import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host import keys
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import (
    MAX_SWITCH_WAIT,
    wait_for,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.backend import rekeyed
from ansible_collections.kilo.mesh.plugins.module_utils.plan import SWITCH_STEP
from ansible_collections.kilo.mesh.plugins.plugin_utils.validate import check_rotation


def test_rotate_replaces_the_key_atomically_and_reports_both_public_keys(tmp_path):
    path = str(tmp_path / "key")
    first = keys.ensure_key(path)
    old_text = open(path).read()
    res = keys.ensure_key(path, rotate=True)
    new_text = open(path).read()
    assert new_text != old_text
    assert res["changed"] is True and res["rotated"] == "requested"
    assert res["previous_public_key"] == first["public_key"]
    assert res["public_key"] == keys.public_key(new_text.strip()) != first["public_key"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(str(tmp_path)) == ["key"]  # no temporary file left, no copy of the old key
    assert old_text.strip() not in repr(res) and new_text.strip() not in repr(res)


def test_a_key_write_killed_before_its_rename_leaves_a_file_the_next_run_removes(tmp_path):
    """SIGKILL between the temporary file and its rename (held there): the key file stays whole,
    and the next key step removes the stray private key (check mode names it and keeps it)."""
    path = str(tmp_path / "key")
    first = keys.ensure_key(path)
    text = open(path).read()
    code = (
        "import os, sys, time\n"
        "from ansible_collections.kilo.mesh.plugins.module_utils.host import keys\n"
        "os.rename = lambda *a: time.sleep(60)\n"
        "keys.ensure_key(sys.argv[1], rotate=True)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, path],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    try:
        deadline = time.monotonic() + 30
        while len(os.listdir(str(tmp_path))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        stray = [n for n in os.listdir(str(tmp_path)) if n != "key"]
        assert len(stray) == 1 and stray[0].startswith(".key.") and stray[0].endswith(".tmp"), stray
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert open(path).read() == text and sorted(os.listdir(str(tmp_path)))[1:] == ["key"]
    looked = keys.ensure_key(path, check_mode=True)
    assert looked["changed"] is True and "would remove 1 temporary file" in looked["msg"]
    assert len(os.listdir(str(tmp_path))) == 2
    done = keys.ensure_key(path)
    assert done["changed"] is True and "removed 1 temporary file" in done["msg"]
    assert done["public_key"] == first["public_key"] and os.listdir(str(tmp_path)) == ["key"]
    assert keys.ensure_key(path)["changed"] is False


def test_check_mode_rotation_writes_nothing_and_stands_in(tmp_path):
    path = str(tmp_path / "key")
    first = keys.ensure_key(path)
    text = open(path).read()
    res = keys.ensure_key(path, check_mode=True, rotate=True)
    assert open(path).read() == text
    assert res["pending"] is True and res["changed"] is True and res["rotated"] == "requested"
    assert res["previous_public_key"] == first["public_key"] != res["public_key"]
    assert "would rotate" in res["msg"]


def test_max_age_rotates_an_old_key_only(tmp_path):
    path = str(tmp_path / "key")
    keys.ensure_key(path)
    assert "rotated" not in keys.ensure_key(path, max_age=3600)
    old = os.stat(path).st_mtime - 7200
    os.utime(path, (old, old))
    assert keys.key_age(path) >= 7200
    res = keys.ensure_key(path, max_age=3600)
    assert res["rotated"] == "age" and "older than kilo_key_max_age" in res["msg"]
    assert keys.key_age(path) < 60
    assert "rotated" not in keys.ensure_key(path, max_age=3600)


def test_tightening_the_mode_does_not_reset_the_age(tmp_path):
    path = str(tmp_path / "key")
    keys.ensure_key(path)
    old = os.stat(path).st_mtime - 7200
    os.utime(path, (old, old))
    os.chmod(path, 0o644)
    keys.ensure_key(path)  # tightens to 0600
    assert keys.key_age(path) >= 7200


def test_wait_for_sleeps_until_the_moment_within_the_bound():
    slept = []
    assert wait_for(100.5, now=100.0, sleep=slept.append) == 0.0
    assert slept == [0.5]
    slept[:] = []
    assert wait_for(99.0, now=100.25, sleep=slept.append) == 1.25  # late: applied at once
    assert wait_for(100.0 + MAX_SWITCH_WAIT + 1, now=100.0, sleep=slept.append) == 0.0
    assert slept == []  # a moment too far ahead (a clock far off) does not stall the run


def _peer(pub, ips):
    return {"public_key": pub, "allowed_ips": ips}


def test_rekeyed_peers_are_added_in_place_of_a_removed_one():
    current = {
        "peers": [
            _peer("OLD", ["10.4.0.1/32", "10.1.0.0/24"]),
            _peer("GONE", ["10.9.0.0/24"]),
            _peer("KEPT", ["10.2.0.0/24"]),
        ]
    }
    ops = [
        {"public_key": "OLD", "remove": True},
        {"public_key": "GONE", "remove": True},
        {"public_key": "NEW", "allowed_ips": ["10.4.0.1/32", "10.1.0.0/24"]},
        {"public_key": "JOINED", "allowed_ips": ["10.3.0.0/24"]},
        {"public_key": "KEPT", "update_only": True, "allowed_ips": ["10.2.0.0/24", "10.9.0.0/24"]},
    ]
    assert [op["public_key"] for op in rekeyed(current, ops)] == ["NEW"]


def test_peers_keep_the_old_key_of_a_host_that_did_not_switch():
    from ansible_collections.kilo.mesh.plugins.action.join import (
        keep_unswitched_keys,
        unswitched_keys,
    )

    hostvars = {
        "a": {
            "kh": {"rotating": True, "public_key": "A2", "previous_public_key": "A1"},
            "rot": {"changed": True},
        },
        "b": {
            "kh": {"rotating": True, "public_key": "B2", "previous_public_key": "B1"},
            "rot": {"failed": True, "msg": "x"},
        },
        "c": {
            "kh": {"rotating": True, "public_key": "C2", "previous_public_key": "C1"}
        },  # unreachable: nothing registered
        "d": {"kh": {"rotating": False, "public_key": "D1"}, "rot": {"skipped": True}},
    }
    task_vars = {"hostvars": hostvars, "ansible_play_hosts_all": ["a", "b", "c", "d"]}
    keep = unswitched_keys(task_vars, "kh", "rot", ["a", "b", "c", "d"])
    assert keep == {"B2": "B1", "C2": "C1"}
    plan = {"peers": [{"public_key": k} for k in ("A2", "B2", "C2", "D1")]}
    keep_unswitched_keys(plan, keep)
    assert [p["public_key"] for p in plan["peers"]] == ["A2", "B1", "C1", "D1"]


def test_rotation_under_a_limit_is_refused_naming_host_variable_and_who_is_left_out():
    per_host = dict((h, {"state": "present", "key_rotate": h == "a"}) for h in ("a", "b", "c"))
    check_rotation(["a", "b", "c"], per_host, {"a", "b", "c"})  # every host in the play: fine
    per_host["c"]["state"] = "absent"
    check_rotation(["a", "b", "c"], per_host, {"a", "b"})  # a host leaving the mesh does not count
    per_host["c"]["state"] = "present"
    with pytest.raises(KiloError) as e:
        check_rotation(["a", "b", "c"], per_host, {"a", "b"})
    assert e.value.name == "a" and e.value.field == "kilo_key_rotate" and "c" in e.value.message
    per_host["a"]["key_rotate"] = False
    check_rotation(["a", "b", "c"], per_host, {"a", "b"})  # no rotation asked: a limit is fine


def _connecting_machine(tmp_path, limit):
    """task_vars of the key step of "laptop" (group connect, outside the mesh) in a run under
    ``limit``, in connect.yml's first play (the laptop's alone), on real Ansible objects."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager
    from ansible_collections.kilo.mesh.plugins.plugin_utils.action import HostVarsOnce

    path = tmp_path / "inventory.yml"
    path.write_text(
        "kilo: {children: {aws: {hosts: {a1: {}, a2: {}}}}}\nconnect: {hosts: {laptop: {}}}\n"
    )
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(path)])
    if limit:
        inventory.subset(limit)
    inventory.restrict_to_hosts([inventory.get_host("laptop")])
    hostvars = HostVars(
        inventory=inventory,
        variable_manager=VariableManager(loader=loader, inventory=inventory),
        loader=loader,
    )
    return {
        "inventory_hostname": "laptop",
        "groups": {"kilo": ["a1", "a2"], "connect": ["laptop"]},
        "ansible_play_hosts_all": ["laptop"],
        "hostvars": HostVarsOnce(hostvars),
    }


def test_a_connecting_machine_under_a_limit_rotates_nothing_and_changes_nothing(tmp_path):
    """connect.yml --limit laptop: the leaders would keep the laptop's old key. kilo_key_rotate
    is refused before the key module runs; a due kilo_key_max_age is held back with a warning."""
    from ansible_collections.kilo.mesh.plugins.action import key
    from test_mesh_reading import make_action

    action = make_action(key)
    task_vars = _connecting_machine(tmp_path, "laptop:a1")
    assert action.left_out(task_vars) == ["a2"]
    with pytest.raises(KiloError) as e:
        action.run_kilo({"port": 51820, "key_rotate": True, "key_max_age": 0}, task_vars)
    assert (e.value.subject, e.value.field) == (
        "host 'laptop'",
        "kilo_key_rotate",
    ) and "a2" in e.value.message
    assert action.calls == []  # the key module never ran: the key file stays
    args = {"key_rotate": False, "key_max_age": 86400}
    assert "kilo_key_max_age is not applied" in action.hold_rotation_under_limit(args, task_vars)
    assert args["key_max_age"] == 0
    with pytest.raises(KiloError):  # a rotation an earlier run left unfinished
        action.refuse_unfinished_rotation({"rotating": True}, task_vars)
    # without --limit, every mesh host is in the run (its mesh play), though not in this play
    task_vars = _connecting_machine(tmp_path, None)
    assert action.left_out(task_vars) == []
    action.refuse_rotation_under_limit({"key_rotate": True}, task_vars)
    assert action.hold_rotation_under_limit({"key_max_age": 86400}, task_vars) is None
    # Ansible not telling what --limit admits: the machine's key stays rather than be cut off
    task_vars["hostvars"] = {}
    assert action.left_out(task_vars) == ["a1", "a2"]


def test_the_agent_gets_the_key_age_but_never_one_run_s_rotation_request():
    from ansible_collections.kilo.mesh.plugins.action.agent import ActionModule
    from ansible_collections.kilo.mesh.plugins.module_utils.options import defaults

    args = defaults("mesh", "host", "key", "agent", "inputs")
    args.update(key_rotate=True, key_max_age=86400)
    config = ActionModule.agent_config(args, "node-1")
    assert config["key"]["key_max_age"] == 86400
    assert "key_rotate" not in config["key"]  # it would rotate on every pass


def _node(name, key, next_key=None):
    from ansible_collections.kilo.mesh.plugins.module_utils.agent import rotation

    annotations = {rotation.KEY: key}
    if next_key is not None:
        annotations[rotation.NEXT_KEY] = next_key
    return {"metadata": {"name": name, "annotations": annotations}}


def test_an_announced_key_is_used_at_once_and_applied_a_step_after_the_switch():
    from ansible_collections.kilo.mesh.plugins.module_utils.agent import rotation

    old, new = (
        keys.public_key(keys.generate_private_key()),
        keys.public_key(keys.generate_private_key()),
    )
    objects = {
        "a": _node("a", old, rotation.announcement(new, 102.0)),
        "b": _node("b", old),
        "me": _node("me", old, rotation.announcement(new, 102.0)),
    }
    out, switch_at = rotation.pending(objects, "me", now=100.0)
    assert out["a"]["metadata"]["annotations"][rotation.KEY] == new
    assert (
        objects["a"]["metadata"]["annotations"][rotation.KEY] == old
    )  # the informer's object untouched
    assert (
        out["b"] is objects["b"] and out["me"] is objects["me"]
    )  # our own announcement is not ours to follow
    assert switch_at == 102.0 + SWITCH_STEP
    # the moment passed (the node has switched): applied at once; the key written: nothing pending
    assert rotation.pending(objects, "me", now=110.0)[1] is None
    assert (
        rotation.pending(objects, "me", now=110.0)[0]["a"]["metadata"]["annotations"][rotation.KEY]
        == new
    )
    done = {"a": _node("a", new, rotation.announcement(new, 102.0))}
    assert rotation.pending(done, "me", now=100.0) == (done, None)


def test_a_malformed_announcement_is_ignored():
    from ansible_collections.kilo.mesh.plugins.module_utils.agent import rotation

    old = keys.public_key(keys.generate_private_key())
    for bad in ("nokey", "x@1", "%s@soon" % old, 42):
        objects = {"a": _node("a", old, bad)}
        assert rotation.pending(objects, "me", now=0.0) == (objects, None)


def test_a_moment_far_ahead_is_clamped_and_ages_are_spread_per_node():
    from ansible_collections.kilo.mesh.plugins.module_utils.agent import rotation

    old, new = (
        keys.public_key(keys.generate_private_key()),
        keys.public_key(keys.generate_private_key()),
    )
    objects = {"a": _node("a", old, rotation.announcement(new, 10000.0))}  # its clock far ahead
    assert rotation.pending(objects, "me", now=100.0)[1] == 100.0 + rotation.LEAD + SWITCH_STEP
    assert rotation.spread(0, "n1") == 0
    spread = set(rotation.spread(86400, "n%d" % i) for i in range(20))
    assert len(spread) > 1 and all(86400 <= s < 86400 + 600 for s in spread)
    assert rotation.spread(86400, "n1") == rotation.spread(
        86400, "n1"
    )  # the same node, the same delay


def test_check_mode_compares_with_the_stand_in_of_a_key_that_would_rotate(tmp_path):
    """A rotating host's converge in check mode shows the switch to the key step's stand-in key
    (it reported ok before, its key file still holding the old key)."""
    from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
    from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.backend import (
        WireGuardBackend,
    )

    path = str(tmp_path / "key")
    on_disk = keys.ensure_key(path)["public_key"]
    stand_in = keys.public_key(keys.generate_private_key())
    plan = {"name": "a", "peers": [], "leader": True, "listen_port": 51820}
    current = {
        "present": True,
        "backend": "userspace",
        "public_key": on_disk,
        "peers": [],
        "up": True,
        "mtu": 1420,
        "listen_port": 51820,
    }
    settings = dict(host_settings({"key_path": path, "mtu": 1420}))
    assert WireGuardBackend(settings).desired(plan, current)["public_key"] == on_disk
    settings["pending_public_key"] = stand_in
    backend = WireGuardBackend(settings)
    desired = backend.desired(plan, current)
    assert desired["public_key"] == stand_in
    assert backend.changes(current, desired) == ["set private key (public key %s)" % stand_in]


def test_a_key_switch_to_come_is_the_interface_running_another_key_than_the_file():
    from ansible_collections.kilo.mesh.plugins.module_utils.host.report import switching_from

    assert switching_from({"public_key": "OLD"}, "NEW") == "OLD"
    assert switching_from({"public_key": "NEW"}, "NEW") is None
    assert switching_from({"present": False, "public_key": None}, "NEW") is None  # no interface yet
    assert switching_from(None, "NEW") is None  # the reading failed
