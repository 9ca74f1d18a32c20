"""The boot restore on lab hosts: what a reboot wipes is wiped, the boot unit's own command brings
it back, and every pair reaches every other again, with no Ansible run in between.

The lab has no systemd (PID 1 of a lab host is its init script), so the unit is written but not
enabled, and its ExecStart, read from the unit file each host holds, is run in each host as
systemd would run it at boot. What a reboot wipes: the WireGuard interface and its daemon,
every route and rule, the nftables table, /run; what it keeps: the files. A stored plan that is
corrupt, of another format or not a plan makes the command fail naming the file, and changes
nothing on the host. Figures printed: wipe to every pair reaching every other, each host's
restore time. (A real reboot under systemd: tests/vm/; the backend on its own: tests/unit/plugins/module_utils/host/test_boot.py.)
"""

import json
import os
import shlex
import threading
import time

import pytest

import sitetools
from sitetools import fresh_lab, recap, site

PREFIX = os.environ.get("KILO_TEST_PREFIX_BOOT_RESTORE", "kbr")
UNIT = "/etc/systemd/system/kilo-mesh.service"
STORED = "/var/lib/kilo/mesh-plan.json"
APP = "/usr/lib/kilo-mesh/kilo-mesh.pyz"


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 2, 2, 1) as lab:
        yield lab


def sh(lab, host, cmd, timeout=60):
    return lab.run(host, ["sh", "-c", cmd], timeout=timeout)


def exec_start(lab, host):
    """The unit's ExecStart on ``host``, as argv."""
    text = sh(lab, host, "cat %s" % UNIT).stdout
    lines = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, text
    return shlex.split(lines[0][len("ExecStart=") :])


def state(lab, host):
    """What a reboot wipes and the restore brings back, as text."""
    return "\n".join(
        sh(lab, host, cmd).stdout
        for cmd in (
            "wg show kilo0 dump 2>/dev/null | cut -f1,3,4 | sort",  # keys, endpoints, allowed IPs
            "ip -br addr show dev kilo0 2>/dev/null | sed 's/ fe80:[^ ]*//'",  # the kernel's link-local address is new
            "ip route show table all proto 107 | sort",
            "ip -6 route show table all proto 107 | sort",
            "ip rule show | grep 1107",
            "nft list table inet kilo_mesh 2>/dev/null | grep -v handle",
        )
    )


def wipe(lab, host):
    sitetools.wipe(lab, host)
    wiped = state(lab, host)
    assert (
        "kilo0" not in wiped
        and "proto 107" not in wiped
        and "1107" not in wiped
        and "table" not in wiped
    ), wiped


def unreached(lab):
    """Pairs (src, dst) whose LAN address does not answer 3 pings within 2 s each."""
    missing, lock = [], threading.Lock()

    def probe(src):
        for dst in sorted(lab.hosts):
            if (
                dst != src
                and sh(lab, src, "ping -c 1 -W 2 -q %s" % lab.hosts[dst]["lan_ip"]).returncode != 0
                and sh(lab, src, "ping -c 2 -W 2 -q %s" % lab.hosts[dst]["lan_ip"]).returncode != 0
            ):
                with lock:
                    missing.append((src, dst))

    threads = [threading.Thread(target=probe, args=(h,)) for h in sorted(lab.hosts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(missing)


def test_check_mode_shows_the_unit_and_the_stored_plan_and_writes_nothing(lab):
    out = site(lab.inventory, "--check", "--diff")
    assert all(c["changed"] > 0 and c["failed"] == 0 for c in recap(out).values()), recap(out)
    assert "ExecStart=/usr/bin/python3 %s --restore %s" % (APP, STORED) in out
    assert "stored_plan" in out and "--restore %s" % STORED in out, (
        "the diff does not show the stored plan"
    )
    for host in lab.hosts:
        assert sh(lab, host, "ls %s %s %s" % (UNIT, STORED, APP)).returncode != 0, host


def test_site_stores_the_plan_and_the_unit_and_a_rerun_changes_nothing(lab):
    site(lab.inventory)
    assert not unreached(lab)
    again = recap(site(lab.inventory))
    assert all(c["changed"] == 0 for c in again.values()), again
    for host in lab.hosts:
        assert sh(lab, host, "stat -c %%a %s" % STORED).stdout.strip() == "600"
        stored = json.loads(sh(lab, host, "cat %s" % STORED).stdout)
        assert stored["plan"]["name"] == host and "state" not in stored["settings"]
        key = sh(lab, host, "cat /var/lib/kilo/key").stdout.strip()
        assert key and key not in sh(lab, host, "cat %s" % STORED).stdout, (
            "the private key in the stored plan"
        )
        assert exec_start(lab, host) == ["/usr/bin/python3", APP, "--restore", STORED]
        # no systemd in the lab: written, not enabled
        assert (
            sh(
                lab, host, "ls /etc/systemd/system/multi-user.target.wants/kilo-mesh.service"
            ).returncode
            != 0
        )


def test_wiped_hosts_come_back_by_the_units_command_alone(lab):
    before = dict((h, state(lab, h)) for h in lab.hosts)
    for host in lab.hosts:
        wipe(lab, host)
    across = sorted(
        (a, b)
        for a in lab.hosts
        for b in lab.hosts
        if lab.hosts[a]["location"] != lab.hosts[b]["location"]
    )
    assert unreached(lab) == across, "a pair of two locations still reached after the wipe"
    wiped = time.monotonic()
    took, results, lock = {}, {}, threading.Lock()

    def restore(host):
        t = time.monotonic()
        proc = lab.run(host, exec_start(lab, host), timeout=120)
        with lock:
            took[host], results[host] = time.monotonic() - t, proc

    threads = [threading.Thread(target=restore, args=(h,)) for h in sorted(lab.hosts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for host, proc in results.items():
        assert proc.returncode == 0, (host, proc.stdout, proc.stderr)
        assert "kilo-mesh restore: %s:" % STORED in proc.stderr and "changes in" in proc.stderr, (
            proc.stderr
        )
    deadline = time.monotonic() + 60
    missing = unreached(lab)
    while missing and time.monotonic() < deadline:
        missing = unreached(lab)
    print(
        "\nboot restore (lab, %d hosts at once): wipe to every pair %.1f s; restore per host %s"
        % (
            len(lab.hosts),
            time.monotonic() - wiped,
            ", ".join("%s %.1f s" % (h, took[h]) for h in sorted(took)),
        )
    )
    assert not missing, missing
    for host in lab.hosts:
        assert state(lab, host) == before[host], host
    again = recap(site(lab.inventory))
    assert all(c["changed"] == 0 for c in again.values()), again
    # a second restore on a host in place changes nothing
    proc = lab.run(sorted(lab.hosts)[0], exec_start(lab, sorted(lab.hosts)[0]), timeout=120)
    assert proc.returncode == 0 and "already in place" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "content,why",
    [
        ('{"format": 1, "plan": {"name": ', "invalid JSON"),
        ('{"format": 7, "plan": {}, "settings": {}}', "format 7"),
        (
            '{"format": 1, "plan": {"name": "x", "listen_port": "many"}, "settings": {}}',
            "plan.leader: missing",
        ),
    ],
)
def test_a_bad_stored_plan_fails_naming_the_file_and_changes_nothing(lab, content, why):
    host = sorted(lab.hosts)[-1]
    good = sh(lab, host, "cat %s" % STORED).stdout
    wipe(lab, host)
    try:
        sh(lab, host, "cat > %s <<'EOF'\n%s\nEOF" % (STORED, content))
        before = state(lab, host)
        links = sh(lab, host, "ip -br link").stdout
        proc = lab.run(host, exec_start(lab, host), timeout=120)
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        assert STORED in proc.stderr and why in proc.stderr and "nothing changed" in proc.stderr, (
            proc.stderr
        )
        assert state(lab, host) == before and sh(lab, host, "ip -br link").stdout == links
    finally:
        sh(lab, host, "cat > %s <<'EOF'\n%sEOF" % (STORED, good))
        assert lab.run(host, exec_start(lab, host), timeout=120).returncode == 0


def test_boot_restore_off_and_state_absent_remove_the_unit_and_the_plan(lab):
    host = sorted(lab.hosts)[0]
    out = site(lab.inventory, "--limit", host, "-e", "kilo_boot_restore=false")
    assert recap(out)[host]["changed"] == 1
    assert sh(lab, host, "ls %s %s %s" % (UNIT, STORED, APP)).stdout.strip() == ""
    site(lab.inventory, "--limit", host)
    assert sh(lab, host, "ls %s %s %s" % (UNIT, STORED, APP)).returncode == 0
    site(lab.inventory, "--limit", host, "-e", "kilo_state=absent")
    assert (
        sh(
            lab,
            host,
            "ls %s %s %s /var/lib/kilo/mesh-preshared-keys.json 2>/dev/null" % (UNIT, STORED, APP),
        ).stdout.strip()
        == ""
    )
