"""kilo.mesh.status on real lab hosts (prefix kst, 2 locations x 2 hosts, wireguard-go):
fresh handshakes on both leaders after traffic; then the wireguard-go of one leader is killed
by its PID and the other leader reports that tunnel stale; the textfile parses as Prometheus
text; no private key in any output.

Every host is reached as the non-root user sitetools.LOGIN_USER with become (sudo without a
password on some hosts, with ansible_become_password on the others). Before the mesh exists,
site.yml without become fails at the key step on every host, naming it and the fix, and changes
nothing on any host; status.yml without become names each host too (not root, it would read no
interface and call every host out of the mesh).
"""

import json
import os
import re
import subprocess
import time

import pytest

from sitetools import LOGIN_USER, REPO, fresh_lab, recap, site
from ansible_collections.kilo.mesh.plugins.module_utils.host.status import SAMPLE_RE

PREFIX = "kst"
PROM = "/tmp/kilo.prom"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")


def env():
    return dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
    )


def status(lab, *args):
    """host -> kilo.mesh.status result, from an ad-hoc run on every host (one line per host)."""
    argv = [
        os.path.join(REPO, ".venv", "bin", "ansible"),
        "kilo",
        "-i",
        lab.inventory,
        "-o",
        "-m",
        "kilo.mesh.status",
        "-a",
        " ".join(args),
    ]
    proc = subprocess.run(argv, cwd=REPO, env=env(), capture_output=True, text=True, check=False)
    out = {}
    for host, result in re.findall(r"^(\S+) \| \w+ => (\{.*\})$", proc.stdout, re.M):
        out[host] = json.loads(result)
    assert set(out) == set(lab.hosts), proc.stdout[-3000:] + proc.stderr[-2000:]
    return out, proc.stdout


def status_playbook(lab, *extra):
    argv = [
        os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
        "-i",
        lab.inventory,
        os.path.join(REPO, "playbooks", "status.yml"),
    ] + list(extra)
    return subprocess.run(argv, cwd=REPO, env=env(), capture_output=True, text=True, check=False)


def traffic(lab):
    """Pings from every host to every other host's LAN address (handshakes are lazy)."""
    for src in sorted(lab.hosts):
        targets = " ".join(lab.hosts[d]["lan_ip"] for d in sorted(lab.hosts) if d != src)
        lab.run(
            src,
            ["sh", "-c", "for ip in %s; do ping -c 3 -i 0.3 -W 2 -q $ip & done; wait" % targets],
            timeout=60,
        )


@pytest.fixture(scope="module")
def fresh():
    with fresh_lab(PREFIX, 2, 2, 1, user=LOGIN_USER) as lab:
        yield lab


@pytest.fixture(scope="module")
def lab(fresh):
    site(fresh.inventory)
    traffic(fresh)
    return fresh


# What a host's state is made of, read as root inside it: links, addresses, rules, routes of every
# table, the whole firewall, the forwarding sysctls, and the files under the host's own /etc,
# /var/lib, /run, /tmp and /home (not /var/log: sshd logs every login there).
SNAPSHOT = (
    "ip -d link show; ip addr show; ip rule show; ip -6 rule show; ip route show table all;"
    " ip -6 route show table all; nft list ruleset; sysctl net.ipv4.ip_forward"
    " net.ipv6.conf.all.forwarding; find /etc /var/lib /run /tmp /home -xdev -newer /etc/hostname"
    " -printf '%p %s %m %u\\n' 2>&1 | sort"
)


def snapshot(lab, host):
    return lab.run(host, ["sh", "-c", SNAPSHOT]).stdout


def settled(lab, timeout=30):
    """Until no host has an IPv6 address in duplicate detection (a fresh lab's link-local ones:
    the kernel adds their local routes when it ends, which is no change of ours)."""
    deadline = time.monotonic() + timeout
    while any("tentative" in lab.run(h, ["ip", "-6", "addr", "show"]).stdout for h in lab.hosts):
        assert time.monotonic() < deadline, "IPv6 duplicate detection still running"
        time.sleep(0.2)


def test_without_become_site_stops_at_the_key_step_naming_each_host_and_changes_nothing(fresh):
    settled(fresh)
    before = dict((h, snapshot(fresh, h)) for h in sorted(fresh.hosts))
    out = site(fresh.inventory, "-e", "ansible_become=false", expect_rc=2)
    counts = recap(out)
    assert set(counts) == set(fresh.hosts), out[-3000:]
    assert all(c["failed"] == 1 and c["changed"] == 0 for c in counts.values()), counts
    said = " ".join(out.split()).replace("''", "'")
    for host in fresh.hosts:
        assert ("host '%s': runs as %s (uid " % (host, LOGIN_USER)) in said, out[-3000:]
    assert "-b on the command line or ansible_become: true" in said, out[-3000:]
    assert "TASK [Compute the mesh once" not in out  # the key step was the last of the run
    for host in sorted(fresh.hosts):
        assert snapshot(fresh, host) == before[host], host
    assert not os.path.exists(fresh.path("kilo-registry.json"))


def private_keys(lab):
    return [lab.run(h, ["cat", "/var/lib/kilo/key"]).stdout.strip() for h in sorted(lab.hosts)]


def test_without_become_status_names_each_host_instead_of_calling_it_out_of_the_mesh(lab):
    table = status_playbook(lab, "-e", "ansible_become=false")
    assert table.returncode == 2, table.stdout[-3000:]
    said = " ".join(table.stdout.split()).replace("''", "'")
    for host in lab.hosts:
        assert ("host '%s': runs as %s (uid " % (host, LOGIN_USER)) in said, table.stdout[-3000:]
    assert "not in mesh" not in table.stdout


def test_leaders_report_fresh_handshakes_and_a_textfile(lab):
    results, raw = status(lab, "textfile=%s" % PROM)
    leaders = sorted(h for h, r in results.items() if r["leader"])
    assert len(leaders) == 2 and len(set(results[h]["location"] for h in leaders)) == 2, results
    for host, r in results.items():
        assert r["in_mesh"] and r["changed"] is False
        assert r["segment"] == "location:%s" % lab.hosts[host]["location"]
        if host not in leaders:
            assert r["peers"] == [] and r["stale"] == []
            continue
        other = [h for h in leaders if h != host][0]
        assert [p["public_key"] for p in r["peers"]] == [results[other]["public_key"]]
        peer = r["peers"][0]
        assert peer["handshake_age"] is not None and peer["handshake_age"] < 180, peer
        assert not peer["stale"] and peer["rx_bytes"] > 0 and peer["tx_bytes"] > 0
        assert any(a.startswith("10.4.") for a in r["addresses"]), r["addresses"]
        # the textfile: every sample line is Prometheus text; Kilo's gauges and the peer's age
        text = lab.run(host, ["cat", PROM]).stdout
        assert text == r["metrics"]
        samples = [line for line in text.splitlines() if line and not line.startswith("#")]
        bad = [line for line in samples if not SAMPLE_RE.match(line)]
        assert samples and bad == [], bad
        assert (
            "kilo_leader 1" in samples and "kilo_nodes 4" in samples and "kilo_peers 0" in samples
        )
        assert any(
            re.match(
                r'kilo_peer_handshake_age_seconds\{interface="kilo0",peer="%s"\} \d+$'
                % re.escape(peer["public_key"]),
                s,
            )
            for s in samples
        ), samples
    for key in private_keys(lab):
        assert key and key not in raw
    table = status_playbook(lab)
    assert table.returncode == 0, table.stdout[-3000:]
    assert "4 hosts, 2 leaders, 2 tunnels, 0 stale" in table.stdout, table.stdout[-3000:]
    for host in lab.hosts:
        assert host in table.stdout


def test_a_killed_leader_is_stale_at_the_other_leader(lab):
    results, dummy = status(lab)
    leaders = sorted(h for h, r in results.items() if r["leader"])
    victim, witness = leaders
    pid = lab.run(victim, ["cat", "/run/kilo/kilo0.pid"]).stdout.strip()
    assert pid.isdigit(), pid
    assert "wireguard-go" in lab.run(victim, ["cat", "/proc/%s/cmdline" % pid]).stdout
    killed = time.time()
    assert lab.run(victim, ["kill", "-9", pid]).returncode == 0
    # traffic from the witness's side towards the victim's location: WireGuard tries to
    # handshake (every 5 s) and gets no answer
    target = [
        h
        for h in lab.hosts
        if lab.hosts[h]["location"] == lab.hosts[victim]["location"] and h != victim
    ][0]
    deadline = time.time() + 40
    while True:
        lab.run(
            witness, ["ping", "-c", "2", "-W", "1", "-q", lab.hosts[target]["lan_ip"]], timeout=30
        )
        results, dummy = status(lab, "stale_after=5")
        peer = results[witness]["peers"][0]
        if peer["stale"] or time.time() > deadline:
            break
        time.sleep(3)
    assert (
        peer["public_key"] == results[victim]["public_key"] or results[victim]["public_key"] is None
    )
    assert peer["stale"] and results[witness]["stale"] == [peer["public_key"]], peer
    assert peer["latest_handshake"] <= killed + 1, (peer, killed)  # no handshake since the kill
    # the victim's interface went with its daemon
    assert not results[victim]["leader"]
    table = status_playbook(lab, "-e", "stale_after=5", "-e", "fail_on_stale=true")
    assert table.returncode == 2, table.stdout[-3000:]
    assert "%s -> %s" % (witness, victim) in table.stdout
    assert "stale" in table.stdout
