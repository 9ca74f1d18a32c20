"""Push-mode relays on real NATs (prefix krl, KILO_TEST_PREFIX_RELAYS_PUSH): site.yml over SSH
connects two locations that sit behind NAT routers and cannot reach each other, through the
public location's leader, which forwards between its own WireGuard peers.

Lab: 3 locations x 2 hosts, the first of each public; aws reachable, gcp and azure each behind a
NAT router of the kind under test (``eim``, then ``symmetric``: lab.py's NAT kinds, measured by
tests/lab/test_nat_kinds.py). gcp and azure are marked ``kilo_behind_nat: true`` (location
variables; no endpoint is configured anywhere: each host's is what the key step discovers). Every
host carries a "pod" address of its pod range on lo (10.2<i>.<k>.1 in 10.2<i>.<k>.0/24).

Asserts: the run succeeds; every host reaches every other host's LAN and pod address; a re-run
reports changed=0; the relay's rule (nft ``iifname kilo0 oifname kilo0 counter``) counted the
traffic between gcp and azure, and only the relay has one; status.yml's PATHS table shows gcp -
azure relayed via aws. Prints the run times and the counter.
"""

import os
import re
import time

import pytest
import yaml

from sitetools import fresh_lab, playbook, recap, site

PREFIX = os.environ.get("KILO_TEST_PREFIX_RELAYS_PUSH", "krl")
NATTED = ("gcp", "azure")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the lab")


def sh(lab, host, cmd, timeout=60):
    return lab.run(host, ["sh", "-c", cmd], timeout=timeout)


def pod(lab, host):
    h = lab.hosts[host]
    return "10.2%d.%d.0/24" % (h["location_index"], h["index"]), "10.2%d.%d.1" % (
        h["location_index"],
        h["index"],
    )


def relay_inventory(lab, natted, name):
    """Pod addresses on lo; an inventory beside the lab's (``name``) whose ``natted`` locations
    carry ``kilo_behind_nat: true`` and every host its pod range. Returns its path."""
    for host in lab.hosts:
        sh(lab, host, "ip addr add %s/32 dev lo" % pod(lab, host)[1])
    with open(lab.inventory) as f:
        inventory = yaml.safe_load(f)
    mesh = inventory["all"]["children"]["kilo"]
    # the pod addresses sit on lo, where discovery would take them for the internal IP
    mesh["vars"]["kilo_discovery_ignore_interfaces"] = ["mgmt0", "lo"]
    for location, group in mesh["children"].items():
        if location in natted:
            group["vars"]["kilo_behind_nat"] = True
        for host, hostvars in group["hosts"].items():
            hostvars["kilo_pod_cidr"] = pod(lab, host)[0]
    path = os.path.join(os.path.dirname(lab.inventory), name)
    with open(path, "w") as f:
        yaml.safe_dump(inventory, f)
    return path


@pytest.fixture(scope="module", params=["eim", "symmetric"])
def lab(request):
    with fresh_lab(PREFIX, 3, 2, 1, nat=[2, 3], nat_kind=request.param) as lab:
        lab.kind = request.param
        lab.site_inventory = relay_inventory(lab, NATTED, "relays.yml")
        try:
            yield lab
        finally:
            os.remove(lab.site_inventory)  # so the lab's down leaves no state dir behind


def unreached(lab, hosts=None):
    """[(src, dst address)] of every host's LAN and pod address a host cannot ping (from its own
    pod address for pod targets), among ``hosts`` (default: all). Each pair gets a few tries:
    WireGuard handshakes on the first packet, and a NAT'd leader's first keepalive may still be
    on its way to the relay."""
    hosts = sorted(lab.hosts) if hosts is None else hosts
    failed = []
    for src in hosts:
        mine = pod(lab, src)[1]
        targets = []
        for dst in hosts:
            if dst != src:
                targets += [
                    "-c 3 %s" % lab.hosts[dst]["lan_ip"],
                    "-c 3 -I %s %s" % (mine, pod(lab, dst)[1]),
                ]
        script = (
            " ".join(
                "(ping -i 0.3 -W 2 -q %s >/dev/null || ping -c 5 -i 0.5 -W 2 -q %s >/dev/null || echo %s) &"
                % (t, t, t.split()[-1])
                for t in targets
            )
            + " wait"
        )
        failed += [(src, a) for a in sh(lab, src, script, timeout=120).stdout.split()]
    return failed


def paths_shown(lab, *extra, with_probe=False):
    """status.yml (textfile /tmp/kilo.prom on each host): {(a, b): (path, via)} of its PATHS table
    (each pair under both orders); ``with_probe``: (path, via, probe), the PROBE column (``-``
    without a probe entry, else the probe's handshake: ``never`` behind symmetric NATs)."""
    out = playbook(
        getattr(lab, "site_inventory", lab.inventory),
        "status.yml",
        "-e",
        "textfile=/tmp/kilo.prom",
        *extra,
    )
    rows = re.findall(
        r"^\W*(location:\S+)\s+(location:\S+)\s+(direct|relayed)\s+(\S+)\s+(\S+)\s+(-|never|yes|\d\w*?)\W*$",
        out,
        re.M,
    )
    assert rows, out[-4000:]
    return dict(
        ((x, y), (path, via, probe) if with_probe else (path, via))
        for a, b, path, via, dummy, probe in rows
        for x, y in ((a, b), (b, a))
    )


def relay_counter(lab, host):
    """(packets, bytes) of the relay rule on host, None without one."""
    out = sh(lab, host, "nft list chain inet kilo_mesh forward 2>/dev/null").stdout
    for line in out.splitlines():
        if 'iifname "kilo0" oifname "kilo0" counter' in line:
            words = line.split()
            return int(words[words.index("packets") + 1]), int(words[words.index("bytes") + 1])
    return None


def wg_allowed(lab, host):
    """public key -> allowed IPs (list) of host's kilo0."""
    out = {}
    for line in sh(lab, host, "wg show kilo0 dump").stdout.splitlines()[1:]:
        f = line.split("\t")
        out[f[0]] = f[3].split(",")
    return out


def icmp_redirects(lab, host):
    out = sh(lab, host, "nstat -az IcmpOutRedirects").stdout
    return int(
        next(line.split()[1] for line in out.splitlines() if line.startswith("IcmpOutRedirects"))
    )


def leader(lab, location):
    leaders = [
        h
        for h in sorted(lab.hosts)
        if lab.hosts[h]["location"] == location
        and sh(lab, h, "wg show kilo0 peers 2>/dev/null").stdout.strip()
    ]
    assert len(leaders) == 1, (location, leaders)
    return leaders[0]


def test_relayed_mesh_pings_everywhere_and_reruns_clean(lab):
    started = time.monotonic()
    first = recap(site(lab.site_inventory))
    took = time.monotonic() - started
    assert set(first) >= set(lab.hosts) and all(
        c["failed"] == 0 and c["unreachable"] == 0 for c in first.values()
    ), first
    relay = leader(lab, "aws")
    assert [h for h in lab.hosts if relay_counter(lab, h) is not None] == [relay]
    # each NAT'd leader carries the other NAT'd location's ranges on its entry for the relay
    relay_key = sh(lab, relay, "wg show kilo0 public-key").stdout.strip()
    for here, there in (NATTED, NATTED[::-1]):
        entries = wg_allowed(lab, leader(lab, here))
        far = [h for h in lab.hosts if lab.hosts[h]["location"] == there]
        assert all(pod(lab, h)[0] in entries[relay_key] for h in far), entries
    redirects = icmp_redirects(lab, relay)
    before = relay_counter(lab, relay)
    missing = unreached(lab)
    assert missing == [], missing
    after = relay_counter(lab, relay)
    started = time.monotonic()
    second = recap(site(lab.site_inventory))
    took2 = time.monotonic() - started
    redirects = icmp_redirects(lab, relay) - redirects
    print(
        "\n%s: first run %.1f s, re-run %.1f s; relay %s forwarded %d packets (%d bytes) during the"
        " matrix, sent %d ICMP redirects"
        % (lab.kind, took, took2, relay, after[0] - before[0], after[1] - before[1], redirects)
    )
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in second.values()), second
    # gcp <-> azure went through the relay: 2 x 2 hosts, both directions, 2 addresses, 3 echoes,
    # each request and reply forwarded once (more where a ping was retried)
    assert after[0] - before[0] >= 2 * 2 * 2 * 2 * 3 * 2, (before, after)
    assert redirects == 0
    assert unreached(lab) == []
    # status: the pair of NAT'd locations relayed through aws, the others direct
    shown = paths_shown(lab)
    print("PATHS: %s" % sorted(k + v for k, v in shown.items() if k[0] < k[1]))
    assert shown[("location:gcp", "location:azure")] == ("relayed", "location:aws")
    assert shown[("location:aws", "location:gcp")] == ("direct", "-")


def test_a_new_nat_mapping_heals_by_roaming_and_a_rerun_keeps_it(lab):
    """The gcp router is re-addressed (lab.remap: every mapping new): the relay learns gcp's new
    mapping from its next keepalive (WireGuard roaming, no run needed), azure reaches gcp again
    through the relay, and a re-run changes nothing and keeps the path."""
    src = [h for h in sorted(lab.hosts) if lab.hosts[h]["location"] == "azure"][0]
    dst = [h for h in sorted(lab.hosts) if lab.hosts[h]["location"] == "gcp"][0]
    target = pod(lab, dst)[1]
    assert (
        sh(lab, src, "ping -c 2 -i 0.3 -W 2 -q -I %s %s" % (pod(lab, src)[1], target)).returncode
        == 0
    )
    old = lab.router("gcp")["public_ip"]
    new = lab.remap("gcp")
    try:
        started = time.monotonic()
        healed = None
        while time.monotonic() - started < 90:
            if (
                sh(lab, src, "ping -c 1 -W 1 -q -I %s %s" % (pod(lab, src)[1], target)).returncode
                == 0
            ):
                healed = time.monotonic() - started
                break
        print(
            "\n%s: gcp's NAT router %s -> %s: %s reaches %s again after %s"
            % (
                lab.kind,
                old,
                new,
                src,
                target,
                "%.1f s" % healed if healed is not None else "never (90 s)",
            )
        )
        assert healed is not None
        relay = leader(lab, "aws")
        gcp_key = sh(lab, leader(lab, "gcp"), "wg show kilo0 public-key").stdout.strip()
        endpoints = dict(
            line.split("\t")[:3:2]
            for line in sh(lab, relay, "wg show kilo0 dump").stdout.splitlines()[1:]
        )
        assert endpoints[gcp_key].startswith(new + ":"), endpoints
        again = recap(site(lab.site_inventory))
        assert all(c["changed"] == 0 and c["failed"] == 0 for c in again.values()), again
        assert unreached(lab) == []
    finally:
        lab.remap("gcp")
