"""site.yml from fresh hosts into a dual-stack mesh (issue 23): test_dual_stack.py converges the
engine's plans itself and runs site.yml only on hosts that already carry them; here site.yml is
the first thing the hosts see.

Lab kdf (KILO_TEST_PREFIX_DUAL_STACK_SITE), 2 locations x 2 hosts, both families on every LAN and
internet link, a pod address of each of the host's pod ranges on lo and nothing else set (no
key, no forwarding: site.yml's prepare and key steps do that). The inventory is test_dual_stack's
site_inventory (kilo_subnet of two, pod ranges of both families, internal IPs of both families
discovered, IPv6 endpoints, iptables on location 2). Tests run in file order and share the lab.
"""

import ipaddress
import json
import os
import shutil

import pytest
import yaml

from sitetools import fresh_lab, recap, site
from test_cni import CONFLIST, pod
from test_dual_stack import pods, sh, site_inventory, state, unreached

PREFIX = os.environ.get("KILO_TEST_PREFIX_DUAL_STACK_SITE", "kdf")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("wireguard-go"), reason="needs root and wireguard-go"
)


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 2, 2, 1, ipv6=True) as lab:
        lab.locations = lab.load()["locations"]
        for host in lab.hosts:
            for r, address in pods(lab, host):
                sh(lab, host, "ip addr add %s/%d dev lo" % (address, 128 if ":" in address else 32))
        lab.site_inventory = lab.path("dual-stack-site.yml")
        with open(lab.site_inventory, "w") as f:
            yaml.safe_dump(site_inventory(lab), f)
        try:
            yield lab
        finally:
            os.remove(lab.site_inventory)


def snapshot(lab, host):
    """test_dual_stack's state of a host, and what only site.yml's prepare and key steps touch."""
    return (
        state(lab, host)
        + sh(
            lab,
            host,
            "sysctl net.ipv4.ip_forward net.ipv6.conf.all.forwarding;"
            " ls -la /var/lib/kilo /etc/sysctl.d 2>&1",
        ).stdout
    )


def test_check_mode_on_fresh_hosts_reports_changes_and_changes_nothing(lab):
    before = dict((h, snapshot(lab, h)) for h in lab.hosts)
    out = site(lab.site_inventory, "--check", "--diff")
    counts = recap(out)
    assert set(counts) == set(lab.hosts), out[-4000:]
    assert all(
        c["failed"] == 0 and c["unreachable"] == 0 and c["changed"] > 0 for c in counts.values()
    ), counts
    # the diff names both families of the WireGuard subnets (a leader's address of each)
    assert "10.4.0." in out and "fd04::" in out, out[-4000:]
    for h in lab.hosts:
        assert snapshot(lab, h) == before[h], h
        assert sh(lab, h, "ip link show kilo0").returncode != 0, h


def test_site_brings_every_pod_to_every_other_in_both_families(lab):
    counts = recap(site(lab.site_inventory))
    assert set(counts) == set(lab.hosts), counts
    assert all(c["failed"] == 0 and c["changed"] > 0 for c in counts.values()), counts
    for h in lab.hosts:
        if lab.hosts[h]["public"]:
            addrs = sh(lab, h, "ip addr show dev kilo0").stdout
            assert "inet 10.4." in addrs and "inet6 fd04::" in addrs, (h, addrs)
    # 4 hosts: every pod pings the 2 of the other location and the 1 of its own, in each family
    assert unreached(lab, sorted(lab.hosts)) == []


def test_rerun_changes_nothing(lab):
    counts = recap(site(lab.site_inventory))
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts
    assert unreached(lab, sorted(lab.hosts)) == []


def test_cni_pods_get_an_address_of_each_family_and_reach_each_other(lab):
    """Kilo's --cni in a dual-stack mesh (beyond Kilo): each node's conflist gives host-local one
    range set per family, so a pod made by Debian's CNI plugins from it (as a runtime runs them)
    gets an address of each, and a pod on a non-leader of one location reaches a pod on the other
    location's leader in both families, both ways."""
    first, second = sorted(set(h["location"] for h in lab.hosts.values()))
    a = [
        n
        for n in sorted(lab.hosts)
        if lab.hosts[n]["location"] == first and not lab.hosts[n]["public"]
    ][0]
    b = [
        n
        for n in sorted(lab.hosts)
        if lab.hosts[n]["location"] == second and lab.hosts[n]["public"]
    ][0]
    made = {}
    try:
        for host, netns in ((a, "pod-a"), (b, "pod-b")):
            ranges = [r for r, _address in pods(lab, host)]
            conflist = json.loads(sh(lab, host, "cat %s" % CONFLIST).stdout)
            assert conflist["plugins"][0]["ipam"]["ranges"] == [[{"subnet": r}] for r in ranges], (
                host,
                conflist,
            )
            result = pod(lab, host, "add", netns)
            made[host] = netns
            addresses = [ipaddress.ip_interface(ip["address"]) for ip in result["ips"]]
            assert [x.network.version for x in addresses] == [4, 6], result
            assert all(x.ip in ipaddress.ip_network(r) for x, r in zip(addresses, ranges)), (
                result,
                ranges,
            )
            made[host] = (netns, [str(x.ip) for x in addresses])
        for src, dst in ((a, b), (b, a)):
            netns = made[src][0]
            for address in made[dst][1]:
                # a few tries: a new IPv6 address is usable once its duplicate detection ends
                done = sh(
                    lab,
                    src,
                    "for i in 1 2 3 4 5; do ip netns exec %s ping -c 2 -i 0.3 -W 2 -q %s && exit 0;"
                    " sleep 1; done; exit 1" % (netns, address),
                )
                assert done.returncode == 0, (src, dst, address, done.stdout, done.stderr)
    finally:
        for host, entry in made.items():
            pod(lab, host, "del", entry[0] if isinstance(entry, tuple) else entry)
