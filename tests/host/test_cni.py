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

from lab.lab import Lab
from sitetools import recap, site

PREFIX = "kcn"
CNI_BIN = "/usr/lib/cni"
CONFLIST = "/etc/cni/net.d/10-kilo.conflist"
# containerd's own loopback network: not part of Kilo's conflist, run for every pod
LOOPBACK = {"cniVersion": "0.3.1", "name": "cni-loopback", "type": "loopback"}

pytestmark = pytest.mark.skipif(not os.access(os.path.join(CNI_BIN, "bridge"), os.X_OK),
                                reason="containernetworking-plugins not installed")


@pytest.fixture(scope="module")
def lab():
    lab = Lab(PREFIX)
    lab.down()
    lab.up(2, 2, 1)
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
    registry = lab.path("kilo-registry.json")
    if os.path.exists(registry):
        os.remove(registry)
    lab.cni_inventory, lab.pods = inventory, pods
    yield lab
    lab.down()
    if os.path.exists(registry):
        os.remove(registry)


def sh(lab, host, cmd, check=True):
    out = lab.run(host, ["sh", "-c", cmd], timeout=60)
    assert not check or out.returncode == 0, (host, cmd, out.stdout, out.stderr)
    return out


def invoke(lab, host, command, netns, ifname, config):
    """One plugin call, as a runtime makes it: CNI_* in the environment, config on stdin."""
    env = ["env", "CNI_COMMAND=%s" % command, "CNI_CONTAINERID=%s" % netns,
           "CNI_NETNS=/var/run/netns/%s" % netns, "CNI_IFNAME=%s" % ifname, "CNI_PATH=%s" % CNI_BIN]
    out = lab.run(host, env + [os.path.join(CNI_BIN, config["type"])], input=json.dumps(config), timeout=60)
    assert out.returncode == 0, (host, command, config["type"], out.stdout, out.stderr)
    return json.loads(out.stdout) if out.stdout.strip() else None


def chain(conflist, prev=None):
    """Each plugin's config as libcni hands it over: name and cniVersion of the list added,
    the previous plugin's result as prevResult."""
    for plugin in conflist["plugins"]:
        config = dict(plugin, name=conflist["name"], cniVersion=conflist["cniVersion"])
        if prev is not None:
            config["prevResult"] = prev
        yield config


def pod_add(lab, host, netns, conflist):
    sh(lab, host, "ip netns add %s" % netns)
    invoke(lab, host, "ADD", netns, "lo", LOOPBACK)
    result = None
    for config in chain(conflist):
        if result is not None:
            config["prevResult"] = result
        result = invoke(lab, host, "ADD", netns, "eth0", config)
    return result


def pod_del(lab, host, netns, conflist, result):
    for config in reversed(list(chain(conflist, result))):
        invoke(lab, host, "DEL", netns, "eth0", config)
    invoke(lab, host, "DEL", netns, "lo", LOOPBACK)
    sh(lab, host, "ip netns del %s" % netns)


def test_site_writes_conflist_and_pods_talk_across_locations(lab):
    out = site(lab.cni_inventory)
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in recap(out).values()), out[-3000:]
    conflists = {}
    for host, pod_cidr in lab.pods.items():
        text = sh(lab, host, "cat %s" % CONFLIST).stdout
        assert sh(lab, host, "stat -c %%a %s" % CONFLIST).stdout.strip() == "644"
        conflists[host] = json.loads(text)
        ipam = conflists[host]["plugins"][0]["ipam"]
        assert conflists[host]["name"] == "kilo" and ipam["ranges"] == [[{"subnet": pod_cidr}]], (host, text)

    # one pod on a non-leader of the first location, one on the leader (public host) of the second
    hosts = lab.hosts
    locs = sorted(set(h["location"] for h in hosts.values()))
    a = [n for n in sorted(hosts) if hosts[n]["location"] == locs[0] and not hosts[n]["public"]][0]
    b = [n for n in sorted(hosts) if hosts[n]["location"] == locs[1] and hosts[n]["public"]][0]
    pods = {}
    try:
        for host, netns in ((a, "pod-a"), (b, "pod-b")):
            result = pod_add(lab, host, netns, conflists[host])
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
            ping = sh(lab, host, "ip netns exec %s ping -c 3 -i 0.3 -W 2 %s" % (netns, dst), check=False)
            assert ping.returncode == 0, (host, dst, ping.stdout, ping.stderr)
    finally:
        for host, (netns, result) in pods.items():
            pod_del(lab, host, netns, conflists[host], result)
    for host in (a, b):
        assert "pod-" not in sh(lab, host, "ip netns list").stdout
        # host-local released the address
        assert sh(lab, host, "ls /var/lib/cni/networks/kilo | grep -c '^10\\.' || true").stdout.strip() == "0"


def test_rerun_leaves_conflist_and_absent_removes_it(lab):
    host = sorted(lab.hosts)[0]
    before = sh(lab, host, "stat -c %%i:%%Y %s" % CONFLIST).stdout
    site(lab.cni_inventory, "--limit", host, "--check", "--diff")
    site(lab.cni_inventory, "--limit", host)
    assert sh(lab, host, "stat -c %%i:%%Y %s" % CONFLIST).stdout == before, "an unchanged conflist was written"
    site(lab.cni_inventory, "--limit", host, "-e", "kilo_state=absent")
    assert sh(lab, host, "test -e %s" % CONFLIST, check=False).returncode != 0
