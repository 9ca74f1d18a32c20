#!/usr/bin/env python3
"""Connectivity matrix of a lab: every host pings every other host's private (LAN) address.

Rows are sources, columns destinations. Exits non-zero when any pair fails, so the demo
and tests can rely on it. Pings run from inside each host (nsenter), in parallel per host.
"""

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lab.lab import Lab  # noqa: E402  (the lab driver lives beside this script's parent)

PING = (
    "for ip in %s; do ping -q -c 2 -W 2 -i 0.3 $ip >/dev/null 2>&1 "
    '&& echo "$ip ok" || echo "$ip fail" & done; wait'
)


def matrix(lab, settle=30):
    hosts = lab.hosts
    names = sorted(hosts, key=lambda n: (hosts[n]["location"], n))

    def probe(src):
        targets = " ".join(hosts[d]["lan_ip"] for d in names if d != src)
        out = lab.run(src, ["sh", "-c", PING % targets], timeout=60).stdout
        ok = dict(line.split() for line in out.splitlines() if line.strip())
        return src, dict((d, ok.get(hosts[d]["lan_ip"]) == "ok") for d in names if d != src)

    # WireGuard handshakes lazily and a NAT'd leader is reached only after its keepalive
    # handshake (retried every 5 s): give a fresh mesh a short while to settle.
    deadline = time.monotonic() + settle
    while True:
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = dict(pool.map(probe, names))
        if all(all(r.values()) for r in results.values()) or time.monotonic() > deadline:
            return names, hosts, results
        time.sleep(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefix", default=None)
    ap.add_argument(
        "--settle", type=float, default=30, help="seconds to wait for tunnels to come up"
    )
    args = ap.parse_args()
    lab = Lab(args.prefix)
    names, hosts, results = matrix(lab, args.settle)
    width = max(len(n) for n in names)
    print(" " * (width + 2) + " ".join(n[:8].ljust(8) for n in names))
    bad = 0
    for src in names:
        cells = []
        for dst in names:
            if src == dst:
                cells.append("-".ljust(8))
            elif results[src][dst]:
                cells.append("ok".ljust(8))
            else:
                cells.append("FAIL".ljust(8))
                bad += 1
        print(src.ljust(width + 2) + " ".join(cells))
    total = len(names) * (len(names) - 1)
    print("matrix: %d of %d pairs reach each other" % (total - bad, total))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
