"""site.yml against real lab hosts over SSH: check mode, idempotence, --limit, an
unreachable host, state absent, and foreign state that must survive.

Real parts only: network-namespace hosts with sshd, wireguard-go, nftables, iproute2.
Tests run in file order and share one lab (each builds on the state the previous left).
"""

import json
import os
import subprocess
import time

import pytest
import yaml

from sitetools import REPO, close_masters, fresh_lab, recap, site

PREFIX = "klh"


def playbook(lab, *extra, **kw):
    return site(lab.inventory, *extra, **kw)


def wg_peers(lab, host):
    """public key -> sorted allowed IPs of the host's WireGuard interface.

    Endpoints are left out: WireGuard itself moves them when a NAT'd peer roams."""
    out = lab.run(host, ["wg", "show", "kilo0", "dump"]).stdout.splitlines()
    peers = {}
    for line in out[1:]:
        f = line.split("\t")
        peers[f[0]] = ",".join(sorted(f[3].split(",")))
    return peers


def sh(lab, host, cmd):
    return lab.run(host, ["sh", "-c", cmd])


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 3, 2, 1, nat=[3]) as lab:
        # Foreign state on every host: a table, a route and a rule that are not ours.
        for host in lab.hosts:
            sh(
                lab,
                host,
                "nft add table inet foreign && nft add chain inet foreign c '{ type filter hook input priority 5; }'"
                " && ip route add blackhole 10.99.0.0/24 proto static && ip rule add to 10.98.0.0/24 table 99 priority 500",
            )
        yield lab


def foreign_intact(lab, host):
    assert sh(lab, host, "nft list table inet foreign").returncode == 0
    assert "blackhole" in sh(lab, host, "ip route show 10.99.0.0/24").stdout
    assert "10.98.0.0/24" in sh(lab, host, "ip rule show").stdout


def test_check_mode_on_fresh_hosts_reports_and_changes_nothing(lab):
    out = playbook(lab, "--check")
    counts = recap(out)
    assert set(counts) == set(lab.hosts)
    assert all(c["changed"] > 0 and c["failed"] == 0 for c in counts.values()), counts
    for host in lab.hosts:
        assert sh(lab, host, "test -e /var/lib/kilo/key").returncode != 0, (
            "check mode made a key on %s" % host
        )
        assert sh(lab, host, "ip link show kilo0").returncode != 0, (
            "check mode made kilo0 on %s" % host
        )
        assert sh(lab, host, "nft list table inet kilo_mesh").returncode != 0
        assert sh(lab, host, "ip route show proto 107").stdout.strip() == ""


def settle(lab):
    """Traffic between every pair of hosts: WireGuard handshakes lazily, and the NAT'd
    leader's translated endpoint is learned by each other leader only after a handshake
    (a run started before that would rightly apply the endpoint another leader learned)."""
    hosts = lab.hosts
    for src in sorted(hosts):
        targets = " ".join(hosts[d]["lan_ip"] for d in sorted(hosts) if d != src)
        lab.run(
            src,
            ["sh", "-c", "for ip in %s; do ping -c 3 -i 0.3 -W 2 -q $ip & done; wait" % targets],
            timeout=60,
        )


def test_converge_then_idempotent(lab):
    first = recap(playbook(lab))
    assert all(c["changed"] > 0 for c in first.values()), first
    settle(lab)
    second = recap(playbook(lab))
    assert all(c["changed"] == 0 for c in second.values()), second
    for host in lab.hosts:
        foreign_intact(lab, host)
        mode = sh(lab, host, "stat -c %a /var/lib/kilo/key").stdout.strip()
        assert mode == "600", (host, mode)


def test_limit_keeps_every_peer(lab):
    leaders = [h for h in sorted(lab.hosts) if wg_peers(lab, h)]
    before = dict((h, wg_peers(lab, h)) for h in leaders)
    out = playbook(lab, "--limit", leaders[0])
    assert recap(out)[leaders[0]]["changed"] == 0
    assert set(recap(out)) == {leaders[0]}
    for h in leaders:
        assert wg_peers(lab, h) == before[h]
    # Three locations: every leader has the two other leaders as peers.
    assert all(len(p) == 2 for p in before.values()), before


def test_unreachable_host_keeps_its_entry(lab):
    leaders = [h for h in sorted(lab.hosts) if wg_peers(lab, h)]
    gone = leaders[-1]
    before = dict((h, wg_peers(lab, h)) for h in leaders)
    sh(lab, gone, "ip link set mgmt0 down")
    try:
        out = playbook(lab, expect_rc=4)  # 4: some host unreachable
    finally:
        sh(lab, gone, "ip link set mgmt0 up")
    counts = recap(out)
    assert counts[gone]["unreachable"] == 1
    for h in leaders:
        if h != gone:
            assert counts[h]["changed"] == 0, counts[h]
            assert wg_peers(lab, h) == before[h]


def test_drift_is_reported_in_check_mode_and_repaired(lab):
    host = sorted(lab.hosts)[1]  # a non-leader: routes only
    route = sh(lab, host, "ip -j route show proto 107").stdout
    dst = json.loads(route)[0]["dst"]
    sh(lab, host, "ip route del %s proto 107" % dst)
    out = playbook(lab, "--check", "--diff", "--limit", host)
    assert recap(out)[host]["changed"] == 1
    assert dst in out  # the diff names the missing route
    assert sh(lab, host, "ip route show %s proto 107" % dst).stdout.strip() == ""
    playbook(lab, "--limit", host)
    assert sh(lab, host, "ip route show %s proto 107" % dst).stdout.strip() != ""


def test_state_absent_removes_exactly_ours(lab):
    host = sorted(lab.hosts)[0]
    playbook(lab, "--limit", host, "-e", "kilo_state=absent")
    assert sh(lab, host, "ip link show kilo0").returncode != 0
    assert sh(lab, host, "ip route show proto 107 table all").stdout.strip() == ""
    assert "1107" not in sh(lab, host, "ip rule show").stdout
    assert sh(lab, host, "nft list table inet kilo_mesh").returncode != 0
    foreign_intact(lab, host)
    # The key stays: the host keeps its identity for a later re-join.
    assert sh(lab, host, "test -s /var/lib/kilo/key").returncode == 0
    out = recap(playbook(lab, "--limit", host))
    assert out[host]["changed"] > 0


def test_install_role_opens_the_port_in_an_active_nftables_firewall(lab):
    host = sorted(lab.hosts)[-1]
    # A host firewall of the user's own (policy accept here: the lab's SSH runs through it).
    sh(
        lab,
        host,
        "nft add table inet filter && nft add chain inet filter input"
        " '{ type filter hook input priority 0; policy accept; }' && nft add rule inet filter input tcp dport 22 accept",
    )
    for run in range(2):
        out = playbook(lab, "--limit", host)
        rules = sh(lab, host, "nft list chain inet filter input").stdout
        assert rules.count('udp dport 51820 accept comment "kilo.mesh"') == 1, rules
        assert "tcp dport 22 accept" in rules
        if run == 1:
            assert recap(out)[host]["changed"] == 0
    # A new port replaces our old rule (and only ours); site.yml puts 51820 back.
    role_only = os.path.join(lab.state_dir, "wireguard-role.yml")
    with open(role_only, "w") as f:
        yaml.safe_dump(
            [
                {
                    "name": "Install role only",
                    "hosts": host,
                    "gather_facts": False,
                    "roles": ["kilo.mesh.wireguard"],
                }
            ],
            f,
        )
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    proc = subprocess.run(
        [
            os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
            "-i",
            lab.inventory,
            role_only,
            "-e",
            "kilo_port=51999",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    rules = sh(lab, host, "nft list chain inet filter input").stdout
    assert "udp dport 51999 accept" in rules and "udp dport 51820" not in rules, rules
    assert "tcp dport 22 accept" in rules
    playbook(lab, "--limit", host)
    rules = sh(lab, host, "nft list chain inet filter input").stdout
    assert rules.count('comment "kilo.mesh"') == 1 and "udp dport 51820 accept" in rules, rules


def test_management_address_is_kept_out_by_ignoring_it_or_by_pinning_endpoints(lab):
    host = sorted(h for h, v in lab.hosts.items() if v["public"] and not v["nat"])[0]
    ansible = [
        os.path.join(REPO, ".venv", "bin", "ansible"),
        "-i",
        lab.inventory,
        host,
        "-m",
        "kilo.mesh.key",
        "-a",
    ]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))

    def key_facts(args):
        out = subprocess.run(
            ansible + [args, "-o"], env=env, stdout=subprocess.PIPE, text=True, check=False
        ).stdout
        return json.loads(out.split("=>", 1)[1])

    # The hazard: Kilo's discovery counts the management range 198.18.0.0/15 as public.
    assert key_facts("ignore_interfaces=[]")["external_ip"].startswith("198.18.")
    # Answer one: ignore the management NIC (what the lab inventory does).
    assert key_facts("ignore_interfaces=mgmt0")["external_ip"] == lab.hosts[host]["public_ip"]
    # Every interface ignored and nothing forced: no usable address; the key call fails naming
    # the host and the variable that would give one (before any converge call).
    links = lab.run(host, ["ip", "-o", "link", "show"]).stdout.splitlines()
    names = sorted(set(line.split(":")[1].strip().split("@")[0] for line in links) - {"lo"})
    failed = key_facts("ignore_interfaces=%s" % ",".join(names))  # (-o drops the "failed" key)
    assert failed["msg"].startswith(
        "host '%s': kilo_force_endpoint: no usable address found by discovery" % host
    ), failed
    assert "public_key" not in failed, failed

    # Answer two: pin every endpoint in the inventory and ignore nothing.
    with open(lab.inventory) as f:
        inv = yaml.safe_load(f)
    kilo = inv["all"]["children"]["kilo"]
    kilo["vars"]["kilo_discovery_ignore_interfaces"] = []
    for loc in kilo["children"].values():
        for name, hvars in loc["hosts"].items():
            h = lab.hosts[name]
            hvars["kilo_force_endpoint"] = "%s:51820" % (h["public_ip"] or h["lan_ip"])
    pinned = os.path.join(lab.state_dir, "inventory-pinned.yml")
    with open(pinned, "w") as f:
        yaml.safe_dump(inv, f)
    out = recap(site(pinned))
    # The pins equal what discovery found while ignoring mgmt0: nothing to change anywhere.
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in out.values()), out
    for h in lab.hosts:
        dump = lab.run(h, ["wg", "show", "kilo0", "endpoints"]).stdout
        assert "198.18." not in dump, (h, dump)


def test_host_checks_fail_the_host_before_its_converge_changes_anything(lab):
    """Port held by another process and a LAN inside the WireGuard subnet: found by the key
    call, the host fails with both named, and nothing of the mesh is made on it."""
    host = sorted(lab.hosts)[0]
    playbook(lab, "--limit", host, "-e", "kilo_state=absent")
    # the holder's PID is the one inside the host's PID namespace (kill runs there too)
    holder = sh(
        lab,
        host,
        "python3 -c 'import socket, time; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
        ' s.bind(("0.0.0.0", 51820)); time.sleep(300)\' >/dev/null 2>&1 & echo $!',
    ).stdout.strip()
    assert (
        sh(
            lab,
            host,
            "for i in $(seq 100); do ss -Hlun 'sport = :51820' | grep -q . && exit 0; sleep 0.1; done;"
            " exit 1",
        ).returncode
        == 0
    ), "the port holder did not bind"
    sh(lab, host, "ip addr add 10.4.200.1/24 dev lo")
    try:
        out = playbook(lab, "--limit", host, expect_rc=2)
        assert (
            "kilo_subnet: 10.4.0.0/16 overlaps a network this host is on (10.4.200.1/24 on lo)"
            in out
        ), out[-3000:]
        assert "kilo_port: UDP port 51820 is already in use by python3 (pid" in out, out[-3000:]
        assert recap(out)[host]["failed"] == 1
        assert sh(lab, host, "ip link show kilo0").returncode != 0
        assert sh(lab, host, "ip route show proto 107 table all").stdout.strip() == ""
    finally:
        sh(
            lab,
            host,
            "kill %s; while kill -0 %s 2>/dev/null; do sleep 0.1; done" % (holder, holder),
        )
        sh(lab, host, "ip addr del 10.4.200.1/24 dev lo")
    assert recap(playbook(lab, "--limit", host))[host]["changed"] > 0
    foreign_intact(lab, host)


def test_a_host_gone_dark_mid_run_is_bounded_and_keeps_its_peers(lab):
    """SSH control connection open, then the host drops every SSH packet: without a bound the
    run hangs for TCP's retransmission time (15 min); kilo_task_timeout ends it."""
    leaders = [h for h in sorted(lab.hosts) if wg_peers(lab, h)]
    dark = leaders[-1]
    before = dict((h, wg_peers(lab, h)) for h in leaders)
    # The lab's ssh_config sends server-alive probes (a hung connection ends in about 10 s by
    # itself): close the lab's control connections and open new ones without probes, so only
    # the task timeout can end the hang.
    control = lab.path("cp")
    close_masters(control)
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
    )
    no_alive = ["-e", "ansible_ssh_extra_args='-o ServerAliveInterval=0'"]
    argv = [
        os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
        "-i",
        lab.inventory,
        os.path.join(REPO, "playbooks", "site.yml"),
    ] + no_alive
    # opens the control connections this test's run will hang on
    assert (
        subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, check=False).returncode == 0
    )
    sh(
        lab,
        dark,
        "nft add table inet kldark && nft add chain inet kldark c '{ type filter hook input priority -10; }'"
        " && nft add rule inet kldark c tcp dport 22 drop",
    )
    try:
        started = time.monotonic()
        proc = subprocess.run(
            argv + ["-e", "kilo_task_timeout=20"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
            timeout=280,
        )  # a hang detector, not a speed goal
        elapsed = time.monotonic() - started
        out = proc.stdout
        print(
            "dark host: run ended after %.1f s (kilo_task_timeout=20), rc %d"
            % (elapsed, proc.returncode)
        )
        assert proc.returncode == 2, out[-3000:]  # failed by the timeout, not unreachable
    finally:
        sh(lab, dark, "nft delete table inet kldark")
        close_masters(control)  # the next runs open them again, with the lab's probes
    counts = recap(out)
    assert counts[dark]["failed"] == 1 and counts[dark]["unreachable"] == 0, counts
    assert "timed out" in out.lower() or "timeout" in out.lower(), out[-3000:]
    for h in leaders:
        if h != dark:
            assert counts[h]["failed"] == 0 and counts[h]["changed"] == 0, counts[h]
        assert wg_peers(lab, h) == before[h], h
