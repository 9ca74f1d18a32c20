"""Every wireguard-format output of kilo.mesh.showconf is taken by `wg setconf` on a real
interface (wireguard-go in a network namespace of this test's own) and reads back equal.

The node configuration carries no private key (it never leaves the host), so the test adds a
generated one after ``[Interface]``; the rest goes in as printed. Read back with
`wg show IFACE dump` and compared field by field with the returned ``data``.
"""

import os
import shutil
import subprocess
import sys
import time

import pytest

from backendtools import ROOT, sh
from ansible_collections.kilo.mesh.plugins.plugin_utils.showconf import showconf

sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
from test_showconf_units import mesh  # noqa: E402  (the unit tests' mesh, worked out by hand)

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
    pytest.mark.skipif(
        not shutil.which("wireguard-go") or not shutil.which("wg"),
        reason="needs wireguard-go and wg",
    ),
]

USERSPACE_ENV = "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD"


@pytest.fixture(scope="module")
def interface():
    """(namespace, interface): wireguard-go serving one interface in a fresh namespace."""
    ns = "kmsc%d" % os.getpid()
    iface = "kmsc%d" % (os.getpid() % 100000)
    sock = "/var/run/wireguard/%s.sock" % iface
    sh("ip", "netns", "add", ns)
    daemon = None
    try:
        # -f: stays in the foreground, so the PID we hold is the daemon's
        daemon = subprocess.Popen(
            ["ip", "netns", "exec", ns, "env", "%s=1" % USERSPACE_ENV, "wireguard-go", "-f", iface],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.time() + 15
        while not os.path.exists(sock):
            assert daemon.poll() is None, daemon.stderr.read().decode()
            assert time.time() < deadline, "wireguard-go did not open %s" % sock
            time.sleep(0.05)
        yield ns, iface
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.terminate()
            try:
                daemon.wait(5)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        sh("ip", "netns", "del", ns, check=False)


def apply(ns, iface, config, tmp_path):
    """`wg setconf` of ``config`` (a generated private key added to its [Interface]); the dump back."""
    if config.startswith("[Interface]\n"):
        private = sh("wg", "genkey").stdout.strip()
        config = config.replace("[Interface]\n", "[Interface]\nPrivateKey = %s\n" % private, 1)
    path = tmp_path / "wg.conf"
    path.write_text(config)
    done = sh("ip", "netns", "exec", ns, "wg", "setconf", iface, str(path), check=False)
    assert done.returncode == 0, done.stderr + "\n" + config
    lines = sh("ip", "netns", "exec", ns, "wg", "show", iface, "dump").stdout.splitlines()
    port = int(lines[0].split("\t")[2])
    peers = {}
    for line in lines[1:]:
        public, psk, endpoint, allowed, dummy, dummy, dummy, keepalive = line.split("\t")
        peers[public] = {
            "endpoint": None if endpoint == "(none)" else endpoint,
            "allowed_ips": set() if allowed == "(none)" else set(allowed.split(",")),
            "persistent_keepalive": 0 if keepalive == "off" else int(keepalive),
        }
    return port, peers


def expected(data):
    """{public key: fields} of the [Peer] sections ``data`` describes (entries or a Peer resource)."""
    if data.get("kind") == "Peer":
        spec = data["spec"]
        endpoint = None
        if "endpoint" in spec:
            endpoint = "%s:%d" % (spec["endpoint"]["dnsOrIP"]["ip"], spec["endpoint"]["port"])
        return {
            spec["publicKey"]: {
                "endpoint": endpoint,
                "allowed_ips": set(spec["allowedIPs"]),
                "persistent_keepalive": spec.get("persistentKeepalive", 0),
            }
        }
    return dict(
        (
            p["public_key"],
            {
                "endpoint": p["endpoint"],
                "allowed_ips": set(p["allowed_ips"]),
                "persistent_keepalive": p["persistent_keepalive"],
            },
        )
        for p in data["peers"]
    )


CASES = [
    ("location", {"node": "a"}),
    ("location", {"node": "c"}),
    ("location", {"peer": "laptop"}),
    ("location", {"node": "a", "as_peer": True, "allowed_ips": ["172.16.50.0/24"]}),
    ("location", {"peer": "laptop", "as_peer": True}),
    ("full", {"node": "a"}),
    ("full", {"node": "b"}),
    ("full", {"peer": "laptop"}),
    ("full", {"node": "b", "as_peer": True}),
    ("cross", {"node": "b"}),
]


@pytest.mark.parametrize(
    "granularity,what",
    CASES,
    ids=["%s-%s" % (g, "-".join(str(v) for v in w.values())) for g, w in CASES],
)
def test_wg_setconf_takes_it_and_reads_back_equal(interface, tmp_path, granularity, what):
    ns, iface = interface
    nodes, peers = mesh()
    for peer in peers:
        if peer["name"] == "phone":
            peer["endpoint"] = "198.51.100.40:4000"  # wg would resolve the unit tests' DNS name
    out = showconf(nodes, peers, {"granularity": granularity}, **what)
    port, live = apply(ns, iface, out["config"], tmp_path)
    assert live == expected(out["data"]), out["config"]
    if "interface" in out["data"]:
        assert port == out["data"]["interface"]["listen_port"]


def test_playbook_output_file_goes_into_wg_setconf(interface, tmp_path):
    """playbooks/showconf.yml on the example inventory, -e dest: the file is what wg takes."""
    ns, iface = interface
    dest = tmp_path / "aws-1.conf"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    done = subprocess.run(
        [
            os.path.join(ROOT, ".venv", "bin", "ansible-playbook"),
            "-i",
            os.path.join(ROOT, "inventory", "example.yml"),
            os.path.join(ROOT, "playbooks", "showconf.yml"),
            "-e",
            "node=aws-1",
            "-e",
            "dest=%s" % dest,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        universal_newlines=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    port, live = apply(ns, iface, dest.read_text(), tmp_path)
    assert port == 51820 and len(live) == 3  # gcp's and home's leaders, the peer laptop
