#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Benchmark of the topology engine: the plans of EVERY node of synthetic meshes, and one node's.

Per size: ``plans nodes=N locations=L seconds=S rss_mb=M`` (every plan, wall time: ``build_plans``
and then each plan taken in turn, as ``plan_store.save`` takes them to write them, the first 50
kept; M is the peak RSS of the process the size runs in: an engine whose ``build_plans`` makes
every plan holds them all, one that renders each plan when asked holds one), ``plan_one nodes=N
cpu_seconds=C`` (the plan of one node, ``only=[name]``, taken: what every agent computes on
every reconcile, and a join without a stored plan)
and ``plan_load`` (a join reading its stored plan). Each size runs in a fresh process, so one
size's memory never counts in the next one's peak. Not a test: nothing fails on time.

``BENCH_BASE=<commit>`` runs the same bench on that commit beside the working tree, in the same
sitting (``git archive`` into a temporary directory; base and working tree alternate, size by
size), and prints both figures and their ratio (work / base), then the goals as ratios to the
base's every-plan time at N=3,000. ``BENCH_REPEAT`` (default 3, with a base) repeats each
measurement and keeps the smallest (the machine is shared: the least disturbed run is the
closest to the engine's own cost). ``BENCH_SIZES`` (e.g. ``3000:30,10000:100``) picks sizes.

Meshes: nodes spread round-robin over the locations; 1 node in 7 has a public endpoint (100.64/10,
public to Kilo), the others use their internal IP as endpoint; every node has a pod CIDR;
five outside peers.
"""

import base64
import inspect
import json
import os
import resource
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = ((100, 10), (1000, 10), (3000, 30), (10000, 100))
# the goals (docs/DESIGN.md, "Scale"): ratios to the base's every-plan time at N=3,000
GOAL_SIZE = 3000
GOALS = (
    ("plans", 3000, "seconds", 1.0, "single-stack at least as fast as the base"),
    ("plans", 10000, "seconds", 2.3, "every plan at N=10,000"),
    ("plan_one", 3000, "cpu_seconds", 0.12, "one node's plan at N=3,000"),
)
GOAL_RSS_MB = (10000, 500)


def key(i):
    return base64.b64encode(struct.pack(">I", i + 1) * 8).decode()


def mesh(count, locations):
    nodes = []
    for i in range(count):
        internal = "172.%d.%d.%d" % (16 + (i >> 16), (i >> 8) & 255, i & 255)
        public = i % 7 == 0
        endpoint = (
            "100.%d.%d.%d:51820" % (64 + (i >> 16), (i >> 8) & 255, i & 255)
            if public
            else internal + ":51820"
        )
        nodes.append(
            {
                "name": "node-%05d" % i,
                "location": "loc-%03d" % (i % locations),
                "endpoint": endpoint,
                "internal_ip": internal + "/12",
                "pod_cidr": "10.%d.%d.0/24" % (128 + (i >> 8), i & 255),
                "public_key": key(i),
                "leader": False,
                "persistent_keepalive": 0,
                "allowed_location_ips": [],
                "discovered_endpoints": {},
            }
        )
    peers = [
        {
            "name": "peer-%d" % j,
            "public_key": key(100000 + j),
            "allowed_ips": ["10.250.%d.0/24" % j],
            "endpoint": None,
            "persistent_keepalive": 0,
        }
        for j in range(5)
    ]
    return nodes, peers


def child(collections, count, locations):
    """In a fresh process of one tree: time every plan, then one node's; print the figures (JSON)."""
    sys.path.insert(0, collections)
    try:
        from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans
    except ImportError:  # a commit before module_utils/engine/ (a3ded01)
        from ansible_collections.kilo.mesh.plugins.module_utils.topology import build_plans
    nodes, peers = mesh(count, locations)
    # the push run's reading: each plan rendered when asked (an engine before lazy plans made
    # them all in build_plans)
    lazy = {"lazy": True} if "lazy" in inspect.signature(build_plans).parameters else {}
    start, cpu = time.perf_counter(), time.process_time()
    result = build_plans(nodes, peers, **lazy)
    # every plan, one by one, as plan_store.save takes them (an engine that renders each plan
    # when asked renders it here; one that made them all in build_plans holds them all)
    plans, first = result["plans"], []
    for name in plans:
        plan = plans[name]
        if len(first) < 50:
            first.append(plan)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    assert len(plans) == count
    # what each host's kilo.mesh.join does per run since the mesh is computed once: read its
    # own plan (the largest one: a non-leader routes to every other node)
    text = max((json.dumps(p, separators=(",", ":")) for p in first), key=len)
    del plan, first, plans
    start = time.perf_counter()
    json.loads(text)
    load_seconds = time.perf_counter() - start
    del result
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    one = nodes[0]["name"]
    start, cpu = time.perf_counter(), time.process_time()
    result = build_plans(nodes, peers, only=[one])
    plan = result["plans"][one]
    one_cpu, one_seconds = time.process_time() - cpu, time.perf_counter() - start
    assert list(result["plans"]) == [one] and plan["name"] == one
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu_seconds": cpu_seconds,
                "rss_mb": rss_mb,
                "one_seconds": one_seconds,
                "one_cpu": one_cpu,
                "load_seconds": load_seconds,
                "plan_kb": len(text) / 1024.0,
            }
        )
    )


def run(collections, count, locations):
    proc = subprocess.run(
        [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            collections,
            str(count),
            str(locations),
        ],
        stdout=subprocess.PIPE,
        universal_newlines=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(
            "bench: size nodes=%d failed in %s (exit %s)" % (count, collections, proc.returncode)
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def best(runs):
    """The smallest of each figure over repeated runs."""
    return dict((k, min(r[k] for r in runs)) for k in runs[0])


def sizes():
    text = os.environ.get("BENCH_SIZES")
    if not text:
        return SIZES
    return tuple(tuple(int(x) for x in item.split(":")) for item in text.split(","))


def print_size(prefix, count, locations, fig):
    print(
        "%splans nodes=%d locations=%d seconds=%.2f cpu_seconds=%.2f rss_mb=%.0f"
        % (prefix, count, locations, fig["seconds"], fig["cpu_seconds"], fig["rss_mb"])
    )
    print(
        "%splan_one nodes=%d cpu_seconds=%.3f seconds=%.3f (a join or an agent computing its plan)"
        % (prefix, count, fig["one_cpu"], fig["one_seconds"])
    )
    print(
        "%splan_load nodes=%d seconds=%.4f plan_kb=%.0f (a join reading its stored plan)"
        % (prefix, count, fig["load_seconds"], fig["plan_kb"])
    )


def main():
    import base_tree  # pylint: disable=import-error

    rev = os.environ.get("BENCH_BASE")
    repeat = int(os.environ.get("BENCH_REPEAT") or (3 if rev else 1))
    if not rev:
        for count, locations in sizes():
            print_size(
                "",
                count,
                locations,
                best([run(base_tree.WORK, count, locations) for _ in range(repeat)]),
            )
            sys.stdout.flush()
        return
    name = base_tree.describe(rev)
    figures = {}
    with base_tree.checkout(rev) as base:
        print(
            "base %s (%s) beside the working tree; best of %d runs each, alternating"
            % (name, rev, repeat)
        )
        for count, locations in sizes():
            runs = {"base": [], "work": []}
            for _ in range(repeat):
                for which, path in (("base", base), ("work", base_tree.WORK)):
                    runs[which].append(run(path, count, locations))
            b, w = best(runs["base"]), best(runs["work"])
            figures[count] = (b, w)
            print_size("base %s " % name, count, locations, b)
            print_size("work    ", count, locations, w)
            print(
                "ratio   nodes=%d plans seconds=%.2f cpu_seconds=%.2f rss_mb=%.2f plan_one cpu_seconds=%.2f"
                " (work / base)"
                % (
                    count,
                    w["seconds"] / b["seconds"],
                    w["cpu_seconds"] / b["cpu_seconds"],
                    w["rss_mb"] / b["rss_mb"],
                    w["one_cpu"] / b["one_cpu"],
                )
            )
            sys.stdout.flush()
    if GOAL_SIZE not in figures:
        return
    unit = figures[GOAL_SIZE][0]["seconds"]
    print(
        "goals: ratios to base %s's every-plan seconds at N=%d (%.2f s; its CPU seconds %.2f in brackets)"
        % (name, GOAL_SIZE, unit, figures[GOAL_SIZE][0]["cpu_seconds"])
    )
    for what, count, field, goal, text in GOALS:
        if count in figures:
            value = figures[count][1][{"seconds": "seconds", "cpu_seconds": "one_cpu"}[field]]
            cpu = figures[count][1]["cpu_seconds" if what == "plans" else "one_cpu"]
            print(
                "goal    %s nodes=%d %s=%.3f ratio=%.3f (cpu %.3f) goal<=%.2f %s (%s)"
                % (
                    what,
                    count,
                    field,
                    value,
                    value / unit,
                    cpu / figures[GOAL_SIZE][0]["cpu_seconds"],
                    goal,
                    "met" if value / unit <= goal else "NOT met",
                    text,
                )
            )
    count, limit = GOAL_RSS_MB
    if count in figures:
        rss = figures[count][1]["rss_mb"]
        print(
            "goal    plans nodes=%d rss_mb=%.0f goal<%d %s"
            % (count, rss, limit, "met" if rss < limit else "NOT met")
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
