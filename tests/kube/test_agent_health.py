"""Leader health between agents, beyond Kilo (squat/kilo#489), on a real lab and API server: a
leader whose WireGuard traffic alone is dropped (it stays Ready and keeps checking in, so Kilo's
liveness never notices) is replaced by a healthy member of its location, and does not flap back
when it recovers.

Own lab (prefix kah): 3 locations x 2 hosts, both hosts of a location public so either can lead;
agents with kilo_leader_health on.
"""
import os
import sys
import time

import pytest

import agentlab  # pylint: disable=import-error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "host"))
import sitetools  # noqa: E402 pylint: disable=import-error,wrong-import-position

PREFIX = os.environ.get("KILO_TEST_PREFIX_AGENT_HEALTH", "kah")


@pytest.fixture(scope="module")
def cluster():
    agentlab.require_lab_and_kube()
    with agentlab.agent_cluster(PREFIX, 3, 2, public=2) as made:
        yield made


def test_a_leader_that_does_not_forward_is_replaced_and_does_not_flap(cluster):
    lab, server, inventory = cluster
    hosts = sorted(lab.hosts)
    out = sitetools.site(inventory, "-e", "kilo_task_timeout=120", "-e", "kilo_leader_health=true",
                         *agentlab.AGENT_ARGS)
    assert all(c["failed"] == 0 for c in sitetools.recap(out).values()), out[-4000:]
    agentlab.wait_for(lambda: agentlab.all_pairs_ping(lab, hosts), 60)
    leaders = agentlab.leaders(lab, hosts)
    broken = [h for h in leaders if lab.hosts[h]["location"] == "gcp"][0]  # gcp-1: a forced leader
    time.sleep(25)  # every leader has probed every other for longer than the dead-after time
    agentlab.drop_wireguard(lab, broken)
    try:
        took = agentlab.stopwatch(lambda: broken not in agentlab.leaders(lab, hosts) and
                                  agentlab.all_pairs_ping(lab, hosts), 120, interval=1)
        print("\nleader %s not forwarding -> replaced, every pair pings: %.1f s" % (broken, took))
        with server.client() as api:
            said = agentlab.node_annotations(api, [h for h in leaders if h != broken][0])
        assert broken in said.get("kilo.mesh/unreachable-leaders", ""), said
    finally:
        agentlab.go_light(lab, broken)
    # repaired: it does not take leadership back within the hold-down, and nothing is cut off
    for _ in range(4):
        time.sleep(10)
        assert broken not in agentlab.leaders(lab, hosts)
        assert agentlab.all_pairs_ping(lab, hosts)
    client_log = agentlab.read_log(lab, broken)
    assert "Traceback" not in client_log, client_log[-3000:]
