"""Push relay failover on real NATs (prefix kpf, KILO_TEST_PREFIX_RELAY_FAILOVER_PUSH): two relays,
the one carrying the pair of NAT'd locations made dark (every packet dropped, SSH too); the next
site.yml run gives it up within the dark-host bound (plugin_utils/keepalive.py), marks it
``relay_down`` and moves only its pairs to the other relay.

Lab: 4 locations x 1 host: aws and gcp public (both relays), azure and home each behind an ``eim``
NAT router and marked ``kilo_behind_nat: true``; pod addresses on lo as in test_relays_push.py.
The lab's SSH has no keepalive of its own (lab_keepalive=False): the bound is the collection's.

Asserts: after the first run every host reaches every other's LAN and pod address through the
relays; with the pair's relay dark, a run that leaves out home (``--limit``) warns naming home's
host; the full run completes (the dark relay unreachable, nobody failed), the NAT'd leaders carry
each other's ranges on the other relay's entry, and every host but the dark one reaches every
other's addresses. Prints the run times and the bound.
"""

import os
import re
import time

import pytest

from sitetools import fresh_lab, recap, site
from test_relays_push import paths_shown, pod, relay_inventory, sh, unreached, wg_allowed

PREFIX = os.environ.get("KILO_TEST_PREFIX_RELAY_FAILOVER_PUSH", "kpf")
NATTED = ("azure", "home")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the lab")


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 4, 1, 1, nat=[3, 4], nat_kind="eim", lab_keepalive=False) as lab:
        lab.site_inventory = relay_inventory(lab, NATTED, "failover.yml")
        try:
            yield lab
        finally:
            os.remove(lab.site_inventory)


def host_of(lab, location):
    return [h for h in sorted(lab.hosts) if lab.hosts[h]["location"] == location][0]


def relay_of_pair(lab):
    """The host whose WireGuard entry on azure's leader carries home's pod range."""
    keys = dict((sh(lab, h, "wg show kilo0 public-key").stdout.strip(), h) for h in lab.hosts)
    home_pod = pod(lab, host_of(lab, "home"))[0]
    carrying = [
        keys[k] for k, ips in wg_allowed(lab, host_of(lab, "azure")).items() if home_pod in ips
    ]
    assert len(carrying) == 1, carrying
    return carrying[0]


def textfile(lab, host):
    return sh(lab, host, "cat /tmp/kilo.prom").stdout


def test_a_dark_relay_is_replaced_at_the_next_run(lab):
    from ansible_collections.kilo.mesh.plugins.plugin_utils.keepalive import BOUND

    started = time.monotonic()
    first = recap(site(lab.site_inventory))
    took = time.monotonic() - started
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in first.values()), first
    hosts = sorted(lab.hosts)
    assert unreached(lab, hosts) == []
    relay = relay_of_pair(lab)
    other = [host_of(lab, loc) for loc in ("aws", "gcp") if host_of(lab, loc) != relay][0]
    assert relay in (host_of(lab, "aws"), host_of(lab, "gcp"))
    # what operators see: the pair relayed through that relay, in PATHS and the metrics
    relay_loc = "location:" + lab.hosts[relay]["location"]
    shown = paths_shown(lab)
    print("\nPATHS before: %s" % sorted(k + v for k, v in shown.items() if k[0] < k[1]))
    assert shown[("location:azure", "location:home")] == ("relayed", relay_loc)
    assert shown[("location:aws", "location:azure")] == ("direct", "-")
    assert 'kilo_path{segment="location:home",path="relayed",via="%s",probing="false"} 1' % (
        relay_loc
    ) in textfile(lab, host_of(lab, "azure"))
    forwarded = re.search(
        r'^kilo_relay_forwarded_bytes_total\{interface="kilo0"\} (\d+)$', textfile(lab, relay), re.M
    )
    assert forwarded and int(forwarded.group(1)) > 0, textfile(lab, relay)
    lab.dark(relay)
    try:
        home = host_of(lab, "home")
        started = time.monotonic()
        out = site(lab.site_inventory, "--limit", "all:!%s" % home, expect_rc=4)
        limited = time.monotonic() - started
        counts = recap(out)
        assert counts[relay]["unreachable"] == 1 and home not in counts, counts
        flat = " ".join(out.split())
        assert (
            "is not in this run (--limit)" in flat
            and ("but %s (leader of location:home)" % home) in flat
        ), out[-4000:]

        started = time.monotonic()
        counts = recap(site(lab.site_inventory, expect_rc=4))
        dark_run = time.monotonic() - started
        assert counts[relay]["unreachable"] == 1, counts
        assert all(
            c["failed"] == 0 and c["unreachable"] == 0 for h, c in counts.items() if h != relay
        ), counts
        assert relay_of_pair(lab) == other
        matrix_started = time.monotonic()
        missing = unreached(lab, [h for h in hosts if h != relay])
        print(
            "\npush relay failover: first run %.1f s; relay %s dark: --limit run %.1f s, full run %.1f s"
            " (dark-host bound %d s); pair now via %s; matrix of the other %d hosts %s in %.1f s"
            % (
                took,
                relay,
                limited,
                dark_run,
                BOUND,
                other,
                len(hosts) - 1,
                "complete" if not missing else "MISSING %s" % missing,
                time.monotonic() - matrix_started,
            )
        )
        assert missing == [], missing
        shown = paths_shown(lab, "--limit", "all:!%s" % relay)
        print("PATHS after: %s" % sorted(k + v for k, v in shown.items() if k[0] < k[1]))
        assert shown[("location:azure", "location:home")] == (
            "relayed",
            "location:" + lab.hosts[other]["location"],
        )
    finally:
        lab.light(relay)
