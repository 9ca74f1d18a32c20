"""Kilo's --cni on real lab hosts: site.yml writes each node's conflist, then Debian's CNI
plugins (bridge, host-local, portmap from the conflist; loopback as a runtime adds it) are run
on that file the way a container runtime runs them, for a "pod" network namespace made inside
one host of each location; the pods ping each other across the mesh, then DEL undoes it.

Real parts only: network-namespace hosts with sshd, wireguard-go, nftables, /usr/lib/cni/*.
"""

import ipaddress
import json
import os

import pytest
import yaml

from sitetools import fresh_lab, recap, site

PREFIX = "kcn"
CNI_BIN = "/usr/lib/cni"
CONFLIST = "/etc/cni/net.d/10-kilo.conflist"
POD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cni_pod.py")

pytestmark = pytest.mark.skipif(
    not os.access(os.path.join(CNI_BIN, "bridge"), os.X_OK),
    reason="containernetworking-plugins not installed",
)


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 2, 2, 1) as lab:
        yield from _with_pod_cidrs(lab)


def _with_pod_cidrs(lab):
    with open(lab.inventory) as f:
        inv = yaml.safe_load(f)
    pods = {}
    locations = inv["all"]["children"]["kilo"]["children"]
    for loc in sorted(locations):
        for host in sorted(locations[loc]["hosts"]):
            pods[host] = "10.244.%d.0/24" % (len(pods) + 1)
            locations[loc]["hosts"][host]["kilo_pod_cidr"] = pods[host]
    inventory = lab.path("inventory-cni.yml")
    with open(inventory, "w") as f:
        yaml.safe_dump(inv, f, default_flow_style=False)
    lab.cni_inventory, lab.pods = inventory, pods
    yield lab


def sh(lab, host, cmd, check=True):
    out = lab.run(host, ["sh", "-c", cmd], timeout=60)
    assert not check or out.returncode == 0, (host, cmd, out.stdout, out.stderr)
    return out


def pod(lab, host, command, netns):
    """cni_pod.py on the host: the conflist's plugins run as a runtime runs them (ADD or DEL)."""
    with open(POD_SCRIPT) as f:
        out = lab.run(host, ["python3", "-", command, netns, CONFLIST], input=f.read(), timeout=60)
    assert out.returncode == 0, (host, command, out.stdout, out.stderr)
    return json.loads(out.stdout) if command == "add" else None


def test_site_writes_conflist_and_pods_talk_across_locations(lab):
    out = site(lab.cni_inventory)
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in recap(out).values()), out[-3000:]
    conflists = {}
    for host, pod_cidr in lab.pods.items():
        text = sh(lab, host, "cat %s" % CONFLIST).stdout
        assert sh(lab, host, "stat -c %%a %s" % CONFLIST).stdout.strip() == "644"
        conflists[host] = json.loads(text)
        ipam = conflists[host]["plugins"][0]["ipam"]
        assert conflists[host]["name"] == "kilo" and ipam["ranges"] == [[{"subnet": pod_cidr}]], (
            host,
            text,
        )

    # one pod on a non-leader of the first location, one on the leader (public host) of the second
    hosts = lab.hosts
    locs = sorted(set(h["location"] for h in hosts.values()))
    a = [n for n in sorted(hosts) if hosts[n]["location"] == locs[0] and not hosts[n]["public"]][0]
    b = [n for n in sorted(hosts) if hosts[n]["location"] == locs[1] and hosts[n]["public"]][0]
    pods = {}
    try:
        for host, netns in ((a, "pod-a"), (b, "pod-b")):
            result = pod(lab, host, "add", netns)
            pods[host] = (netns, result)
            ip = ipaddress.ip_interface(result["ips"][0]["address"])
            assert ip in ipaddress.ip_network(lab.pods[host]), result
            assert sh(lab, host, "ip -br link show kube-bridge").stdout.strip()
        ip_a = pods[a][1]["ips"][0]["address"].split("/")[0]
        ip_b = pods[b][1]["ips"][0]["address"].split("/")[0]
        # the mesh (routes of protocol 107) carries each pod CIDR to the other location
        assert sh(lab, a, "ip route show %s proto 107" % lab.pods[b]).stdout.strip()
        assert sh(lab, b, "ip route show %s proto 107 dev kilo0" % lab.pods[a]).stdout.strip()
        for host, netns, dst in ((a, "pod-a", ip_b), (b, "pod-b", ip_a)):
            ping = sh(
                lab, host, "ip netns exec %s ping -c 3 -i 0.3 -W 2 %s" % (netns, dst), check=False
            )
            assert ping.returncode == 0, (host, dst, ping.stdout, ping.stderr)
    finally:
        for host, (netns, _result) in pods.items():
            pod(lab, host, "del", netns)
    for host in (a, b):
        assert "pod-" not in sh(lab, host, "ip netns list").stdout
        # host-local released the address
        assert (
            sh(lab, host, "ls /var/lib/cni/networks/kilo | grep -c '^10\\.' || true").stdout.strip()
            == "0"
        )


def test_rerun_leaves_conflist_and_absent_removes_it(lab):
    host = sorted(lab.hosts)[0]
    before = sh(lab, host, "stat -c %%i:%%Y %s" % CONFLIST).stdout
    site(lab.cni_inventory, "--limit", host, "--check", "--diff")
    site(lab.cni_inventory, "--limit", host)
    assert sh(lab, host, "stat -c %%i:%%Y %s" % CONFLIST).stdout == before, (
        "an unchanged conflist was written"
    )
    site(lab.cni_inventory, "--limit", host, "-e", "kilo_state=absent")
    assert sh(lab, host, "test -e %s" % CONFLIST, check=False).returncode != 0
