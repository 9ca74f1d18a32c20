"""site.yml as AWX job slicing runs it: several ansible-playbook processes at once, each with
``--limit`` one slice of the hosts (every third host, as AWX slices an inventory), sharing one
registry in Redis (a real redis-server started here on 127.0.0.1, stopped by its PID).

The very first run starts from an empty registry: each slice writes its hosts' data and waits
(``kilo_registry_wait``) until every host of the mesh is known, so each computes the plans one
run would. Then: every pair of hosts pings across the mesh; one whole run of site.yml changes
nothing and leaves every stored plan as the slices wrote it (the sliced plans are the one-run
plans); concurrent slices again change nothing.

Real parts only: network-namespace hosts with sshd, wireguard-go, nftables, iproute2.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from sitetools import ANSIBLE_BIN, REPO, fresh_lab, recap, site

sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests", "unit"))
from redis_server import redis_server  # noqa: E402  (tests/unit/redis_server.py)
from scripts.matrix import matrix  # noqa: E402  pylint: disable=wrong-import-position

PREFIX = os.environ.get("KILO_TEST_PREFIX_JOB_SLICING", "ksl")
SLICES = 3
WAIT = 240  # kilo_registry_wait: the slices' key steps take seconds, a first install longer


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 3, 2) as lab:
        yield lab


@pytest.fixture(scope="module")
def registry():
    with redis_server() as url:
        yield url + "?key=" + PREFIX


def slices(lab):
    """AWX's slices of the inventory: host i goes to slice i mod SLICES."""
    hosts = list(lab.hosts)
    return [hosts[i::SLICES] for i in range(SLICES)]


def run_slices(lab, registry):
    """site.yml once per slice, all at once; returns (host -> recap counts, wall seconds per slice)."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
    )
    procs = []
    started = time.monotonic()
    for part in slices(lab):
        argv = [
            os.path.join(ANSIBLE_BIN, "ansible-playbook"),
            "-i",
            lab.inventory,
            os.path.join(REPO, "playbooks", "site.yml"),
            "--limit",
            ",".join(part),
            "-e",
            "kilo_registry=%s" % registry,
            "-e",
            "kilo_registry_wait=%d" % WAIT,
        ]
        procs.append(
            subprocess.Popen(
                argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    counts, walls = {}, []
    for part, proc in zip(slices(lab), procs):
        out, _ = proc.communicate(timeout=900)
        walls.append(round(time.monotonic() - started, 1))
        assert proc.returncode == 0, out[-6000:]
        got = recap(out)
        assert set(got) == set(part), (part, out[-3000:])
        counts.update(got)
    return counts, walls


def stored_plans(lab):
    return dict(
        (
            host,
            json.loads(lab.run(host, ["cat", "/var/lib/kilo/mesh-plan.json"], check=True).stdout)[
                "plan"
            ],
        )
        for host in lab.hosts
    )


def test_first_run_as_concurrent_slices_builds_the_whole_mesh(lab, registry):
    counts, walls = run_slices(lab, registry)
    print(
        "first sliced run: %d slices of %s hosts, done after %s s"
        % (SLICES, [len(s) for s in slices(lab)], walls)
    )
    assert all(
        c["failed"] == 0 and c["unreachable"] == 0 and c["changed"] > 0 for c in counts.values()
    ), counts
    plans = stored_plans(lab)
    every = set(lab.hosts)
    for host, plan in plans.items():
        # every other host is in this host's plan: as a WireGuard peer (leaders) or behind its leader's routes
        assert plan["name"] == host
    leaders = sorted(h for h, p in plans.items() if p["leader"])
    assert len(leaders) == 3, leaders
    for leader in leaders:
        keys = set(p["public_key"] for p in plans[leader]["peers"])
        assert len(keys) == 2, (leader, plans[leader]["peers"])  # the two other locations' leaders
    names, hosts, results = matrix(lab)
    failed = [(src, dst) for src, row in results.items() for dst, ok in row.items() if not ok]
    print("pings: %d pairs, %d failed" % (sum(len(r) for r in results.values()), len(failed)))
    assert not failed and set(names) == every


def test_one_whole_run_changes_nothing_the_slices_planned(lab, registry):
    before = stored_plans(lab)
    out = site(lab.inventory, "-e", "kilo_registry=%s" % registry)
    counts = recap(out)
    assert set(counts) == set(lab.hosts)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts
    assert stored_plans(lab) == before, "the one-run plans differ from the sliced ones"


def test_sliced_rerun_changes_nothing(lab, registry):
    counts, walls = run_slices(lab, registry)
    print("sliced re-run: done after %s s" % walls)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts
