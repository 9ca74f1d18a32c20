"""A lab whose hosts are Nodes of a kube-apiserver of its own, listening on the lab's management
bridge so that agents inside the lab hosts reach it: for the agent-mode tests.

    with agent_cluster("kag", 2, 2) as (lab, server, inventory): ...

The API server is the test's own (not the session's `kube` fixture) because the fault tests stop
and start it. Everything is removed at the end, whatever happens; processes started in lab hosts
die with the lab (each host's PID namespace).
"""

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import yaml

import labcluster  # pylint: disable=import-error
from apiserver import ApiServer  # pylint: disable=import-error
from lab.lab import Lab  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

AGENT_LOG = "/run/kilo/kilo-mesh-agent.log"  # where the supervisor (no systemd in lab hosts) logs
# Lab hosts share the machine's /usr: each keeps its own copy of the agent's zip application.
# when site.yml last ran (tests that need the agents alone to keep the cluster current read it)
LAST_RUN = [0.0]
AGENT_ARGS = (
    "-e",
    "kilo_agent=true",
    "-e",
    "kilo_agent_app=/var/lib/kilo-mesh/kilo-mesh-agent.pyz",
)


def require_lab_and_kube():
    """Skip (or, with KILO_REQUIRE_KUBE=1 as in CI, fail) without root or the control plane's binaries."""
    import pytest  # pylint: disable=import-outside-toplevel
    from apiserver import binaries_missing  # pylint: disable=import-error,import-outside-toplevel

    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces)")
    missing = binaries_missing()
    if missing:
        message = "no Kubernetes control plane: %s missing (run bash scripts/kube.sh)" % ", ".join(
            missing
        )
        if os.environ.get("KILO_REQUIRE_KUBE") == "1":
            pytest.fail(message)
        pytest.skip(message)


def host_kubeconfig(server, token=None):
    """A kubeconfig a lab host can use: the server's bridge address, the CA inline (a host's /tmp
    is its own, so no path into the controller's)."""
    with open(server.ca_cert, "rb") as f:
        ca = base64.b64encode(f.read()).decode()
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "kilo",
            "clusters": [
                {
                    "name": "kilo",
                    "cluster": {"server": server.host, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": "agent", "user": {"token": token or server.token}}],
            "contexts": [{"name": "kilo", "context": {"cluster": "kilo", "user": "agent"}}],
        }
    )


@contextlib.contextmanager
def agent_cluster(prefix, locations, hosts, peer=None, skip=(), public=1, **lab_options):
    """(lab, server, inventory): a lab, an API server on its bridge, the CRDs, every host a Node
    (labcluster.register_nodes, dual-stack with the lab option ``ipv6``) but those in ``skip``, the
    inventory of the inventory plugin; all removed after."""
    from kubernetes import client  # pylint: disable=import-outside-toplevel

    lab = Lab(prefix)
    lab.down()
    lab.up(locations, hosts, public, **lab_options)
    server, tmp = None, tempfile.mkdtemp(prefix="kilo-%s-" % prefix)
    try:
        server = ApiServer(bind_address=lab.load()["mgmt_bridge_ip"]).start()
        server.kubectl("apply", "-f", labcluster.CRDS)
        with server.client() as api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            wait_for(
                lambda: custom.list_cluster_custom_object(
                    kn.PEER_GROUP, kn.PEER_VERSION, kn.PEER_PLURAL
                ),
                60,
            )
            labcluster.register_nodes(lab, core, skip=skip, ipv6=lab_options.get("ipv6", False))
            if peer:
                custom.create_cluster_custom_object(
                    kn.PEER_GROUP, kn.PEER_VERSION, kn.PEER_PLURAL, labcluster.peer_resource(peer)
                )
        inventory = labcluster.write_inventory(
            lab,
            server.kubeconfig,
            os.path.join(tmp, "inventory"),
            os.path.join(tmp, "kilo-registry.json"),
        )
        yield lab, server, inventory
    finally:
        lab.down()
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def wait_for(check, timeout, interval=0.2):
    """check()'s first truthy value (exceptions count as not yet); AssertionError after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # pylint: disable=broad-exception-caught
            last = e
        if time.monotonic() > deadline:
            raise AssertionError("not within %ss (last error: %r)" % (timeout, last))
        time.sleep(interval)


def stopwatch(check, timeout, interval=0.2):
    """Seconds until check() holds (see wait_for)."""
    start = time.monotonic()
    wait_for(check, timeout, interval)
    return time.monotonic() - start


def wg_dump(lab, host, interface="kilo0"):
    """{public key: {"endpoint", "allowed_ips", "handshake"}} of a host's WireGuard interface."""
    out = lab.run(host, ["wg", "show", interface, "dump"]).stdout.splitlines()
    peers = {}
    for line in out[1:]:
        f = line.split("\t")
        peers[f[0]] = {
            "endpoint": f[2],
            "allowed_ips": sorted(f[3].split(",")),
            "handshake": int(f[4]),
        }
    return peers


def read_log(lab, host):
    return lab.run(host, ["cat", AGENT_LOG]).stdout


def pids(lab, host, pattern="kilo-mesh-agent|module_utils[.]agent[.]main"):
    out = lab.run(host, ["pgrep", "-f", pattern]).stdout.split()
    return [int(p) for p in out]


def node_annotations(api, name):
    from kubernetes import client  # pylint: disable=import-outside-toplevel

    return client.CoreV1Api(api).read_node(name).metadata.annotations or {}


def dump_json(obj):
    return json.dumps(obj, indent=1, sort_keys=True)


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAN_FILE = "/run/kilo/agent-plan.json"


def install_agents(inventory, hosts, *extra):
    """playbooks/agent.yml (the role kilo.mesh.agent) on ``hosts``: installs and starts the agent."""
    import sitetools  # pylint: disable=import-error,import-outside-toplevel

    return sitetools.playbook(
        inventory, "agent.yml", "--limit", ",".join(hosts), *(AGENT_ARGS + extra)
    )


def agent_pid(lab, host):
    """The agent's PID: the child of the supervisor whose PID file the role keeps."""
    done = lab.run(host, ["sh", "-c", "pgrep -P $(cat /run/kilo/kilo-mesh-agent.pid)"])
    return int(done.stdout.split()[0]) if done.returncode == 0 and done.stdout.split() else None


def metrics(lab, host, path="/metrics"):
    """(status, text) of the agent's HTTP listener inside the host."""
    code = (
        "import urllib.request, urllib.error, sys\n"
        "try:\n r = urllib.request.urlopen('http://127.0.0.1:1107%s', timeout=5); print(r.status); "
        "print(r.read().decode())\n"
        "except urllib.error.HTTPError as e:\n print(e.code); print(e.read().decode())\n" % path
    )
    done = lab.run(host, ["python3", "-c", code])
    lines = done.stdout.split("\n", 1)
    return int(lines[0]), lines[1] if len(lines) > 1 else ""


def metric(lab, host, name):
    """The value of one unlabelled metric of the agent in ``host``."""
    _status, text = metrics(lab, host)
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric %s in: %s" % (name, text[-2000:]))


def controller_plans(inventory):
    """{host: plan} as the controller's topology step computes them from the same Nodes."""
    import sitetools  # pylint: disable=import-error,import-outside-toplevel

    out_file = tempfile.mktemp(prefix="kilo-plans-", suffix=".json")
    book = tempfile.mktemp(prefix="kilo-plans-", suffix=".yml")
    with open(book, "w") as f:
        f.write(
            "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
            "    - kilo.mesh.topology: {}\n      register: t\n"
            "    - ansible.builtin.copy: {content: '{{ t.plans | to_json }}', dest: %s, mode: '0600'}\n"
            % out_file
        )
    try:
        out = sitetools.playbook(inventory, os.path.abspath(book))
        with open(out_file) as f:
            return json.load(f)
    except OSError:
        raise AssertionError(out[-3000:])
    finally:
        for path in (book, out_file):
            if os.path.exists(path):
                os.remove(path)


def agent_plan(lab, host):
    done = lab.run(host, ["cat", PLAN_FILE])
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else None


def comparable(plan):
    """A plan without what only the run that hands it over adds (roaming marks), in one order."""
    plan = json.loads(json.dumps(plan))
    for peer in plan.get("peers", []):
        peer.pop("roaming", None)
        peer.pop("preshared_key", None)
    return plan


def leaders(lab, hosts):
    """Hosts that hold a WireGuard address on kilo0 (leaders; the others have none)."""
    return [
        h
        for h in hosts
        if lab.run(
            h, ["sh", "-c", "ip -o -4 addr show dev kilo0 2>/dev/null | grep -q inet"]
        ).returncode
        == 0
    ]


DARK_TABLE = "kilo_test_dark"


def go_dark(lab, host):
    """Every packet in and out of the host dropped (management interface too: no API, no SSH)."""
    lab.run(
        host,
        ["nft", "-f", "-"],
        check=True,
        input=(
            "table inet %s {\n chain in { type filter hook input priority -300; policy drop; }\n"
            " chain out { type filter hook output priority -300; policy drop; }\n}\n" % DARK_TABLE
        ),
    )


def go_light(lab, host):
    lab.run(host, ["nft", "delete", "table", "inet", DARK_TABLE], check=True)


def drop_wireguard(lab, host, port=51820):
    """The host's WireGuard packets (UDP ``port`` either way) dropped; SSH and the API still work."""
    lab.run(
        host,
        ["nft", "-f", "-"],
        check=True,
        input=(
            "table inet %s {\n chain in { type filter hook input priority -300; udp dport %d drop; }\n"
            " chain out { type filter hook output priority -300; udp sport %d drop; }\n}\n"
            % (DARK_TABLE, port, port)
        ),
    )


class PingWatch(object):
    """Pings between every pair of hosts in different locations, 10 per second, while the block
    runs; ``lost()`` maps (src, dst ip) -> the sequence numbers never answered. The last echo sent
    before the block ends may still be on its way: it is not counted (ping's own summary would)."""

    def __init__(self, lab, hosts, interval=0.1):
        self.lab, self.hosts, self.interval = lab, hosts, interval
        self.procs = []
        self.results = {}

    def __enter__(self):
        info = self.lab.hosts
        for src in self.hosts:
            for dst in self.hosts:
                if info[dst]["location"] != info[src]["location"]:
                    argv = self.lab.nsenter_argv(
                        src,
                        ["ping", "-n", "-i", str(self.interval), "-W", "1", info[dst]["lan_ip"]],
                    )
                    proc = subprocess.Popen(
                        argv,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        text=True,
                        start_new_session=True,
                    )
                    # read all along: a pipe read only at the end fills (64 KiB, about 1,000
                    # replies) and ping blocks writing it, so a long watch would stop sending
                    out = []
                    reader = threading.Thread(
                        target=lambda proc=proc, out=out: out.append(proc.stdout.read()),
                        daemon=True,
                    )
                    reader.start()
                    self.procs.append(((src, info[dst]["lan_ip"]), proc, reader, out))
        return self

    def __exit__(self, *exc):
        for key, proc, reader, out in self.procs:
            os.killpg(
                proc.pid, signal.SIGINT
            )  # nsenter forks into the PID namespace: ping is its child
        for key, proc, reader, out in self.procs:
            proc.wait(timeout=30)
            reader.join(30)  # until ping (not only nsenter) closed its output: its summary
            self.results[key] = "".join(out)

    def lost(self):
        lost = {}
        for key, out in self.results.items():
            sent = re.search(r"(\d+) packets transmitted", out)
            if not sent:
                lost[key] = "no summary: %s" % out[-200:]
                continue
            answered = set(int(n) for n in re.findall(r"icmp_seq=(\d+) ttl=", out))
            missing = sorted(
                set(range(1, int(sent.group(1)))) - answered
            )  # the last one may be in flight
            if missing:
                lost[key] = missing
        return lost


def all_pairs_ping(lab, hosts, timeout=1):
    """Every host reaches every host of another location at its LAN address (through the mesh)."""
    info = lab.hosts
    failed = []
    for src in hosts:
        targets = [info[d]["lan_ip"] for d in hosts if info[d]["location"] != info[src]["location"]]
        done = lab.run(
            src,
            [
                "sh",
                "-c",
                "ok=0; for ip in %s; do ping -c 1 -W %d -q $ip >/dev/null || "
                "{ ok=1; echo $ip; }; done; exit $ok" % (" ".join(targets), timeout),
            ],
            timeout=60,
        )
        if done.returncode:
            failed.append((src, done.stdout.split()))
    return not failed
