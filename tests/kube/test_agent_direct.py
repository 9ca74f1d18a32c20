"""Direct paths in agent mode on a real lab and a real kube-apiserver: two locations behind NAT,
relayed at first through the public one, move to a direct path by themselves when their NATs map
endpoint-independently, and never when they are symmetric (docs/DESIGN.md, "Direct paths").

Lab (prefix kdp, KILO_TEST_PREFIX_AGENT_DIRECT; one lab per NAT kind, the fixture's parameter):
3 locations x 1 host, aws public (the relay), gcp and azure behind NAT routers of the kind, their
Nodes marked ``kilo.mesh/behind-nat``, no endpoint of the operator's. The agents are installed
with the install step and the agent role alone (test_agent_relays.py's ``install``).

Per lab, in file order: the agents connect the mesh; then, ``eim``: the pair goes direct while 50
echoes a second cross both ways (printed: seconds from the install's start to the switch, echoes
lost), the relay's rule stops counting, and after the gcp router takes a new address (new
mappings) the pair falls back to the relay and goes direct again by itself (times printed);
``symmetric``: the pair is still relayed after 60 s, the NAT'd leaders wrote their Nodes not once
and their /metrics say ``kilo_path{path="relayed", via="location:aws", probing="true"}``.
"""

import json
import os
import re
import sys
import time

import pytest
from kubernetes import client

import agentlab  # pylint: disable=import-error
from test_agent_relays import install, relay_counter, relay_metrics  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "host"))

PREFIX = os.environ.get("KILO_TEST_PREFIX_AGENT_DIRECT", "kdp")
RELAY, NATTED = "aws", ("gcp", "azure")
RATE = 0.02  # 50 echoes a second


@pytest.fixture(scope="module", params=["eim", "symmetric"])
def cluster(request):
    agentlab.require_lab_and_kube()
    kind = request.param
    with agentlab.agent_cluster(PREFIX, 3, 1, nat=[2, 3], nat_kind=kind) as (
        lab,
        server,
        inventory,
    ):
        with server.client() as api:
            core = client.CoreV1Api(api)
            for name, h in lab.hosts.items():
                if h["location"] in NATTED:
                    core.patch_node(
                        name,
                        {"metadata": {"annotations": {kn.FIELDS["behind_nat"].annotation: "true"}}},
                    )
            hosts = dict((lab.hosts[h]["location"], h) for h in lab.hosts)
            state = {"kind": kind, "hosts": hosts, "start": time.monotonic()}
            install(inventory)
            state["installed"] = time.monotonic() - state["start"]
            agentlab.wait_for(
                lambda: all("watching" in agentlab.read_log(lab, h) for h in lab.hosts), 60
            )
            yield lab, api, state


def carrier(lab, host, far):
    """The public key of the entry on ``host`` that carries ``far``'s LAN address."""
    wanted = lab.hosts[far]["lan_ip"] + "/32"
    keys = [
        k
        for k, p in agentlab.wg_dump(lab, host).items()
        if any(a == wanted or _contains(a, lab.hosts[far]["lan_ip"]) for a in p["allowed_ips"])
    ]
    assert len(keys) == 1, agentlab.wg_dump(lab, host)
    return keys[0]


def _contains(cidr, ip):
    import ipaddress  # pylint: disable=import-outside-toplevel

    try:
        return ipaddress.ip_address(ip) in ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False


def is_direct(lab, api, hosts):
    """Both NAT'd leaders carry each other's address on each other's entry."""
    a, b = hosts[NATTED[0]], hosts[NATTED[1]]
    return (
        carrier(lab, a, b) == agentlab.node_annotations(api, b)[kn.KEY]
        and carrier(lab, b, a) == agentlab.node_annotations(api, a)[kn.KEY]
    )


def is_relayed(lab, api, hosts):
    relay_key = agentlab.node_annotations(api, hosts[RELAY])[kn.KEY]
    a, b = hosts[NATTED[0]], hosts[NATTED[1]]
    return carrier(lab, a, b) == relay_key and carrier(lab, b, a) == relay_key


def reachable(lab, hosts):
    return agentlab.all_pairs_ping(lab, sorted(hosts.values()))


def path_state(api, host):
    return json.loads(agentlab.node_annotations(api, host)[kn.PATH_STATE])


def of_kind(cluster, kind):
    """(lab, api, state, hosts, the NAT'd pair) of the lab behind ``kind`` NATs; other labs skip."""
    lab, api, state = cluster
    if state["kind"] != kind:
        pytest.skip("%s only" % kind)
    hosts = state["hosts"]
    return lab, api, state, hosts, [hosts[n] for n in NATTED]


def test_relayed_first(cluster):
    lab, api, state = cluster
    hosts = state["hosts"]
    took = agentlab.stopwatch(lambda: reachable(lab, hosts), 120, interval=1)
    print(
        "\n[%s] agents installed in %.1f s; every host reaches every other %.1f s later"
        % (state["kind"], state["installed"], took)
    )


def test_eim_pair_goes_direct_across_the_switch(cluster):
    lab, api, state, hosts, pair = of_kind(cluster, "eim")
    with agentlab.PingWatch(lab, pair, interval=RATE) as watch:
        agentlab.wait_for(lambda: is_direct(lab, api, hosts), 120, interval=0.5)
        direct = time.monotonic() - state["start"]
        time.sleep(2)
    lost = watch.lost()
    counts = dict(
        ("%s->%s" % k, len(v) if isinstance(v, list) else v) for k, v in sorted(lost.items())
    )
    print(
        "\n[eim] direct %.1f s from the install's start (agents installed at %.1f s); echoes lost at 50/s across"
        " the switch: %s" % (direct, state["installed"], counts or "none")
    )
    print("path states: %s" % dict((n, path_state(api, hosts[n])) for n in NATTED))
    # the relay no longer forwards their traffic
    with agentlab.PingWatch(lab, pair, interval=RATE) as watch:
        before = relay_counter(lab, hosts[RELAY])
        time.sleep(3)
        after = relay_counter(lab, hosts[RELAY])
    print(
        "relay rule (packets, bytes) over 3 s of 50/s echoes both ways: %s -> %s" % (before, after)
    )
    assert after[0] == before[0], (before, after)
    assert watch.lost() == {}, watch.lost()
    assert all(isinstance(v, list) for v in lost.values()), lost
    assert all(path_state(api, hosts[n])["direct"] for n in NATTED)
    # the agents' /metrics: no kilo_path once direct (only pairs through a relay have one)
    assert [relay_metrics(lab, h)["path"] for h in pair] == [[], []]
    state["direct"] = direct


def test_eim_new_mappings_heal_by_themselves(cluster):
    """The gcp router re-addressed (every mapping new): the direct path dies, both ends fall back to
    the relay (held), the relay learns the new mapping, and after the hold the pair goes direct again."""
    lab, api, state, hosts, pair = of_kind(cluster, "eim")
    agentlab.wait_for(lambda: is_direct(lab, api, hosts), 60, interval=0.5)
    with agentlab.PingWatch(lab, pair, interval=RATE) as watch:
        time.sleep(1)
        lab.remap(NATTED[0])
        start = time.monotonic()
        relayed = agentlab.stopwatch(lambda: is_relayed(lab, api, hosts), 60, interval=0.5)
        answered = agentlab.stopwatch(lambda: reachable(lab, hosts), 60, interval=0.5) + relayed
        held = dict((n, path_state(api, hosts[n])["held"]) for n in NATTED)
        agentlab.wait_for(lambda: is_direct(lab, api, hosts), 150, interval=1)
        direct = time.monotonic() - start
        time.sleep(2)
    lost = watch.lost()
    counts = dict(
        ("%s->%s" % k, len(v) if isinstance(v, list) else v) for k, v in sorted(lost.items())
    )
    print(
        "\n[eim] gcp's NAT remapped: relayed after %.1f s, every host reached %.1f s, direct again %.1f s;"
        " held %s; echoes lost at 50/s: %s" % (relayed, answered, direct, held, counts or "none")
    )
    assert any(held.values()), held
    assert reachable(lab, hosts)


def test_symmetric_pair_stays_relayed_without_flapping(cluster):
    lab, api, state, hosts, pair = of_kind(cluster, "symmetric")
    writes = dict((h, agentlab.read_log(lab, h).count("wrote annotations")) for h in pair)
    seen = set()
    end = time.monotonic() + 60
    while time.monotonic() < end:
        assert is_relayed(lab, api, hosts)
        seen.add(json.dumps(dict((n, path_state(api, hosts[n])) for n in NATTED), sort_keys=True))
        time.sleep(2)
    written = dict(
        (h, agentlab.read_log(lab, h).count("wrote annotations") - writes[h]) for h in pair
    )
    probes = dict(
        (h, [p["name"] for p in agentlab.agent_plan(lab, h)["peers"] if p.get("probe")])
        for h in pair
    )
    print(
        "\n[symmetric] relayed for 60 s; Node writes by the NAT'd leaders: %s; path states seen: %s; probes: %s"
        % (written, sorted(seen), probes)
    )
    assert len(seen) == 1 and not any(json.loads(s)[n]["direct"] for s in seen for n in NATTED), (
        seen
    )
    assert all(v == 0 for v in written.values()), written
    assert all(probes.values()), probes
    # what the agents' /metrics say: relayed via the relay, a probe trying meanwhile
    exported = dict((n, relay_metrics(lab, hosts[n])["path"]) for n in NATTED)
    print("kilo_path: %s" % exported)
    for n, far in zip(NATTED, reversed(NATTED)):
        assert exported[n] == [
            {
                "segment": "location:" + far,
                "path": "relayed",
                "via": "location:" + RELAY,
                "probing": "true",
            }
        ], exported
    # the probes were re-armed (every 25 s) without a failure of the direct loop
    failed = dict(
        (h, re.findall(r"direct paths: \w+Error.*", agentlab.read_log(lab, h))) for h in pair
    )
    assert not any(failed.values()), failed
    assert reachable(lab, hosts)
