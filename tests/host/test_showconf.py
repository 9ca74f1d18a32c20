"""Every wireguard-format output of kilo.mesh.showconf is taken by `wg setconf` on a real
interface (wireguard-go in a network namespace of this test's own) and reads back equal.

The node configuration carries no private key (it never leaves the host), so the test adds a
generated one after ``[Interface]``; the rest goes in as printed. Read back with
`wg show IFACE dump` and compared field by field with the returned ``data``.

Relayed meshes (locations behind NAT): showconf of a NAT'd leader and of its pair's relay, and an
agent's plan with a probe entry, through ``wg setconf``, read back with ``wg showconf``: the far
NAT'd location's ranges on the relay's section, the probe without allowed IPs.
"""

import os
import shutil
import subprocess
import sys
import time

import pytest

from backendtools import ROOT, sh
from ansible_collections.kilo.mesh.plugins.plugin_utils.showconf import showconf

# the unit tests' meshes (tests/unit mirrors plugins/), and flat_plans they import
for _sub in ("", "plugins/plugin_utils", "plugins/module_utils/engine"):
    sys.path.insert(0, os.path.join(ROOT, "tests", "unit", _sub))
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


# ---------------------------------------------------------------- a relayed mesh


def real_keys(nodes):
    """The nodes with real public keys (``wg genkey | wg pubkey``) in place of the unit tests'
    patterned ones, their discovered endpoints keyed alike; {name: key}."""
    keys = {}
    for node in nodes:
        private = sh("wg", "genkey").stdout.strip()
        keys[node["public_key"]] = subprocess.run(
            ["wg", "pubkey"], input=private, capture_output=True, text=True, check=True
        ).stdout.strip()
    for node in nodes:
        node["public_key"] = keys[node["public_key"]]
        if node.get("discovered_endpoints"):
            node["discovered_endpoints"] = dict(
                (keys[k], v) for k, v in node["discovered_endpoints"].items()
            )
    return dict((n["name"], n["public_key"]) for n in nodes)


def showconf_back(ns, iface, config, tmp_path):
    """``config`` through ``wg setconf`` (a generated private key added), then ``wg showconf``:
    {public key: {field: value}} of its [Peer] sections (the private key never kept)."""
    apply(ns, iface, config, tmp_path)
    text = sh("ip", "netns", "exec", ns, "wg", "showconf", iface).stdout
    sections, current = {}, None
    for line in text.splitlines():
        if line.startswith("["):
            current = {} if line == "[Peer]" else None
            continue
        if current is None or "=" not in line:
            continue
        field, value = (part.strip() for part in line.split("=", 1))
        current[field] = value
        if field == "PublicKey":
            sections[value] = current
    return sections


def allowed(section):
    return set(a.strip() for a in section.get("AllowedIPs", "").split(",") if a.strip())


def relayed_mesh():
    """test_topology_relays' timed mesh (r and s public, both relays; u and v behind NAT, r has
    seen their mappings), with real keys: (nodes, {name: key}, the pair's relay)."""
    from test_topology_relays import timed_mesh  # pylint: disable=import-error

    nodes = timed_mesh()[0]
    keys = real_keys(nodes)
    (pair,) = [
        p
        for p in showconf_paths(nodes)
        if p["path"] == "relayed" and {p["a"], p["b"]} == {"location:u", "location:v"}
    ]
    return nodes, keys, pair["via"].split(":", 1)[1]


def showconf_paths(nodes):
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans

    return build_plans(nodes, [], {})["paths"]


def test_showconf_of_a_relayed_mesh_is_valid_for_wg_setconf(interface, tmp_path):
    """showconf of a leader behind NAT and of its pair's relay, taken by ``wg setconf``: the far
    NAT'd location's ranges ride on the relay's [Peer] section, and the relay's sections of both
    NAT'd leaders carry their own ranges, with the mapping the relay learned as endpoint."""
    ns, iface = interface
    nodes, keys, relay = relayed_mesh()
    by = dict((n["name"], n) for n in nodes)
    out = showconf(nodes, [], {}, node="u")
    live = showconf_back(ns, iface, out["config"], tmp_path)
    assert set(live) == set(keys[n] for n in ("r", "s")), out["config"]  # no entry of v
    carried = allowed(live[keys[relay]])
    assert {by["v"]["pod_cidr"], by["v"]["internal_ip"].split("/")[0] + "/32"} <= carried
    other = "s" if relay == "r" else "r"
    assert by["v"]["pod_cidr"] not in allowed(live[keys[other]])
    assert live[keys[relay]]["Endpoint"] == by[relay]["endpoint"]
    assert live[keys[relay]]["PersistentKeepalive"] == "25"  # u keeps alive towards its relays
    print("\nu's [Peer] of its relay %s after wg setconf: AllowedIPs %s" % (relay, sorted(carried)))
    # the relay: its sections of u and v, each with its own ranges
    out = showconf(nodes, [], {}, node=relay)
    live = showconf_back(ns, iface, out["config"], tmp_path)
    assert set(live) == set(keys[n] for n in by if n != relay)
    assert by["u"]["pod_cidr"] not in allowed(live[keys["v"]])
    for name in ("u", "v"):
        assert by[name]["pod_cidr"] in allowed(live[keys[name]])
        if relay == "r":  # r learned both mappings
            assert live[keys[name]]["Endpoint"] == by["r"]["discovered_endpoints"][keys[name]]


def test_showconf_of_a_probing_leader_is_valid_for_wg_setconf(interface, tmp_path):
    """An agent's plan (the engine at a time): the NAT'd leaders publish a path state, so u has a
    probe entry for v beside the relay's. showconf's rendering of it (``_node_view``, as ``showconf``
    renders every node) goes into ``wg setconf``: the probe has an endpoint, the mapping, and no
    allowed IPs; v's ranges stay on the relay's section."""
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import Topology
    from ansible_collections.kilo.mesh.plugins.plugin_utils import showconf as sc

    ns, iface = interface
    nodes, keys, relay = relayed_mesh()
    by = dict((n["name"], n) for n in nodes)
    for name in ("u", "v"):
        by[name]["path_state"] = {"direct": {}}
    entries, port = sc._node_view(Topology(nodes, [], {}, 1000), "u", False, [])
    assert [e.get("probe") for e in entries if e["name"] == "location:v"] == [True]
    config = sc.wireguard_conf(entries, port)
    live = showconf_back(ns, iface, config, tmp_path)
    probe = live[keys["v"]]
    assert "AllowedIPs" not in probe and probe["Endpoint"] == "198.51.100.4:40004", config
    assert probe["PersistentKeepalive"] == "25"
    assert by["v"]["pod_cidr"] in allowed(live[keys[relay]])
