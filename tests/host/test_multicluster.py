"""playbooks/multicluster.yml on a real lab: two meshes become peers of each other, each with the
other's service CIDR, so a "service" address of one is reachable from every host of the other.

One lab of 4 locations x 2 hosts, split into two meshes by two inventories in two directories
(each with its own registry): mesh A = aws, gcp (kilo_subnet 10.4.0.0/16, services 10.96.0.0/16),
mesh B = azure, home (10.6.0.0/16, services 10.97.0.0/16). The service address sits on `lo` of
every host of its mesh, as kube-proxy answers a ClusterIP on every node; `lo` is left out of IP
discovery so it never becomes a node's internal IP. Tests run in file order on one lab.
"""

import copy
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from lab.lab import Lab
from sitetools import REPO, playbook, recap, site

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the lab)")

PREFIX = "kxm"
MESHES = {
    "a": {
        "locations": ["aws", "gcp"],
        "subnet": "10.4.0.0/16",
        "services": "10.96.0.0/16",
        "service": "10.96.0.10",
    },
    "b": {
        "locations": ["azure", "home"],
        "subnet": "10.6.0.0/16",
        "services": "10.97.0.0/16",
        "service": "10.97.0.10",
    },
}
OTHER = {"a": "b", "b": "a"}


class Meshes:
    def __init__(self, lab):
        self.lab = lab
        self.dirs = dict((m, os.path.join(lab.state_dir, "mesh-%s" % m)) for m in MESHES)
        self.inventory = dict((m, os.path.join(d, "inventory.yml")) for m, d in self.dirs.items())
        self.registry = dict(
            (m, os.path.join(d, "kilo-registry.json")) for m, d in self.dirs.items()
        )
        self.hosts = dict(
            (m, sorted(h for h, v in lab.hosts.items() if v["location"] in MESHES[m]["locations"]))
            for m in MESHES
        )
        # the lab's first host of each location is its public one, so it leads the location
        self.leaders = dict(
            (m, sorted(h for h in self.hosts[m] if lab.hosts[h]["public"])) for m in MESHES
        )

    def write_inventories(self):
        with open(self.lab.inventory) as f:
            whole = yaml.safe_load(f)
        for m, spec in MESHES.items():
            inv = copy.deepcopy(whole)
            kilo = inv["all"]["children"]["kilo"]
            kilo["children"] = dict((loc, kilo["children"][loc]) for loc in spec["locations"])
            kilo["vars"].update(
                kilo_subnet=spec["subnet"],
                kilo_service_cidrs=[spec["services"]],
                kilo_discovery_ignore_interfaces=["mgmt0", "lo"],
            )
            os.makedirs(self.dirs[m], exist_ok=True)
            with open(self.inventory[m], "w") as f:
                yaml.safe_dump(inv, f)
            if os.path.exists(self.registry[m]):
                os.remove(self.registry[m])

    def registry_peers(self, m):
        with open(self.registry[m]) as f:
            return json.load(f).get("peers", {})

    def key(self, host):
        return self.lab.run(host, ["wg", "show", "kilo0", "public-key"], check=True).stdout.strip()


def multicluster(meshes, *extra, **kw):
    return playbook(
        meshes.inventory["a"],
        "multicluster.yml",
        "-e",
        "other_inventory=%s" % meshes.inventory["b"],
        *extra,
        timeout=1200,
        **kw,
    )


def other_recap(output):
    """host -> counts of the other mesh's run, from the lines the playbook prints of its recap."""
    out = {}
    for host, counts in re.findall(r"^\s*-\s*'?(\S+)\s+:\s+(ok=[^'\n]*)", output, re.M):
        out[host] = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", counts))
    return out


def wg_keys(lab, host):
    out = lab.run(host, ["wg", "show", "kilo0", "dump"], check=True).stdout.splitlines()
    return dict((line.split("\t")[0], line.split("\t")[3]) for line in out[1:])


def reaches(lab, host, address, tries=6):
    """A ping from ``host`` to ``address`` is answered (WireGuard handshakes on the first packet)."""
    for dummy in range(tries):
        if (
            lab.run(
                host, ["ping", "-c", "2", "-i", "0.3", "-W", "2", "-q", address], timeout=30
            ).returncode
            == 0
        ):
            return True
    return False


def unreachable(lab, host, address):
    return (
        lab.run(
            host, ["ping", "-c", "2", "-i", "0.3", "-W", "1", "-q", address], timeout=30
        ).returncode
        != 0
    )


@pytest.fixture(scope="module")
def meshes():
    lab = Lab(PREFIX)
    lab.down()
    try:
        lab.up(4, 2, 1)
        meshes = Meshes(lab)
        meshes.write_inventories()
        for m, spec in MESHES.items():
            for host in meshes.hosts[m]:
                lab.run(
                    host, ["ip", "addr", "add", spec["service"] + "/32", "dev", "lo"], check=True
                )
            out = recap(site(meshes.inventory[m]))
            assert set(out) == set(meshes.hosts[m]) and all(
                c["failed"] == 0 for c in out.values()
            ), out
        yield meshes
    finally:
        for m in MESHES:  # the inventories and registries, so down() removes the state dir
            shutil.rmtree(os.path.join(lab.state_dir, "mesh-%s" % m), ignore_errors=True)
        lab.down()


def test_each_mesh_alone_and_the_other_services_unreachable(meshes):
    lab = meshes.lab
    for m in MESHES:
        # two locations, one tunnel each way between their leaders
        for leader in meshes.leaders[m]:
            assert set(wg_keys(lab, leader)) == set(
                meshes.key(h) for h in meshes.leaders[m] if h != leader
            )
        for host in meshes.hosts[m]:
            assert reaches(lab, host, lab.hosts[meshes.hosts[m][-1]]["lan_ip"]), (
                host
            )  # its own mesh works
            assert unreachable(lab, host, MESHES[OTHER[m]]["service"]), host


def test_check_mode_reports_and_records_nothing(meshes):
    before = dict((m, open(meshes.registry[m]).read()) for m in MESHES)
    out = multicluster(meshes, "--check")
    assert recap(out)["localhost"]["changed"] > 0, out[-3000:]
    assert "check mode: the peers above are not written" in " ".join(out.split())
    for m in MESHES:
        assert open(meshes.registry[m]).read() == before[m]
        for leader in meshes.leaders[m]:
            assert len(wg_keys(meshes.lab, leader)) == 1


def test_overlapping_networks_are_refused_before_either_registry_changes(meshes):
    """B's service CIDR inside A's kilo_subnet: only A's side could see it (B's own networks do
    not overlap A's peers), yet B's run, which comes first, refuses it and records nothing."""
    before = dict((m, open(meshes.registry[m]).read()) for m in MESHES)
    out = multicluster(meshes, "-e", "other_service_cidrs=10.4.128.0/24", expect_rc=2)
    said = " ".join(out.split())  # the message as one line, however the callbacks wrapped it
    # the service CIDRs ride on the first leader's peer alone (WireGuard: one peer per allowed IP)
    assert (
        "leader azure-1 of mesh %s: 10.4.128.0/24 overlaps 10.4.0.0/16 of mesh %s"
        % (meshes.inventory["b"], meshes.inventory["a"])
    ) in said, out[-4000:]
    for m in MESHES:
        assert open(meshes.registry[m]).read() == before[m]


def test_meshes_become_peers_and_services_flow_both_ways(meshes):
    lab = meshes.lab
    out = multicluster(meshes)
    assert recap(out)["localhost"]["changed"] > 0
    for m in MESHES:
        other = OTHER[m]
        peers = meshes.registry_peers(m)
        # every leader of the other mesh, named as kgctl names it (the node)
        assert sorted(peers) == meshes.leaders[other], peers
        assert dict((n, p["public_key"]) for n, p in peers.items()) == dict(
            (h, meshes.key(h)) for h in meshes.leaders[other]
        )
        for name, peer in peers.items():
            assert peer["endpoint"] == "%s:51820" % lab.hosts[name]["public_ip"]
        # the other mesh's service CIDR on one peer alone (WireGuard keeps an allowed IP on one peer)
        carriers = [n for n, p in peers.items() if MESHES[other]["services"] in p["allowed_ips"]]
        assert len(carriers) == 1, peers
        # on every leader: its own mesh's other leader and both leaders of the other mesh
        for leader in meshes.leaders[m]:
            keys = set(
                meshes.key(h) for h in meshes.leaders[m] + meshes.leaders[other] if h != leader
            )
            live = wg_keys(lab, leader)
            assert set(live) == keys, live
            assert MESHES[other]["services"] in live[meshes.key(carriers[0])]
    for m in MESHES:
        for host in meshes.hosts[OTHER[m]]:
            assert reaches(lab, host, MESHES[m]["service"]), (host, MESHES[m]["service"])


def test_second_run_changes_nothing(meshes):
    out = multicluster(meshes)
    counts = recap(out)
    assert set(counts) == set(meshes.hosts["a"]) | {"localhost"}, counts
    assert all(c["changed"] == 0 for c in counts.values()), counts
    others = other_recap(out)
    assert set(others) == set(meshes.hosts["b"]) | {"localhost"}, out[-3000:]
    assert all(c["changed"] == 0 for c in others.values()), others


def registry_peer(meshes, m, *args):
    """kilo.mesh.peer store=registry on mesh ``m``'s registry (key=value arguments)."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
    )
    proc = subprocess.run(
        [
            os.path.join(REPO, ".venv", "bin", "ansible"),
            "localhost",
            "-m",
            "kilo.mesh.peer",
            "-a",
            " ".join(("store=registry", "registry=%s" % meshes.registry[m]) + args),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout


def test_an_old_leaders_peer_goes_and_a_peer_of_its_own_stays(meshes):
    """B's registry holds a peer with a key of mesh A under another name (a leader A no longer
    has) and a peer added by hand; the run removes the first only."""
    with open(meshes.registry["a"]) as f:
        member_key = json.load(f)["hosts"]["aws-2"]["public_key"]
    laptop = subprocess.run(
        ["sh", "-c", "wg genkey | wg pubkey"], stdout=subprocess.PIPE, text=True, check=True
    ).stdout.strip()
    registry_peer(
        meshes, "b", "name=old-aws", "public_key=%s" % member_key, "allowed_ips=10.4.9.9/32"
    )
    registry_peer(meshes, "b", "name=laptop", "public_key=%s" % laptop, "allowed_ips=10.5.0.1/32")
    out = multicluster(meshes, "-e", "converge=false")
    assert "changed: [localhost] => (item=old-aws)" in out
    assert sorted(meshes.registry_peers("b")) == meshes.leaders["a"] + ["laptop"]
    registry_peer(meshes, "b", "name=laptop", "state=absent")


def test_state_absent_takes_the_peers_out_of_both_meshes(meshes):
    lab = meshes.lab
    out = multicluster(meshes, "-e", "state=absent")
    assert recap(out)["localhost"]["changed"] > 0
    for m in MESHES:
        assert meshes.registry_peers(m) == {}
        for leader in meshes.leaders[m]:
            assert set(wg_keys(lab, leader)) == set(
                meshes.key(h) for h in meshes.leaders[m] if h != leader
            )
        for host in meshes.hosts[m]:
            assert unreachable(lab, host, MESHES[OTHER[m]]["service"]), host
    # and once more: nothing left to do
    counts = recap(multicluster(meshes, "-e", "state=absent"))
    assert all(c["changed"] == 0 for c in counts.values()), counts
