"""Installing the agent: the zip application, the token age rule, the unit, the supervisor.

The supervisor runs for real (processes of this test, by PID, in a temporary directory): a
SIGKILLed agent comes back, a second run changes nothing and restarts nothing, absent stops both.
"""

import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.agent import service
from ansible_collections.kilo.mesh.plugins.plugin_utils import agent_zip

# the directory holding ansible_collections/ (six levels above plugins/plugin_utils/agent_zip.py)
COLLECTIONS = os.path.abspath(agent_zip.__file__)
for _ in range(6):
    COLLECTIONS = os.path.dirname(COLLECTIONS)


# --- the zip application ----------------------------------------------------------------------


def test_zip_is_deterministic_and_follows_the_code(tmp_path):
    data1, digest1 = agent_zip.build()
    data2, digest2 = agent_zip.build()
    assert data1 == data2 and digest1 == digest2
    copy = tmp_path / "module_utils"
    shutil.copytree(
        agent_zip.module_utils_dir(), copy, ignore=shutil.ignore_patterns("__pycache__")
    )
    os.utime(copy / "common.py", (1, 1))  # a timestamp alone changes nothing
    assert agent_zip.build(str(copy))[1] == digest1
    with open(copy / "common.py", "a") as f:
        f.write("\n# changed\n")
    assert agent_zip.build(str(copy))[1] != digest1


def test_zip_runs_under_the_hosts_python(tmp_path):
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("no /usr/bin/python3")
    app = tmp_path / "kilo-mesh-agent.pyz"
    app.write_bytes(agent_zip.build()[0])
    done = subprocess.run(
        ["/usr/bin/python3", str(app), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "usage: kilo-mesh-agent" in done.stdout and "--config" in done.stdout


# --- the token age rule -------------------------------------------------------------------------


def jwt(claims):
    def part(obj):
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return "%s.%s.%s" % (part({"alg": "RS256"}), part(claims), "c2lnbmF0dXJl")


def sa_claims(iat, exp, uid="uid-1", sub="system:serviceaccount:kube-system:kilo-mesh-agent-a"):
    return {
        "iat": iat,
        "exp": exp,
        "sub": sub,
        "kubernetes.io": {
            "namespace": "kube-system",
            "serviceaccount": {"name": "kilo-mesh-agent-a", "uid": uid},
        },
    }


def test_token_is_renewed_past_a_third_of_its_life():
    claims = service.jwt_claims(jwt(sa_claims(1000, 4000)))
    assert claims["exp"] == 4000
    assert service.token_fresh(claims, now=1000)
    assert service.token_fresh(claims, now=1999)
    assert not service.token_fresh(claims, now=2000)
    assert not service.token_fresh(claims, now=5000)
    assert not service.token_fresh(
        service.jwt_claims(jwt({"exp": 4000})), now=1000
    )  # no iat: renew
    for bad in ("", "abc", "a.b", "a.!!!.c", None):
        assert service.jwt_claims(bad) is None
        assert not service.token_fresh(service.jwt_claims(bad), now=0)


def test_kubeconfig_kept_only_for_same_cluster_identity_and_young_token(tmp_path):
    path = str(tmp_path / "kubeconfig")
    wanted = dict(
        server="https://10.0.0.1:6443",
        ca_data="Q0E=",
        insecure=False,
        subject="system:serviceaccount:kube-system:kilo-mesh-agent-a",
        uid="uid-1",
    )
    assert service.kubeconfig_verdict(path, wanted, now=1000) == "missing"
    with open(path, "w") as f:
        f.write(service.kubeconfig_text(wanted, jwt(sa_claims(1000, 4000))))
    assert service.kubeconfig_verdict(path, wanted, now=1500) is None
    assert service.kubeconfig_verdict(path, wanted, now=2500) == "token past a third of its life"
    assert service.kubeconfig_verdict(path, dict(wanted, server="https://10.0.0.2:6443"), now=1500)
    assert service.kubeconfig_verdict(path, dict(wanted, ca_data="T1RIRVI="), now=1500)
    assert (
        service.kubeconfig_verdict(path, dict(wanted, uid="uid-2"), now=1500) == "identity differs"
    )
    assert service.kubeconfig_verdict(
        path, dict(wanted, subject="system:serviceaccount:x:y"), now=1500
    )
    shown = json.dumps(service.kubeconfig_shown(path))
    assert "c2lnbmF0dXJl" not in shown and "uid-1" in shown  # never the token


# --- the systemd unit -----------------------------------------------------------------------------


def test_unit_limits_capabilities_and_writable_paths():
    config = {
        "settings": {
            "cni_path": "/etc/cni/net.d/10-kilo.conflist",
            "key_path": "/var/lib/kilo/key",
        },
        "key": {"key_path": "/var/lib/kilo/key"},
    }
    text = service.unit_text(
        "/usr/lib/kilo-mesh/kilo-mesh-agent.pyz", "/etc/kilo-mesh/agent.json", config
    )
    lines = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")
    )
    assert (
        lines["ExecStart"]
        == "/usr/bin/python3 /usr/lib/kilo-mesh/kilo-mesh-agent.pyz --config /etc/kilo-mesh/agent.json"
    )
    assert lines["Restart"] == "always"
    assert (
        lines["CapabilityBoundingSet"]
        == lines["AmbientCapabilities"]
        == "CAP_NET_ADMIN CAP_NET_RAW"
    )
    assert lines["ProtectSystem"] == "strict" and lines["ProtectHome"] == "yes"
    assert lines["NoNewPrivileges"] == lines["PrivateTmp"] == "yes"
    # /run/systemd/system: the userspace daemon's unit
    assert lines["ReadWritePaths"].split() == [
        "-/var/lib/kilo",
        "-/etc/cni/net.d",
        "-/run/kilo",
        "-/run/wireguard",
        "-/run/systemd/system",
    ]
    assert lines["DeviceAllow"] == "/dev/net/tun rw"
    # made at every start (a reboot empties /run), kept at a stop (the push run's PID files)
    assert lines["RuntimeDirectory"].split() == ["kilo", "wireguard"]
    assert lines["RuntimeDirectoryPreserve"] == "yes"
    assert text == service.unit_text(
        "/usr/lib/kilo-mesh/kilo-mesh-agent.pyz", "/etc/kilo-mesh/agent.json", config
    )


# --- present, again, SIGKILL, absent under the supervisor ------------------------------------------

FAKE_APP = """import sys, time
sys.path.insert(0, %r)
if sys.argv[1:2] == ["--supervise"]:
    from ansible_collections.kilo.mesh.plugins.module_utils.agent import supervise
    sys.exit(supervise.main(sys.argv[2:], sys.argv[0]))
while True:
    time.sleep(1)
"""


def wait_for(what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.1)
    return what()


@pytest.fixture
def host(tmp_path, monkeypatch):
    monkeypatch.setattr(service, "RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(service, "UNIT_PATH", str(tmp_path / "kilo-mesh-agent.service"))
    app_text = (FAKE_APP % COLLECTIONS).encode()
    src = tmp_path / "src.pyz"
    src.write_bytes(app_text)
    params = dict(
        app_digest=hashlib.sha256(app_text).hexdigest(),
        app_path=str(tmp_path / "lib" / "agent.pyz"),
        config_path=str(tmp_path / "etc" / "agent.json"),
        kubeconfig_path=str(tmp_path / "etc" / "kubeconfig"),
        config={"node": "a", "settings": {}, "key": {}},
        python=sys.executable,
        service_manager="supervisor",
        kubeconfig=dict(
            server="https://10.0.0.1:6443",
            ca_data="Q0E=",
            subject="system:serviceaccount:kube-system:kilo-mesh-agent-a",
            uid="uid-1",
        ),
    )
    yield params, str(src)
    service.absent(params)


def test_supervised_agent_lifecycle(host):
    params, src = host
    now = time.time()
    first = service.present(params, check_mode=True)
    assert first["changed"] and "start the agent" in first["changes"]
    assert not os.path.exists(params["config_path"])
    assert service.present(params)["need"] == ["app", "token"]
    assert not os.path.exists(params["config_path"])  # asked for what it needs, changed nothing
    token = jwt(sa_claims(int(now), int(now) + 3000))
    done = service.present(dict(params, app_src=src, token=token))
    assert done["changed"] and done["service"] == "supervisor" and done["pid"]
    for path in (params["config_path"], params["kubeconfig_path"]):
        assert os.stat(path).st_mode & 0o777 == 0o600
    assert token not in json.dumps(done)
    sup = service.Supervisor(params["app_path"], params["config_path"], sys.executable)
    agent = wait_for(sup.agent_pid)
    assert agent

    again = service.present(params)
    assert not again["changed"] and again["changes"] == [] and again["pid"] == done["pid"]
    assert sup.agent_pid() == agent  # not restarted

    os.kill(agent, signal.SIGKILL)
    start = time.monotonic()
    back = wait_for(lambda: sup.agent_pid() not in (None, agent), timeout=10)
    assert back, "the supervisor did not start the agent again"
    assert time.monotonic() - start < 5

    changed = service.present(
        dict(params, config={"node": "a", "settings": {}, "key": {}, "resync_period": 5})
    )
    assert changed["restarted"] and changed["pid"] != done["pid"]

    gone = service.absent(params)
    assert gone["changed"]
    assert (
        sup.pid() is None
        and not os.path.exists(params["config_path"])
        and not os.path.exists(params["app_path"])
    )
    assert (
        not os.path.exists("/proc/%d" % changed["pid"])
        or open("/proc/%d/stat" % changed["pid"]).read().split()[2] == "Z"
    )
    assert not service.absent(params)["changed"]
