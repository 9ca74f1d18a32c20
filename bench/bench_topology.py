#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Benchmark of the topology engine: the plans of EVERY node of synthetic meshes.

Prints two lines per size: ``plans nodes=N locations=L seconds=S rss_mb=M`` (every plan; M is the
peak RSS of the child process the size runs in) and ``plan_one nodes=N seconds=S`` (the plan of one
node, ``only=[name]``: what a per-host action computes). Each size runs in a fresh forked child, so
one size's memory never counts in the next one's peak. Not a test: nothing fails on time. Nodes spread round-robin over the locations; 1 node in 7 has a public endpoint (100.64/10,
public to Kilo), the others use their internal IP as endpoint; every node has a pod CIDR.
"""

import base64
import json
import multiprocessing
import os
import resource
import struct
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans  # noqa: E402

SIZES = ((100, 10), (1000, 10), (3000, 30))


def key(i):
    return base64.b64encode(struct.pack(">I", i + 1) * 8).decode()


def mesh(count, locations):
    nodes = []
    for i in range(count):
        internal = "172.%d.%d.%d" % (16 + (i >> 16), (i >> 8) & 255, i & 255)
        public = i % 7 == 0
        endpoint = "100.%d.%d.%d:51820" % (64 + (i >> 16), (i >> 8) & 255, i & 255) if public else internal + ":51820"
        nodes.append({
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
        })
    peers = [{"name": "peer-%d" % j, "public_key": key(100000 + j), "allowed_ips": ["10.250.%d.0/24" % j],
              "endpoint": None, "persistent_keepalive": 0} for j in range(5)]
    return nodes, peers


def measure(count, locations, conn):
    """In the child: time every plan, then one node's plan; send (seconds, rss_mb, one_seconds)."""
    nodes, peers = mesh(count, locations)
    start = time.perf_counter()
    result = build_plans(nodes, peers)
    seconds = time.perf_counter() - start
    assert len(result["plans"]) == count
    # what each host's kilo.mesh.join does per run since the mesh is computed once: read its
    # own plan (the largest one: a non-leader routes to every other node)
    text = max((json.dumps(p, separators=(",", ":")) for p in list(result["plans"].values())[:50]), key=len)
    start = time.perf_counter()
    json.loads(text)
    load_seconds = time.perf_counter() - start
    del result
    one = nodes[0]["name"]
    start = time.perf_counter()
    result = build_plans(nodes, peers, only=[one])
    one_seconds = time.perf_counter() - start
    assert list(result["plans"]) == [one]
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    conn.send((seconds, rss_mb, one_seconds, load_seconds, len(text)))
    conn.close()


def main():
    ctx = multiprocessing.get_context("fork")
    for count, locations in SIZES:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=measure, args=(count, locations, child))
        proc.start()
        child.close()
        try:
            seconds, rss_mb, one_seconds, load_seconds, size = parent.recv()
        except EOFError:
            proc.join()
            raise SystemExit("bench: size nodes=%d failed in the child (exit %s)" % (count, proc.exitcode))
        proc.join()
        print("plans nodes=%d locations=%d seconds=%.2f rss_mb=%.0f" % (count, locations, seconds, rss_mb))
        print("plan_one nodes=%d seconds=%.3f (a join computing the mesh itself)" % (count, one_seconds))
        print("plan_load nodes=%d seconds=%.4f plan_kb=%.0f (a join reading its stored plan)"
              % (count, load_seconds, size / 1024.0))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
