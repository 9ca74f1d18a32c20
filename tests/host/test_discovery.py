"""IP discovery and the kilo.mesh.key module, in a network namespace shaped like a lab host.

Host namespace: mgmt0 198.18.0.5/15 holding the default route (what a lab management NIC looks
like: Kilo's rules count 198.18/15 as public), eth1 10.1.0.5/24 (private), eth2 203.0.113.5/24
(public). The other ends of the veths sit in a sink namespace; no traffic is sent.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".collections")
sys.path.insert(0, COLLECTIONS)

from ansible_collections.kilo.mesh.plugins.module_utils.host import discovery  # noqa: E402
from ansible_collections.kilo.mesh.plugins.module_utils.common import is_public  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

PROBE = (
    r"""
import json, sys
sys.path.insert(0, %r)
from ansible_collections.kilo.mesh.plugins.module_utils.host import discovery as d
args = json.loads(sys.argv[1])
host = d.read_host()
out = d.choose_ips(host, hostname=args.get("hostname"), ignore_interfaces=args.get("ignore", []))
out["mtu"] = d.default_route_mtu(host)
out["wg_mtu"] = d.wireguard_mtu(0, host)
print(json.dumps(out))
"""
    % COLLECTIONS
)


def sh(*args, **kw):
    kw.setdefault("check", True)
    return subprocess.run(
        list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, **kw
    )


@pytest.fixture(scope="module")
def ns():
    tag = "kw%dd" % (os.getpid() % 100000)
    host, sink = tag + "h", tag + "s"
    try:
        sh("ip", "netns", "add", host)
        sh("ip", "netns", "add", sink)
        for name, cidr in (
            ("mgmt0", "198.18.0.5/15"),
            ("eth1", "10.1.0.5/24"),
            ("eth2", "203.0.113.5/24"),
        ):
            sh(
                "ip",
                "link",
                "add",
                name,
                "netns",
                host,
                "type",
                "veth",
                "peer",
                "name",
                "s" + name,
                "netns",
                sink,
            )
            sh("ip", "-n", host, "addr", "add", cidr, "dev", name)
            sh("ip", "-n", host, "link", "set", name, "up")
            sh("ip", "-n", sink, "link", "set", "s" + name, "up")
        sh("ip", "-n", host, "link", "set", "lo", "up")
        sh("ip", "-n", host, "link", "set", "mgmt0", "mtu", "1500")
        sh("ip", "-n", host, "route", "add", "default", "via", "198.18.0.1", "dev", "mgmt0")
        yield host
    finally:
        sh("ip", "netns", "del", host, check=False)
        sh("ip", "netns", "del", sink, check=False)


def probe(ns, python="/usr/bin/python3", **args):
    r = sh("ip", "netns", "exec", ns, python, "-c", PROBE, json.dumps(args))
    return json.loads(r.stdout)


@pytest.mark.parametrize(
    "python", ["/usr/bin/python3", os.path.join(ROOT, ".venv", "bin", "python")]
)
def test_management_nic_wins_unless_ignored(ns, python):
    if not os.path.exists(python):
        pytest.skip("no " + python)
    out = probe(ns, python)
    # Kilo's order: the default-route interface's public address first
    assert out["external_ip"] == "198.18.0.5"
    assert out["candidates"]["external"] == ["198.18.0.5/15", "203.0.113.5/24"]
    assert out["internal_ip"] == "10.1.0.5/24"
    out = probe(ns, python, ignore=["mgmt0"])
    assert out["external_ip"] == "203.0.113.5"
    assert out["candidates"] == {"internal": ["10.1.0.5/24"], "external": ["203.0.113.5/24"]}
    assert out["mtu"] == 1500 and out["wg_mtu"] == 1420


def test_hostname_address_is_preferred(ns):
    # an IP literal as "hostname" stands for what the name resolves to
    sh("ip", "-n", ns, "addr", "add", "10.1.0.9/24", "dev", "eth1")
    try:
        assert probe(ns)["internal_ip"] == "10.1.0.5/24"
        assert probe(ns, hostname="10.1.0.9")["internal_ip"] == "10.1.0.9/24"
        # a resolved address that is not on this host does not count
        assert probe(ns, hostname="10.1.0.77")["internal_ip"] == "10.1.0.5/24"
    finally:
        sh("ip", "-n", ns, "addr", "del", "10.1.0.9/24", "dev", "eth1")


def test_no_public_address_falls_back_to_private(ns):
    out = probe(ns, ignore=["mgmt0", "eth2"])
    assert out["external_ip"] == "10.1.0.5" and out["candidates"]["external"] == []


def test_pure_rules():
    host = {
        "links": {
            1: {"name": "lo", "mtu": 65536},
            2: {"name": "eth0", "mtu": 9000},
            3: {"name": "kilo0", "mtu": 1420},
        },
        "addrs": [
            {"index": 1, "ifname": "lo", "cidr": "127.0.0.1/8"},
            {"index": 2, "ifname": "eth0", "cidr": "fe80::1/64"},
            {"index": 2, "ifname": "eth0", "cidr": "172.20.0.4/16"},
            {"index": 2, "ifname": "eth0", "cidr": "2001:db8::4/64"},
            {"index": 2, "ifname": "eth0", "cidr": "100.64.0.4/10"},
            {"index": 3, "ifname": "kilo0", "cidr": "10.4.0.1/16"},
        ],
        "default_index": 2,
    }
    out = discovery.choose_ips(host, ignore_interfaces=["kilo0"])
    assert out == {
        "internal_ip": "172.20.0.4/16",
        "external_ip": "100.64.0.4",
        "candidates": {
            "internal": ["172.20.0.4/16"],
            "external": ["100.64.0.4/10", "2001:db8::4/64"],
        },
    }
    assert discovery.wireguard_mtu(0, host) == 8920
    assert discovery.wireguard_mtu(1300, host) == 1300
    assert discovery.wireguard_mtu(0, dict(host, default_index=None)) == 1420
    assert not is_public("172.31.0.1") and is_public("172.32.0.1")
    assert not is_public("fd00::1") and is_public("fd01::1")


def _ansible(ns, args, check=False):
    """Ad-hoc run of the module under the host python; cwd elsewhere so no ansible.cfg applies."""
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_STDOUT_CALLBACK="default",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        ANSIBLE_NOCOLOR="1",
    )
    cmd = [
        "ip",
        "netns",
        "exec",
        ns,
        os.path.join(ROOT, ".venv", "bin", "ansible"),
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        "ansible_python_interpreter=/usr/bin/python3",
        "-m",
        "kilo.mesh.key",
        "-a",
        args,
    ]
    if check:
        cmd.append("--check")
    r = subprocess.run(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        env=env,
        cwd="/",
    )
    head, sep, body = r.stdout.partition("=> ")
    assert sep, r.stdout + r.stderr
    out = json.loads(body)
    out["_status"] = head.split("|")[-1].strip()
    return out


def test_key_module_end_to_end(ns):
    if not os.path.exists(os.path.join(ROOT, ".venv", "bin", "ansible")):
        pytest.skip("no ansible in .venv")
    tmp = tempfile.mkdtemp(prefix="kw-key-")
    try:
        path = os.path.join(tmp, "kilo", "key")
        res = _ansible(ns, "key_path=%s ignore_interfaces=mgmt0" % path, check=True)
        assert res["changed"] is True and res["pending"] is True and not os.path.exists(path)
        res = _ansible(ns, "key_path=%s ignore_interfaces=mgmt0" % path)
        assert res["changed"] is True and res["public_key"]
        with open(path) as f:
            priv = f.read().strip()
        assert priv not in json.dumps(res)
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        assert res["internal_ip"] == "10.1.0.5/24" and res["external_ip"] == "203.0.113.5"
        assert res["mtu"] == 1500 and res["discovered_endpoints"] == {}
        again = _ansible(ns, "key_path=%s ignore_interfaces=mgmt0" % path)
        assert again["changed"] is False and again["public_key"] == res["public_key"]
        with open(path, "w") as f:
            f.write("garbage\n")
        bad = _ansible(ns, "key_path=%s" % path)
        assert (
            bad["_status"].startswith("FAILED")
            and path in bad["msg"]
            and "garbage" not in bad["msg"]
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


COMPARE = (
    r"""
import json, sys
sys.path.insert(0, %r)
from ansible_collections.kilo.mesh.plugins.module_utils.host import discovery as d
from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink import links as n
from pyroute2 import IPRoute
names = [m.get_attr("IFLA_IFNAME") for m in n.NetlinkReader().get_links()]
with IPRoute() as ipr:
    theirs = dict((name, n.link(name, ipr)) for name in names)
print(json.dumps({"mine": d.read_host(), "theirs": d.read_host_pyroute2(),
                  "links": dict((name, n.link(name)) for name in names), "their_links": theirs}))
"""
    % COLLECTIONS
)


@pytest.mark.parametrize(
    "python", ["/usr/bin/python3", os.path.join(ROOT, ".venv", "bin", "python")]
)
def test_the_standard_library_read_matches_pyroute2(ns, python):
    """read_host reads links, addresses and the default route with the standard library
    (netlink.links, netlink.routes); pyroute2 (0.7.2 and the venv's 0.9) reads the same, with
    IPv6, a point-to-point address, a link that is down, and a multipath default route (the
    machine has no dummy module: the extra link is a veth pair)."""
    if not os.path.exists(python):
        pytest.skip("no " + python)
    sh("ip", "-n", ns, "link", "add", "dum0", "mtu", "1380", "type", "veth", "peer", "name", "dum1")
    sh("ip", "-n", ns, "addr", "add", "10.9.0.1", "peer", "10.9.0.2/32", "dev", "dum0")
    sh("ip", "-n", ns, "addr", "add", "fd00:5::5/64", "dev", "eth2", "nodad")
    try:
        out = json.loads(sh("ip", "netns", "exec", ns, python, "-c", COMPARE).stdout)
        assert out["mine"] == out["theirs"] and out["links"] == out["their_links"]
        cidrs = dict((a["cidr"], a["ifname"]) for a in out["mine"]["addrs"])
        assert cidrs["10.9.0.1/32"] == "dum0" and cidrs["fd00:5::5/64"] == "eth2"
        assert out["links"]["dum0"]["kind"] == "veth" and out["links"]["dum0"]["up"] is False
        assert out["links"]["dum0"]["mtu"] == 1380
        assert out["links"]["eth1"]["kind"] == "veth" and out["links"]["eth1"]["up"] is True
        assert out["mine"]["default_index"] == out["links"]["mgmt0"]["index"]
        sh(
            "ip",
            "-n",
            ns,
            "route",
            "replace",
            "default",
            "nexthop",
            "via",
            "10.1.0.1",
            "dev",
            "eth1",
            "nexthop",
            "via",
            "203.0.113.1",
            "dev",
            "eth2",
        )
        out = json.loads(sh("ip", "netns", "exec", ns, python, "-c", COMPARE).stdout)
        assert out["mine"] == out["theirs"]
        assert out["mine"]["default_index"] == out["links"]["eth1"]["index"]
    finally:
        sh(
            "ip",
            "-n",
            ns,
            "route",
            "replace",
            "default",
            "via",
            "198.18.0.1",
            "dev",
            "mgmt0",
            check=False,
        )
        sh("ip", "-n", ns, "addr", "del", "fd00:5::5/64", "dev", "eth2", check=False)
        sh("ip", "-n", ns, "link", "del", "dum0", check=False)
