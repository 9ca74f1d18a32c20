"""WireGuard key rotation (issue 24) in a real lab: real hosts (network namespaces with sshd and
wireguard-go), real Ansible over SSH, playbooks/rotate.yml.

One lab (prefix krt) of 3 locations x 2 hosts, location granularity: X-1 is its location's
leader (the only host with WireGuard peers: the other leaders), X-2 reaches the other locations
through it. site.yml runs once; the tests then run in file order on the same mesh:

* check mode and --limit change nothing (a key that would rotate is named, no private key shown;
  --limit refuses before any host changes);
* a leader, a non-leader and every host at once rotate under 50 pings/s on every tunnel of the
  rotating hosts (the loss of each flow is printed; bound: under 1 s, 50 packets, per flow);
  a plain site.yml afterwards changes nothing;
* rotation by age (kilo_key_max_age): held back under --limit, done in a run of every host;
* revocation: a WireGuard client holding a rotated host's old private key completes a handshake
  with no host of the mesh (and did before the rotation: the attacker's set-up works);
* an interrupted rotation heals in one ordinary run: rotate.yml SIGKILLed at each step, and the
  rotating host going dark (SSH blocked) after its key step.

Every host is reached as the non-root user sitetools.LOGIN_USER with become (sudo without a
password on some hosts, with ansible_become_password on the others).

Run with -s to see the figures.
"""

import base64
import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from attacker import Attacker, attacker_net, remove_net
from flows import under_traffic
from sitetools import ANSIBLE_BIN, LOGIN_USER, REPO, fresh_lab, playbook, recap, site

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the lab")

PREFIX = os.environ.get(
    "KILO_TEST_PREFIX_ROTATION", "krt"
)  # overridable: two checkouts testing at once
KEY = "/var/lib/kilo/key"
IFACE = "kilo0"


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 3, 2, 1, user=LOGIN_USER) as lab:
        started = time.monotonic()
        site(lab.inventory)
        print("\nsite.yml (first run, 6 hosts): %.1f s" % (time.monotonic() - started))
        yield lab


# -- reading the hosts ---------------------------------------------------------------------


def sh(lab, host, command):
    proc = lab.run(host, ["sh", "-c", command], timeout=30)
    assert proc.returncode == 0, (host, command, proc.stdout, proc.stderr)
    return proc.stdout.strip()


def iface_key(lab, host):
    return sh(lab, host, "wg show %s public-key" % IFACE)


def file_key(lab, host):
    """The private key file's text: read here as a leak would (the test may)."""
    return sh(lab, host, "cat %s" % KEY)


def peers_of(lab, host):
    return set(sh(lab, host, "wg show %s peers" % IFACE).split())


def registry_keys(lab):
    with open(lab.path("kilo-registry.json")) as f:
        return dict((name, data["public_key"]) for name, data in json.load(f)["hosts"].items())


def leaders(lab):
    """Hosts with WireGuard peers: the location leaders."""
    return sorted(host for host in lab.hosts if peers_of(lab, host))


def follower(lab, leader):
    """The other host of the leader's location."""
    loc = lab.hosts[leader]["location"]
    return [h for h in sorted(lab.hosts) if lab.hosts[h]["location"] == loc and h != leader][0]


def keys_now(lab):
    return dict((host, iface_key(lab, host)) for host in lab.hosts)


def assert_consistent(lab):
    """Every host: its key file is a whole key (44 base64 characters of 32 bytes, 0600, no
    temporary file of a write left beside it), its interface runs that key, the registry holds
    it, and every leader's peers are exactly the other leaders' current keys."""
    keys = keys_now(lab)
    registry = registry_keys(lab)
    for host in sorted(lab.hosts):
        text = file_key(lab, host)
        assert len(text) == 44 and len(base64.b64decode(text, validate=True)) == 32, (
            host,
            len(text),
        )
        assert sh(lab, host, "stat -c %%a %s" % KEY) == "600", host
        # beside the key only the boot restore's stored plan (and its preshared keys, when any)
        listing = sh(lab, host, "ls -A %s" % os.path.dirname(KEY)).split()
        assert "key" in listing and set(listing) <= {
            "key",
            "mesh-plan.json",
            "mesh-preshared-keys.json",
        }, (host, listing)
        assert sh(lab, host, "wg pubkey < %s" % KEY) == keys[host], host
        assert registry[host] == keys[host], host
    heads = leaders(lab)
    assert len(heads) == 3, heads
    for leader in heads:
        assert peers_of(lab, leader) == set(keys[o] for o in heads if o != leader), leader


def reach_all(lab):
    """Every host pings every other one's LAN address (all at once); the pairs that did not."""
    procs = []
    for src in sorted(lab.hosts):
        for dst in sorted(lab.hosts):
            if src != dst:
                argv = lab.nsenter_argv(
                    src, ["ping", "-c", "2", "-i", "0.2", "-w", "10", lab.hosts[dst]["lan_ip"]]
                )
                procs.append(
                    (
                        (src, dst),
                        subprocess.Popen(
                            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                        ),
                    )
                )
    return [pair for pair, proc in procs if proc.wait(timeout=30) != 0]


def assert_all_reach(lab):
    failed = reach_all(lab)
    assert failed == [], "no reply between %s" % failed


def rotate_under_traffic(lab, what, pattern, pairs, check_bound=True):
    """rotate.yml -e hosts=PATTERN under 50 pings/s on every pair (flows.under_traffic);
    returns {(src, dst): (sent, lost icmp_seq list)}."""
    return under_traffic(
        lab,
        "rotation of %s" % what,
        lambda: playbook(lab.inventory, "rotate.yml", "-e", "hosts=%s" % pattern),
        pairs,
        check_bound,
    )[0]


def assert_no_change(lab, out):
    counts = recap(out)
    assert set(lab.hosts) <= set(counts), counts
    assert all(
        c["changed"] == 0 and c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()
    ), counts


# -- the tests -----------------------------------------------------------------------------


def test_check_mode_names_the_key_that_would_rotate_and_changes_nothing(lab):
    host = "aws-1"
    private, keys = file_key(lab, host), keys_now(lab)
    with open(lab.path("kilo-registry.json")) as f:
        registry = f.read()
    out = playbook(lab.inventory, "rotate.yml", "-e", "hosts=%s" % host, "--check", "--diff", "-v")
    assert file_key(lab, host) == private
    assert keys_now(lab) == keys
    with open(lab.path("kilo-registry.json")) as f:
        assert f.read() == registry
    assert private not in out
    for other in lab.hosts:  # no host's private key, in any form the output could hold it
        assert file_key(lab, other) not in out
    assert "would rotate key %s" % KEY in out, out[-4000:]
    # the key step's diff: the host's old public key, the new one only named
    section = out.split("ensure the WireGuard key", 1)[1].split("TASK [", 1)[0]
    assert re.search(
        r"-\s+public_key: %s\n\+\s+public_key: \(new key, made in the run\)"
        % re.escape(keys[host]),
        section,
    ), section
    assert re.search(r"^changed: \[%s\]" % host, section, re.M), section
    assert not re.search(r"^changed: \[(?!%s\])" % host, section, re.M), section


def test_limit_refuses_a_rotation_before_any_change(lab):
    host = "gcp-2"
    private, keys = file_key(lab, host), keys_now(lab)
    out = playbook(
        lab.inventory, "rotate.yml", "-e", "hosts=%s" % host, "--limit", host, expect_rc=2
    )
    refusal = [line for line in out.splitlines() if "kilo_key_rotate" in line]
    assert refusal and host in refusal[0] and "--limit" in refusal[0], out[-3000:]
    assert "ensure the WireGuard key" not in out, out[-3000:]  # no host was touched
    assert file_key(lab, host) == private
    assert keys_now(lab) == keys


def test_rotating_a_leader_loses_nothing_on_its_tunnels(lab):
    heads = leaders(lab)
    host = heads[0]
    others = [h for h in heads if h != host]
    old = iface_key(lab, host)
    behind = follower(lab, host)
    far = [follower(lab, o) for o in others]
    pairs = (
        [(host, o) for o in others]
        + [(o, host) for o in others]
        + [(behind, far[0]), (far[1], behind)]
    )
    rotate_under_traffic(lab, "leader %s" % host, host, pairs)
    new = iface_key(lab, host)
    assert new != old
    for other in others:
        assert new in peers_of(lab, other) and old not in peers_of(lab, other), other
    assert_consistent(lab)
    started = time.monotonic()
    assert_no_change(lab, site(lab.inventory))
    print(
        "site.yml after the rotation: changed=0 everywhere (%.1f s)" % (time.monotonic() - started)
    )


def test_rotating_a_non_leader_keeps_its_location_reachable(lab):
    heads = leaders(lab)
    host = follower(lab, heads[1])
    old = iface_key(lab, host)
    others = [h for h in heads if lab.hosts[h]["location"] != lab.hosts[host]["location"]]
    far = follower(lab, others[0])
    pairs = [(host, others[0]), (others[1], host), (host, far), (far, host)]
    rotate_under_traffic(lab, "non-leader %s" % host, host, pairs)
    assert iface_key(lab, host) != old
    assert_consistent(lab)


def test_a_key_past_kilo_key_max_age_rotates_in_a_run_of_every_host_only(lab):
    """Rotation by age in push mode: a leader's key file backdated two days, kilo_key_max_age one
    day. A run limited to it holds the rotation back (its peers outside would keep the old key),
    saying so; a run of every host rotates that key and no other, every peer follows, and the new
    key, being young, makes the next run change nothing."""
    host = leaders(lab)[-1]
    old, age = iface_key(lab, host), "kilo_key_max_age=86400"
    sh(lab, host, "touch -d @%d %s" % (time.time() - 2 * 86400, KEY))
    held = playbook(lab.inventory, "site.yml", "--limit", host, "-e", age)
    assert "kilo_key_max_age is not applied in this run" in held, held[-3000:]
    assert iface_key(lab, host) == old and sh(lab, host, "wg pubkey < %s" % KEY) == old
    before = dict((h, k) for h, k in keys_now(lab).items() if h != host)
    old_private = file_key(lab, host)
    out = site(lab.inventory, "-e", age, "-v", "--diff")
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in recap(out).values()), out[-3000:]
    assert iface_key(lab, host) != old
    # neither private key in a verbose run's results and diffs (the public keys are there)
    assert old_private not in out and file_key(lab, host) not in out and iface_key(lab, host) in out
    assert dict((h, k) for h, k in keys_now(lab).items() if h != host) == before
    assert_consistent(lab)
    assert_all_reach(lab)
    assert_no_change(lab, site(lab.inventory, "-e", age))


def test_the_old_key_is_accepted_nowhere_after_a_rotation(lab, tmp_path):
    heads = leaders(lab)
    host = heads[-1]
    others = [h for h in heads if h != host]
    stolen = file_key(lab, host)  # the leak: the key file before the rotation
    old = iface_key(lab, host)
    assert sh(lab, host, "wg pubkey < %s" % KEY) == old

    def wg_ip(name):
        return sh(lab, name, "ip -4 -o addr show dev %s" % IFACE).split()[3].split("/")[0]

    def endpoint(name):
        port = sh(lab, name, "wg show %s listen-port" % IFACE)
        return "%s:%s" % (lab.hosts[name]["public_ip"] or lab.hosts[name]["lan_ip"], port)

    addresses = dict((name, wg_ip(name)) for name in heads)
    attacker_net(lab, PREFIX)
    try:
        # Before the rotation the stolen key is good: the attacker completes a handshake with
        # the host's peers as the host (so what follows fails for the key, not the set-up).
        attacker = Attacker(
            PREFIX,
            tmp_path,
            stolen,
            [(iface_key(lab, o), endpoint(o), addresses[o] + "/32") for o in others],
        )
        try:
            before = attacker.wait_for_handshakes()
        finally:
            attacker.stop()
        assert len(before) == len(others) and all(before.values()), before

        playbook(lab.inventory, "rotate.yml", "-e", "hosts=%s" % host)
        keys = keys_now(lab)
        assert keys[host] != old

        # After it: the old key against every host of the mesh (the rotated host itself too);
        # the followers have no WireGuard IP, their LAN address stands for it.
        peers = [
            (keys[name], endpoint(name), (addresses.get(name) or lab.hosts[name]["lan_ip"]) + "/32")
            for name in sorted(lab.hosts)
        ]
        attacker = Attacker(PREFIX, tmp_path, stolen, peers)
        try:
            started = time.monotonic()
            attacker.ping(sorted(addresses.values()), 10)
            after, sent = attacker.handshakes(), attacker.sent()
        finally:
            attacker.stop()
        print(
            "\nrevocation: the old key of %s completed a handshake with %d of %d peers before the rotation and"
            " with %d of %d hosts in %.0f s after it (handshake bytes sent to each: %s)"
            % (
                host,
                sum(1 for t in before.values() if t),
                len(before),
                sum(1 for t in after.values() if t),
                len(after),
                time.monotonic() - started,
                sorted(sent.values()),
            )
        )
        assert len(after) == len(lab.hosts) and not any(after.values()), after
        # it did try each host: handshake initiations went out to every one
        assert all(sent.values()), sent
    finally:
        remove_net(PREFIX)
    # The impersonation before the rotation moved the peers' endpoint of the host to the
    # attacker; the rotation's new peer entries put it back.
    assert_consistent(lab)
    assert_all_reach(lab)


def test_rotating_every_host_at_once(lab):
    """Every host rotates in one run. The leaders switch one after another (kilo.mesh.topology's
    ROTATING_GAP): at one moment their handshakes under the new keys would cross, and each end,
    answering the other's as responder, would drop the answer to its own, leaving both without a
    session until WireGuard's retry (5 s and more; seen in about half the runs before). What a
    later leader sends over its old session in the gap is lost; the bound holds."""
    heads = leaders(lab)
    old = keys_now(lab)
    rest = [follower(lab, h) for h in heads]
    pairs = [(a, b) for a in heads for b in heads if a != b] + [
        (rest[i], rest[(i + 1) % 3]) for i in range(3)
    ]
    rotate_under_traffic(lab, "every host (-e hosts=kilo)", "kilo", pairs)
    new = keys_now(lab)
    assert all(new[h] != old[h] for h in lab.hosts), (old, new)
    assert_consistent(lab)
    assert_all_reach(lab)


# -- interrupted rotations -----------------------------------------------------------------


def ansible_playbook(lab, *extra):
    argv = [
        os.path.join(ANSIBLE_BIN, "ansible-playbook"),
        "-i",
        lab.inventory,
        os.path.join(REPO, "playbooks", "rotate.yml"),
    ] + list(extra)
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
    )
    return subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def follow(proc, react, limit=240):
    """Feed each output line of ``proc`` to ``react(line)`` until it returns true or the run
    ends; the run is killed (SIGKILL, its process group) when it outlasts ``limit``. Returns the
    output read and whether react fired."""
    timer = threading.Timer(limit, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    lines, fired = [], False
    try:
        for line in proc.stdout:
            lines.append(line)
            if react(line):
                fired = True
                break
    finally:
        timer.cancel()
    return "".join(lines), fired


class Moment(object):
    """Says when rotate.yml's output reached a step: the step's banner, then a result line."""

    def __init__(self, banner, result=None):
        self.banner, self.result, self.seen = banner, result, False
        self.at = None

    def __call__(self, line):
        found = re.match(r"^\s+at: ([\d.]+)$", line)
        if found:
            self.at = float(found.group(1))
        if line.startswith("TASK [") and self.banner in line:
            self.seen = True
            return self.result is None
        return self.seen and self.result is not None and re.match(self.result, line) is not None


KILL_MOMENTS = {
    # the key step has started on every host (the modules may or may not finish)
    "key-step-banner": ("ensure the WireGuard key", None),
    # the rotating host's new key is on its disk; nothing else knows it
    "key-step-done": ("ensure the WireGuard key", r"^changed: \[{host}\]"),
    # the mesh is computed (the registry still names the key the interface runs); no host has switched
    "topology-done": ("Compute the mesh", r"^ok: \["),
    # the converge calls wait for their moment: killed between the rotating host's switch and
    # its peers' (rotation.at + 0.1 s)
    "join-mid-switch": ("Converge WireGuard", None),
}


def state_of(lab, host, before):
    """What a cut-short run left: the host's key file and interface against the key it ran
    before (``before``), and which of its peers hold the file's key."""
    keys = keys_now(lab)
    on_file = sh(lab, host, "wg pubkey < %s" % KEY)
    holding = sorted(h for h in leaders(lab) if h != host and on_file in peers_of(lab, h))
    return "key file %s, interface on the %s key, peers holding the file's key: %s" % (
        "unchanged" if on_file == before else "rotated",
        "old" if keys[host] == before else "new",
        ", ".join(holding) or "none",
    )


@pytest.mark.parametrize("moment", sorted(KILL_MOMENTS))
def test_a_rotation_killed_at_each_step_heals_in_one_run(lab, moment):
    host = "gcp-1" if lab.hosts["gcp-1"]["public"] else leaders(lab)[1]
    banner, result = KILL_MOMENTS[moment]
    watch = Moment(banner, result and result.format(host=re.escape(host)))
    before = iface_key(lab, host)
    proc = ansible_playbook(lab, "-e", "hosts=%s" % host, "-v")
    try:
        out, fired = follow(proc, watch)
        assert fired, out[-3000:]
        if moment == "join-mid-switch":
            assert watch.at, out[-3000:]
            time.sleep(max(0.0, watch.at + 0.1 - time.time()))
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
    time.sleep(1)  # what the killed run started on the hosts ends or dies
    found = state_of(lab, host, before)
    if moment == "topology-done":
        # the mesh was computed, nobody switched: the registry still names the key the host's
        # interface runs, so a run without it (--limit) leaves every peer on that key
        assert registry_keys(lab)[host] == iface_key(lab, host) == before
        out = playbook(lab.inventory, "site.yml", "--limit", "all:!%s" % host)
        assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in recap(out).values()), out[
            -3000:
        ]
        assert all(before in peers_of(lab, o) for o in leaders(lab) if o != host), found
        assert_all_reach(lab)
    started = time.monotonic()
    site(lab.inventory)
    print(
        "\nrotate.yml killed at %s: %s; one site.yml (%.1f s) healed it"
        % (moment, found, time.monotonic() - started)
    )
    assert_consistent(lab)
    assert_all_reach(lab)


def test_a_host_dark_after_its_key_step_heals_in_one_run(lab):
    host = leaders(lab)[0]
    old = iface_key(lab, host)
    table = PREFIX + "dark"
    proc = ansible_playbook(lab, "-e", "hosts=%s" % host)
    try:
        out, fired = follow(
            proc, Moment("ensure the WireGuard key", r"^changed: \[%s\]" % re.escape(host))
        )
        assert fired, out[-3000:]
        # its SSH goes silent (both ways of port 22); the rest of the host stays up
        sh(
            lab,
            host,
            "nft add table inet {t} && nft add chain inet {t} in '{{ type filter hook input priority -10; }}'"
            " && nft add rule inet {t} in tcp dport 22 drop".format(t=table),
        )
        rest, _ = follow(proc, lambda line: False)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        proc.stdout.close()
        dark = lab.run(host, ["nft", "list", "table", "inet", table]).returncode == 0
        lab.run(host, ["nft", "delete", "table", "inet", table])
    counts = recap(out + rest)
    assert dark
    assert counts[host]["unreachable"] == 1, (counts, rest[-3000:])
    others = [h for h in leaders(lab) if h != host]
    cut = [
        o
        for o in others
        if lab.run(
            host, ["ping", "-c", "1", "-W", "2", lab.hosts[o]["lan_ip"]], timeout=30
        ).returncode
        != 0
    ]
    found = state_of(lab, host, old)
    # its interface still runs the old key (it never switched): the registry names that one
    assert registry_keys(lab)[host] == old
    started = time.monotonic()
    site(lab.inventory)
    print(
        "\n%s dark after its key step: the run ended with it unreachable (%s; cut off from %s while"
        " dark); one site.yml (%.1f s) healed it"
        % (host, found, ", ".join(cut) or "no leader", time.monotonic() - started)
    )
    assert iface_key(lab, host) != old
    assert_consistent(lab)
    assert_all_reach(lab)
