"""The key call prepares the host too (kilo.mesh.key prepare: true, as roles/node runs it): a
host that lacks a package gets it installed by the action and the key step runs again; a host
that lacks nothing pays one remote call.

Own lab (prefix kpi): 2 locations x 1 host. The package goes missing in one host only: a lab
host already has its own copy-on-write /etc, /var/lib and /var/log, and the test lays one over
/usr in that host's mount namespace, so `dpkg --remove` there and the reinstall by site.yml touch
nothing of this machine. The .deb comes from apt's cache (filled first, outside the lab, since
lab hosts have no uplink).
"""

import os
import re
import subprocess

import pytest

from sitetools import fresh_lab, recap, site

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the lab")

PACKAGE = "wireguard-tools"  # one of prepare.PACKAGES["apt"]["base"]; nothing in a lab run needs it


@pytest.fixture(scope="module")
def lab():
    # overridable: two checkouts testing at once
    with fresh_lab(os.environ.get("KILO_TEST_PREFIX_PREPARE_KEY", "kpi"), 2, 1, 1) as lab:
        yield lab


def in_host(lab, host, script):
    return lab.run(host, ["sh", "-c", script + " 2>&1"])


def installed(lab, host):
    out = in_host(lab, host, "dpkg-query -W -f='${Status}' %s" % PACKAGE).stdout
    return "ok installed" in out


def test_a_missing_package_is_installed_in_the_key_call_and_a_rerun_installs_nothing(lab):
    host = sorted(lab.hosts)[0]
    other = sorted(lab.hosts)[1]
    cached = subprocess.run(
        ["apt-get", "install", "-y", "-q", "--download-only", "--reinstall", PACKAGE],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert cached.returncode == 0, cached.stdout[-2000:]
    upper = lab.path("usr-upper")
    os.makedirs(os.path.join(upper, "u"), exist_ok=True)
    os.makedirs(os.path.join(upper, "w"), exist_ok=True)
    made = in_host(
        lab,
        host,
        "mount -t overlay overlay -o lowerdir=/usr,upperdir={0}/u,workdir={0}/w /usr"
        " && dpkg --remove --force-depends {1}".format(upper, PACKAGE),
    )
    assert made.returncode == 0, made.stdout
    assert not installed(lab, host) and installed(lab, other)
    assert in_host(lab, host, "command -v wg").returncode != 0
    assert os.path.exists("/usr/bin/wg"), "the removal leaked out of the lab host"

    # Check mode: says what it would install, installs nothing; the key step still answers.
    out = site(lab.inventory, "--check", "-v", "--limit", host)
    assert re.search(r"^\s+installed:\n\s+- %s$" % PACKAGE, out, re.M), out[-4000:]
    assert not installed(lab, host)

    out = site(lab.inventory, "-v")
    counts = recap(out)
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), counts
    assert installed(lab, host), out[-4000:]
    assert in_host(lab, host, "wg show kilo0 public-key").stdout.strip(), (
        "wg missing after the install"
    )
    # the mesh is up between the two locations
    peer_ip = lab.hosts[other]["lan_ip"]
    assert lab.run(host, ["ping", "-c", "2", "-W", "2", "-q", peer_ip]).returncode == 0

    out = site(lab.inventory, "-v")
    assert all(c["changed"] == 0 for c in recap(out).values()), recap(out)
    assert re.findall(r"^\s+installed: \[\]$", out, re.M) == ["        installed: []"] * 2, out[
        -4000:
    ]
    # two remote calls per host on a re-run: the key call and the converge
    tasks = re.findall(r"^TASK \[(.*)\]", out, re.M)
    assert not [t for t in tasks if "prepare" in t.lower() and "key" not in t.lower()], tasks
