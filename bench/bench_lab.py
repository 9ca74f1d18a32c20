#!/usr/bin/env python3
"""Benchmark the namespace lab: up/down wall time, Ansible ping, memory per host.

Run as root from the repo root: .venv/bin/python bench/bench_lab.py [--sizes 3x3,5x6]
Uses its own prefix (klb) so it runs beside a demo lab; always tears down what it made.
"""

import argparse
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from lab.lab import Lab  # noqa: E402

LAB_PY = os.path.join(REPO, "lab", "lab.py")


def timed(argv, **kw):
    t = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit("failed: %s\n%s%s" % (" ".join(argv), r.stdout, r.stderr))
    return time.monotonic() - t


def pss_kb(netns):
    """Proportional set size of every process inside one host (they all live in its netns)."""
    pids = subprocess.run(
        ["ip", "netns", "pids", netns], capture_output=True, text=True
    ).stdout.split()
    total = 0
    for pid in pids:
        try:
            with open("/proc/%s/smaps_rollup" % pid) as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total, len(pids)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="3x3,5x6", help="LOCATIONSxHOSTS,...")
    ap.add_argument("--prefix", default="klb")
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter for lab.py")
    args = ap.parse_args()
    lab = Lab(args.prefix)
    cli = [args.python, LAB_PY, "--prefix", args.prefix]
    ansible = os.path.join(REPO, ".venv", "bin", "ansible")
    lab.down()
    for size in args.sizes.split(","):
        locs, per = (int(x) for x in size.split("x"))
        n = locs * per
        try:
            up = timed(cli + ["up", str(locs), str(per), "1"])
            print("lab up locations=%d hosts=%d seconds=%.2f" % (locs, n, up), flush=True)
            mem = [pss_kb(h["netns"]) for h in lab.hosts.values()]
            print(
                "lab memory hosts=%d processes_per_host=%.1f pss_kb_per_host=%d"
                % (n, sum(m[1] for m in mem) / n, sum(m[0] for m in mem) / n),
                flush=True,
            )
            if os.path.exists(ansible):
                secs = timed(
                    [ansible, "-i", lab.inventory, "kilo", "-m", "ping", "-f", str(max(n, 5))],
                    cwd=REPO,
                    timeout=600,
                )
                print("ansible ping hosts=%d seconds=%.2f" % (n, secs), flush=True)
        finally:
            down = timed(cli + ["down"])
        print("lab down locations=%d hosts=%d seconds=%.2f" % (locs, n, down), flush=True)


if __name__ == "__main__":
    main()
