"""An outside peer without endpoint (a laptop, playbooks/connect.yml) reaches locations behind NAT
through a relay (prefix kpl, KILO_TEST_PREFIX_PEER_RELAYED): engine/relays.py ``peer_relay``.

Lab: 4 locations x 1 host: aws public (the relay), gcp behind an ``eim`` NAT router, azure behind
a ``symmetric`` one (both marked ``kilo_behind_nat: true``), home-1 the laptop (group connect,
outside the mesh), itself behind an ``eim`` NAT router; pod addresses on lo as in
test_relays_push.py (whose helpers this reuses).

Neither a NAT'd leader nor the laptop can send to the other first (the laptop has no endpoint,
the NAT'd leaders' routers drop what they did not ask for), so the laptop's configuration (from
kilo.mesh.connect, as showconf's peer section) carries the NAT'd locations' ranges on the relay's
entry, and their leaders carry the laptop's address on theirs.

Asserts: the laptop reaches every host's LAN and pod address and is reached back from each; its
interface has no entry for a NAT'd leader and the relay's entry carries their pod ranges; a
re-run of connect.yml is ``changed=0``. Prints the runs' times and the relay's count.
"""

import os
import time

import pytest
import yaml

from sitetools import fresh_lab, playbook, recap
from test_relays_push import pod, relay_counter, relay_inventory, sh, wg_allowed

PREFIX = os.environ.get("KILO_TEST_PREFIX_PEER_RELAYED", "kpl")
NATTED = ("gcp", "azure")
LAPTOP = "home-1"
LAPTOP_IP = "10.5.0.1"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the lab")


@pytest.fixture(scope="module")
def lab():
    kinds = {2: "eim", 3: "symmetric", 4: "eim"}
    with fresh_lab(PREFIX, 4, 1, 1, nat=[2, 3, 4], nat_kind=kinds) as lab:
        path = relay_inventory(lab, NATTED, "peer.yml")
        with open(path) as f:
            inventory = yaml.safe_load(f)
        mesh = inventory["all"]["children"]["kilo"]
        laptop = mesh["children"].pop("home")["hosts"][LAPTOP]
        laptop.pop("kilo_pod_cidr", None)
        laptop.update(kilo_connect_name="laptop", kilo_connect_allowed_ip=LAPTOP_IP + "/32")
        inventory["all"]["children"]["connect"] = {"hosts": {LAPTOP: laptop}}
        with open(path, "w") as f:
            yaml.safe_dump(inventory, f)
        lab.site_inventory = path
        try:
            yield lab
        finally:
            os.remove(path)


def timed(inventory, name):
    started = time.monotonic()
    counts = recap(playbook(inventory, name, timeout=900))
    took = time.monotonic() - started
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), counts
    return took, counts


def reaches(lab, src, dst, source=None):
    cmd = "ping -c 3 -i 0.3 -W 2 -q %s%s" % ("-I %s " % source if source else "", dst)
    return (
        sh(lab, src, "for i in 1 2 3; do %s >/dev/null && exit 0; done; exit 1" % cmd).returncode
        == 0
    )


def test_a_laptop_reaches_both_nat_kinds_through_the_relay(lab):
    site_took, _ = timed(lab.site_inventory, "site.yml")
    connect_took, counts = timed(lab.site_inventory, "connect.yml")
    assert counts[LAPTOP]["changed"] > 0, counts
    mesh = sorted(h for h in lab.hosts if h != LAPTOP)
    relay = [h for h in mesh if lab.hosts[h]["location"] == "aws"][0]
    keys = dict((h, sh(lab, h, "wg show kilo0 public-key").stdout.strip()) for h in mesh)
    before = relay_counter(lab, relay)
    missing = []
    for host in mesh:
        for address in (lab.hosts[host]["lan_ip"], pod(lab, host)[1]):
            if not reaches(lab, LAPTOP, address):
                missing.append((LAPTOP, address))
        if not reaches(lab, host, LAPTOP_IP, source=pod(lab, host)[1]):
            missing.append((host, LAPTOP_IP))
    after = relay_counter(lab, relay)
    again_took, again = timed(lab.site_inventory, "connect.yml")
    print(
        "\nsite.yml %.1f s, connect.yml %.1f s, re-run %.1f s; relay %s forwarded %d packets of the"
        " laptop's pings; unreached: %s"
        % (site_took, connect_took, again_took, relay, after[0] - before[0], missing)
    )
    assert missing == []
    entries = wg_allowed(lab, LAPTOP)
    for host in mesh:
        if lab.hosts[host]["location"] in NATTED:
            assert keys[host] not in entries, entries
            assert pod(lab, host)[0] in entries[keys[relay]], entries
    # the NAT'd hosts' pings and the laptop's to them: 2 hosts x 3 kinds of ping x 3 echoes x 2
    assert after[0] - before[0] >= 2 * 3 * 3 * 2, (before, after)
    assert all(c["changed"] == 0 for c in again.values()), again
