"""The boot backend and the restore on a temporary directory (no systemd here): the stored plan
and preshared keys written 0600 with no key in the plan file, the unit written with the app's
restore command, the app asked for (``need``) and nothing changed until it is sent, idempotence,
check mode, turning it off, state absent; the restore refusing a missing, corrupt, foreign or
invalid file by its name before any backend runs, and converging a good one.
(A real reboot: tests/vm/; the restore on lab hosts: tests/host/test_boot_restore.py.)"""

import hashlib
import io
import json
import os
import shlex
import stat
import subprocess
import sys

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.host import boot
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import (
    Backend,
    converge,
    host_settings,
)
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan

PLAN = {
    "name": "a",
    "leader": True,
    "segment": "location:x",
    "listen_port": 51820,
    "address": "10.4.0.1/16",
    "peers": [
        {
            "name": "b",
            "public_key": "B" * 43 + "=",
            "allowed_ips": ["10.4.0.2/32"],
            "endpoint": "203.0.113.2:51820",
        }
    ],
}
PSK = {"B" * 43 + "=": "P" * 43 + "="}
APP = b"PK-not-really-a-zip"
DIGEST = hashlib.sha256(APP).hexdigest()
CHECKED = check_plan(PLAN, "kilo0")  # what the backends get, and so what is stored


@pytest.fixture(name="where")
def where_fixture(tmp_path, monkeypatch):
    monkeypatch.setattr(boot, "UNIT_DIR", str(tmp_path / "systemd"))
    monkeypatch.setattr(boot, "systemd_running", lambda: False)
    src = tmp_path / "upload.pyz"
    src.write_bytes(APP)
    return tmp_path


def backend(where, settings, app=None, psk=None):
    return boot.BootBackend(
        settings,
        psk,
        app,
        plan_path=str(where / "lib" / "mesh-plan.json"),
        psk_path=str(where / "lib" / "mesh-preshared-keys.json"),
        app_path=str(where / "app" / "kilo.pyz"),
    )


def run(where, plan=None, check=False, app="send", psk=None, **given):
    settings = host_settings(given)
    app = (
        {"digest": DIGEST, "src": str(where / "upload.pyz") if app == "send" else None}
        if app
        else None
    )
    b = backend(where, settings, app, psk)
    plan = PLAN if plan is None else plan
    return converge(
        plan if settings["state"] == "present" else None,
        settings,
        check_mode=check,
        backends=[b],
        preshared_keys=psk,
    ), b


def mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def test_stored_plan_unit_and_app_written_then_nothing_to_do(where):
    out = run(where, check=True, psk=PSK)[0]
    assert out["changed"] and not (where / "lib").exists() and not (where / "app").exists(), (
        "check mode wrote"
    )
    assert out["diff"]["after"]["boot"]["stored_plan"]["plan"] == CHECKED
    assert out["diff"]["after"]["boot"]["preshared_keys"] == "1 (not shown)"
    out = run(where, psk=PSK)[0]
    changes = out["changes"]["boot"]
    assert "write %s" % (where / "lib" / "mesh-plan.json") in changes
    assert "write %s" % (where / "systemd" / "kilo-mesh.service") in changes
    stored = where / "lib" / "mesh-plan.json"
    assert mode(stored) == 0o600 and mode(where / "lib" / "mesh-preshared-keys.json") == 0o600
    text = stored.read_text()
    assert "P" * 43 not in text, "a preshared key in the stored plan"
    data = json.loads(text)
    assert (
        data["plan"] == CHECKED
        and data["format"] == boot.FORMAT
        and "state" not in data["settings"]
    )
    assert json.loads((where / "lib" / "mesh-preshared-keys.json").read_text()) == PSK
    assert (where / "app" / "kilo.pyz").read_bytes() == APP
    unit = (where / "systemd" / "kilo-mesh.service").read_text()
    assert (
        "ExecStart=/usr/bin/python3 %s --restore %s\n" % (where / "app" / "kilo.pyz", stored)
        in unit
    )
    assert (
        "Type=oneshot" in unit and "Before=kubelet.service" in unit and "TimeoutStartSec=" in unit
    )
    again = run(where, psk=PSK)[0]
    assert not again["changed"], again["changes"]
    # without systemd (this fixture's host) the first write says nothing restores it; re-runs are quiet
    assert len(out["warnings"]) == 1 and "does not run systemd" in out["warnings"][0], out.get(
        "warnings"
    )
    assert "--restore" in out["warnings"][0] and "warnings" not in again


def test_the_app_is_asked_for_and_nothing_changes_until_it_is_sent(where):
    out, b = run(where, app="ask")
    assert out == {
        "changed": False,
        "need": ["app"],
        "changes": {},
        "diff": {"before": {}, "after": {}},
    }
    assert b.need == ["app"] and not (where / "lib").exists() and not (where / "systemd").exists()
    run(where)
    out, b = run(where, app="ask")  # the host has it now: no second transfer
    assert not out["changed"] and "need" not in out and b.need == []


def test_a_sent_app_of_another_digest_is_refused(where):
    (where / "upload.pyz").write_bytes(b"something else")
    with pytest.raises(boot.KiloError, match="does not hold the app"):
        run(where)


def test_a_changed_plan_is_stored_again_and_off_removes_everything(where):
    run(where, psk=PSK)
    moved = dict(PLAN, address="10.4.0.9/16")
    out = run(where, plan=moved)[0]
    assert out["changes"]["boot"] == [
        "write %s" % (where / "lib" / "mesh-plan.json"),
        "remove %s" % (where / "lib" / "mesh-preshared-keys.json"),
    ]
    assert (
        json.loads((where / "lib" / "mesh-plan.json").read_text())["plan"]["address"]
        == "10.4.0.9/16"
    )
    out = run(where, plan=moved, boot_restore=False)[0]
    assert out["changed"]
    assert (
        not (where / "lib" / "mesh-plan.json").exists()
        and not (where / "systemd" / "kilo-mesh.service").exists()
    )
    assert not (where / "app" / "kilo.pyz").exists()
    assert not run(where, plan=moved, boot_restore=False)[0]["changed"]


def test_state_absent_removes_what_it_wrote_and_only_that(where):
    run(where, psk=PSK)
    (where / "app" / "kilo-mesh-agent.pyz").write_bytes(b"the agent's own")
    out = run(where, state="absent", check=True)[0]
    assert (
        out["changes"] == {"boot": ["remove boot"]} and (where / "lib" / "mesh-plan.json").exists()
    )
    run(where, state="absent")
    assert (
        sorted(os.listdir(str(where / "lib"))) == []
        and not (where / "systemd" / "kilo-mesh.service").exists()
    )
    assert sorted(os.listdir(str(where / "app"))) == ["kilo-mesh-agent.pyz"], (
        "the agent's app went too"
    )
    assert not run(where, state="absent")[0]["changed"]
    (where / "app" / "kilo-mesh-agent.pyz").unlink()
    run(where)
    run(where, state="absent")
    assert not (where / "app").exists(), "the emptied app directory stayed"


def test_a_roaming_peers_endpoint_alone_is_not_stored_anew(where):
    roaming = dict(PLAN, peers=[dict(PLAN["peers"][0], roaming=True, persistent_keepalive=25)])
    run(where, plan=roaming)
    moved = dict(roaming, peers=[dict(roaming["peers"][0], endpoint="198.51.100.7:40000")])
    out = run(where, plan=moved)[0]
    assert not out["changed"], out["changes"]
    stored = json.loads((where / "lib" / "mesh-plan.json").read_text())
    assert stored["plan"]["peers"][0]["endpoint"] == "203.0.113.2:51820"
    other = dict(moved, peers=[dict(moved["peers"][0], allowed_ips=["10.4.0.3/32"])])
    assert run(where, plan=other)[0]["changes"]["boot"] == [
        "write %s" % (where / "lib" / "mesh-plan.json")
    ]
    assert (
        json.loads((where / "lib" / "mesh-plan.json").read_text())["plan"]["peers"][0]["endpoint"]
        == "198.51.100.7:40000"
    )


def test_a_converge_holds_the_lock_while_it_reads_and_applies(tmp_path, monkeypatch):
    from ansible_collections.kilo.mesh.plugins.module_utils.host import converge as conv
    from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard import (
        daemon as wireguard_daemon,
    )

    monkeypatch.setattr(wireguard_daemon, "RUN_DIR", str(tmp_path / "run"))
    seen = []

    class Probe(Backend):
        name = "probe"

        def _free(self):
            try:
                with conv.converge_lock(timeout=0):
                    return True
            except conv.Busy:
                return False

        def current(self, plan):
            seen.append(("current", self._free()))

        def desired(self, plan, current):
            return None

        def changes(self, current, desired):
            return ["probe"]

        def apply(self, current, desired):
            seen.append(("apply", self._free()))

        def diff(self, current, desired):
            return None, None

    monkeypatch.setattr(
        conv,
        "backends_for",
        lambda settings, keys=None, app=None, takeover=False: [Probe(settings)],
    )
    conv.converge(PLAN, host_settings({}))
    assert seen == [("current", False), ("apply", False)], "a converge ran without the lock"
    seen[:] = []
    conv.converge(PLAN, host_settings({}), check_mode=True)
    assert seen == [("current", True)], "check mode took the lock"


class Recorder(Backend):
    name = "recorder"

    def __init__(self):
        super(Recorder, self).__init__(host_settings({}))
        self.seen = []

    def current(self, plan):
        return None

    def desired(self, plan, current):
        self.seen.append(plan)
        return plan

    def changes(self, current, desired):
        return ["converge"]

    def apply(self, current, desired):
        pass

    def diff(self, current, desired):
        return None, None


def stored(where, text):
    path = where / "mesh-plan.json"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "text,why",
    [
        ("{not json", "invalid JSON"),
        ('["a list"]', "an object with 'plan' and 'settings' expected"),
        (json.dumps({"format": 99, "plan": PLAN, "settings": {}}), "format 99"),
        (
            json.dumps({"format": 1, "plan": dict(PLAN, listen_port="x"), "settings": {}}),
            "listen_port",
        ),
    ],
)
def test_a_bad_stored_plan_names_the_file_and_changes_nothing(where, text, why):
    path = stored(where, text)
    recorder = Recorder()
    with pytest.raises(boot.RestoreError) as e:
        boot.restore(path, backends=[recorder])
    assert path in str(e.value) and why in str(e.value)
    assert recorder.seen == []
    out = io.StringIO()
    assert (
        boot.main([path], out=out) == 1
        and path in out.getvalue()
        and "nothing changed" in out.getvalue()
    )


def test_a_missing_stored_plan_fails_the_restore(where):
    out = io.StringIO()
    assert boot.main([str(where / "none.json")], out=out) == 1
    assert (
        "cannot read the stored plan" in out.getvalue()
        and str(where / "none.json") in out.getvalue()
    )


def test_the_restore_converges_the_stored_plan_with_its_settings_and_keys(where, monkeypatch):
    from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard import (
        daemon as wireguard_daemon,
    )

    monkeypatch.setattr(wireguard_daemon, "RUN_DIR", str(where / "run"))
    run(where, psk=PSK, mtu=1380)
    recorder = Recorder()
    seen = {}

    def backends_for(settings, keys=None, app=None):
        seen.update(settings=settings, keys=keys, app=app)
        return [recorder]

    monkeypatch.setattr(boot, "backends_for", backends_for)
    result = boot.restore(str(where / "lib" / "mesh-plan.json"))
    assert result["changes"] == {"recorder": ["converge"]} and recorder.seen[0]["name"] == "a"
    assert seen["settings"]["mtu"] == 1380 and seen["settings"]["state"] == "present"
    # one run's requests are not stored; the restore's backends get every option, defaults for those
    stored_settings = json.loads((where / "lib" / "mesh-plan.json").read_text())["settings"]
    assert "route_conflict" not in stored_settings and seen["settings"]["route_conflict"] == "fail"
    assert seen["keys"] == PSK and seen["app"] is None
    assert recorder.lenient_endpoints, "a restore fails on an endpoint DNS cannot resolve yet"


def test_the_userspace_daemons_unit_restarts_it_and_restores_the_plan_after():
    from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.daemon import Daemon

    after = boot.after_restart_command("/usr/lib/kilo-mesh/kilo-mesh-agent.pyz")
    text = Daemon(
        "kilo0", "wireguard-go", "/run/wireguard/kilo0.sock", after_start=after
    ).unit_text()
    lines = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")
    )
    assert lines["ExecStart"].endswith("wireguard-go -f kilo0") and lines["ExecStart"].startswith(
        "/"
    )
    assert (
        lines["Restart"] == "on-failure"
        and lines["Environment"] == "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1"
    )
    post = lines["ExecStartPost"]
    assert post.startswith("-") and "$" not in post, "systemd would expand a $ in it"
    argv = shlex.split(post[1:])
    assert argv[:2] == ["/bin/sh", "-c"] and argv[2] == (
        "test -e /usr/lib/kilo-mesh/kilo-mesh-agent.pyz || exit 0; exec /usr/bin/python3"
        " /usr/lib/kilo-mesh/kilo-mesh-agent.pyz --restore %s --after-restart" % boot.PLAN_PATH
    )
    assert "[Install]" not in text, "enabled on its own: the restore or a converge starts it"
    assert "ExecStartPost" not in Daemon("kilo0", "wireguard-go", "/x").unit_text()


def test_the_restart_restore_is_quiet_before_the_app_is_installed(tmp_path):
    """The first converge starts the daemon before the boot backend installs the app: the
    unit's ExecStartPost, run as systemd runs it, exits 0 and logs nothing."""
    argv = boot.after_restart_command(
        str(tmp_path / "not-yet.pyz"), path=str(tmp_path / "plan.json")
    )
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    app = tmp_path / "app.py"
    app.write_text("import sys; print(' '.join(sys.argv[1:]))")
    argv = boot.after_restart_command(
        str(app), path=str(tmp_path / "plan.json"), python=sys.executable
    )
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "--restore %s --after-restart" % (
        tmp_path / "plan.json"
    )


def test_after_a_restart_nothing_is_done_without_a_plan_and_a_converge_is_waited_for(
    where, tmp_path, monkeypatch
):
    from ansible_collections.kilo.mesh.plugins.module_utils.host import converge as conv
    from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard import (
        daemon as wireguard_daemon,
    )

    monkeypatch.setattr(wireguard_daemon, "RUN_DIR", str(tmp_path / "run"))
    out = io.StringIO()
    assert (
        boot.main([str(tmp_path / "none.json"), "--after-restart"], out=out) == 0
        and out.getvalue() == ""
    )
    path = stored(where, json.dumps({"format": 1, "plan": PLAN, "settings": {}}))
    monkeypatch.setattr(boot, "AFTER_RESTART_WAIT", 0.3)
    with conv.converge_lock():
        assert boot.main([path, "--after-restart"], out=out) == 0 and "left to it" in out.getvalue()


def test_the_stored_plan_keeps_no_one_run_policy():
    """A run with route_conflict replace (one run's permission to take foreign routes over) stores
    the same text as a plain run: the next plain run changes nothing, and no restore takes over."""
    from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings

    plan = {"name": "a"}
    told = boot.stored_text(plan, host_settings({"route_conflict": "replace", "state": "present"}))
    plain = boot.stored_text(plan, host_settings({}))
    assert told == plain and "route_conflict" not in plain
