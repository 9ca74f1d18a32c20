"""Leader health (kilo_leader_health, beyond Kilo): a location's leader goes dark (no SSH, no
forwarding); a run with the option moves the lead to the other node of its location and traffic
across locations flows again; without it the dark leader keeps leading and traffic stays cut.

Own lab (prefix klf, KILO_TEST_PREFIX_LEADER_HEALTH): 2 locations x 2 hosts, both hosts of a
location public, so either can lead. The lab's SSH has no keepalive of its own (lab_keepalive=False):
how soon the dark leader is given up is the collection's default bound (plugin_utils/keepalive.py).
"""

import os
import time

import pytest

from sitetools import fresh_lab, recap, site

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the lab")

PREFIX = os.environ.get("KILO_TEST_PREFIX_LEADER_HEALTH", "klf")


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 2, 2, 2, lab_keepalive=False) as lab:
        yield lab


def leads(lab, host):
    return bool(lab.run(host, ["wg", "show", "kilo0", "peers"]).stdout.strip())


def reaches(lab, src, dst_ip, within=60):
    """Ping until it answers or ``within`` seconds pass: after a lead change WireGuard retries
    its handshake every 5 s, and a loaded machine stretches that."""
    deadline = time.monotonic() + within
    while True:
        if lab.run(src, ["ping", "-c", "2", "-i", "0.3", "-W", "2", "-q", dst_ip]).returncode == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(1)


def test_a_dark_leader_loses_the_lead_to_a_healthy_node_of_its_location(lab):
    assert all(c["failed"] == 0 for c in recap(site(lab.inventory)).values())
    by_location = {}
    for name, h in sorted(lab.hosts.items()):
        by_location.setdefault(h["location"], []).append(name)
    here, there = sorted(by_location)
    leader = [h for h in by_location[here] if leads(lab, h)]
    assert len(leader) == 1, leader
    leader = leader[0]
    mate = [h for h in by_location[here] if h != leader][0]
    remote = by_location[there][-1]
    remote_ip = lab.hosts[remote]["lan_ip"]
    assert reaches(lab, mate, remote_ip)

    # dark: no SSH and no forwarding (its WireGuard interface is gone, wireguard-go with it)
    lab.run(leader, ["sh", "-c", "ip link set mgmt0 down; ip link del kilo0"], check=True)
    try:
        # without the option the registry keeps the dark leader leading: still cut off
        started = time.monotonic()
        counts = recap(site(lab.inventory, expect_rc=4))
        print(
            "leader health: the first run after the leader went dark (SSH master open) took %.1f s"
            % (time.monotonic() - started)
        )
        assert counts[leader]["unreachable"] == 1
        assert not leads(lab, mate) and not reaches(lab, mate, remote_ip, within=5)

        started = time.monotonic()
        counts = recap(site(lab.inventory, "-e", "kilo_leader_health=true", expect_rc=4))
        print(
            "leader health: the run that replaced the dark leader took %.1f s (a new SSH connection)"
            % (time.monotonic() - started)
        )
        assert counts[leader]["unreachable"] == 1
        assert counts[mate]["changed"] > 0 and counts[mate]["failed"] == 0, counts
        assert leads(lab, mate)
        assert reaches(lab, mate, remote_ip) and reaches(lab, remote, lab.hosts[mate]["lan_ip"])
    finally:
        lab.run(leader, ["ip", "link", "set", "mgmt0", "up"])
    # back: Kilo's choice again, and every host converges
    counts = recap(site(lab.inventory))
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), counts
    assert leads(lab, leader) and not leads(lab, mate)
    assert reaches(lab, mate, remote_ip)
