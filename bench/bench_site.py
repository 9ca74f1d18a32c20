#!/usr/bin/env python3
"""site.yml on lab meshes: a cold run, an idempotent re-run, and `ansible -m ping` for scale.

Prints `site cold|rerun|ping|floor locations=L hosts=N seconds=S` per lab size, then
`site ratio locations=L hosts=N rerun_over_ping=X floor_over_ping=F`. The goal for the
idempotent re-run is within 3x the ping time. `floor` is a playbook of two `ping` tasks on the
same hosts: the two remote calls a re-run cannot do without (learn the host's data, converge),
with Ansible's own start and per-task cost, and nothing of ours. rerun, ping and floor are
medians of three runs. Sizes 3x3 and 5x6; with BENCH_BIG=1 also 10x10. A benchmark: it never
fails on time.
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from lab.lab import Lab  # noqa: E402

PREFIX = "klb"
SIZES = [(3, 3), (5, 6)] + ([(10, 10)] if os.environ.get("BENCH_BIG") == "1" else [])
FLOOR = """- hosts: kilo
  gather_facts: false
  tasks:
    - ansible.builtin.ping:
    - ansible.builtin.ping:
"""


def timed(argv, env):
    start = time.monotonic()
    proc = subprocess.run(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:])
        raise SystemExit("bench: %s failed" % " ".join(argv[:2]))
    return elapsed


def main():
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
    )
    venv = os.path.join(REPO, ".venv", "bin")
    tmp = tempfile.mkdtemp(prefix="kilo-bench-site.")
    try:
        run_sizes(env, venv, os.path.join(tmp, "floor.yml"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_sizes(env, venv, floor_play):
    with open(floor_play, "w") as f:
        f.write(FLOOR)
    for locations, hosts in SIZES:
        lab = Lab(PREFIX)
        lab.down()
        lab.up(locations, hosts, 1)
        try:
            inv = lab.inventory
            registry = os.path.join(lab.state_dir, "kilo-registry.json")
            if os.path.exists(registry):
                os.remove(registry)
            n = locations * hosts
            site = [os.path.join(venv, "ansible-playbook"), "-i", inv, "playbooks/site.yml"]
            ping = [os.path.join(venv, "ansible"), "-i", inv, "kilo", "-m", "ping"]
            floor = [os.path.join(venv, "ansible-playbook"), "-i", inv, floor_play]
            seconds = {"cold": timed(site, env)}
            for what, argv in (("rerun", site), ("ping", ping), ("floor", floor)):
                seconds[what] = statistics.median(timed(argv, env) for dummy in range(3))
            for what in ("cold", "rerun", "ping", "floor"):
                print(
                    "site %s locations=%d hosts=%d seconds=%.2f"
                    % (what, locations, n, seconds[what]),
                    flush=True,
                )
            print(
                "site ratio locations=%d hosts=%d rerun_over_ping=%.2f floor_over_ping=%.2f"
                % (
                    locations,
                    n,
                    seconds["rerun"] / seconds["ping"],
                    seconds["floor"] / seconds["ping"],
                ),
                flush=True,
            )
        finally:
            lab.down()


if __name__ == "__main__":
    main()
