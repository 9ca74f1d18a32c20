"""Kilo's own kgctl reads a cluster that kilo.mesh manages: `graph` and `showconf node`.

Needs Kilo's kgctl binary in $KILO_KGCTL (skipped otherwise). A 2 x 2 lab whose hosts are
Nodes of the test API server (labcluster's: locations by label and by annotation, a forced
leader; location granularity, one Peer resource) is converged by site.yml
through the inventory plugin; kgctl then computes the mesh from the Nodes' annotations alone, as
Kilo's agent would, and must agree with what each host runs. kgctl counts only Nodes checked in
during the last 60 s, so every check follows a site.yml run.
"""

import os
import shutil
import subprocess

import pytest
from kubernetes import client

# tests/kube is on sys.path (conftest.py).
from test_apiserver import admin  # noqa: F401 pylint: disable=import-error,unused-import
from test_site_kubernetes import sitetools, wg_peers  # pylint: disable=import-error

import kubelab  # pylint: disable=import-error
import labcluster  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

KGCTL = kubelab.binary(
    "KILO_KGCTL", "build Kilo's cmd/kgctl (github.com/squat/kilo), set KILO_KGCTL"
)
PREFIX = "kgc"  # this machine's labs are global: this prefix is this file's only
PEER = "kgc-laptop"


@pytest.fixture(scope="module")
def cluster(kube, admin):
    """(lab, inventory, kubeconfig): the lab's hosts as Nodes, one Peer; all removed after."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces)")
    with labcluster.nodes_of(kube, admin, PREFIX, PEER) as (lab, inventory):
        yield lab, inventory, kube.kubeconfig


def converge(inventory):
    """site.yml through the inventory plugin; also refreshes every Node's last-seen for kgctl."""
    counts = sitetools.recap(sitetools.site(inventory, "-e", "kilo_task_timeout=120"))
    assert counts and all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), (
        counts
    )


def kgctl(kubeconfig, *args):
    done = subprocess.run(
        [KGCTL, "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def showconf_peers(text):
    """public key -> allowed IPs (sorted) of the [Peer] sections of a WireGuard configuration."""
    peers = {}
    for section in text.split("[Peer]")[1:]:
        fields = dict(line.split("=", 1) for line in section.splitlines() if "=" in line)
        fields = dict((k.strip(), v.strip()) for k, v in fields.items())
        peers[fields["PublicKey"]] = sorted(
            ip.strip() for ip in fields.get("AllowedIPs", "").split(",") if ip.strip()
        )
    return peers


def test_graph_is_valid_dot_and_names_every_node_and_the_peer(cluster):
    lab, inventory, kubeconfig = cluster
    if not shutil.which("dot"):
        pytest.skip("Graphviz's dot is not installed")
    converge(inventory)
    rc, graph, err = kgctl(kubeconfig, "graph")
    assert rc == 0, err
    rendered = subprocess.run(
        ["dot", "-Tsvg"], input=graph, capture_output=True, text=True, timeout=60, check=False
    )
    assert rendered.returncode == 0 and "<svg" in rendered.stdout, rendered.stderr
    for name in list(lab.hosts) + [PEER]:
        assert '"%s" [' % name in graph, (name, graph)  # a vertex of the graph, not only a label
    print(graph[:1500])


def test_showconf_of_every_leader_lists_exactly_its_interface_peers(cluster, admin):
    lab, inventory, kubeconfig = cluster
    converge(inventory)
    leaders = kubelab.leaders(admin, lab.hosts)
    assert leaders == sorted(n for n, h in lab.hosts.items() if h["index"] == 1), (
        leaders
    )  # one per location
    for leader in leaders:
        rc, conf, err = kgctl(kubeconfig, "showconf", "node", leader)
        assert rc == 0, (leader, err)
        print("kgctl showconf node %s:\n%s" % (leader, conf))
        want = showconf_peers(conf)
        assert want == wg_peers(lab, leader), (leader, conf, wg_peers(lab, leader))
        assert want[labcluster.PEER_KEY] == labcluster.PEER_ALLOWED_IPS


def test_showconf_refuses_a_node_that_is_not_a_leader(cluster, admin):
    """The same leader choice as Kilo: kgctl sees the non-leaders as non-leaders too."""
    lab, inventory, kubeconfig = cluster
    converge(inventory)
    others = sorted(set(lab.hosts) - set(kubelab.leaders(admin, lab.hosts)))
    assert others
    for name in others:
        rc, out, err = kgctl(kubeconfig, "showconf", "node", name)
        # kgctl says so on stderr, prints no configuration, and still exits 0
        assert (
            rc == 0 and "[Interface]" not in out and 'Node "%s" is not a leader node' % name in err
        ), (name, out, err)


def test_a_rotated_key_is_on_the_node_and_in_kgctls_showconf(cluster, admin):
    """playbooks/rotate.yml on a leader: its Node's key annotation is the new key, and kgctl
    (which reads only the annotations) gives every other leader a [Peer] with the new key, the
    same as its interface holds."""
    lab, inventory, kubeconfig = cluster
    converge(inventory)
    leaders = kubelab.leaders(admin, lab.hosts)
    victim = leaders[0]
    key_of = lambda: client.CoreV1Api(admin).read_node(victim).metadata.annotations.get(kn.KEY)  # noqa: E731
    old = key_of()
    counts = sitetools.recap(
        sitetools.playbook(
            inventory, "rotate.yml", "-e", "hosts=%s" % victim, "-e", "kilo_task_timeout=120"
        )
    )
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), counts
    new = lab.run(victim, ["wg", "show", "kilo0", "public-key"]).stdout.strip()
    assert new and new != old and key_of() == new, (old, new, key_of())
    for leader in leaders:
        if leader == victim:
            continue
        rc, conf, err = kgctl(kubeconfig, "showconf", "node", leader)
        assert rc == 0, (leader, err)
        want = showconf_peers(conf)
        assert new in want and old not in want, (leader, conf)
        assert want == wg_peers(lab, leader), (leader, conf, wg_peers(lab, leader))
    print(
        "rotated %s: Node key %s... -> %s..., kgctl showconf of every other leader names the new key"
        % (victim, old[:8], new[:8])
    )
