"""playbooks/connect.yml into a dual-stack mesh (issue 23) on a real lab: a laptop outside the mesh
holding an address of each IP family reaches a remote non-leader's pod address in both families
and is reached back in both.

Lab kdc (KILO_TEST_PREFIX_DUAL_STACK_CONNECT), 3 locations x 2 hosts, dual-stack LAN and internet
links: the first two locations are the mesh (site.yml with test_dual_stack's inputs: kilo_subnet of
two, pod ranges of both families with a pod address of each on lo, IPv6 endpoints, iptables on
location 2); the third location's first host is the laptop (group connect, 10.5.0.1 and fd05::1),
its second host is left out. Tests run in file order and share one lab.
"""

import json
import os
import re
import shutil

import pytest
import yaml

from sitetools import fresh_lab, playbook, recap, site
from test_dual_stack import pods, sh, site_inventory

PREFIX = os.environ.get("KILO_TEST_PREFIX_DUAL_STACK_CONNECT", "kdc")
LAPTOP_IPS = ["10.5.0.1", "fd05::1"]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("wireguard-go"), reason="needs root and wireguard-go"
)


def write_inventory(lab):
    """test_dual_stack's site inventory of the first two locations, and the laptop in group connect
    with an address of each family."""
    inventory = site_inventory(lab)
    kilo = inventory["all"]["children"]["kilo"]
    laptop_location = kilo["children"].pop(lab.locations[2])
    laptop = laptop_location["hosts"][lab.laptop]
    laptop.update(
        kilo_connect_name="laptop",
        kilo_connect_allowed_ip=["%s/%d" % (ip, 128 if ":" in ip else 32) for ip in LAPTOP_IPS],
    )
    inventory["all"]["children"]["connect"] = {"hosts": {lab.laptop: laptop}}
    path = lab.path("dual-stack-connect.yml")
    with open(path, "w") as f:
        yaml.safe_dump(inventory, f)
    return path


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 3, 2, 1, ipv6=True) as lab:
        lab.locations = lab.load()["locations"]
        lab.laptop = lab.locations[2] + "-1"
        lab.far = lab.locations[1] + "-2"  # a non-leader of the remote location
        lab.mesh = sorted(h for h in lab.hosts if lab.hosts[h]["location_index"] in (1, 2))
        for host in lab.mesh:
            # a leader forwards both families (as test_dual_stack's lab sets it)
            sh(lab, host, "sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1")
            for r, address in pods(lab, host):
                sh(lab, host, "ip addr add %s/%d dev lo" % (address, 128 if ":" in address else 32))
        lab.connect_inventory = write_inventory(lab)
        first = recap(site(lab.connect_inventory))
        assert all(c["failed"] == 0 for c in first.values()), first
        try:
            yield lab
        finally:
            path = lab.path("dual-stack-connect.yml")
            if os.path.exists(path):
                os.remove(path)


def ping(lab, host, ip):
    """Whether ``host`` gets an answer from ``ip`` (a few tries: WireGuard handshakes first)."""
    return (
        sh(
            lab,
            host,
            "for i in 1 2 3; do ping -c 3 -i 0.3 -W 2 -q %s >/dev/null && exit 0; done; exit 1"
            % ip,
            timeout=90,
        ).returncode
        == 0
    )


def test_connect_gives_the_laptop_both_families(lab):
    counts = recap(playbook(lab.connect_inventory, "connect.yml", timeout=900))
    assert all(c["failed"] == 0 for c in counts.values()), counts
    addrs = sh(lab, lab.laptop, "ip -o addr show dev kilo0 scope global").stdout
    assert "inet 10.5.0.1/32" in addrs and "inet6 fd05::1/128" in addrs, addrs
    # each family's routes to the mesh leave from the laptop's address of that family
    v4 = sh(lab, lab.laptop, "ip -4 route show proto 107").stdout
    v6 = sh(lab, lab.laptop, "ip -6 route show proto 107").stdout
    far4, far6 = [r for r, a in pods(lab, lab.far)]
    assert "%s dev kilo0" % far4 in v4 and "src 10.5.0.1" in v4, v4
    assert "%s dev kilo0" % far6 in v6 and "src fd05::1" in v6, v6
    # every leader allows both of its addresses
    for leader in (loc + "-1" for loc in lab.locations[:2]):
        allowed = sh(lab, leader, "wg show kilo0 allowed-ips").stdout
        assert "10.5.0.1/32 fd05::1/128" in allowed, (leader, allowed)


@pytest.mark.parametrize("family", [4, 6])
def test_the_laptop_reaches_a_remote_pod_and_is_reached_back(lab, family):
    pod = [a for r, a in pods(lab, lab.far) if (":" in a) == (family == 6)][0]
    laptop_ip = LAPTOP_IPS[family == 6]
    assert ping(lab, lab.laptop, pod), (lab.laptop, pod)
    # back from the pod's own address: the answer finds the laptop through the far location's leader
    assert (
        sh(
            lab,
            lab.far,
            "for i in 1 2 3; do ping -c 3 -i 0.3 -W 2 -q -I %s %s >/dev/null && exit 0; done;"
            " exit 1" % (pod, laptop_ip),
            timeout=90,
        ).returncode
        == 0
    ), (lab.far, laptop_ip)


def test_rerun_changes_nothing(lab):
    counts = recap(playbook(lab.connect_inventory, "connect.yml", timeout=900))
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts


def test_status_shows_both_addresses(lab, monkeypatch):
    """status.yml on the mesh: a leader's addresses are its WireGuard IP of each family (not the
    kernel's link-local one of wireguard-go's tun device), a member's none; each leader has one
    tunnel per remote location plus the laptop."""
    monkeypatch.setenv("ANSIBLE_CALLBACK_RESULT_FORMAT", "json")
    monkeypatch.setenv("ANSIBLE_CALLBACK_FORMAT_PRETTY", "false")
    out = playbook(lab.connect_inventory, "status.yml", "-v", timeout=600)
    results = dict(
        (h, json.loads(r))
        for h, r in re.findall(r"^ok: \[(\S+)\] => (\{.*\})$", out, re.M)
        if '"in_mesh"' in r
    )
    assert sorted(results) == lab.mesh, out[-3000:]
    for host, result in results.items():
        if lab.hosts[host]["public"]:
            families = sorted(a.split(":")[0] if ":" in a else "v4" for a in result["addresses"])
            assert families == ["fd04", "v4"] and result["addresses"][0].startswith("10.4.0."), (
                host,
                result,
            )
            assert len(result["peers"]) == 2, (host, result["peers"])
        else:
            assert result["addresses"] == [] and result["peers"] == [], (host, result)
