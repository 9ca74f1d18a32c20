"""site.yml with the inventory plugin kilo.mesh.kubernetes: a real kube-apiserver and a real lab.

Each lab host (network namespace, sshd, wireguard-go) is a Node of the fixture's API server:
its pod CIDR in spec.podCIDR, its management address as InternalIP (so Ansible reaches it),
its location by label on some Nodes and by Kilo's annotation on others, one forced leader, and
one Peer resource. The inventory is the plugin's config plus group_vars with the lab's SSH
settings. Tests run in file order and share the lab and the Nodes, removed at the end.

The last tests take the pod ranges from IPAM objects (issue 23): Calico's BlockAffinity and
Cilium's CiliumNode, their resource types from tests/kube/ipam_crds.yaml (written here).
"""

import os

import yaml

import pytest
from kubernetes import client

# tests/kube is on sys.path (conftest.py); tests/host holds the lab's site.yml helpers.
from test_apiserver import GROUP, PLURAL, VERSION, admin  # noqa: F401 pylint: disable=import-error,unused-import
import kubelab  # pylint: disable=import-error
import labcluster  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = os.environ.get(
    "KILO_TEST_PREFIX_SITE_KUBERNETES", "kkb"
)  # overridable: two checkouts testing at once
PEER = "kkb-laptop"
PEER_KEY = labcluster.PEER_KEY


def _host_tools():
    import sys  # pylint: disable=import-outside-toplevel

    sys.path.insert(0, os.path.join(ROOT, "tests", "host"))
    sys.path.insert(0, ROOT)
    import sitetools  # pylint: disable=import-error,import-outside-toplevel

    return sitetools


sitetools = _host_tools()


@pytest.fixture(scope="module")
def cluster(kube, admin):
    """(lab, inventory path): the lab up, its hosts registered as Nodes, a Peer; all removed after."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces)")
    with labcluster.nodes_of(kube, admin, PREFIX, PEER) as made:
        yield made


def wg_peers(lab, host):
    """public key -> allowed IPs (sorted) of the host's WireGuard interface; {} without one."""
    out = lab.run(host, ["wg", "show", "kilo0", "dump"]).stdout.splitlines()
    return dict((f[0], sorted(f[3].split(","))) for f in (line.split("\t") for line in out[1:]))


def pings(lab, only=None):
    """Every host (of ``only``) pings every host of the other location at its LAN address."""
    hosts = dict((n, h) for n, h in lab.hosts.items() if only is None or n in only)
    for src, h in sorted(hosts.items()):
        targets = [d["lan_ip"] for d in hosts.values() if d["location"] != h["location"]]
        done = lab.run(
            src,
            [
                "sh",
                "-c",
                "ok=0; for ip in %s; do ping -c 2 -i 0.3 -W 2 -q $ip >/dev/null || ok=1; done;"
                " exit $ok" % " ".join(targets),
            ],
            timeout=60,
        )
        assert done.returncode == 0, (src, targets, done.stdout, done.stderr)


def annotations(admin, name):
    return client.CoreV1Api(admin).read_node(name).metadata.annotations or {}


def test_site_converges_every_node_and_writes_back_kilos_annotations(cluster, admin):
    lab, inventory = cluster
    out = sitetools.site(inventory, "-e", "kilo_task_timeout=120")
    counts = sitetools.recap(out)
    assert set(counts) == set(lab.hosts) and all(
        c["failed"] == 0 and c["changed"] > 0 for c in counts.values()
    ), counts
    pings(lab)
    leaders = set()
    for name, h in lab.hosts.items():
        got = annotations(admin, name)
        key = lab.run(name, ["wg", "show", "kilo0", "public-key"]).stdout.strip()
        assert got[kn.KEY] == key
        assert got[kn.INTERNAL_IP] == h["lan_ip"] + "/24"
        # the endpoint: the public address where there is one, else the LAN address (Kilo's choice)
        assert got[kn.ENDPOINT] == "%s:51820" % (h["public_ip"] or h["lan_ip"])
        assert got[kn.GRANULARITY] == "location"
        address = lab.run(
            name, ["sh", "-c", "ip -o -4 addr show dev kilo0 | awk '{print $4}'"]
        ).stdout.strip()
        assert got[kn.WIREGUARD_IP] == address, (
            name,
            got,
            address,
        )  # "" and no address on non-leaders
        if address:
            leaders.add(name)
    assert leaders == set(n for n, h in lab.hosts.items() if h["index"] == 1)
    assert "gcp-1" in leaders  # the forced one
    for leader in leaders:
        assert PEER_KEY in wg_peers(lab, leader) and wg_peers(lab, leader)[PEER_KEY] == [
            "10.5.0.1/32"
        ]


def test_second_run_is_idempotent_and_only_last_seen_moves(cluster, admin):
    lab, inventory = cluster
    before = dict((n, annotations(admin, n)) for n in lab.hosts)
    out = sitetools.site(inventory, "--diff")
    counts = sitetools.recap(out)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), out[-8000:]
    for name in lab.hosts:
        after = annotations(admin, name)
        assert int(after.pop(kn.LAST_SEEN)) >= int(before[name].pop(kn.LAST_SEEN))
        assert after == before[name]
    pings(lab)


def test_a_deleted_peer_resource_leaves_every_leader(cluster, admin):
    lab, inventory = cluster
    client.CustomObjectsApi(admin).delete_cluster_custom_object(GROUP, VERSION, PLURAL, PEER)
    sitetools.site(inventory)
    for name in lab.hosts:
        assert PEER_KEY not in wg_peers(lab, name), name
    pings(lab)


def test_a_rotated_key_follows_on_the_node_and_every_leader(cluster, admin):
    """playbooks/rotate.yml on a leader (issue 24): in the same run its Node's key annotation
    becomes the key its interface now runs, and every other leader holds that key and not the
    old one (kgctl's view of it: tests/kube/test_kgctl.py, with KILO_KGCTL)."""
    lab, inventory = cluster
    victim = "gcp-1"  # the forced leader
    old = annotations(admin, victim)[kn.KEY]
    counts = sitetools.recap(
        sitetools.playbook(
            inventory, "rotate.yml", "-e", "hosts=%s" % victim, "-e", "kilo_task_timeout=120"
        )
    )
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), counts
    new = lab.run(victim, ["wg", "show", "kilo0", "public-key"]).stdout.strip()
    assert new and new != old and annotations(admin, victim)[kn.KEY] == new, (old, new)
    for leader in kubelab.leaders(admin, lab.hosts):
        if leader != victim:
            assert new in wg_peers(lab, leader) and old not in wg_peers(lab, leader), leader
    pings(lab)


def test_the_annotations_alone_keep_the_hosts_outside_the_limit(cluster):
    """A cluster moving from Kilo: no registry, only what the agent wrote on the Nodes."""
    lab, inventory = cluster
    os.remove(os.path.join(os.path.dirname(os.path.dirname(inventory)), "kilo-registry.json"))
    before = dict((n, wg_peers(lab, n)) for n in lab.hosts)
    out = sitetools.site(inventory, "--limit", "aws-1")
    assert (
        set(sitetools.recap(out)) == {"aws-1"} and sitetools.recap(out)["aws-1"]["changed"] == 0
    ), out[-3000:]
    assert "left out" not in out
    assert dict((n, wg_peers(lab, n)) for n in lab.hosts) == before


def test_a_deleted_node_leaves_the_mesh_whatever_the_registry_says(cluster, admin):
    """Liveness in push mode: a Node's age never removes it; deleting the Node does (as in Kilo)."""
    lab, inventory = cluster
    gone = "gcp-2"
    pod_cidr = "10.50.22.0/24"
    assert any(pod_cidr in ips for ips in wg_peers(lab, "aws-1").values())
    client.CoreV1Api(admin).delete_node(gone)
    out = sitetools.site(inventory)
    assert set(sitetools.recap(out)) == set(lab.hosts) - {gone}
    assert not any(pod_cidr in ips for ips in wg_peers(lab, "aws-1").values()), wg_peers(
        lab, "aws-1"
    )


# --- pod ranges from the IPAM (issue 23): Calico's blocks, Cilium's CiliumNode -----------------

IPAM_CRDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ipam_crds.yaml")
CALICO = kn.IPAM_KINDS["calico"]
CILIUM = kn.IPAM_KINDS["cilium"]
LIVE = ("aws-1", "aws-2", "gcp-1")  # gcp-2's Node is gone (the test above)


@pytest.fixture(scope="module")
def ipam(kube, admin, cluster):
    """The two resource types installed (removed after, with every object of theirs)."""
    from test_apiserver import eventually  # pylint: disable=import-error,import-outside-toplevel

    custom = client.CustomObjectsApi(admin)
    kube.kubectl("apply", "-f", IPAM_CRDS)
    try:
        for kind in (CALICO, CILIUM):
            eventually(lambda kind=kind: custom.list_cluster_custom_object(*kind), 60)
        yield custom
    finally:
        kube.kubectl("delete", "-f", IPAM_CRDS, "--ignore-not-found")


def block(custom, node, cidr, state="confirmed"):
    name = "%s-%s" % (node, cidr.replace(".", "-").replace("/", "-"))
    custom.create_cluster_custom_object(
        *CALICO,
        {
            "apiVersion": "%s/%s" % CALICO[:2],
            "kind": "BlockAffinity",
            "metadata": {"name": name},
            "spec": {"node": node, "cidr": cidr, "state": state, "deleted": "false"},
        },
    )
    return name


def pod_routes(lab, host):
    """The pod ranges this host routes (our routes, protocol 107), sorted."""
    out = lab.run(host, ["ip", "-o", "route", "show", "proto", "107"]).stdout.splitlines()
    return sorted(
        line.split()[0] for line in out if line.startswith(("10.50.", "10.60.", "10.70."))
    )


def assert_ranges(lab, ranges):
    """Every live host routes exactly the other nodes' ranges, and each leader's peer for the other
    location allows exactly that location's ranges (besides internal and WireGuard IPs)."""
    for host in LIVE:
        assert pod_routes(lab, host) == sorted(c for n in LIVE if n != host for c in ranges[n]), (
            host
        )
    keys = dict(
        (n, lab.run(n, ["wg", "show", "kilo0", "public-key"]).stdout.strip())
        for n in ("aws-1", "gcp-1")
    )
    for leader, other, members in (
        ("aws-1", "gcp-1", ["gcp-1"]),
        ("gcp-1", "aws-1", ["aws-1", "aws-2"]),
    ):
        allowed = wg_peers(lab, leader)[keys[other]]
        assert sorted(
            ip for ip in allowed if ip.startswith(("10.50.", "10.60.", "10.70."))
        ) == sorted(c for n in members for c in ranges[n]), (leader, allowed)


def set_group_var(inventory, name, value):
    path = os.path.join(os.path.dirname(inventory), "group_vars", "kilo.yml")
    with open(path) as f:
        data = yaml.safe_load(f)
    data[name] = value
    with open(path, "w") as f:
        yaml.safe_dump(data, f, default_flow_style=False)


def test_calico_blocks_are_the_routes_and_allowed_ips(cluster, ipam):
    lab, inventory = cluster
    for node, cidr in (
        ("aws-1", "10.60.0.0/26"),
        ("aws-1", "10.60.0.64/26"),
        ("aws-2", "10.60.1.0/26"),
        ("gcp-1", "10.60.2.0/26"),
        ("gcp-1", "10.60.2.128/26"),
    ):
        block(ipam, node, cidr)
    block(ipam, "aws-2", "10.60.3.0/26", state="pending")  # not the node's yet
    set_group_var(inventory, "kilo_pod_cidr_source", "calico")
    sitetools.site(inventory)
    assert_ranges(
        lab,
        {
            "aws-1": ["10.60.0.0/26", "10.60.0.64/26"],
            "aws-2": ["10.60.1.0/26"],
            "gcp-1": ["10.60.2.0/26", "10.60.2.128/26"],
        },
    )
    pings(lab, LIVE)


def test_a_moved_block_moves_its_route_and_a_node_may_name_its_own_source(cluster, admin, ipam):
    lab, inventory = cluster
    moved = "aws-1-10-60-0-64-26"
    ipam.patch_cluster_custom_object(*CALICO, moved, {"spec": {"node": "aws-2"}})
    ipam.create_cluster_custom_object(
        *CILIUM,
        {
            "apiVersion": "%s/%s" % CILIUM[:2],
            "kind": "CiliumNode",
            "metadata": {"name": "gcp-1"},
            "spec": {"ipam": {"podCIDRs": ["10.70.2.0/24", "10.70.3.0/24"]}},
        },
    )
    client.CoreV1Api(admin).patch_node(
        "gcp-1", {"metadata": {"annotations": {"kilo.mesh/pod-cidr-source": "cilium"}}}
    )
    sitetools.site(inventory)
    assert_ranges(
        lab,
        {
            "aws-1": ["10.60.0.0/26"],
            "aws-2": ["10.60.0.64/26", "10.60.1.0/26"],
            "gcp-1": ["10.70.2.0/24", "10.70.3.0/24"],
        },
    )


def test_two_nodes_claiming_one_range_fail_before_any_host_changes(cluster, ipam):
    lab, inventory = cluster
    before = dict((n, pod_routes(lab, n)) for n in LIVE)
    name = block(ipam, "aws-1", "10.60.1.0/27")  # inside aws-2's block
    try:
        out = sitetools.site(inventory, expect_rc=2)
        assert (
            "host 'aws-2': pod_cidr (kilo_pod_cidr_source calico): 10.60.1.0/26 holds the pod range"
            " 10.60.1.0/27 of node 'aws-1'"
        ) in out, out[-3000:]
        assert "changed=0" in out and "changed=1" not in out
    finally:
        ipam.delete_cluster_custom_object(*CALICO, name)
    assert dict((n, pod_routes(lab, n)) for n in LIVE) == before
