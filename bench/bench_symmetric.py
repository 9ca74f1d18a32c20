#!/usr/bin/env python3
"""kilo-mesh-agent behind symmetric NATs: the NAT'd pair stays relayed, without flapping, for
five minutes (docs/DESIGN.md, "Direct paths", item 5; CI's test_agent_direct.py watches 60 s).

The lab of tests/kube/test_agent_direct.py's symmetric case (prefix kbs): a kube-apiserver of its
own, 3 locations x 1 host, aws public (the relay), gcp and azure behind symmetric NAT routers (a
port per destination: their probes never handshake), marked ``kilo.mesh/behind-nat``; the agents
installed with the install step and the agent role alone. Once every host reaches every other,
WATCH seconds (300; BENCH_SYMMETRIC_SECONDS) of 50 echoes a second both ways between the NAT'd
leaders while each second reads which entry carries the other on each end.

Prints `bench symmetric <what> key=value ...`: the path changes (a change of the carrying entry at
either end), the NAT'd leaders' Node writes, the echoes lost, the relay rule's growth (packets,
bytes), the path states and the kilo_path samples seen. A benchmark: it never fails on a figure.
"""

import json
import os
import re
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [
    os.path.join(REPO, "tests", "kube"),
    os.path.join(REPO, "tests", "host"),
    REPO,
    os.path.join(REPO, ".collections"),
]
from kubernetes import client  # noqa: E402

import agentlab  # noqa: E402  pylint: disable=import-error,wrong-import-position
from test_agent_direct import carrier, path_state  # noqa: E402  pylint: disable=import-error
from test_agent_relays import install, relay_counter, relay_metrics  # noqa: E402  pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn  # noqa: E402

PREFIX = os.environ.get("KILO_TEST_PREFIX_BENCH_SYMMETRIC", "kbs")
WATCH = float(os.environ.get("BENCH_SYMMETRIC_SECONDS", "300"))
RATE = 0.02  # 50 echoes a second
RELAY, NATTED = "aws", ("gcp", "azure")


def line(what, **figures):
    print(
        "bench symmetric %s %s" % (what, " ".join("%s=%s" % kv for kv in figures.items())),
        flush=True,
    )


def writes(lab, host):
    return agentlab.read_log(lab, host).count("wrote annotations")


def main():
    if os.geteuid() != 0:
        line("skipped", reason="needs-root")
        return 0
    with agentlab.agent_cluster(PREFIX, 3, 1, nat=[2, 3], nat_kind="symmetric") as (
        lab,
        server,
        inventory,
    ):
        with server.client() as api:
            core = client.CoreV1Api(api)
            hosts = dict((lab.hosts[h]["location"], h) for h in lab.hosts)
            for loc in NATTED:
                core.patch_node(
                    hosts[loc],
                    {"metadata": {"annotations": {kn.FIELDS["behind_nat"].annotation: "true"}}},
                )
            start = time.monotonic()
            install(inventory)
            installed = time.monotonic() - start
            agentlab.wait_for(
                lambda: all("watching" in agentlab.read_log(lab, h) for h in lab.hosts), 60
            )
            took = agentlab.stopwatch(
                lambda: agentlab.all_pairs_ping(lab, sorted(lab.hosts)), 180, interval=1
            )
            line("connected", installed="%.1f" % installed, matrix="%.1f" % (installed + took))
            pair = [hosts[n] for n in NATTED]
            keys = dict((h, agentlab.node_annotations(api, h)[kn.KEY]) for h in lab.hosts)
            names = dict((k, lab.hosts[h]["location"]) for h, k in keys.items())

            def carriers():
                return (
                    names.get(carrier(lab, pair[0], pair[1])),
                    names.get(carrier(lab, pair[1], pair[0])),
                )

            before = dict((h, writes(lab, h)) for h in pair)
            counted = relay_counter(lab, hosts[RELAY])
            states, seen, changes, reads = set(), [], 0, 0
            last = carriers()
            seen.append(last)
            begun = time.monotonic()
            with agentlab.PingWatch(lab, pair, interval=RATE) as watch:
                while time.monotonic() - begun < WATCH:
                    time.sleep(1)
                    now = carriers()
                    reads += 1
                    if now != last:
                        changes += 1
                        seen.append(now)
                        last = now
                    states.add(
                        json.dumps(
                            dict((n, path_state(api, hosts[n])) for n in NATTED), sort_keys=True
                        )
                    )
                watched = time.monotonic() - begun
            after = relay_counter(lab, hosts[RELAY])
            written = dict((h, writes(lab, h) - before[h]) for h in pair)
            lost = watch.lost()
            sent = dict(
                ("%s->%s" % k, re.search(r"(\d+) packets transmitted", out).group(1))
                for k, out in sorted(watch.results.items())
            )
            line(
                "watched",
                seconds="%.0f" % watched,
                reads=reads,
                path_changes=changes,
                carriers="|".join("%s,%s" % c for c in seen),
            )
            line("node-writes", **dict((h, n) for h, n in sorted(written.items())))
            line(
                "echoes",
                rate="50/s asked",
                sent=",".join("%s:%s" % kv for kv in sorted(sent.items())),
                lost=",".join(
                    "%s->%s:%s" % (k[0], k[1], len(v) if isinstance(v, list) else v)
                    for k, v in sorted(lost.items())
                )
                or "0",
            )
            line(
                "relay-rule",
                packets=after[0] - counted[0],
                bytes=after[1] - counted[1],
                packets_per_s="%.1f" % ((after[0] - counted[0]) / watched),
            )
            line("path-states", seen=len(states), last=sorted(states)[-1].replace(" ", ""))
            line(
                "kilo_path",
                **dict(
                    (
                        h,
                        ";".join(
                            "%(segment)s,%(path)s,%(via)s,probing=%(probing)s" % s
                            for s in relay_metrics(lab, h)["path"]
                        ),
                    )
                    for h in pair
                ),
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
