"""A host that goes dark mid-run, with SSH as a user's machine has it (no keepalive of the lab's
own): the collection's keepalive (plugin_utils/keepalive.py) ends that host's part as
unreachable and the run completes, long before the task timeout (300 s) that ended it before.
A remote step silent for longer than the keepalive bound (a slow first package install) is not
cut. And the first run's validate says what will happen: no "left out" warning for the hosts
the run gives a key, one for a host outside --limit.

Own lab (prefix kdk, KILO_TEST_PREFIX_DARK_HOST): 2 locations x 2 hosts. Tests run in file order.
"""

import json
import os
import re
import subprocess
import time

import pytest

from ansible_collections.kilo.mesh.plugins.plugin_utils import keepalive
from sitetools import close_masters, fresh_lab, playbook, recap, site

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the lab")

PREFIX = os.environ.get("KILO_TEST_PREFIX_DARK_HOST", "kdk")
# the task timeout that bounded a dark host before (kilo_task_timeout's default)
OLD_BOUND = 300


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 2, 2, 2, lab_keepalive=False) as lab:
        yield lab


def ssh_argv(lab, host):
    return [
        "ssh",
        "-F",
        lab.ssh_config,
        "-o",
        "ControlPath=%s/%%C" % lab.path("cp"),
        lab.hosts[host]["mgmt_ip"],
    ]


def master_open(lab, host):
    """Is an SSH master connection (ControlPersist) to ``host`` open?"""
    proc = subprocess.run(
        ssh_argv(lab, host)[:-1] + ["-O", "check", lab.hosts[host]["mgmt_ip"]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=30,
        check=False,
    )
    return "Master running" in proc.stdout


def warnings_of(out):
    return re.findall(r"left out of the mesh: (.*)", out)


def test_the_labs_ssh_has_no_keepalive_of_its_own(lab):
    # what ssh itself would use for these hosts: no probe within the collection's bound
    host = sorted(lab.hosts)[0]
    settings = subprocess.run(
        ["ssh", "-G"] + ssh_argv(lab, host)[1:], stdout=subprocess.PIPE, text=True, check=True
    ).stdout
    after = keepalive.gives_up_after(settings)
    assert after is None or after > keepalive.BOUND, settings


def test_a_first_run_warns_only_of_hosts_it_leaves_out(lab):
    hosts = sorted(lab.hosts)
    outside = hosts[-1]
    out = site(lab.inventory, "--limit", "all:!%s" % outside)
    # the hosts of this run get their key in it: only the host outside --limit is left out
    assert warnings_of(out) == [outside] * len(warnings_of(out)) and warnings_of(out), out[-4000:]
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in recap(out).values())
    out = site(lab.inventory)
    assert warnings_of(out) == [], out[-4000:]
    counts = recap(out)
    assert set(counts) == set(hosts) and all(c["failed"] == 0 for c in counts.values()), counts
    # the host that joined last is in the mesh now: its key is in the registry with the others'
    with open(lab.path("kilo-registry.json")) as f:
        assert sorted(json.load(f)["hosts"]) == hosts
    assert lab.run(outside, ["wg", "show", "kilo0", "public-key"]).returncode == 0


def test_a_host_gone_dark_mid_run_ends_its_part_and_the_run_completes(lab):
    """The masters of the run before are open; then one host drops every SSH packet (TCP port
    22, both ways: the host stays up otherwise). Before, its key call waited for the task
    timeout (300 s, 'Timed out'), and the whole run with it."""
    site(lab.inventory)  # masters fresh (opened or used within ControlPersist's 60 s)
    dark = sorted(lab.hosts)[-1]
    assert master_open(lab, dark)
    lab.run(
        dark,
        [
            "sh",
            "-c",
            "nft add table inet kdkdark && nft add chain inet kdkdark in '{ type filter hook input"
            " priority -10; }' && nft add rule inet kdkdark in tcp dport 22 drop",
        ],
        check=True,
    )
    try:
        started = time.monotonic()
        # timeout: the run must end before the old bound would have let it (a hang detector)
        out = site(lab.inventory, expect_rc=4, timeout=OLD_BOUND - 10)
        elapsed = time.monotonic() - started
        still_dark = lab.run(dark, ["nft", "list", "table", "inet", "kdkdark"]).returncode == 0
    finally:
        lab.run(dark, ["nft", "delete", "table", "inet", "kdkdark"])
    print(
        "dark host %s: the run ended after %.1f s (before: the task timeout, %d s, and the whole run"
        " with it); keepalive %s, gives up after %d s of silence"
        % (dark, elapsed, OLD_BOUND, keepalive.ARGS, keepalive.BOUND)
    )
    assert still_dark
    counts = recap(out)
    assert counts[dark]["unreachable"] == 1 and counts[dark]["failed"] == 0, counts
    assert "timed out after" not in out.lower(), out[-4000:]
    for host in lab.hosts:
        if host != dark:
            assert counts[host]["failed"] == 0 and counts[host]["unreachable"] == 0, counts
            # the rest of the run went on: every other host converged (its join ran)
            assert counts[host]["ok"] >= 2, counts


def test_a_step_silent_for_longer_than_the_keepalive_bound_is_not_cut(lab, tmp_path):
    """A first package install can print nothing for minutes: sshd answers the probes meanwhile,
    so the connection stays. A collection step opens the masters, then a command silent for
    longer than the bound runs over them."""
    book = tmp_path / "slow.yml"
    book.write_text(
        """
- hosts: kilo
  gather_facts: false
  tasks:
    - name: A remote step of the collection (opens the master with its keepalive)
      kilo.mesh.status:
    - name: Silent for longer than the keepalive bound
      ansible.builtin.command: sleep %d
      changed_when: false
"""
        % (keepalive.BOUND + 15)
    )
    close_masters(lab.path("cp"))
    out = playbook(lab.inventory, str(book), "-vvv", timeout=OLD_BOUND)
    counts = recap(out)
    assert all(
        c["failed"] == 0 and c["unreachable"] == 0 and c["ok"] == 2 for c in counts.values()
    ), counts
    # every host's first SSH command (the one that opened its master) carried the keepalive
    for host in sorted(lab.hosts):
        first = [
            line
            for line in out.splitlines()
            if "SSH: EXEC" in line and lab.hosts[host]["mgmt_ip"] + " " in line
        ][0]
        assert keepalive.ARGS in first, first
