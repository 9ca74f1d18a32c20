#!/usr/bin/env python3
"""site.yml on 6 lab hosts, alone and inside a 1,000-host mesh.

A lab of 3 locations x 2 hosts: site.yml cold, then the idempotent re-run is timed
(`bench mesh6 hosts=6 seconds=S changed=K`). Then a second inventory adds 994 hosts in 99
extra locations of the `kilo` group, every field the topology needs pinned (kilo_public_key,
kilo_force_endpoint, kilo_force_internal_ip, kilo_pod_cidr), and site.yml runs with
`--limit` to the 6 lab hosts: cold, then the timed re-run (`bench mesh1000 hosts=6 seconds=S
changed=K`). The pinned hosts are never contacted (they are outside --limit); their endpoints
are 198.51.100.7 on distinct ports, which no lab namespace can route to.

A benchmark: it fails when a run fails, never on time. Prints the PLAY RECAP's changed count
of each timed re-run (an idempotent run reports changed=0). Re-runs are medians of three.

The floor: a play of one run-once `debug` task with the same inventories and --limit
(`bench mesh-floor inventory=6|1000 seconds=S`) is what ansible-playbook itself pays to load and
iterate each inventory before any task of ours; `bench mesh1000 ... ratio=R floor_ratio=F`
sets the 1,000-host re-run against the 6-host one, and the noop plays against each other.
"""

import base64
import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from lab.lab import Lab  # noqa: E402

PREFIX = "kbm"
LOCATIONS, HOSTS = 3, 2
EXTRA = 994  # 6 lab hosts + 994 pinned hosts = 1,000
EXTRA_LOCATIONS = 99


def key(i):
    """A valid WireGuard public key (base64 of 32 bytes), distinct per i."""
    return base64.b64encode(hashlib.sha256(b"kbm-%d" % i).digest()).decode()


def extra_inventory(path):
    """994 pinned hosts in 99 location groups under `kilo` (none of the lab's addresses:
    internal IPs in 10.200.0.0/16, pod CIDRs in 10.160.0.0/14, endpoints 198.51.100.7:2xxxx)."""
    lines = [
        "# %d pinned hosts for bench/bench_mesh.py; never contacted (outside --limit)" % EXTRA,
        "all:",
        "  children:",
        "    kilo:",
        "      children:",
    ]
    groups = {}
    for i in range(EXTRA):
        groups.setdefault(i % EXTRA_LOCATIONS, []).append(i)
    for g, members in sorted(groups.items()):
        loc = "bm%02d" % g
        lines += [
            "        %s:" % loc,
            "          vars:",
            "            kilo_location: %s" % loc,
            "          hosts:",
        ]
        for i in members:
            lines += [
                "            bmh-%04d:" % i,
                '              kilo_public_key: "%s"' % key(i),
                '              kilo_force_endpoint: "198.51.100.7:%d"' % (20000 + i),
                '              kilo_force_internal_ip: "10.200.%d.%d/16"' % (i // 250, 1 + i % 250),
                '              kilo_pod_cidr: "10.%d.%d.0/24"' % (160 + (i >> 8), i & 255),
            ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


RECAP = re.compile(
    r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M
)


def run(argv, env, what):
    start = time.monotonic()
    proc = subprocess.run(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    elapsed = time.monotonic() - start
    recap = RECAP.findall(proc.stdout)
    if proc.returncode != 0 or not recap:
        sys.stderr.write(proc.stdout[-4000:])
        raise SystemExit("bench: %s: ansible-playbook failed (rc=%d)" % (what, proc.returncode))
    hosts = len(recap)
    changed = sum(int(r[2]) for r in recap)
    return elapsed, hosts, changed


def rerun(argv, env, what):
    """Median seconds of three runs; hosts and changed of the last."""
    runs = [run(argv, env, what) for dummy in range(3)]
    return statistics.median(r[0] for r in runs), runs[-1][1], runs[-1][2]


def clean_registry(lab):
    """The registry site.yml writes beside the lab's inventory (lab.down() leaves it)."""
    registry = os.path.join(lab.state_dir, "kilo-registry.json")
    for path in (registry, registry + ".lock"):
        if os.path.exists(path):
            os.remove(path)


def main():
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
    )
    playbook = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
    lab = Lab(PREFIX)
    lab.down()
    tmp = tempfile.mkdtemp(prefix="kilo-bench-mesh.")
    try:
        lab.up(LOCATIONS, HOSTS, 1)
        clean_registry(lab)
        lab_hosts = sorted(lab.hosts)
        site = [playbook, "-i", lab.inventory, "playbooks/site.yml"]
        cold, hosts, changed = run(site, env, "mesh6 cold")
        print(
            "bench mesh6-cold hosts=%d seconds=%.2f changed=%d" % (hosts, cold, changed), flush=True
        )
        seconds6, hosts, changed = rerun(site, env, "mesh6 rerun")
        print(
            "bench mesh6 hosts=%d seconds=%.2f changed=%d" % (hosts, seconds6, changed), flush=True
        )

        extra = os.path.join(tmp, "mesh1000.yml")
        extra_inventory(extra)
        big = [
            playbook,
            "-i",
            lab.inventory,
            "-i",
            extra,
            "--limit",
            ",".join(lab_hosts),
            "playbooks/site.yml",
        ]
        # First run with the big mesh: the lab hosts take on ~1,000 routes (not timed as a re-run).
        first, hosts, changed = run(big, env, "mesh1000 first")
        print(
            "bench mesh1000-first hosts=%d seconds=%.2f changed=%d" % (hosts, first, changed),
            flush=True,
        )
        seconds, hosts, changed = rerun(big, env, "mesh1000 rerun")
        # Sanity figure: routes on the lab hosts now (every table), the most any host holds.
        routes = [
            len(lab.run(h, ["ip", "route", "show", "table", "all"]).stdout.splitlines())
            for h in lab_hosts
        ]

        noop = os.path.join(tmp, "floor.yml")
        with open(noop, "w") as f:
            f.write(
                "- hosts: kilo\n  gather_facts: false\n  tasks:\n    - ansible.builtin.debug:\n        msg: floor\n"
                "      run_once: true\n"
            )
        limit = ["--limit", ",".join(lab_hosts), noop]
        floor6 = statistics.median(
            run([playbook, "-i", lab.inventory] + limit, env, "floor 6")[0] for dummy in range(3)
        )
        floor1000 = statistics.median(
            run([playbook, "-i", lab.inventory, "-i", extra] + limit, env, "floor 1000")[0]
            for dummy in range(3)
        )
        print("bench mesh-floor inventory=6 seconds=%.2f" % floor6, flush=True)
        print("bench mesh-floor inventory=1000 seconds=%.2f" % floor1000, flush=True)
        print(
            "bench mesh1000 hosts=%d seconds=%.2f changed=%d routes_max=%d ratio=%.2f floor_ratio=%.2f"
            " extra_seconds=%.2f floor_extra_seconds=%.2f"
            % (
                hosts,
                seconds,
                changed,
                max(routes),
                seconds / seconds6,
                floor1000 / floor6,
                seconds - seconds6,
                floor1000 - floor6,
            ),
            flush=True,
        )
    finally:
        lab.down()
        clean_registry(lab)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
