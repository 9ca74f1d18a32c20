"""Agent mode in a dual-stack mesh (issue 23): after site.yml hands over to the agents, the mesh
follows the cluster in both IP families with no Ansible run.

Lab kad (KILO_TEST_PREFIX_AGENT_DUAL_STACK), 2 locations x 2 hosts with both families on every
link, an API server of its own on the lab's bridge (agentlab.agent_cluster), every Node dual-stack
(spec.podCIDRs of both families), kilo_subnet of two in the inventory's group vars, the first
address of each pod range on lo (ignored by discovery). Tests run in file order and share the lab.
"""

import os
import sys
import time

import pytest
from kubernetes import client

import agentlab  # pylint: disable=import-error
import labcluster  # pylint: disable=import-error
from test_agent import api  # noqa: F401 pylint: disable=import-error,unused-import  (a client of this file's cluster)
from test_site_kubernetes import set_group_var, sitetools  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.host import keys
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

sys.path.insert(0, os.path.dirname(sitetools.__file__))  # test_site_kubernetes put tests/host there
from test_dual_stack import OPTIONS, sh, unreached  # noqa: E402 pylint: disable=import-error,wrong-import-position

PREFIX = os.environ.get("KILO_TEST_PREFIX_AGENT_DUAL_STACK", "kad")
GROUP = (kn.PEER_GROUP, kn.PEER_VERSION, kn.PEER_PLURAL)
PEER_IPS = ["10.5.0.1/32", "fd05::1/128"]
# a Node of location gcp whose Kilo agent runs outside the lab: only its annotations and ranges
EXTRA = PREFIX + "-extra"
EXTRA_PODS = ["10.50.29.0/24", "fd50:0:0:29::/64"]


@pytest.fixture(scope="module")
def cluster():
    agentlab.require_lab_and_kube()
    with agentlab.agent_cluster(PREFIX, 2, 2, ipv6=True) as (lab, server, inventory):
        for host in lab.hosts:
            for _range, address in labcluster.pods(lab, host):
                sh(lab, host, "ip addr add %s/%d dev lo" % (address, 128 if ":" in address else 32))
        set_group_var(inventory, "kilo_subnet", OPTIONS["subnet"])
        set_group_var(inventory, "kilo_discovery_ignore_interfaces", ["mgmt0", "lo"])
        yield lab, server, inventory


def test_site_hands_over_to_the_agents_and_pods_reach_in_both_families(cluster, api):
    lab, _server, inventory = cluster
    out = sitetools.site(inventory, "-e", "kilo_task_timeout=120", *agentlab.AGENT_ARGS)
    counts = sitetools.recap(out)
    assert set(counts) == set(lab.hosts) and all(c["failed"] == 0 for c in counts.values()), out[
        -4000:
    ]
    agentlab.wait_for(lambda: all("watching" in agentlab.read_log(lab, h) for h in lab.hosts), 60)
    assert unreached(lab, sorted(lab.hosts), pods_of=labcluster.pods) == []
    # the agents' plans are dual-stack: a leader's address of each family
    for leader in agentlab.leaders(lab, sorted(lab.hosts)):
        plan = agentlab.wait_for(lambda leader=leader: agentlab.agent_plan(lab, leader), 60)
        assert isinstance(plan["address"], list) and len(plan["address"]) == 2, (
            leader,
            plan["address"],
        )


def test_a_dual_stack_peer_applied_with_the_api_reaches_every_leader(cluster, api):
    lab, _server, _inventory = cluster
    custom = client.CustomObjectsApi(api)
    leaders = agentlab.leaders(lab, sorted(lab.hosts))
    assert len(leaders) == 2, leaders
    peer = labcluster.peer_resource(PREFIX + "-laptop")
    peer["spec"]["allowedIPs"] = PEER_IPS
    custom.create_cluster_custom_object(*GROUP, peer)

    def on_every_leader():
        return all(
            agentlab.wg_dump(lab, h).get(labcluster.PEER_KEY, {}).get("allowed_ips")
            == sorted(PEER_IPS)
            for h in leaders
        )

    try:
        agentlab.wait_for(on_every_leader, 60)
    except AssertionError:
        raise AssertionError(
            "the Peer's two addresses not on every leader in 60 s: %s"
            % dict((h, agentlab.wg_dump(lab, h).get(labcluster.PEER_KEY)) for h in leaders)
        )
    custom.delete_cluster_custom_object(*GROUP, PREFIX + "-laptop")
    agentlab.wait_for(
        lambda: not any(labcluster.PEER_KEY in agentlab.wg_dump(lab, h) for h in leaders), 60
    )


def test_the_agents_write_both_families_under_kilo_mesh(cluster, api):
    """Each agent writes its Node's kilo.mesh/internal-ips (and a leader's kilo.mesh/wireguard-ips)
    with both families; taken off the Nodes, they come back with no Ansible run."""
    lab, _server, _inventory = cluster
    core = client.CoreV1Api(api)
    leaders = agentlab.leaders(lab, sorted(lab.hosts))

    def expected(host):
        h = lab.hosts[host]
        want = {
            kn.INTERNAL_IPS: "%s/24,%s/64" % (h["lan_ip"], h["lan_ip6"]),
            kn.INTERNAL_IP: h["lan_ip"] + "/24",
        }
        if host in leaders:
            out = sh(
                lab, host, "ip -o -4 addr show dev kilo0; ip -o -6 addr show dev kilo0 scope global"
            ).stdout
            wg = [line.split()[3] for line in out.splitlines()]
            want.update({kn.WIREGUARD_IPS: ",".join(wg), kn.WIREGUARD_IP: wg[0]})
        return want

    def written(host):
        got = agentlab.node_annotations(api, host)
        return all(got.get(k) == v for k, v in expected(host).items())

    for host in lab.hosts:
        core.patch_node(
            host, {"metadata": {"annotations": dict((k, None) for k in kn.DUAL_ANNOTATIONS)}}
        )
    for host in sorted(lab.hosts):
        try:
            agentlab.wait_for(lambda host=host: written(host), 90)
        except AssertionError:
            raise AssertionError(
                "agent of %s did not write %s in 90 s: %s"
                % (host, expected(host), agentlab.node_annotations(api, host))
            )


def test_a_dual_stack_node_added_reaches_every_leader(cluster, api):
    """A Node that joins with Kilo's annotations (and ours for its IPv6 internal IP) and pod ranges
    of both families: its location's leader routes both ranges to it and the other leader's peer
    for that location allows both, by the agents alone; deleted, it leaves both."""
    lab, _server, _inventory = cluster
    core = client.CoreV1Api(api)
    aws, gcp = "aws-1", "gcp-1"  # gcp-1 is the forced leader (labcluster.register_nodes)
    assert sorted(agentlab.leaders(lab, sorted(lab.hosts))) == [aws, gcp]
    lan4, lan6 = (
        lab.hosts["gcp-2"]["lan_ip"].rsplit(".", 1)[0] + ".99",
        lab.hosts["gcp-2"]["lan_ip6"].rsplit(":", 1)[0] + ":99",
    )
    annotations = {
        kn.LOCATION: "gcp",
        kn.KEY: keys.public_key(keys.generate_private_key()),
        kn.ENDPOINT: "%s:51820" % lan4,
        kn.INTERNAL_IP: lan4 + "/24",
        kn.INTERNAL_IPS: "%s/24,%s/64" % (lan4, lan6),
        kn.LAST_SEEN: str(int(time.time())),
        kn.GRANULARITY: "location",
    }
    core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name=EXTRA, annotations=annotations),
            spec=client.V1NodeSpec(pod_cidr=EXTRA_PODS[0], pod_cidrs=EXTRA_PODS),
        )
    )
    gcp_key = sh(lab, gcp, "wg show kilo0 public-key").stdout.strip()

    def state():
        allowed = agentlab.wg_dump(lab, aws).get(gcp_key, {}).get("allowed_ips", [])
        routes = sh(lab, gcp, "ip -o route show proto 107; ip -o -6 route show proto 107").stdout
        return dict((c, (c in allowed, c in routes)) for c in EXTRA_PODS)

    try:
        try:
            agentlab.wait_for(lambda: all(v == (True, True) for v in state().values()), 60)
        except AssertionError:
            raise AssertionError(
                "Node %s's ranges not on both leaders in 60 s ({range: (in %s's allowed IPs for "
                "%s, routed by %s)}): %s" % (EXTRA, aws, gcp, gcp, state())
            )
    finally:
        core.delete_node(EXTRA)
    try:
        agentlab.wait_for(lambda: all(v == (False, False) for v in state().values()), 60)
    except AssertionError:
        raise AssertionError(
            "Node %s deleted, its ranges still on the leaders after 60 s: %s" % (EXTRA, state())
        )
