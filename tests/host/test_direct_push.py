"""Push-mode direct paths on real NATs (prefix kdx, KILO_TEST_PREFIX_DIRECT_PUSH): with
``kilo_direct_paths: always`` site.yml probes the two NAT'd locations directly beside their relayed
path, and the next run moves the pair to a direct path where both leaders report a fresh probe
handshake (engine/relays.py, action/topology.py ``mark_direct_paths``).

Lab: 3 locations x 1 host: aws public (the relay), gcp and azure each behind a NAT router of the
kind under test (``eim``, then ``symmetric``) and marked ``kilo_behind_nat: true``; pod addresses
on lo as in test_relays_push.py (whose helpers this reuses).

Runs: the first run relays the pair (no mapping known yet: the relay learns it from the NAT'd
leaders' keepalives once their tunnels are up); the second one probes it (the relay's key step
reported the mappings); behind ``eim`` the probes handshake and the third run moves the pair to
a direct path, behind ``symmetric`` they never do and the pair stays relayed.

Asserts: every host reaches every LAN and pod address after each run; behind ``eim`` the NAT'd
leaders carry each other's ranges on each other's entry, the relay's rule counts nothing of 20
echoes each way between them, status.yml's PATHS says direct, and the next run is ``changed=0``;
behind ``symmetric`` the pair stays relayed (PATHS: probing via aws) and re-runs are
``changed=0``; the third run, under 50 echoes a second each way between the NAT'd hosts, loses
less than 1 s of them (the move is synchronized). Prints the runs' times and the losses.
"""

import os
import time

import pytest
import yaml

from flows import under_traffic
from sitetools import fresh_lab, recap, site
from test_relays_push import (
    paths_shown,
    pod,
    relay_counter,
    relay_inventory,
    sh,
    unreached,
    wg_allowed,
)

PREFIX = os.environ.get("KILO_TEST_PREFIX_DIRECT_PUSH", "kdx")
NATTED = ("gcp", "azure")
PAIR = ("location:gcp", "location:azure")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the lab")


@pytest.fixture(scope="module", params=["eim", "symmetric"])
def lab(request):
    with fresh_lab(PREFIX, 3, 1, 1, nat=[2, 3], nat_kind=request.param) as lab:
        lab.kind = request.param
        path = relay_inventory(lab, NATTED, "direct.yml")
        with open(path) as f:
            inventory = yaml.safe_load(f)
        inventory["all"]["children"]["kilo"]["vars"]["kilo_direct_paths"] = "always"
        with open(path, "w") as f:
            yaml.safe_dump(inventory, f)
        lab.site_inventory = path
        try:
            yield lab
        finally:
            os.remove(path)


def host_of(lab, location):
    return [h for h in sorted(lab.hosts) if lab.hosts[h]["location"] == location][0]


def timed_run(lab, traffic=False):
    """One site.yml run: (seconds, changes); with ``traffic``, under 50 echoes a second each way
    between the NAT'd hosts (flows.under_traffic prints each flow's loss, at most 1 s of it)."""
    started = time.monotonic()
    if traffic:
        gcp, azure = host_of(lab, "gcp"), host_of(lab, "azure")
        out = under_traffic(
            lab,
            "%s: the third run" % lab.kind,
            lambda: site(lab.site_inventory),
            [(gcp, azure), (azure, gcp)],
        )[1]
    else:
        out = site(lab.site_inventory)
    counts = recap(out)
    took = time.monotonic() - started
    assert set(counts) >= set(lab.hosts) and all(
        c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()
    ), counts
    return took, sum(counts[h]["changed"] for h in lab.hosts)


def carries_directly(lab):
    """Whether each NAT'd leader carries the other's pod range on the other's own entry."""
    keys = dict((h, sh(lab, h, "wg show kilo0 public-key").stdout.strip()) for h in lab.hosts)
    gcp, azure = host_of(lab, "gcp"), host_of(lab, "azure")
    return all(
        pod(lab, there)[0] in wg_allowed(lab, here).get(keys[there], [])
        for here, there in ((gcp, azure), (azure, gcp))
    )


def test_push_direct_paths(lab):
    figures, changes = [], []
    for run in range(1, 4):
        took, changed = timed_run(lab, traffic=run == 3)
        changes.append(changed)
        figures.append("run %d %.1f s changed=%d" % (run, took, changed))
        assert unreached(lab) == [], (run, figures)
        if run == 2:
            # the relay's key step reported the mappings: the pair probes beside the relay
            assert changed > 0, figures
    relay = host_of(lab, "aws")
    gcp, azure = host_of(lab, "gcp"), host_of(lab, "azure")
    before = relay_counter(lab, relay)
    for src, dst in ((gcp, azure), (azure, gcp)):
        script = "ping -c 20 -i 0.05 -W 2 -q -I %s %s" % (pod(lab, src)[1], pod(lab, dst)[1])
        assert sh(lab, src, script).returncode == 0
    after = relay_counter(lab, relay)
    shown = paths_shown(lab)
    took, changed = timed_run(lab)
    figures.append("run 4 %.1f s changed=%d" % (took, changed))
    print(
        "\n%s: %s; relay rule +%d packets over 40 echoes between the NAT'd pods; PATHS %s - %s: %s"
        % (
            lab.kind,
            ", ".join(figures),
            after[0] - before[0],
            PAIR[0],
            PAIR[1],
            shown[PAIR],
        )
    )
    assert changed == 0, figures
    if lab.kind == "eim":
        assert carries_directly(lab)
        assert after[0] == before[0], (before, after)
        assert shown[PAIR] == ("direct", "-")
    else:
        assert not carries_directly(lab)
        assert after[0] - before[0] >= 80, (before, after)
        assert shown[PAIR] == ("probing", "location:aws")
        assert changes[2] == 0, figures  # the probes stay, nothing else to do
    assert unreached(lab) == []
