"""Zero-drop: re-running site.yml while traffic flows loses no packet.

Real lab hosts (network namespaces with sshd), real Ansible over SSH, real wireguard-go.
A 20-per-second ping runs between non-leaders of two locations (so it crosses both
leaders' WireGuard), while a host of a third location joins and site.yml runs again.
"""

import os
import re
import signal
import subprocess
import time

import pytest
import yaml

from sitetools import fresh_lab, recap, site

PREFIX = "klz"


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 3, 2, 1) as lab:
        yield lab


def test_adding_a_location_drops_no_packet(lab):
    with open(lab.inventory) as f:
        full = yaml.safe_load(f)
    locations = full["all"]["children"]["kilo"]["children"]
    # The joining location sorts last, so no existing segment is renumbered (Kilo assigns
    # WireGuard IPs in segment order); the test is about peers changing under traffic.
    joining = sorted(locations)[-1]
    partial = yaml.safe_load(yaml.safe_dump(full))
    del partial["all"]["children"]["kilo"]["children"][joining]
    first = os.path.join(lab.state_dir, "inventory-partial.yml")
    with open(first, "w") as f:
        yaml.safe_dump(partial, f)

    site(first)
    hosts = lab.hosts
    staying = sorted(loc for loc in locations if loc != joining)
    src = "%s-2" % staying[0]
    dst = "%s-2" % staying[1]
    # Warm up: the first packets wait for handshakes through both leaders.
    warm = lab.run(
        src, ["ping", "-c", "5", "-i", "0.2", "-w", "20", hosts[dst]["lan_ip"]], timeout=30
    )
    assert warm.returncode == 0, warm.stdout

    ping = subprocess.Popen(
        lab.nsenter_argv(src, ["ping", "-i", "0.05", hosts[dst]["lan_ip"]]),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        time.sleep(2)
        output = site(lab.inventory)
        time.sleep(2)
    finally:
        # nsenter forks ping into the host's PID namespace; signal the whole group.
        os.killpg(ping.pid, signal.SIGINT)
        out, _ = ping.communicate(timeout=10)
    sent = int(re.search(r"(\d+) packets transmitted", out).group(1))
    received = set(int(s) for s in re.findall(r"icmp_seq=(\d+)", out))
    # The last two echo requests may still be in flight when ping is stopped.
    lost = sorted(set(range(1, sent - 1)) - received)
    print(
        "zero-drop: sent=%d lost=%d while %s joined (site.yml re-run)" % (sent, len(lost), joining)
    )
    assert sent > 40, out[-500:]
    assert lost == [], "lost icmp_seq %s" % lost
    # The joining location really joined: its hosts converged in the second run.
    assert recap(output)["%s-1" % joining]["changed"] > 0
    reach = lab.run(
        src,
        ["ping", "-c", "3", "-i", "0.2", "-w", "15", hosts["%s-2" % joining]["lan_ip"]],
        timeout=30,
    )
    assert reach.returncode == 0, reach.stdout
