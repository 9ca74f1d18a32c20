#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Benchmark of the netstate backend's host read on a router carrying a large foreign table.

Needs root. Inside a network namespace it creates (kbn-<pid>, deleted at the end) it loads
FOREIGN routes of another protocol (bgp, /28s in 10.128/9 via a veth link) into the main table,
then times ``current(plan)`` of a plan with OURS routes (/24s in main, /32s in table 1107):

  netstate read run=first  ...  our routes not there yet (the read looks for foreign ones in the way)
  netstate read run=rerun  ...  an idempotent re-run (every plan route already ours)

Each read runs in its own process under `ip netns exec`, so rss_mb is that read's peak RSS
(interpreter and imports included). Prints figures only: nothing fails on time.
Usage: bench_netstate.py [FOREIGN ...] [--python PATH ...]
"""

import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".collections")
SIZES = (100000, 500000)
OURS_MAIN, OURS_KILO = 5000, 1000
IFACE = "kilo0"


def sh(*args, **kw):
    return subprocess.run(
        args,
        check=kw.pop("check", True),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        **kw,
    )


def plan():
    routes = [
        {
            "dst": "10.%d.%d.0/24" % (16 + (i >> 8), i & 255),
            "gateway": "10.4.%d.%d" % (1 + (i >> 8), 1 + (i & 127)),
            "device": IFACE,
            "source": "10.1.0.1",
            "table": 254,
            "onlink": True,
        }
        for i in range(OURS_MAIN)
    ]
    routes += [
        {
            "dst": "10.1.%d.%d/32" % (1 + (i >> 8), i & 255),
            "gateway": "10.1.%d.%d" % (1 + (i >> 8), i & 255),
            "device": "private",
            "source": "10.1.0.1",
            "table": 1107,
            "onlink": True,
        }
        for i in range(OURS_KILO)
    ]
    return {
        "name": "bench",
        "leader": True,
        "segment": "location:bench",
        "listen_port": 51820,
        "interface": IFACE,
        "address": "10.4.0.1/16",
        "internal_ip": "10.1.0.1/16",
        "routes": routes,
        "rules": [
            {"src": "10.1.0.0/16", "dst": None, "iif": None, "table": 1107},
            {"src": None, "dst": "10.1.0.0/16", "iif": IFACE, "table": 1107},
        ],
    }


def foreign(start, stop):
    for i in range(start, stop):
        yield "route add 10.%d.%d.%d/28 via 10.255.0.2 dev kbbgp proto bgp\n" % (
            128 + (i >> 12),
            (i >> 4) & 255,
            (i & 15) << 4,
        )


def child(mode):
    """In the namespace: time one current(plan); 'first' then applies the plan."""
    sys.path.insert(0, COLLECTIONS)
    from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
    from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.backend import (
        NetStateBackend,
    )
    from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan

    settings = host_settings({"interface": IFACE})
    checked = check_plan(json.load(sys.stdin), IFACE)
    backend = NetStateBackend(settings)
    start = time.perf_counter()
    cur = backend.current(checked)
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    changes = backend.changes(cur, backend.desired(checked, cur))
    out = {"seconds": seconds, "rss_mb": rss, "ours": len(cur["routes"]), "changes": len(changes)}
    if mode == "first":
        start = time.perf_counter()
        backend.apply(cur, backend.desired(checked, cur))
        out["apply_seconds"] = time.perf_counter() - start
    print(json.dumps(out))


def measure(ns, python, mode, size):
    proc = sh(
        "ip",
        "netns",
        "exec",
        ns,
        python,
        os.path.abspath(__file__),
        "--child",
        mode,
        input=json.dumps(plan()),
        check=False,
    )
    if proc.returncode != 0:
        print(
            "netstate read run=%s foreign=%d python=%s failed: %s"
            % (mode, size, python, proc.stderr.strip()[-500:])
        )
        return
    r = json.loads(proc.stdout)
    line = (
        "netstate read run=%-5s foreign=%d ours=%d seconds=%.2f rss_mb=%.0f changes=%d python=%s"
        % (mode, size, OURS_MAIN + OURS_KILO, r["seconds"], r["rss_mb"], r["changes"], python)
    )
    if "apply_seconds" in r:
        line += " apply_seconds=%.2f" % r["apply_seconds"]
    print(line)
    sys.stdout.flush()


def main(argv):
    sizes = [int(a) for a in argv if a.isdigit()] or list(SIZES)
    pythons = [argv[i + 1] for i, a in enumerate(argv) if a == "--python"] or [
        p for p in ("/usr/bin/python3", sys.executable) if os.path.exists(p)
    ]
    ns = "kbn-%d" % os.getpid()
    sh("ip", "netns", "add", ns)
    try:
        ip = ("ip", "-n", ns)
        sh(*ip + ("link", "set", "lo", "up"))
        for dev, addr in (("kbpriv", "10.1.0.1/16"), (IFACE, None), ("kbbgp", "10.255.0.1/24")):
            # veth pairs: this kernel may lack the dummy module
            sh(*ip + ("link", "add", dev, "type", "veth", "peer", "name", dev + "p"))
            for name in (dev, dev + "p"):
                sh(*ip + ("link", "set", name, "up"))
            if addr:
                sh(*ip + ("addr", "add", addr, "dev", dev))
        loaded = 0
        for size in sorted(sizes):
            start = time.perf_counter()
            sh(*ip + ("-batch", "-"), input="".join(foreign(loaded, size)))
            print("loaded foreign=%d seconds=%.1f" % (size, time.perf_counter() - start))
            loaded = size
            for python in pythons:
                # ours gone: the first run looks for foreign routes at every plan destination
                sh(*ip + ("route", "flush", "table", "all", "proto", "107"))
                measure(ns, python, "first", size)
                measure(ns, python, "rerun", size)
    finally:
        sh("ip", "netns", "del", ns, check=False)  # ours, by the name made above


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        main(sys.argv[1:])
