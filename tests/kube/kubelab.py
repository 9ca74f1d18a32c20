"""What the tests that run Kilo's own binaries need beyond labcluster.nodes_of (their lab and Nodes).

Shared by test_kgctl.py and test_migration.py: the binaries named by env vars, and what Kilo's
agent needs inside a lab host: a way to the API server (an SSH remote forward, the lab's own
management path), a kubeconfig in the host's /etc, and background processes started and
stopped by PID.
"""

import base64
import os
import shlex
import signal
import subprocess
import threading
import time

import pytest
import yaml
from kubernetes import client


from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

API_PORT = 6443  # the API server's port inside every lab host (loopback, forwarded over SSH)
KUBECONFIG_IN_HOST = "/etc/kubernetes/kubeconfig"  # where Kilo's DaemonSet mounts it


def binary(var, how):
    """The executable named by $VAR, else skip the module with how to get one."""
    path = os.environ.get(var)
    if not path:
        pytest.skip("%s is not set: %s" % (var, how), allow_module_level=True)
    if not os.access(path, os.X_OK):
        pytest.skip("%s=%s is not an executable: %s" % (var, path, how), allow_module_level=True)
    return path


def leaders(admin, names):
    """The Nodes whose wireguard-ip annotation is set (Kilo writes "" on the others)."""
    core = client.CoreV1Api(admin)
    return sorted(
        n for n in names if (core.read_node(n).metadata.annotations or {}).get(kn.WIREGUARD_IP)
    )


# -- what Kilo's agent needs inside a lab host ---------------------------------------------------


class ApiTunnels:
    """127.0.0.1:API_PORT in every lab host reaches the test API server (127.0.0.1 of the machine).

    One `ssh -N -R` per host over the lab's management path, as an operator would tunnel; the
    server's certificate names 127.0.0.1, so TLS checks hold inside the host too.
    """

    def __init__(self, lab, kube):
        self.lab, self.kube, self.procs = lab, kube, {}

    def __enter__(self):
        port = int(self.kube.host.rsplit(":", 1)[1])
        for name in sorted(self.lab.hosts):
            self.procs[name] = subprocess.Popen(
                [
                    "ssh",
                    "-F",
                    self.lab.ssh_config,
                    "-o",
                    "ControlMaster=no",
                    "-o",
                    "ControlPath=none",
                    "-o",
                    "ExitOnForwardFailure=yes",
                    "-N",
                    "-R",
                    "127.0.0.1:%d:127.0.0.1:%d" % (API_PORT, port),
                    name,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        for name in self.procs:
            self._wait_open(name)
        return self

    def _wait_open(self, name):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise RuntimeError(
                    "ssh -R to %s exited: %s" % (name, self.procs[name].stderr.read())
                )
            if (
                self.lab.run(
                    name, ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/%d" % API_PORT]
                ).returncode
                == 0
            ):
                return
            time.sleep(0.3)
        raise RuntimeError("no API tunnel into %s after 30 s" % name)

    def __exit__(self, *exc):
        for proc in self.procs.values():  # only the ssh processes started above, by PID
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=15)


def install_kubeconfig(lab, host, kube):
    """The admin kubeconfig, CA inlined, at KUBECONFIG_IN_HOST of the host, server on the tunnel."""
    with open(kube.ca_cert, "rb") as f:
        ca = base64.b64encode(f.read()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "kilo",
        "clusters": [
            {
                "name": "kilo",
                "cluster": {
                    "server": "https://127.0.0.1:%d" % API_PORT,
                    "certificate-authority-data": ca,
                },
            }
        ],
        "users": [{"name": "kilo", "user": {"token": kube.token}}],
        "contexts": [{"name": "kilo", "context": {"cluster": "kilo", "user": "kilo"}}],
    }
    done = lab.run(
        host,
        [
            "sh",
            "-c",
            "umask 077; mkdir -p %s && cat > %s"
            % (os.path.dirname(KUBECONFIG_IN_HOST), KUBECONFIG_IN_HOST),
        ],
        input=yaml.safe_dump(config),
    )
    assert done.returncode == 0, done.stderr


def start(lab, host, argv, log, env=None):
    """Start argv in the background inside the host (own session, output to log); its PID there."""
    exports = "".join("%s=%s " % (k, shlex.quote(v)) for k, v in (env or {}).items())
    script = "%s setsid %s > %s 2>&1 < /dev/null & echo $!" % (
        "export " + exports + ";" if exports else "",
        " ".join(shlex.quote(a) for a in argv),
        shlex.quote(log),
    )
    done = lab.run(host, ["sh", "-c", script])
    assert done.returncode == 0 and done.stdout.strip().isdigit(), (host, done.stdout, done.stderr)
    return int(done.stdout.strip())


def alive(lab, host, pid):
    """PID runs in the host (a zombie left for the host's init to reap counts as gone)."""
    status = lab.run(host, ["cat", "/proc/%d/status" % pid]).stdout
    return bool(status) and "\nState:\tZ" not in status


def stop(lab, host, pid, sig=signal.SIGTERM, timeout=30):
    """Signal the process PID of the host (its own PID namespace) and wait until it is gone."""
    lab.run(host, ["kill", "-%d" % sig, str(pid)])
    deadline = time.monotonic() + timeout
    while alive(lab, host, pid):
        assert time.monotonic() < deadline, "%s: pid %d still running %d s after signal %d" % (
            host,
            pid,
            timeout,
            sig,
        )
        time.sleep(0.2)


def kg_argv(kg, name, kubeconfig=KUBECONFIG_IN_HOST, clean_up=True):
    """kg's flags as Kilo's userspace DaemonSet passes them, for this lab (no IPIP, no CNI);
    ``clean_up`` False adds ``--clean-up=false`` (what playbooks/migrate.yml asks of the DaemonSet)."""
    return [
        kg,
        "--kubeconfig=" + kubeconfig,
        "--hostname=" + name,
        "--create-interface=false",
        "--encapsulate=never",
        "--cni=false",
        "--mesh-granularity=location",
        "--listen=127.0.0.1:1107",
    ] + ([] if clean_up else ["--clean-up=false"])


class DaemonSet(object):
    """Kilo's DaemonSet with a nodeAffinity (``label`` DoesNotExist), as its controller and the
    kubelet run it: kg on every Node of ``names`` without the label (started again when it exits,
    restartPolicy Always), stopped with SIGTERM where the label appears (the pod deleted), started
    again where it goes. A thread polls the Nodes every 0.5 s; the lab has no kubelet.

    ``argv_of(name)`` is kg's command line on that host; ``pids`` maps host -> kg's PID there;
    ``start_delay`` (seconds, 0 by default) holds each start back that long after the label went,
    as a pod that waits for its image or its turn on the node."""

    def __init__(self, lab, core, names, argv_of, label, log="/var/log/kg.log"):
        self.lab, self.core, self.names, self.argv_of, self.label, self.log = (
            lab,
            core,
            list(names),
            argv_of,
            label,
            log,
        )
        self.pids, self.events, self.start_delay, self._due = {}, [], 0.0, {}
        self._stop = threading.Event()
        self._thread = None

    def reconcile(self):
        labels = dict(
            (n.metadata.name, n.metadata.labels or {}) for n in self.core.list_node().items
        )
        for name in self.names:
            wanted = name in labels and self.label not in labels[name]
            pid = self.pids.get(name)
            running = pid is not None and alive(self.lab, name, pid)
            if wanted and not running:
                due = self._due.setdefault(name, time.time() + self.start_delay)
                if time.time() < due:
                    continue
                del self._due[name]
                self.pids[name] = start(self.lab, name, self.argv_of(name), self.log)
                self.events.append((time.time(), name, "started"))
            elif running and not wanted:
                stop(self.lab, name, pid, signal.SIGTERM)
                del self.pids[name]
                self.events.append((time.time(), name, "stopped (SIGTERM)"))

    def _loop(self):
        while not self._stop.wait(0.5):
            try:
                self.reconcile()
            except Exception as e:  # pylint: disable=broad-exception-caught
                self.events.append((time.time(), "-", "reconcile failed: %r" % e))

    def __enter__(self):
        self.reconcile()
        self._thread = threading.Thread(target=self._loop, name="kilo-daemonset", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=60)
        for name, pid in sorted(self.pids.items()):
            stop(self.lab, name, pid, signal.SIGKILL)
        self.pids.clear()


def prepare_node(lab, name):
    """What a Kubernetes node with Kilo's userspace DaemonSet has and a bare lab host lacks."""
    h = lab.hosts[name]
    # Kilo picks its addresses from the default route's interface and refuses to start without one;
    # the fabric has no route onward, so nothing leaves the lab.
    uplink = "eth1" if h["public_ip"] else "eth0"
    for argv in (
        ["ip", "route", "replace", "default", "dev", uplink],
        ["sysctl", "-qw", "net.ipv4.ip_forward=1"],
    ):  # kubeadm's preflight demands forwarding
        done = lab.run(name, argv)
        assert done.returncode == 0, (name, argv, done.stderr)
    start(
        lab,
        name,
        ["wireguard-go", "-f", "kilo0"],
        "/var/log/wireguard-go.log",
        env={"WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD": "1"},
    )
    deadline = time.monotonic() + 15
    while lab.run(name, ["ip", "link", "show", "kilo0"]).returncode != 0:
        assert time.monotonic() < deadline, "%s: wireguard-go made no kilo0 in 15 s" % name
        time.sleep(0.2)
