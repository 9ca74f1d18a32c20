"""Dual-stack meshes on real lab hosts (issue 23): WireGuard, routes and firewall of both IP
families, converged by the host code the converge module runs.

The lab: 4 locations x 2 hosts (the first of each public), locations 1-3 dual-stack on their LAN
and internet links, location 4 IPv6 alone (lab.py's ipv6_only). Every host carries a "pod" address
of each of its pod ranges on lo (the machine has no dummy module), IPv4 10.2<i>.<k>.1 and IPv6
fd10:<i>:<k>::1. The plans are the engine's (build_plans with two subnets), converged in each host
with /usr/bin/python3 (Debian's pyroute2) through converge.converge, as kilo.mesh.converge calls it.
Location 2 uses the iptables firewall (ip6tables for IPv6), the others nftables.

Tests run in file order on one lab: check mode on fresh hosts, converge, pod-to-pod reach in both
families, a re-run with nothing to change, the pod ranges masqueraded to outside destinations in
both families, then location 4 joins with every endpoint IPv6 (check mode first, which must
announce exactly what the real run then does).
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from sitetools import REPO, fresh_lab, recap, site

sys.path.insert(0, os.path.join(REPO, ".collections"))

from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans  # noqa: E402
from ansible_collections.kilo.mesh.plugins.module_utils.host import keys  # noqa: E402
from ansible_collections.kilo.mesh.plugins.module_utils.plan import split_preshared_keys  # noqa: E402

PREFIX = os.environ.get("KILO_TEST_PREFIX_DUAL_STACK", "kds")
PORT = 51820
OPTIONS = {"subnet": ["10.4.0.0/16", "fd04::/64"], "encapsulate": "never"}  # the lab has no IPIP
V6_ONLY = 4

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("wireguard-go"), reason="needs root and wireguard-go"
)

# One converge in a lab host: JSON request on stdin, the converge result on stdout.
DRIVER = r"""
import json, sys
sys.path.insert(0, %r)
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import converge
req = json.load(sys.stdin)
try:
    out = converge(req["plan"], req["settings"], req["check"], preshared_keys=req["psk"])
except KiloError as exc:
    out = {"error": str(exc)}
print(json.dumps(out))
""" % os.path.join(REPO, ".collections")


def sh(lab, host, cmd, timeout=60):
    return lab.run(host, ["sh", "-c", cmd], timeout=timeout)


def pods(lab, host):
    """The host's pod ranges and the pod address placed in each: [(range, address)]."""
    h = lab.hosts[host]
    i, k = h["location_index"], h["index"]
    out = [] if i == V6_ONLY else [("10.2%d.%s.0/24" % (i, k), "10.2%d.%s.1" % (i, k))]
    return out + [("fd10:%d:%s::/64" % (i, k), "fd10:%d:%s::1" % (i, k))]


def node(lab, host, ipv6_endpoint):
    h = lab.hosts[host]
    internal = ([h["lan_ip"] + "/24"] if h["lan_ip"] else []) + [h["lan_ip6"] + "/64"]
    endpoint = None
    if h["public"]:
        endpoint = (
            ("[%s]:%d" % (h["public_ip6"], PORT))
            if ipv6_endpoint or not h["public_ip"]
            else "%s:%d" % (h["public_ip"], PORT)
        )
    return {
        "name": host,
        "location": h["location"],
        "internal_ip": internal if len(internal) > 1 else internal[0],
        "pod_cidr": [r for r, a in pods(lab, host)],
        "endpoint": endpoint,
        "public_key": lab.public_keys[host],
    }


def plans(lab, hosts, ipv6_endpoint=False):
    result = build_plans([node(lab, h, ipv6_endpoint) for h in hosts], [], OPTIONS)
    return result["plans"]


def converge(lab, plans_by_host, check=False):
    """host -> converge result (each host at once, as Ansible's forks would)."""
    procs = {}
    for host, plan in plans_by_host.items():
        settings = {
            "firewall": "iptables" if lab.hosts[host]["location_index"] == 2 else "nftables"
        }
        req = {
            "plan": plan,
            "settings": settings,
            "check": check,
            "psk": split_preshared_keys(plan),
        }
        procs[host] = subprocess.Popen(
            lab.nsenter_argv(host, ["/usr/bin/python3", "-c", DRIVER]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs[host].stdin.write(json.dumps(req))
        procs[host].stdin.close()
    out = {}
    for host, proc in procs.items():
        stdout, stderr = proc.stdout.read(), proc.stderr.read()
        assert proc.wait(timeout=120) == 0, (host, stderr)
        out[host] = json.loads(stdout)
        assert "error" not in out[host], (host, out[host])
    return out


def state(lab, host):
    """What a converge may change: the interface, routes, rules, addresses, firewall."""
    return "\n".join(
        sh(lab, host, cmd).stdout
        for cmd in (
            "wg show kilo0 dump 2>/dev/null | cut -f1,3,4 | sort",
            "ip -4 addr show dev kilo0 2>/dev/null",
            "ip -6 addr show dev kilo0 scope global 2>/dev/null",
            "ip route show table all proto 107",
            "ip -6 route show table all proto 107",
            "ip rule; ip -6 rule",
            "nft list table inet kilo_mesh 2>/dev/null",
            "iptables-save 2>/dev/null | grep -i kilo; ip6tables-save 2>/dev/null | grep -i kilo",
        )
    )


def unreached(lab, hosts, families=(4, 6), pods_of=pods):
    """[(src, dst address)] that a pod of ``src`` cannot ping from its own pod address (``pods_of``
    is ``pods`` or another lab's function of that shape). WireGuard handshakes on the first
    packet, so each pair gets a few tries."""
    failed = []
    for src in sorted(hosts):
        mine = dict((":" in a and 6 or 4, a) for r, a in pods_of(lab, src))
        targets = [
            (a, mine[v])
            for dst in sorted(hosts)
            if dst != src
            for r, a in pods_of(lab, dst)
            for v in [6 if ":" in a else 4]
            if v in families and v in mine
        ]
        script = (
            " ".join(
                "(ping -%d -c 3 -i 0.3 -W 2 -q -I %s %s >/dev/null || echo %s) &"
                % (6 if ":" in a else 4, s, a, a)
                for a, s in targets
            )
            + " wait"
        )
        out = sh(lab, src, script, timeout=90).stdout.split()
        failed += [(src, a) for a in out]
    return failed


SERVER = r"""
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7107)); s.listen(8)
print("ready", flush=True)
while True:
    c, addr = s.accept()
    c.sendall(addr[0].encode()); c.close()
"""

CLIENT = r"""
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
c = socket.socket(family); c.settimeout(5); c.bind((sys.argv[2], 0)); c.connect((sys.argv[1], 7107))
print(c.recv(64).decode())
"""


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 4, 2, 1, ipv6_only=[V6_ONLY]) as lab:
        lab.locations = lab.load()["locations"]
        lab.public_keys = {}
        for host in lab.hosts:
            # what kilo.mesh.prepare sets by default: a leader forwards both families
            sh(lab, host, "sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1")
            private = keys.generate_private_key()
            sh(
                lab,
                host,
                "mkdir -p /var/lib/kilo && umask 077 && printf '%%s\\n' %s > /var/lib/kilo/key"
                % private,
            )
            lab.public_keys[host] = keys.public_key(private)
            for r, address in pods(lab, host):
                sh(lab, host, "ip addr add %s/%d dev lo" % (address, 128 if ":" in address else 32))
        yield lab


def dual_hosts(lab):
    return sorted(h for h in lab.hosts if lab.hosts[h]["location_index"] != V6_ONLY)


def test_check_mode_on_fresh_hosts_changes_nothing(lab):
    hosts = dual_hosts(lab)
    before = dict((h, state(lab, h)) for h in hosts)
    out = converge(lab, plans(lab, hosts), check=True)
    assert all(r["changed"] for r in out.values()), out
    for h in hosts:
        assert state(lab, h) == before[h], h
        assert sh(lab, h, "ip link show kilo0").returncode != 0
    leader = out[hosts[0]]["changes"]
    assert any(c.startswith("add address fd04::") for c in leader["netstate"]), leader
    assert any(c.startswith("add route fd10:") for c in leader["netstate"]), leader


def test_converge_both_families_then_every_pod_reaches_every_other(lab):
    hosts = dual_hosts(lab)
    out = converge(lab, plans(lab, hosts))
    assert all(r["changed"] for r in out.values())
    for h in hosts:
        if lab.hosts[h]["public"]:
            addrs = sh(lab, h, "ip addr show dev kilo0").stdout
            assert "inet 10.4." in addrs and "inet6 fd04::" in addrs, addrs
    assert unreached(lab, hosts) == []


def test_rerun_changes_nothing(lab):
    hosts = dual_hosts(lab)
    out = converge(lab, plans(lab, hosts))
    assert dict((h, r["changes"]) for h, r in out.items() if r["changed"]) == {}


@pytest.mark.parametrize("family", [4, 6])
def test_pod_ranges_are_masqueraded_to_the_outside_in_both_families(lab, family):
    """A pod's connection to an address outside the mesh (another leader's public address)
    leaves with the host's own address: nftables on location 1, ip(6)tables on location 2."""
    one, two = lab.locations[0] + "-1", lab.locations[1] + "-1"
    key = "public_ip6" if family == 6 else "public_ip"
    for client, server in ((one, two), (two, one)):
        address = lab.hosts[server][key]
        proc = subprocess.Popen(
            lab.nsenter_argv(server, ["/usr/bin/python3", "-c", SERVER, address]),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout.readline().strip() == "ready"
            pod = [a for r, a in pods(lab, client) if (":" in a) == (family == 6)][0]
            seen = lab.run(client, ["/usr/bin/python3", "-c", CLIENT, address, pod]).stdout.strip()
            assert seen == lab.hosts[client][key], (client, pod, seen)
        finally:
            proc.kill()  # our server, by its handle
            proc.wait()


def test_ipv6_only_location_joins_check_mode_first(lab):
    """Location 4 has IPv6 alone; every endpoint becomes IPv6. Check mode changes nothing and
    announces exactly the changes the real run then makes."""
    hosts = sorted(lab.hosts)
    want = plans(lab, hosts, ipv6_endpoint=True)
    before = dict((h, state(lab, h)) for h in hosts)
    check = converge(lab, want, check=True)
    for h in hosts:
        assert state(lab, h) == before[h], h
    assert all(check[h]["changed"] for h in hosts)
    real = converge(lab, want)
    assert dict((h, r["changes"]) for h, r in real.items()) == dict(
        (h, r["changes"]) for h, r in check.items()
    )
    again = converge(lab, want)
    assert dict((h, r["changes"]) for h, r in again.items() if r["changed"]) == {}


def test_every_pod_reaches_every_other_over_ipv6_endpoints(lab):
    """IPv6 between all eight hosts (the IPv6-only location's too), IPv4 between the dual-stack
    ones, now carried over IPv6 endpoints."""
    assert unreached(lab, sorted(lab.hosts)) == []
    for h in lab.hosts:
        endpoints = sh(lab, h, "wg show kilo0 endpoints 2>/dev/null").stdout
        assert "203.0.113." not in endpoints, (h, endpoints)


def site_inventory(lab):
    """The lab's inventory with the dual-stack inputs of a site.yml run: kilo_subnet of two, each
    host's pod ranges of both families, internal IPs of both families left to discovery, the
    leaders' endpoints forced IPv6, location 2 on the iptables firewall (test_dual_stack_connect's
    mesh too)."""
    with open(lab.inventory) as f:
        inventory = yaml.safe_load(f)
    mesh = inventory["all"]["children"]["kilo"]
    mesh["vars"]["kilo_subnet"] = OPTIONS["subnet"]
    # the pod addresses sit on lo here, where discovery would take 10.2<i>.<k>.1 for the internal IP
    mesh["vars"]["kilo_discovery_ignore_interfaces"] = ["mgmt0", "lo"]
    for group in mesh["children"].values():
        for host, hostvars in group["hosts"].items():
            h = lab.hosts[host]
            hostvars["kilo_pod_cidr"] = [r for r, a in pods(lab, host)]
            if h["public"]:
                hostvars["kilo_force_endpoint"] = "[%s]:%d" % (h["public_ip6"], PORT)
            if h["location_index"] == 2:
                hostvars["kilo_firewall"] = "iptables"
    return inventory


def test_site_yml_over_ssh_keeps_the_dual_stack_mesh(lab):
    """site.yml over real SSH with the inventory's dual-stack inputs (kilo_subnet of two, pod
    ranges of both families, internal IPs of both families discovered, endpoints forced IPv6)
    computes the plans the hosts already run: after its first run (which adds what only a run
    makes: sysctl file, registry) a re-run changes nothing and every pod still reaches every other."""
    inventory = site_inventory(lab)
    path = os.path.join(os.path.dirname(lab.inventory), "dual-stack.yml")
    with open(path, "w") as f:
        yaml.safe_dump(inventory, f)
    first = recap(site(path))
    assert set(first) == set(lab.hosts) and all(c["failed"] == 0 for c in first.values()), first
    with open(os.path.join(os.path.dirname(path), "kilo-registry.json")) as f:
        registry = json.load(f)["hosts"]
    discovered = dict((h, registry[h].get("internal_ip")) for h in lab.hosts)
    assert discovered == dict((h, node(lab, h, True)["internal_ip"]) for h in lab.hosts), discovered
    second = recap(site(path))
    assert all(c["changed"] == 0 for c in second.values()), second
    assert unreached(lab, sorted(lab.hosts)) == []
