"""One cluster, two kinds of agent: Kilo's own `kg` runs the aws location, our agent the gcp one.

Needs Kilo's kg binary in $KILO_KG (skipped otherwise). The kg hosts are set up as Kilo's userspace
DaemonSet runs them (kubelab.prepare_node, kubelab.kg_argv); they reach this module's API server
on the lab bridge as our agents do. Nobody runs Ansible on the kg location, and after its own run
nobody runs Ansible on a gcp host either: each side learns the other from the Nodes' annotations
alone (keys, endpoints, internal IPs, `last-seen`), which is what makes a cluster movable from
Kilo to kilo.mesh one location at a time. Tests run in file order on one lab:

  a. kg starts on aws; site.yml --limit gcp installs our agents; every pair pings and both kinds
     of agent name the same leaders;
  b. a new Node on each side (kg started on aws-3; one `site.yml --limit gcp-3`): every pair of
     all six hosts pings with no other run.
"""

import os
import signal
import sys
import time

import pytest
from kubernetes import client

import agentlab  # pylint: disable=import-error
import kubelab  # pylint: disable=import-error
import labcluster  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "host"))
import sitetools  # noqa: E402 pylint: disable=import-error,wrong-import-position

KG = kubelab.binary("KILO_KG", "build Kilo's cmd/kg (github.com/squat/kilo), set KILO_KG")
PREFIX = os.environ.get("KILO_TEST_PREFIX_AGENT_MIXED", "kmx")
KG_SIDE = ("aws-1", "aws-2")
OURS = ("gcp-1", "gcp-2")
JOINERS = ("aws-3", "gcp-3")  # Nodes only from test_b on


@pytest.fixture(scope="module")
def cluster():
    agentlab.require_lab_and_kube()
    with agentlab.agent_cluster(PREFIX, 2, 3, skip=JOINERS) as (lab, server, inventory):
        kgs = {}
        try:
            yield lab, server, inventory, kgs
        finally:
            for name, pid in sorted(kgs.items()):
                kubelab.stop(lab, name, pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def api(cluster):
    with cluster[1].client() as api_client:
        yield api_client


def start_kg(lab, server, kgs, name):
    """kg on ``name`` as the DaemonSet would run it, with a kubeconfig for the bridge address."""
    done = lab.run(
        name,
        [
            "sh",
            "-c",
            "umask 077; mkdir -p %s && cat > %s"
            % (os.path.dirname(kubelab.KUBECONFIG_IN_HOST), kubelab.KUBECONFIG_IN_HOST),
        ],
        input=agentlab.host_kubeconfig(server),
    )
    assert done.returncode == 0, done.stderr
    kubelab.prepare_node(lab, name)
    kgs[name] = kubelab.start(lab, name, kubelab.kg_argv(KG, name), "/var/log/kg.log")


def wait_or_show_kg(lab, check, timeout):
    """agentlab.wait_for, printing what kg logged when the wait fails."""
    try:
        return agentlab.wait_for(check, timeout)
    except AssertionError:
        for name in sorted(set(KG_SIDE + JOINERS) & set(lab.hosts)):
            print(
                "\n== kg log of %s\n%s"
                % (name, lab.run(name, ["tail", "-n", "30", "/var/log/kg.log"]).stdout)
            )
        raise


def checked_in(api, names, since):
    """Every Node of ``names`` carries a key and a last-seen written after ``since``."""
    for name in names:
        got = agentlab.node_annotations(api, name)
        if not got.get(kn.KEY) or int(got.get(kn.LAST_SEEN, 0)) < since:
            return False
    return True


def test_a_kg_and_our_agents_mesh_the_two_locations(cluster, api):
    lab, server, inventory, kgs = cluster
    since = int(time.time())
    for name in KG_SIDE:
        start_kg(lab, server, kgs, name)
    wait_or_show_kg(lab, lambda: checked_in(api, KG_SIDE, since), 60)
    out = sitetools.site(
        inventory, "--limit", ",".join(OURS), "-e", "kilo_task_timeout=120", *agentlab.AGENT_ARGS
    )
    counts = sitetools.recap(out)
    assert set(counts) == set(OURS) and all(c["failed"] == 0 for c in counts.values()), out[-4000:]
    hosts = KG_SIDE + OURS
    took = agentlab.stopwatch(lambda: agentlab.all_pairs_ping(lab, hosts), 120, interval=1)
    print("\nkg on aws, our agents on gcp -> every pair pings %.1f s after site.yml" % took)
    # Each location has one leader, and every agent (of either kind) names the same ones: kg
    # writes wireguard-ip on the leader it runs, our agent on ours, from the same Nodes.
    agentlab.wait_for(lambda: kubelab.leaders(api, hosts) == ["aws-1", "gcp-1"], 60)
    # (kg's aws-2 may keep the address it took while it briefly thought itself the leader: only
    # our side's interfaces are ours to judge)
    assert agentlab.leaders(lab, OURS) == ["gcp-1"]
    # The kg leader's interface holds our leader with our node's key, and ours holds kg's.
    for mine, theirs in (("aws-1", "gcp-1"), ("gcp-1", "aws-1")):
        key = agentlab.node_annotations(api, theirs)[kn.KEY]
        assert key in agentlab.wg_dump(lab, mine), (mine, theirs)
    # Our agents keep our Nodes checked in, so kg does not age them out after its 60 s.
    now = int(time.time()) + 1
    agentlab.wait_for(lambda: checked_in(api, OURS, now), 45)
    assert all(kubelab.alive(lab, name, pid) for name, pid in kgs.items())


def test_b_a_new_node_on_each_side_is_taken_in(cluster, api):
    lab, server, inventory, kgs = cluster
    since = int(time.time())
    labcluster.register_nodes(lab, client.CoreV1Api(api), only=list(JOINERS))
    start_kg(lab, server, kgs, "aws-3")
    out = sitetools.site(
        inventory, "--limit", "gcp-3", "-e", "kilo_task_timeout=120", *agentlab.AGENT_ARGS
    )
    assert sitetools.recap(out)["gcp-3"]["failed"] == 0, out[-4000:]
    wait_or_show_kg(lab, lambda: checked_in(api, JOINERS, since), 60)
    hosts = KG_SIDE + OURS + JOINERS
    took = agentlab.stopwatch(lambda: agentlab.all_pairs_ping(lab, hosts), 120, interval=1)
    print("\nnew Nodes aws-3 (kg) and gcp-3 (ours) -> every pair of six pings: %.1f s" % took)
    assert kubelab.leaders(api, hosts) == ["aws-1", "gcp-1"]
