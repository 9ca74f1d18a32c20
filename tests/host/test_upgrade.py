"""Upgrading the collection on a running mesh: a lab converged by an earlier version of the
collection, then site.yml of this tree while every pair of locations pings at 50/s.

The earlier version is a landed commit (``KILO_UPGRADE_FROM``, default: the last landing before
the boot restore, which adds state of its own on every host), unpacked with ``git archive`` as an
installed collection beside kubernetes.core. After the upgrade run no WireGuard interface was
recreated (same ifindex), every peer and route is as it was, the flows lost nothing past one
second (the loss is printed), and a second run reports ``changed=0``.
"""

import os
import subprocess
import tarfile
import io

import pytest

import flows
from sitetools import ANSIBLE_BIN, REPO, fresh_lab, recap, site

PREFIX = os.environ.get("KILO_TEST_PREFIX_UPGRADE", "kup")
FROM = os.environ.get("KILO_UPGRADE_FROM", "66a2612")


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    """ANSIBLE_COLLECTIONS_PATH of the earlier version (kilo.mesh at FROM, kubernetes.core)."""
    have = subprocess.run(["git", "-C", REPO, "cat-file", "-e", FROM + "^{commit}"], check=False)
    if have.returncode != 0:
        pytest.skip("commit %s is not in this clone's history (a shallow clone)" % FROM)
    root = tmp_path_factory.mktemp("earlier")
    dest = root / "ansible_collections" / "kilo" / "mesh"
    dest.mkdir(parents=True)
    data = subprocess.run(
        ["git", "-C", REPO, "archive", "--format=tar", FROM], check=True, stdout=subprocess.PIPE
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(str(dest), filter="data")
    os.symlink(
        os.path.join(REPO, ".collections", "ansible_collections", "kubernetes"),
        str(root / "ansible_collections" / "kubernetes"),
    )
    return str(root)


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 2, 2, 1) as lab:
        yield lab


def earlier_site(lab, collections):
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=collections,
    )
    proc = subprocess.run(
        [
            os.path.join(ANSIBLE_BIN, "ansible-playbook"),
            "-i",
            lab.inventory,
            os.path.join(
                collections, "ansible_collections", "kilo", "mesh", "playbooks", "site.yml"
            ),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-6000:]
    return proc.stdout


def sh(lab, host, cmd):
    return lab.run(host, ["sh", "-c", cmd]).stdout


def snapshot(lab, host):
    return {
        "ifindex": sh(lab, host, "cat /sys/class/net/kilo0/ifindex"),
        "peers": sh(lab, host, "wg show kilo0 dump | tail -n +2 | cut -f1,4 | sort"),
        "routes": sh(lab, host, "ip route show table all proto 107 | sort"),
        "rules": sh(lab, host, "ip rule show | grep 1107"),
    }


def test_a_run_of_this_version_over_an_earlier_ones_mesh_drops_no_tunnel(lab, earlier):
    earlier_site(lab, earlier)
    before = dict((h, snapshot(lab, h)) for h in lab.hosts)
    assert all(s["ifindex"].strip() for s in before.values()), before
    pairs = [
        (a, b)
        for a in sorted(lab.hosts)
        for b in sorted(lab.hosts)
        if lab.hosts[a]["location"] != lab.hosts[b]["location"]
    ]
    result, out = flows.under_traffic(
        lab, "upgrade from %s" % FROM, lambda: site(lab.inventory), pairs, check_bound=True
    )
    counts = recap(out)
    assert all(c["failed"] == 0 for c in counts.values()), counts
    for host in lab.hosts:
        assert snapshot(lab, host) == before[host], host
    print(
        "upgrade from %s: echoes lost in all %d flows: %d"
        % (FROM, len(result), sum(len(lost) for _sent, lost in result.values()))
    )
    again = recap(site(lab.inventory))
    assert all(c["changed"] == 0 for c in again.values()), again
