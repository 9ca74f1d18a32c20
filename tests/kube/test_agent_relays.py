"""Agent relays on a real lab and a real kube-apiserver: locations behind NAT that cannot reach each
other, connected by the agents alone (no push run) through a public location's leader.

Lab (prefix kar, KILO_TEST_PREFIX_AGENT_RELAYS): 4 locations x 2 hosts, one public host in each
of aws and gcp (the relays), azure and home behind NAT routers (lab ``--nat``, symmetric: a port
per destination, so the pair never goes direct; test_agent_direct.py). The NAT'd Nodes carry
``kilo.mesh/behind-nat`` and no endpoint of the operator's; every host a pod address (its Node's pod range's first, on lo). The agents are installed with
playbooks/agent.yml alone: nothing converges before them.

Tests share the lab, in file order: the first starts the agents and waits for the matrix (every
host pings every other's LAN and pod address), compares every agent's plan with the controller's
for the same Nodes, reads the annotations the agents wrote and scrapes every agent's /metrics
(``kilo_path`` on the NAT'd leaders, the relays' forwarded bytes); the second makes one relay dark
while 50 echoes a second cross between the NAT'd locations (relay failover).
"""

import json
import re
import os
import sys
import time

import pytest
import yaml
from kubernetes import client

import agentlab  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "host"))

PREFIX = os.environ.get("KILO_TEST_PREFIX_AGENT_RELAYS", "kar")
RELAYS = ("aws", "gcp")
NATTED = ("azure", "home")


def pod_address(lab, host):
    """The first address of the host's Node's pod range (labcluster.pod_cidr), held on lo."""
    import labcluster  # pylint: disable=import-error,import-outside-toplevel

    return labcluster.pod_cidr(lab.hosts[host]).replace(".0/24", ".1")


@pytest.fixture(scope="module")
def cluster():
    agentlab.require_lab_and_kube()
    with agentlab.agent_cluster(PREFIX, 4, 2, nat=[3, 4], nat_kind="symmetric") as (
        lab,
        server,
        inventory,
    ):
        for host in lab.hosts:
            lab.run(
                host, ["ip", "addr", "add", pod_address(lab, host) + "/32", "dev", "lo"], check=True
            )
        # the pod addresses sit on lo, where discovery would take them for the internal IP
        group_vars = os.path.join(os.path.dirname(inventory), "group_vars", "kilo.yml")
        with open(group_vars) as f:
            data = yaml.safe_load(f)
        data["kilo_discovery_ignore_interfaces"] = ["mgmt0", "lo"]
        with open(group_vars, "w") as f:
            yaml.safe_dump(data, f)
        with server.client() as api:
            core = client.CoreV1Api(api)
            for name, h in lab.hosts.items():
                if h["location"] in NATTED:
                    core.patch_node(
                        name,
                        {"metadata": {"annotations": {kn.FIELDS["behind_nat"].annotation: "true"}}},
                    )
            yield lab, server, inventory, api


def install(inventory):
    """The install step (role kilo.mesh.wireguard: packages, forwarding, the port) and the agent
    (role kilo.mesh.agent), on every host at once, and no converge: the agents build the mesh."""
    import sitetools  # pylint: disable=import-error,import-outside-toplevel

    book = os.path.join(os.path.dirname(inventory), "..", "agents.yml")
    with open(book, "w") as f:
        f.write(
            "- hosts: kilo\n  gather_facts: false\n  roles: [kilo.mesh.wireguard, kilo.mesh.agent]\n"
        )
    return sitetools.playbook(inventory, os.path.abspath(book), *agentlab.AGENT_ARGS)


def sh(lab, host, cmd, timeout=60):
    return lab.run(host, ["sh", "-c", cmd], timeout=timeout)


def unreached(lab):
    """[(src, dst address)] of every other host's LAN and pod address a host cannot ping (pod
    targets from its own pod address), each target tried a few times."""
    failed = []
    for src in sorted(lab.hosts):
        targets = []
        for dst in sorted(lab.hosts):
            if dst != src:
                targets += [
                    "%s" % lab.hosts[dst]["lan_ip"],
                    "-I %s %s" % (pod_address(lab, src), pod_address(lab, dst)),
                ]
        script = (
            " ".join(
                "(ping -c 2 -i 0.3 -W 1 -q %s >/dev/null || ping -c 3 -i 0.5 -W 1 -q %s >/dev/null"
                " || echo %s) &" % (t, t, t.split()[-1])
                for t in targets
            )
            + " wait"
        )
        failed += [(src, a) for a in sh(lab, src, script, timeout=120).stdout.split()]
    return failed


def connect(lab, timeout):
    """Seconds until every host reaches every other (``unreached``); what is not reached, after ``timeout``."""
    last = []

    def connected():
        last[:] = unreached(lab)
        return not last

    try:
        return agentlab.stopwatch(connected, timeout, interval=1)
    except AssertionError:
        raise AssertionError("not reached after %d s: %s" % (timeout, last))


def leader(lab, location):
    found = [
        h
        for h in sorted(lab.hosts)
        if lab.hosts[h]["location"] == location
        and sh(lab, h, "wg show kilo0 peers 2>/dev/null").stdout.strip()
    ]
    assert len(found) == 1, (location, found)
    return found[0]


def relay_counter(lab, host):
    """(packets, bytes) of the relay rule on host (nft), None without one."""
    for line in sh(
        lab, host, "nft list chain inet kilo_mesh forward 2>/dev/null"
    ).stdout.splitlines():
        if 'iifname "kilo0" oifname "kilo0" counter' in line:
            words = line.split()
            return int(words[words.index("packets") + 1]), int(words[words.index("bytes") + 1])
    return None


def relay_metrics(lab, host):
    """The agent's kilo_path samples ([labels]) and kilo_relay_forwarded_bytes_total (None: none) on
    host, from its /metrics."""
    status, text = agentlab.metrics(lab, host)
    assert status == 200, text
    paths, forwarded = [], None
    for line in text.splitlines():
        if line.startswith("kilo_path{"):
            labels, value = line[len("kilo_path{") :].rsplit("} ", 1)
            assert float(value) == 1, line
            paths.append(dict(re.findall(r'(\w+)="([^"]*)"', labels)))
        elif line.startswith('kilo_relay_forwarded_bytes_total{interface="kilo0"} '):
            forwarded = float(line.rsplit(" ", 1)[1])
    return {"path": paths, "forwarded": forwarded}


def without_probes(plan):
    """A plan (agentlab.comparable) less its probe entries: a push run has no time, so it never
    probes; everything else of the agent's plan is the controller's."""
    plan = agentlab.comparable(plan)
    plan["peers"] = [p for p in plan.get("peers", []) if not p.get("probe")]
    return plan


def test_agents_alone_connect_locations_behind_nat_through_a_relay(cluster):
    lab, _server, inventory, api = cluster
    hosts = sorted(lab.hosts)
    start = time.monotonic()
    install(inventory)
    installed = time.monotonic() - start
    agentlab.wait_for(lambda: all("watching" in agentlab.read_log(lab, h) for h in hosts), 60)
    took = connect(lab, 180)
    matrix = time.monotonic() - start
    print(
        "\nagents installed (agent.yml, %d hosts) in %.1f s; every host pings every LAN and pod address %.1f s"
        " later, %.1f s from the start" % (len(hosts), installed, took, matrix)
    )
    leaders = dict((loc, leader(lab, loc)) for loc in RELAYS + NATTED)
    # what the agents wrote: each relay's start, each NAT'd node's path state; never both
    for host in hosts:
        notes = agentlab.node_annotations(api, host)
        if lab.hosts[host]["location"] in NATTED:
            assert kn.RELAY not in notes, (host, notes)
            assert json.loads(notes[kn.PATH_STATE]) == {"down": {}, "direct": {}, "held": {}}, (
                host,
                notes,
            )
        else:
            assert kn.PATH_STATE not in notes and int(notes[kn.RELAY]) > 0, (host, notes)
    # the NAT'd pair goes through one relay, which forwards it (its rule counts), and only relays have the rule
    counters = dict((h, relay_counter(lab, h)) for h in hosts)
    assert set(h for h, c in counters.items() if c is not None) == set(
        leaders[loc] for loc in RELAYS
    ), counters
    assert sum(c[0] for c in counters.values() if c) > 0, counters
    via = [
        p
        for p in agentlab.wg_dump(lab, leaders["azure"]).values()
        if pod_address(lab, leaders["home"]).rsplit(".", 1)[0] + ".0/24" in p["allowed_ips"]
    ]
    assert len(via) == 1, agentlab.wg_dump(lab, leaders["azure"])
    print(
        "relay rule counters (packets, bytes): %s" % dict((h, c) for h, c in counters.items() if c)
    )
    # what the agents' /metrics say of it (the push textfile's two metrics)
    relay = relay_of_pair(lab, api)[0]
    exported = dict((h, relay_metrics(lab, h)) for h in hosts)
    print(
        "agents' kilo_path and kilo_relay_forwarded_bytes_total: %s"
        % dict((h, m) for h, m in exported.items() if m["path"] or m["forwarded"] is not None)
    )
    for loc, far in (("azure", "home"), ("home", "azure")):
        # through the relay: relayed, probing="true" while the agent's plan has a probe entry trying
        # the direct path (behind these symmetric NATs it stays, never getting through)
        probing = any(
            p.get("probe") and p["name"] == "location:" + far
            for p in agentlab.agent_plan(lab, leaders[loc])["peers"]
        )
        assert exported[leaders[loc]]["path"] == [
            {
                "segment": "location:" + far,
                "path": "relayed",
                "via": "location:" + lab.hosts[relay]["location"],
                "probing": "true" if probing else "false",
            }
        ], exported[leaders[loc]]
    assert not any(
        m["path"] for h, m in exported.items() if lab.hosts[h]["location"] not in NATTED
    ), exported
    assert set(h for h, m in exported.items() if m["forwarded"] is not None) == set(
        leaders[loc] for loc in RELAYS
    )
    assert exported[relay]["forwarded"] >= counters[relay][1] > 0, (
        exported[relay],
        counters[relay],
    )

    # The agents' plans are the controller's for the same Nodes (but the probes, which need a time)
    def same():
        plans = agentlab.controller_plans(inventory)
        differ = [
            h
            for h in hosts
            if without_probes(agentlab.agent_plan(lab, h)) != without_probes(plans[h])
        ]
        return not differ or (print("plans differ on %s" % differ) and False)

    agentlab.wait_for(same, 60, interval=2)
    probes = dict(
        (h, sorted(p["name"] for p in agentlab.agent_plan(lab, h)["peers"] if p.get("probe")))
        for h in hosts
    )
    assert set(h for h, names in probes.items() if names) <= set(leaders[loc] for loc in NATTED), (
        probes
    )
    print(
        "probe entries (direct attempts, no allowed IPs): %s"
        % dict((h, n) for h, n in probes.items() if n)
    )


def relay_of_pair(lab, api):
    """(relay host, its public key) whose entry on the azure leader carries home's pod range."""
    azure, home = leader(lab, "azure"), leader(lab, "home")
    wanted = pod_address(lab, home).rsplit(".", 1)[0] + ".0/24"
    keys = [k for k, p in agentlab.wg_dump(lab, azure).items() if wanted in p["allowed_ips"]]
    assert len(keys) == 1, agentlab.wg_dump(lab, azure)
    hosts = [
        h for h in sorted(lab.hosts) if agentlab.node_annotations(api, h).get(kn.KEY) == keys[0]
    ]
    return hosts[0], keys[0]


def test_a_relay_whose_agent_restarts_keeps_its_pairs(cluster):
    """The relay's agent SIGKILLed (its supervisor starts it again, the host keeps running): it keeps
    the start its Node carries, so the pairs it relays never move; 20 echoes a second between every
    two hosts of different locations lose nothing."""
    lab, _server, _inventory, api = cluster
    hosts = sorted(lab.hosts)
    relay, key = relay_of_pair(lab, api)
    since = agentlab.node_annotations(api, relay)[kn.RELAY]
    before = agentlab.agent_pid(lab, relay)
    with agentlab.PingWatch(lab, hosts, interval=0.05) as watch:
        time.sleep(1)
        lab.run(relay, ["kill", "-KILL", str(before)], check=True)
        took = agentlab.stopwatch(lambda: agentlab.agent_pid(lab, relay) not in (None, before), 30)
        agentlab.wait_for(
            lambda: (
                "watching" in agentlab.read_log(lab, relay).rsplit("restored the last plan", 1)[-1]
            ),
            30,
        )
        time.sleep(8)  # past the 5 s a new start would take to count
    print(
        "\nrelay %s's agent SIGKILLed -> running again: %.1f s; lost: %s"
        % (relay, took, watch.lost() or "none")
    )
    assert "already in place" in agentlab.read_log(lab, relay)
    assert agentlab.node_annotations(api, relay)[kn.RELAY] == since
    assert relay_of_pair(lab, api)[1] == key
    assert watch.lost() == {}, watch.lost()


def test_a_dark_relay_is_replaced_within_seconds(cluster):
    """The relay of the NAT'd pair made dark (every packet in and out of it dropped) while 50 echoes
    a second cross between every two hosts of the other locations: the NAT'd leaders' probes see it
    dead, leave it (``down`` in their path state) and move the pair to the other relay; the pairs
    that do not go through it lose nothing."""
    lab, _server, _inventory, api = cluster
    hosts = sorted(lab.hosts)
    relay, key = relay_of_pair(lab, api)
    dark_location = lab.hosts[relay]["location"]
    watched = [h for h in hosts if lab.hosts[h]["location"] != dark_location]
    natted = set(lab.hosts[h]["lan_ip"] for h in hosts if lab.hosts[h]["location"] in NATTED)
    azure = leader(lab, "azure")
    writes = agentlab.read_log(lab, azure).count("wrote annotations")
    with agentlab.PingWatch(lab, watched, interval=0.02) as watch:
        time.sleep(3)
        agentlab.go_dark(lab, relay)
        dark = time.monotonic()
        try:
            moved = agentlab.stopwatch(lambda: relay_of_pair(lab, api)[1] != key, 60)
            time.sleep(8)  # the last 5 s must be answered in full
        finally:
            agentlab.go_light(lab, relay)
            dark = time.monotonic() - dark
    lost = watch.lost()
    said = json.loads(agentlab.node_annotations(api, azure)[kn.PATH_STATE])["down"]
    assert list(said) == ["location:" + lab.hosts[relay]["location"]], said
    print(
        "\n%s's path state: down %s; its Node written %d times in the %.0f s the relay was dark"
        % (azure, said, agentlab.read_log(lab, azure).count("wrote annotations") - writes, dark)
    )
    counts = dict(
        ("%s->%s" % k, len(v) if isinstance(v, list) else v) for k, v in sorted(lost.items())
    )
    print(
        "\nrelay %s dark: the NAT'd pair on the other relay %.1f s later; echoes lost per flow (50/s): %s"
        % (relay, moved, counts or "none")
    )
    worst = max([len(v) for v in lost.values() if isinstance(v, list)] or [0])
    print("NAT'd pair: at most %d echoes lost (%.1f s without an answer)" % (worst, worst * 0.02))
    # only flows between the NAT'd locations lose echoes, and they recovered before the end
    involved = dict(
        (k, v)
        for k, v in lost.items()
        if not (
            k[0] in [h for h in watched if lab.hosts[h]["location"] in NATTED] and k[1] in natted
        )
    )
    assert involved == {}, involved
    assert all(isinstance(v, list) for v in lost.values()), lost
    sent = dict(
        (k, int(re.search(r"(\d+) packets transmitted", out).group(1)))
        for k, out in watch.results.items()
    )
    assert all(max(v) < sent[k] - 5 / 0.02 for k, v in lost.items()), (lost, sent)
    # the relay back: every pair again (its agent relays again from its watch's reconnect)
    took = connect(lab, 150)
    print("relay %s back -> every host reaches every LAN and pod address: %.1f s" % (relay, took))
