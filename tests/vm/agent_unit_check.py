"""The agent's systemd unit, in a VM whose PID 1 is systemd (tests/vm/run.sh --systemd).

Installs the agent as kilo.mesh.agent's module does (module_utils/agent/service.py, the zip
from plugin_utils/agent_zip.py), then checks: started; a second run changes and restarts
nothing; the hardening is in force in the running process (capabilities, no new privileges,
read-only system, writable key directory; systemctl show); restarted after SIGKILL; stopped
cleanly by SIGTERM; removed. The API server is not reachable from the VM: the agent keeps
running and retrying, which is all the unit needs.
"""

import base64
import json
import os
import signal
import sys
import time

from vmcheck import Checker, run

from ansible_collections.kilo.mesh.plugins.module_utils.agent import service
from ansible_collections.kilo.mesh.plugins.plugin_utils import agent_zip

CAPS = (1 << 12) | (1 << 13)  # CAP_NET_ADMIN, CAP_NET_RAW


def jwt(claims):
    def part(obj):
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return "%s.%s.sig" % (part({"alg": "RS256"}), part(claims))


def status_field(pid, name):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return None


def show(prop):
    return run("systemctl", "show", "-p", prop, "--value", service.UNIT_NAME).stdout.strip()


def main_pid():
    pid = show("MainPID")
    return int(pid) if pid.isdigit() and int(pid) > 0 else None


def wait_for(what, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.2)
    return what()


def main():
    if os.environ.get("KV_VM") != "1" or not os.path.isdir("/run/systemd/system"):
        print("agent_unit_check: only in the VM with systemd as PID 1 (tests/vm/run.sh --systemd)")
        return 2
    c = Checker()
    data, digest = agent_zip.build()
    with open("/tmp/kilo-mesh-agent.pyz", "wb") as f:
        f.write(data)
    now = int(time.time())
    subject = "system:serviceaccount:kube-system:kilo-mesh-agent-kv"
    token = jwt(
        {
            "iat": now,
            "exp": now + 3600,
            "sub": subject,
            "kubernetes.io": {"serviceaccount": {"name": "kilo-mesh-agent-kv", "uid": "u1"}},
        }
    )
    params = dict(
        app_digest=digest,
        python="/usr/bin/python3",
        service_manager="auto",
        config={
            "node": "kv",
            "options": {},
            "resync_period": 30,
            "listen": ":1107",
            "settings": {
                "interface": "kilo0",
                "key_path": "/var/lib/kilo/key",
                "cni_path": "/etc/cni/net.d/10-kilo.conflist",
            },
            "key": {"interface": "kilo0", "key_path": "/var/lib/kilo/key"},
        },
        kubeconfig=dict(server="https://127.0.0.1:6443", insecure=True, subject=subject, uid="u1"),
    )

    need = service.present(params)
    c.check("first call asks for the app and a token", need.get("need") == ["app", "token"], need)
    t0 = time.monotonic()
    done = service.present(dict(params, app_src="/tmp/kilo-mesh-agent.pyz", token=token))
    print("install and start: %.1f s" % (time.monotonic() - t0))
    c.check(
        "installed under systemd", done["service"] == "systemd" and done["changed"], done["changes"]
    )
    c.check(
        "unit active", wait_for(lambda: show("ActiveState") == "active", 30), show("ActiveState")
    )
    c.check(
        "unit enabled",
        run("systemctl", "is-enabled", service.UNIT_NAME, check=False).stdout.strip() == "enabled",
    )
    pid = main_pid()
    c.check(
        "main PID runs the app",
        pid
        and b"/usr/lib/kilo-mesh/kilo-mesh-agent.pyz"
        in open("/proc/%d/cmdline" % pid, "rb").read(),
        pid,
    )
    for path in (service.DEFAULT_AGENT_CONFIG, service.DEFAULT_AGENT_KUBECONFIG):
        c.check("%s is 0600" % path, os.stat(path).st_mode & 0o777 == 0o600)

    # the agent lives (retrying the unreachable API server) rather than crash-looping
    time.sleep(8)
    c.check(
        "agent still the same process after 8 s",
        main_pid() == pid and show("NRestarts") == "0",
        (
            main_pid(),
            pid,
            show("NRestarts"),
            run("journalctl", "-u", service.UNIT_NAME, "--no-pager", check=False).stdout[-1500:],
        ),
    )

    again = service.present(params)
    c.check(
        "second run: nothing changed, not restarted",
        not again["changed"] and not again["restarted"] and main_pid() == pid,
        again,
    )

    # the hardening, in force in the running process
    c.check(
        "bounding set is NET_ADMIN + NET_RAW",
        int(status_field(pid, "CapBnd"), 16) == CAPS,
        status_field(pid, "CapBnd"),
    )
    c.check(
        "effective capabilities within it",
        int(status_field(pid, "CapEff"), 16) & ~CAPS == 0,
        status_field(pid, "CapEff"),
    )
    c.check("no new privileges", status_field(pid, "NoNewPrivs") == "1")
    ro = run("nsenter", "-t", str(pid), "-m", "touch", "/usr/kilo-probe", check=False)
    c.check("/usr read-only for the agent", ro.returncode != 0, ro.stderr)
    etc = run("nsenter", "-t", str(pid), "-m", "touch", "/etc/kilo-probe", check=False)
    c.check("/etc read-only for the agent", etc.returncode != 0, etc.stderr)
    rw = run("nsenter", "-t", str(pid), "-m", "touch", "/var/lib/kilo/probe", check=False)
    c.check("key directory writable for the agent", rw.returncode == 0, rw.stderr)
    cni = run("nsenter", "-t", str(pid), "-m", "touch", "/etc/cni/net.d/probe", check=False)
    c.check("CNI directory writable for the agent", cni.returncode == 0, cni.stderr)
    for path in ("/var/lib/kilo/probe", "/etc/cni/net.d/probe"):
        if os.path.exists(path):
            os.unlink(path)
    # ProtectHome=yes: /root is an inaccessible (mode 000) mount for the agent
    home = run("nsenter", "-t", str(pid), "-m", "stat", "-c", "%a", "/root", check=False)
    c.check("home inaccessible", home.stdout.strip() == "0", home.stdout + home.stderr)
    expected = {
        "Restart": "always",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "NoNewPrivileges": "yes",
        "PrivateTmp": "yes",
        "CapabilityBoundingSet": "cap_net_admin cap_net_raw",
        "AmbientCapabilities": "cap_net_admin cap_net_raw",
    }
    for prop, value in expected.items():
        c.check("systemctl show %s=%s" % (prop, value), show(prop) == value, show(prop))
    c.check(
        "ReadWritePaths",
        "/var/lib/kilo" in show("ReadWritePaths") and "/run/wireguard" in show("ReadWritePaths"),
        show("ReadWritePaths"),
    )

    # SIGKILL: systemd starts it again (RestartSec=2)
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    new = wait_for(
        lambda: main_pid() not in (None, pid) and show("ActiveState") == "active" and main_pid(), 20
    )
    c.check("restarted after SIGKILL", new and new != pid, (new, show("ActiveState")))
    print("restart after SIGKILL: %.1f s" % (time.monotonic() - t0))
    c.check("NRestarts counted", show("NRestarts") == "1", show("NRestarts"))

    # stopped cleanly: once the agent runs (it says so; imports take seconds under TCG), SIGTERM
    # ends it with status 0 well within TimeoutStopSec
    def watching():
        log = run(
            "journalctl", "-u", service.UNIT_NAME, "--no-pager", "-o", "cat", check=False
        ).stdout
        return log.count("watching the API server") >= 2  # the restarted one too

    c.check("the restarted agent runs", wait_for(watching, 60))
    t0 = time.monotonic()
    run("systemctl", "stop", service.UNIT_NAME, check=False)
    took = time.monotonic() - t0
    c.check(
        "stopped cleanly by SIGTERM",
        show("ActiveState") == "inactive"
        and show("Result") == "success"
        and show("ExecMainStatus") == "0"
        and took < service.STOP_TIMEOUT,
        (show("ActiveState"), show("Result"), show("ExecMainStatus"), took),
    )
    print("stop: %.1f s" % took)

    back = service.present(params)
    c.check(
        "a run starts a stopped agent",
        back["changes"] == ["start the agent"] and main_pid(),
        back["changes"],
    )

    gone = service.absent(params)
    c.check(
        "absent removes it",
        gone["changed"]
        and not os.path.exists(service.UNIT_PATH)
        and not os.path.exists(service.DEFAULT_AGENT_CONFIG)
        and not os.path.exists(service.DEFAULT_AGENT_APP),
        gone["changes"],
    )
    c.check("unit gone", show("LoadState") in ("not-found", ""), show("LoadState"))
    c.check("absent again: nothing", not service.absent(params)["changed"])
    print("agent-unit: %d passed, %d failed" % (c.passed, c.failed))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
