"""A running Kilo cluster moves to kilo.mesh node by node, leaders included, and a node back, under traffic.

The mixed-cluster test (test_agent_mixed.py) shows Kilo's `kg` and our agent side by side; this one
moves every node of a 3 x 2 lab from kg to our agent, one at a time, with playbooks/migrate.yml,
while every host sends 50 UDP echoes a second to every host of the other locations (flows.RateFlows:
a fixed rate, counted by sequence number). Needs Kilo's kg binary in $KILO_KG (skipped otherwise);
with $KILO_KGCTL, Kilo's kgctl must agree with every leader after every step.

Kilo's DaemonSet is played by kubelab.DaemonSet: kg (with --clean-up=false, as the guide asks of
the DaemonSet) on every Node without the label kilo.mesh/agent, stopped with SIGTERM where the
label appears, started where it goes. Tests run in file order on one lab:

  a. kg alone meshes the three locations; migrate.yml --check on a leader changes nothing; a move
     refused after kg stopped (a stray tunnel on the leader) gives the node back to kg;
  b. every node moves, leaders included: echoes lost per node moved and in total are printed (the
     goal is none), every pair reaches every other after each step, the leaders never change;
  c. a second run changes nothing: site.yml over every node and migrate.yml on a moved leader;
  d. a node goes back to kg (a non-leader: kg writes nothing on its Node before its first check-in,
     30 s after it starts), whose pod starts KG_START_DELAY s after the label goes (an image pull):
     without the hand-back's refreshes the node would be silent for over a minute and leave every
     other agent's mesh; it never does, for two minutes after the move (losses printed).
"""

import os
import subprocess
import sys
import time

import pytest
from kubernetes import client

import agentlab  # pylint: disable=import-error
import kubelab  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "host"))
import flows  # noqa: E402 pylint: disable=import-error,wrong-import-position
import sitetools  # noqa: E402 pylint: disable=import-error,wrong-import-position

KG = kubelab.binary("KILO_KG", "build Kilo's cmd/kg (github.com/squat/kilo), set KILO_KG")
PREFIX = os.environ.get("KILO_TEST_PREFIX_AGENT_MIGRATE", "kmg")
LABEL = "kilo.mesh/agent"
LEADERS = [
    "aws-1",
    "azure-1",
    "gcp-1",
]  # public first hosts; gcp-1 is also a forced leader (labcluster)
# Every node once, leaders included: a member before its leader in aws, a leader first elsewhere.
ORDER = ("aws-2", "aws-1", "gcp-1", "gcp-2", "azure-1", "azure-2")
BACK = "azure-2"
WATCH = 120  # seconds of traffic watched after the move back (twice the agents' liveness window)
KG_START_DELAY = 40  # the moved-back node's kg pod starts this late: with kg's 30 s to its first check-in, > 60 s
RUN = ("-e", "kilo_task_timeout=120") + agentlab.AGENT_ARGS
# The most echoes a flow may lose in one step: a lost handshake (about 0.5 s at 50/s); the goal is none.
BOUND = 25


@pytest.fixture(scope="module")
def cluster():
    """(lab, server, inventory, api, daemonset): a 3 x 2 lab, its Nodes, Kilo's DaemonSet on it."""
    agentlab.require_lab_and_kube()
    with agentlab.agent_cluster(PREFIX, 3, 2) as (lab, server, inventory):
        with server.client() as api:
            core = client.CoreV1Api(api)
            for name, h in lab.hosts.items():
                # Kilo's discovery counts the lab's management address (198.18.0.0/15) as public and
                # has no flag to ignore an interface (the lab's inventory ignores mgmt0): the endpoint
                # is forced on the Node, as a Kilo user does, so both agents agree on it
                core.patch_node(
                    name,
                    {
                        "metadata": {
                            "annotations": {
                                kn.FORCE_ENDPOINT: "%s:51820" % (h["public_ip"] or h["lan_ip"])
                            }
                        }
                    },
                )
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
            daemonset = kubelab.DaemonSet(
                lab,
                core,
                sorted(lab.hosts),
                lambda name: kubelab.kg_argv(KG, name, clean_up=False),
                LABEL,
            )
            with daemonset:
                yield lab, server, inventory, api, daemonset


def pairs(lab):
    return [
        (src, dst)
        for src in sorted(lab.hosts)
        for dst in sorted(lab.hosts)
        if lab.hosts[src]["location"] != lab.hosts[dst]["location"]
    ]


def checked_in(api, names, since):
    return all(
        int(agentlab.node_annotations(api, n).get(kn.LAST_SEEN, 0)) >= since
        and agentlab.node_annotations(api, n).get(kn.KEY)
        for n in names
    )


def kg_log(lab, names):
    for name in names:
        print(
            "\n== kg log of %s\n%s"
            % (name, lab.run(name, ["tail", "-n", "30", "/var/log/kg.log"]).stdout)
        )


def kgctl_agrees(lab, server, api):
    """With $KILO_KGCTL: kgctl showconf of every leader lists the peers on its interface."""
    kgctl = os.environ.get("KILO_KGCTL")
    if not kgctl or not os.access(kgctl, os.X_OK):
        return None
    from test_kgctl import showconf_peers  # pylint: disable=import-error,import-outside-toplevel

    for leader in kubelab.leaders(api, lab.hosts):
        done = subprocess.run(
            [kgctl, "--kubeconfig", server.kubeconfig, "showconf", "node", leader],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0 and "[Interface]" in done.stdout, (leader, done.stderr)
        have = dict((key, p["allowed_ips"]) for key, p in agentlab.wg_dump(lab, leader).items())
        assert showconf_peers(done.stdout) == have, (leader, done.stdout, have)
    return True


def migrate(inventory, node, *extra):
    out = sitetools.playbook(inventory, "migrate.yml", "-e", "node=" + node, *(RUN + extra))
    counts = sitetools.recap(out)
    assert counts[node]["failed"] == 0 and counts[node]["unreachable"] == 0, out[-4000:]
    return out, counts


def left_out(lab, host, node, since):
    """The lines of ``host``'s agent log since ``since`` saying it left ``node`` out of its mesh."""
    out = []
    for line in agentlab.read_log(lab, host).splitlines():
        stamp = line.split(" ", 1)[0]
        try:
            when = time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            continue
        if when >= int(since) and "left out node %s:" % node in line:
            out.append(line)
    return out


def timeline(log, start, events, result):
    """Each task of an Ansible log, each DaemonSet event and each lost echo, in seconds from ``start``."""
    marks = []
    with open(log) as f:
        for line in f:
            if "| TASK [" in line:
                when = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + float(
                    "0." + line[20:23]
                )
                marks.append((when, line.split("| TASK [", 1)[1].split("]", 1)[0]))
    marks += [(t, "kg %s %s" % (what, name)) for t, name, what in events if t >= start]
    for (src, dst), (_sent, times) in sorted(result.items()):
        spans = []  # runs of lost echoes, apart by more than 0.1 s
        for t in sorted(t for t in times if t >= start):
            if spans and t - spans[-1][1] <= 0.1:
                spans[-1] = (spans[-1][0], t, spans[-1][2] + 1)
            else:
                spans.append((t, t, 1))
        marks += [(a, "lost %d echoes %s->%s (%.2f s)" % (n, src, dst, b - a)) for a, b, n in spans]
    print("  timeline of the move back:")
    for when, what in sorted(marks):
        print("    %+7.2f s  %s" % (when - start, what))


def report(result, steps, what):
    """Print the echoes lost in each step (and between steps) and the total; {step: worst flow's loss}."""
    worst = {}
    print(
        "\n%s: %d flows at 50/s, %d echoes sent"
        % (what, len(result), sum(s for s, _ in result.values()))
    )
    edges = [t for _name, start, end in steps for t in (start, end)]
    windows = list(steps) + [
        ("between steps", edges[i], edges[i + 1]) for i in range(1, len(edges) - 1, 2)
    ]
    for name, start, end in windows:
        lost = flows.lost_between(result, start, end)
        bad = dict((p, n) for p, n in lost.items() if n)
        worst[name] = max(lost.values()) if lost else 0
        if name != "between steps" or bad:
            print(
                "  %-28s %5.1f s  lost %d%s"
                % (
                    name,
                    end - start,
                    sum(lost.values()),
                    "".join("  %s->%s %d" % (s, d, n) for (s, d), n in sorted(bad.items())),
                )
            )
    total = sum(len(times) for _s, times in result.values())
    print("  total lost %d (%.2f s of one flow at 50/s)" % (total, total / 50.0))
    return worst


# -- the tests ---------------------------------------------------------------------------------


def test_a_kilos_agents_alone_mesh_the_locations(cluster):
    lab, _server, _inventory, api, daemonset = cluster
    since = int(time.time()) - 5
    try:
        agentlab.wait_for(lambda: checked_in(api, lab.hosts, since), 90)
        took = agentlab.stopwatch(
            lambda: agentlab.all_pairs_ping(lab, sorted(lab.hosts)), 120, interval=1
        )
        agentlab.wait_for(lambda: kubelab.leaders(api, lab.hosts) == LEADERS, 90)
    except AssertionError:
        kg_log(lab, sorted(lab.hosts))
        raise
    print("\nkg on every node: every pair pings (%.1f s), leaders %s" % (took, LEADERS))
    assert sorted(daemonset.pids) == sorted(lab.hosts)


def test_a2_check_mode_runs_every_refusal_and_changes_nothing(cluster):
    lab, _server, inventory, api, daemonset = cluster
    pid = daemonset.pids["aws-1"]
    routes = lab.run("aws-1", ["ip", "route", "show", "proto", "static"]).stdout
    out, counts = migrate(inventory, "aws-1", "--check", "--diff")
    # the diff shows kg's routes as the converge would take them over
    assert counts["aws-1"]["changed"] > 0 and "dev kilo0 onlink src" in out, out[-4000:]
    assert daemonset.pids.get("aws-1") == pid and kubelab.alive(lab, "aws-1", pid)
    assert LABEL not in (client.CoreV1Api(api).read_node("aws-1").metadata.labels or {})
    assert lab.run("aws-1", ["ip", "route", "show", "proto", "static"]).stdout == routes != ""
    assert agentlab.agent_pid(lab, "aws-1") is None


def test_a3_a_move_that_fails_after_the_label_gives_the_node_back_to_kg(cluster):
    """A leader whose interface holds a tunnel the mesh has not: the takeover refuses it after kg
    stopped, and the play puts the node back (label removed, kg started again, nothing of ours)."""
    lab, _server, inventory, api, daemonset = cluster
    stray = "aNdi7F94dUaB6O9ScwgibmXpFk7PcQSX2C5Hzcc0b2M="
    lab.run(
        "aws-1", ["wg", "set", "kilo0", "peer", stray, "allowed-ips", "10.99.0.1/32"], check=True
    )
    out = sitetools.playbook(inventory, "migrate.yml", "-e", "node=aws-1", *RUN, expect_rc=2)
    assert "the interface runs other tunnels than the plan says (remove peer %s)" % stray in out, (
        out[-4000:]
    )
    assert "Kilo agent has the node again" in out, out[-4000:]
    assert LABEL not in (client.CoreV1Api(api).read_node("aws-1").metadata.labels or {})
    agentlab.wait_for(lambda: "aws-1" in daemonset.pids, 30)
    assert agentlab.agent_pid(lab, "aws-1") is None
    # kg, back, puts its own configuration on the interface (the stray tunnel goes) and the mesh is whole
    agentlab.wait_for(lambda: stray not in agentlab.wg_dump(lab, "aws-1"), 60)
    agentlab.wait_for(lambda: agentlab.all_pairs_ping(lab, sorted(lab.hosts)), 60)
    print(
        "\na move refused after the label (a stray tunnel on aws-1): the node went back to kg: %s"
        % ["%s %s" % (name, what) for _t, name, what in daemonset.events if name == "aws-1"]
    )


def test_b_every_node_moves_to_kilo_mesh_without_loss(cluster):
    lab, server, inventory, api, daemonset = cluster
    hosts = sorted(lab.hosts)
    flows.warm_up(lab, pairs(lab))
    steps = []
    traffic = flows.RateFlows(lab, pairs(lab))
    try:
        time.sleep(2)
        for node in ORDER:
            start = time.time()
            _out, counts = migrate(inventory, node)
            took = time.time() - start
            time.sleep(2)  # what follows the run (the other agents' next events) counts in the step
            steps.append(
                ("%s%s" % (node, " (leader)" if node in LEADERS else ""), start, time.time())
            )
            assert node not in daemonset.pids, daemonset.events
            assert agentlab.agent_pid(lab, node), agentlab.read_log(lab, node)
            assert agentlab.all_pairs_ping(lab, hosts), node
            assert kubelab.leaders(api, hosts) == LEADERS, node
            kgctl = kgctl_agrees(lab, server, api)
            print(
                "\nmoved %s: migrate.yml %.1f s, changed=%d; every pair pings%s"
                % (
                    node,
                    took,
                    counts[node]["changed"],
                    "; kgctl agrees with every leader" if kgctl else "",
                )
            )
        time.sleep(2)
    finally:
        result = traffic.stop()
        worst = report(result, steps, "every node moved from kg to kilo.mesh, one at a time")
    assert not daemonset.pids, daemonset.pids
    assert all(worst[name] <= BOUND for name, _s, _e in steps), worst


def test_c_a_second_run_changes_nothing(cluster):
    lab, _server, inventory, _api, _daemonset = cluster
    out = sitetools.site(inventory, *RUN)
    counts = sitetools.recap(out)
    assert set(counts) == set(lab.hosts), counts
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), out[-4000:]
    out, again = migrate(inventory, "gcp-1")
    assert again["gcp-1"]["changed"] == 0, out[-6000:]
    print(
        "\nafter the move: site.yml over every node changed=0, migrate.yml on gcp-1 again changed=0"
    )


def test_d_a_node_goes_back_to_kg_and_never_leaves_the_mesh(cluster):
    lab, server, inventory, api, daemonset = cluster
    hosts = sorted(lab.hosts)
    flows.warm_up(lab, pairs(lab))
    traffic = flows.RateFlows(lab, pairs(lab))
    samples = []
    try:
        time.sleep(2)
        daemonset.start_delay = KG_START_DELAY
        start = time.time()
        log = os.path.join(os.path.dirname(inventory), "migrate-back.log")
        os.environ["ANSIBLE_LOG_PATH"] = log  # Ansible's own log: a time on every task
        try:
            migrate(inventory, BACK, "-e", "to=kg")
        finally:
            del os.environ["ANSIBLE_LOG_PATH"]
        moved = time.time()
        assert agentlab.agent_pid(lab, BACK) is None
        # the other agents keep the node for two minutes: sampled every 5 s from their own view
        while time.time() < moved + WATCH:
            seen = agentlab.node_annotations(api, BACK).get(kn.LAST_SEEN)
            samples.append(time.time() - int(seen))
            time.sleep(5)
        end = time.time()
    finally:
        result = traffic.stop()
    worst = report(
        result,
        [("%s back to kg" % BACK, start, moved), ("the %d s after" % WATCH, moved, end)],
        "%s moved back to kg, then watched" % BACK,
    )
    dropped = dict((h, left_out(lab, h, BACK, start)) for h in hosts if h != BACK)
    print(
        "  migrate.yml -e to=kg took %.1f s (it waits for kg's first check-in); the Node's last-seen at most %.0f s"
        " old over the %d s watched; our agents that left %s out: %s"
        % (
            moved - start,
            max(samples),
            WATCH,
            BACK,
            sorted(h for h, lines in dropped.items() if lines) or "none",
        )
    )
    began = [
        t for t, name, what in daemonset.events if name == BACK and what == "started" and t >= start
    ]
    print(
        "  kg started on %s %.1f s after the move began (its pod held back %d s), checked in before the play"
        " ended" % (BACK, began[0] - start if began else -1, KG_START_DELAY)
    )
    timeline(log, start, daemonset.events, result)
    assert BACK in daemonset.pids, daemonset.events
    assert max(samples) < 60, samples
    assert not any(dropped.values()), dropped
    assert agentlab.all_pairs_ping(lab, hosts)
    assert kubelab.leaders(api, hosts) == LEADERS
    kgctl_agrees(lab, server, api)
    assert all(n <= BOUND for n in worst.values()), worst
    out, again = migrate(inventory, BACK, "-e", "to=kg")
    assert again[BACK]["changed"] == 0 and "nothing to move" in out, out[-4000:]
