"""A mixed cluster with relays: Kilo's own `kg` on a reachable location, our agents elsewhere, two
locations behind symmetric NATs (docs/DESIGN.md, "Kilo in mixed clusters").

Needs Kilo's kg binary in $KILO_KG (skipped otherwise; $KILO_KGCTL adds what kgctl shows). Lab
(prefix kgr, KILO_TEST_PREFIX_AGENT_RELAYS_KG): 4 locations x 1 host, aws and gcp public, azure and
home behind NAT routers of the symmetric kind (a port per destination: the NAT'd pair never goes
direct), their Nodes marked ``kilo.mesh/behind-nat`` with Kilo's ``persistent-keepalive`` (as the
user guide asks in a Kubernetes mesh). kg runs gcp-1 as Kilo's userspace DaemonSet would; our
agents (the install step and the agent role, no converge) the other three.

Asserted: every host pings every other (Kilo connects gcp with each location: the NAT'd leaders
keep alive towards it, kg learns their mappings by roaming); the NAT'd pair goes through our relay
(aws), never through kg's gcp (a `kg` leader never relays), whose rule counts it; kg's interface
holds one entry per location, each NAT'd one at its NAT mapping with its own ranges (Kilo's
entries: nothing of relays). Printed: kg's `wg show`, and with $KILO_KGCTL kgctl's showconf of a
NAT'd leader (what Kilo thinks it runs) beside the leader's interface.
"""

import os
import signal
import subprocess
import time

import pytest
from kubernetes import client

import agentlab  # pylint: disable=import-error
import kubelab  # pylint: disable=import-error
from test_agent_relays import relay_counter, relay_metrics  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

KG = kubelab.binary("KILO_KG", "build Kilo's cmd/kg (github.com/squat/kilo), set KILO_KG")
PREFIX = os.environ.get("KILO_TEST_PREFIX_AGENT_RELAYS_KG", "kgr")
KG_HOST, RELAY = "gcp-1", "aws-1"
NATTED = ("azure-1", "home-1")
OURS = (RELAY,) + NATTED


@pytest.fixture(scope="module")
def cluster():
    agentlab.require_lab_and_kube()
    with agentlab.agent_cluster(PREFIX, 4, 1, nat=[3, 4], nat_kind="symmetric") as (
        lab,
        server,
        inventory,
    ):
        kgs = {}
        try:
            with server.client() as api:
                core = client.CoreV1Api(api)
                for name in NATTED:
                    core.patch_node(
                        name,
                        {
                            "metadata": {
                                "annotations": {
                                    kn.FIELDS["behind_nat"].annotation: "true",
                                    kn.PERSISTENT_KEEPALIVE: "25",
                                }
                            }
                        },
                    )
                yield lab, server, inventory, api, kgs
        finally:
            for name, pid in sorted(kgs.items()):
                kubelab.stop(lab, name, pid, signal.SIGKILL)


def install_ours(inventory):
    """The install step and the agent role on our hosts only (no converge), as test_agent_relays'
    ``install`` does on all."""
    import sitetools  # pylint: disable=import-error,import-outside-toplevel

    book = os.path.join(os.path.dirname(inventory), "..", "agents.yml")
    with open(book, "w") as f:
        f.write(
            "- hosts: kilo\n  gather_facts: false\n  roles: [kilo.mesh.wireguard, kilo.mesh.agent]\n"
        )
    return sitetools.playbook(
        inventory, os.path.abspath(book), "--limit", ",".join(OURS), *agentlab.AGENT_ARGS
    )


def kg_log(lab):
    return lab.run(KG_HOST, ["tail", "-n", "40", "/var/log/kg.log"]).stdout


def carrier(lab, host, far):
    """The public key of the entry on ``host`` whose allowed IPs hold ``far``'s LAN address."""
    wanted = lab.hosts[far]["lan_ip"] + "/32"
    keys = [k for k, p in agentlab.wg_dump(lab, host).items() if wanted in p["allowed_ips"]]
    assert len(keys) == 1, agentlab.wg_dump(lab, host)
    return keys[0]


def test_kg_and_our_relays_in_one_cluster(cluster):
    from test_agent_mixed import start_kg  # pylint: disable=import-error,import-outside-toplevel

    lab, server, inventory, api, kgs = cluster
    hosts = sorted(lab.hosts)
    since = int(time.time())
    start_kg(lab, server, kgs, KG_HOST)
    agentlab.wait_for(
        lambda: int(agentlab.node_annotations(api, KG_HOST).get(kn.LAST_SEEN, 0)) >= since, 60
    )
    start = time.monotonic()
    install_ours(inventory)
    agentlab.wait_for(lambda: all("watching" in agentlab.read_log(lab, h) for h in OURS), 60)
    try:
        took = agentlab.stopwatch(lambda: agentlab.all_pairs_ping(lab, hosts), 180, interval=1)
        connected = time.monotonic()
    except AssertionError:
        print("\n== kg log of %s\n%s" % (KG_HOST, kg_log(lab)))
        raise
    print(
        "\nkg on gcp, our agents on aws, azure, home (symmetric NATs): every host pings every"
        " other %.1f s after the install's start (%.1f s of waiting)"
        % (time.monotonic() - start, took)
    )
    keys = dict((h, agentlab.node_annotations(api, h)[kn.KEY]) for h in hosts)
    notes = dict((h, agentlab.node_annotations(api, h)) for h in hosts)
    # the Kilo-end rule: kg's Node carries neither of our marks; the relay's start is on aws only
    assert kn.RELAY not in notes[KG_HOST] and kn.PATH_STATE not in notes[KG_HOST]
    assert kn.RELAY in notes[RELAY]
    # the NAT'd pair through our relay, never through kg's leader; the relay's rule counts it
    a, b = NATTED
    assert carrier(lab, a, b) == carrier(lab, b, a) == keys[RELAY]
    counted = relay_counter(lab, RELAY)
    assert counted and counted[0] > 0, counted
    assert relay_counter(lab, KG_HOST) is None  # kg's host has no rule of ours
    for near, far in ((a, b), (b, a)):
        # relayed via aws (probing="true" once the relays published both mappings: a probe entry
        # beside the relay's, which behind these NATs never handshakes)
        (path,) = relay_metrics(lab, near)["path"]
        print("kilo_path on %s: %s" % (near, path))
        assert dict(path, probing=None) == {
            "segment": "location:" + lab.hosts[far]["location"],
            "path": "relayed",
            "via": "location:aws",
            "probing": None,
        }
    # what kg sees: one entry per location, the NAT'd ones at their NAT mapping, each with its own
    # ranges only (Kilo's entries; nothing of the relay's)
    seen = agentlab.wg_dump(lab, KG_HOST)
    print("kg's wg show on %s:" % KG_HOST)
    for h in hosts:
        if h != KG_HOST:
            p = seen.get(keys[h], {})
            print(
                "  %s: endpoint %s, allowed IPs %s"
                % (h, p.get("endpoint"), ",".join(p.get("allowed_ips", [])))
            )
    assert set(seen) == set(keys[h] for h in OURS), seen
    for h in NATTED:
        entry = seen[keys[h]]
        # the mapping kg's gcp-1 learned (its NAT router's address), not the Node's endpoint
        assert entry["endpoint"].rsplit(":", 1)[0] == lab.hosts[h]["nat_ip"], (h, entry)
        assert lab.hosts[h]["lan_ip"] + "/32" in entry["allowed_ips"], (h, entry)
        other = [x for x in NATTED if x != h][0]
        assert lab.hosts[other]["lan_ip"] + "/32" not in entry["allowed_ips"], (h, entry)
    # past kg's resync (30 s): kg keeps the mappings it learned (the Nodes' persistent-keepalive
    # makes it use its discovered endpoints), every pair still pings
    time.sleep(max(0.0, 35 - (time.monotonic() - connected)))
    assert agentlab.all_pairs_ping(lab, hosts)
    assert kubelab.alive(lab, KG_HOST, kgs[KG_HOST])
    print(
        "the NAT'd Nodes' endpoints (our key step's report): %s"
        % dict((h, notes[h].get(kn.ENDPOINT)) for h in NATTED)
    )
    kgctl = os.environ.get("KILO_KGCTL")
    if kgctl and os.access(kgctl, os.X_OK):
        from test_kgctl import showconf_peers  # pylint: disable=import-error,import-outside-toplevel

        shown = {}
        for name in (a, KG_HOST):
            done = subprocess.run(
                [kgctl, "--kubeconfig", server.kubeconfig, "showconf", "node", name],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            print("kgctl showconf node %s:\n%s" % (name, done.stdout))
            shown[name] = showconf_peers(done.stdout)
        graph = subprocess.run(
            [kgctl, "--kubeconfig", server.kubeconfig, "graph"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        print("kgctl graph (rc %d):\n%s" % (graph.returncode, graph.stdout))
        # an edge between the two NAT'd leaders, as between any two leaders: no relay drawn
        assert graph.returncode == 0 and '"%s"->"%s"' % (a, b) in graph.stdout, graph.stdout
        live = agentlab.wg_dump(lab, a)
        print("%s's interface:" % a)
        for key, p in sorted(live.items()):
            name = [h for h in hosts if keys[h] == key]
            print("  %s: endpoint %s, allowed IPs %s" % (name, p["endpoint"], p["allowed_ips"]))
        # kgctl draws the relayed pair as a direct one: b's ranges on b's own section, where a's
        # interface has them on the relay's (and b's entry is the probe, without allowed IPs)
        lan = lab.hosts[b]["lan_ip"] + "/32"
        assert lan in shown[a][keys[b]] and lan not in shown[a][keys[RELAY]]
        assert lan in live[keys[RELAY]]["allowed_ips"] and lan not in live[keys[b]]["allowed_ips"]
        # and kg's own node as its interface has it (allowed IPs; the endpoints are the mappings
        # some Node published, not necessarily those kg's interface roamed to)
        assert shown[KG_HOST] == dict((k, p["allowed_ips"]) for k, p in seen.items())
