"""playbooks/connect.yml on a real lab: a "laptop" outside the mesh group joins as a peer (like
kgctl connect), reaches a non-leader of a remote location and is reached back, takes the mesh
as its VPN exit, and leaves without a trace.

Lab kvp (KILO_TEST_PREFIX_CONNECT), 4 locations x 2 hosts: aws and gcp form the mesh (group kilo); azure-1 is the laptop
(group connect, outside the mesh); home-1 stands for "the internet" behind the exit: it carries
198.51.100.77, which only gcp-1 (the exit) has a route to. Key rotation (issue 24): the laptop
rotates its own key under 50 pings/s each way, and refuses to under a --limit that leaves the
leaders out; a leader it uses rotates (rotate.yml) under 50 pings/s and the laptop takes the new
key in the same run, after which the leader's old private key completes no handshake with it
(the losses printed: run with -s to see them). Real parts only: network-namespace hosts with
sshd, wireguard-go, nftables, iproute2, Ansible over SSH. Tests run in file order and share one lab.

Every host is reached as the non-root user sitetools.LOGIN_USER with become (the inventory's
ansible_become; sudo without a password on some hosts, with ansible_become_password on the
others): site.yml, connect.yml, rotate.yml and status.yml run as a fleet without root SSH runs them.
"""

import json
import os
import re

import ipaddress
import time

import pytest
import yaml

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.engine.connect import (
    best_path,
    connect_plan,
)
from attacker import Attacker, attacker_net, remove_net
from flows import under_traffic
from lab.lab import Lab
from sitetools import LOGIN_USER, playbook, recap

PREFIX = os.environ.get(
    "KILO_TEST_PREFIX_CONNECT", "kvp"
)  # overridable: two checkouts testing at once
LAPTOP, INTERNET, EXIT = "azure-1", "home-1", "gcp-1"
LAPTOP_IP = "10.5.0.1"
FAR = "198.51.100.77"  # outside every range of the mesh; only the exit routes to it
EXIT_VARS = json.dumps({"kilo_connect_allowed_ips": ["0.0.0.0/0"], "kilo_connect_via": EXIT})

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")


def sh(lab, host, cmd, timeout=60):
    return lab.run(host, ["sh", "-c", cmd], timeout=timeout)


def ansible_playbook(inventory, name, *extra, **kw):
    return playbook(inventory, name, *extra, timeout=900, **kw)


def write_inventory(lab):
    """The lab's inventory with aws and gcp as the mesh and azure-1 in group connect."""
    with open(lab.inventory) as f:
        inv = yaml.safe_load(f)
    kilo = inv["all"]["children"]["kilo"]
    laptop = kilo["children"]["azure"]["hosts"][LAPTOP]
    kilo["children"] = dict((loc, kilo["children"][loc]) for loc in ("aws", "gcp"))
    laptop.update(kilo_connect_name="laptop", kilo_connect_allowed_ip=LAPTOP_IP + "/32")
    inv["all"]["children"]["connect"] = {"hosts": {LAPTOP: laptop}}
    path = lab.path("connect-inventory.yml")
    with open(path, "w") as f:
        yaml.safe_dump(inv, f)
    # the same beside it (so the same registry), the laptop's own key rotating in every run
    laptop["kilo_key_rotate"] = True
    with open(lab.path("connect-rotate-inventory.yml"), "w") as f:
        yaml.safe_dump(inv, f)
    return path


@pytest.fixture(scope="module")
def lab():
    lab = Lab(PREFIX)
    lab.down()
    lab.registry = lab.path("kilo-registry.json")
    try:
        forget(lab.registry)  # a registry of an earlier lab would carry its hosts and peers
        lab.up(4, 2, 1, user=LOGIN_USER)
        lab.connect_inventory = write_inventory(lab)
        # "the internet" behind the exit: home-1 holds FAR; gcp-1 alone routes to it
        sh(lab, INTERNET, "ip addr add %s/32 dev lo" % FAR)
        sh(
            lab,
            EXIT,
            "ip route add %s/32 via %s dev eth1" % (FAR, lab.hosts[INTERNET]["public_ip"]),
        )
        ansible_playbook(lab.connect_inventory, "site.yml")
        yield lab
    finally:
        lab.down()
        for path in (
            lab.registry,
            lab.registry + ".lock",
            lab.path("connect-inventory.yml"),
            lab.path("connect-rotate-inventory.yml"),
        ):
            forget(path)


def forget(path):
    if os.path.exists(path):
        os.remove(path)


def registry_peers(lab):
    if not os.path.exists(lab.registry):
        return {}
    with open(lab.registry) as f:
        return json.load(f).get("peers") or {}


def wg_keys(lab, host):
    """public key -> allowed IPs of the host's WireGuard peers; {} without an interface."""
    out = sh(lab, host, "wg show kilo0 dump 2>/dev/null").stdout.splitlines()
    return dict((line.split("\t")[0], line.split("\t")[3]) for line in out[1:])


def laptop_key(lab):
    return sh(lab, LAPTOP, "wg pubkey < /var/lib/kilo/key").stdout.strip()


def mesh_hosts(lab):
    return sorted(h for h in lab.hosts if h.startswith(("aws-", "gcp-")))


def ping(lab, host, ip, count=3):
    """Whether ``host`` gets an answer from ``ip`` (a few tries: WireGuard handshakes first)."""
    return (
        sh(
            lab,
            host,
            "for i in 1 2 3; do ping -c %d -i 0.3 -W 2 -q %s && exit 0; done; exit 1" % (count, ip),
            timeout=90,
        ).returncode
        == 0
    )


def connect(lab, *extra, **kw):
    return ansible_playbook(kw.pop("inventory", lab.connect_inventory), "connect.yml", *extra, **kw)


@needs_root
def test_check_mode_on_a_fresh_laptop_changes_nothing(lab):
    counts = recap(connect(lab, "--check"))
    assert counts[LAPTOP]["changed"] > 0 and counts[LAPTOP]["failed"] == 0, counts
    assert sh(lab, LAPTOP, "test -e /var/lib/kilo/key").returncode != 0
    assert sh(lab, LAPTOP, "ip link show kilo0").returncode != 0
    assert "laptop" not in registry_peers(lab)


@needs_root
def test_kilo_state_absent_is_refused_and_the_mesh_stays(lab):
    out = connect(lab, "-e", "kilo_state=absent", expect_rc=2)
    assert "kilo_connect_state=absent" in out
    assert all(sh(lab, h, "ip link show kilo0").returncode == 0 for h in mesh_hosts(lab))


@needs_root
def test_connect_reaches_a_remote_non_leader_and_is_reached_back(lab):
    counts = recap(connect(lab))
    assert counts[LAPTOP]["failed"] == 0 and counts[LAPTOP]["changed"] > 0, counts
    key = laptop_key(lab)
    assert registry_peers(lab)["laptop"]["public_key"] == key
    assert sh(lab, LAPTOP, "stat -c %a /var/lib/kilo/key").stdout.strip() == "600"
    leaders = [h for h in mesh_hosts(lab) if wg_keys(lab, h)]
    assert len(leaders) == 2, leaders
    for leader in leaders:
        assert wg_keys(lab, leader).get(key) == LAPTOP_IP + "/32", leader
    far_member = lab.hosts["aws-2"]
    assert "aws-2" not in leaders
    assert ping(lab, LAPTOP, far_member["lan_ip"])
    assert ping(lab, "aws-2", LAPTOP_IP)
    assert ping(lab, "gcp-2", LAPTOP_IP)


@needs_root
def test_rerun_changes_nothing_and_shows_no_private_key(lab):
    out = connect(lab, "--diff", "-v")
    counts = recap(out)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts
    private = sh(lab, LAPTOP, "cat /var/lib/kilo/key").stdout.strip()
    assert len(private) == 44 and private not in out


@needs_root
def test_status_counts_and_names_the_registry_peer(lab):
    """A peer kept in the registry counts for Kilo's kilo_peers gauge and is named in the table."""
    out = ansible_playbook(lab.connect_inventory, "status.yml", "-e", "textfile=/run/kilo.prom")
    # named by the registry's peer entry (without it the table shows a shortened key)
    assert re.search(r"aws-1\s+laptop\s+203\.0\.113\.", out), out[-3000:]
    assert "kilo_peers 1" in sh(lab, "aws-1", "cat /run/kilo.prom").stdout


def key_state(lab):
    """What a refused rotation must leave as it is: the laptop's key file (its text's digest and
    its age), every WireGuard peer of the laptop and of the mesh, and the mesh's own keys."""
    laptop = sh(lab, LAPTOP, "sha256sum /var/lib/kilo/key; stat -c %Y /var/lib/kilo/key").stdout
    return laptop, own_keys(lab), dict((h, wg_keys(lab, h)) for h in mesh_hosts(lab) + [LAPTOP])


@needs_root
def test_the_laptop_rotating_under_a_limit_that_leaves_the_leaders_out_changes_nothing(lab):
    """connect.yml --limit laptop runs no leader, so the leaders would keep the laptop's old key
    and cut it off. kilo_key_rotate is refused by the laptop's key step, naming the host and the
    variable, before anything changes; a due kilo_key_max_age is held back with a warning."""
    before = key_state(lab)
    out = connect(
        lab, "--limit", LAPTOP, inventory=lab.path("connect-rotate-inventory.yml"), expect_rc=2
    )
    said = " ".join(out.split()).replace("''", "'")  # as one line, YAML's doubled quotes undone
    assert re.search(
        r"host '%s': kilo_key_rotate: this machine's key would rotate, but aws-1, aws-2, gcp-1, gcp-2,"
        r" left out of this run \(--limit\)" % LAPTOP,
        said,
    ), out[-3000:]
    assert key_state(lab) == before
    out = connect(lab, "--limit", LAPTOP, "-e", "kilo_key_max_age=1")  # the key file is minutes old
    assert "kilo_key_max_age is not applied in this run" in " ".join(out.split()), out[-3000:]
    counts = recap(out)
    assert counts[LAPTOP]["changed"] == 0 and counts[LAPTOP]["failed"] == 0, counts
    assert key_state(lab) == before


@needs_root
def test_the_laptop_rotating_its_own_key_switches_first_and_keeps_its_traffic(lab):
    """kilo_key_rotate on the laptop alone: it switches in the mesh's play, just before the
    leaders replace its entry (a task later); its traffic both ways, through a leader and to a
    leader, is kept. The mesh's own keys stay."""
    old, own = laptop_key(lab), own_keys(lab)
    peers = dict((h, set(wg_keys(lab, h)) - {old}) for h in mesh_hosts(lab))
    leaders = sorted(h for h in peers if peers[h])
    pairs = [(LAPTOP, "aws-2"), (LAPTOP, "gcp-1"), ("aws-2", LAPTOP_IP), ("gcp-2", LAPTOP_IP)]
    # The loss is printed, not bounded: with no common moment the step is the time between two
    # Ansible tasks, which is the controller's wall time (0 to 8 echoes a flow on a quiet machine,
    # 50 to 130 at load 13 on 2 cores); the order, the keys and the traffic after are checked.
    result, out = under_traffic(
        lab,
        "the laptop's own key rotation (connect.yml)",
        lambda: connect(lab, inventory=lab.path("connect-rotate-inventory.yml")),
        pairs,
        check_bound=False,
    )
    counts = recap(out)
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), counts
    # the laptop switched in the mesh's play (before the leaders' converge), not in the last play
    mesh_play = out.split("PLAY [The mesh takes the peers]")[1].split("PLAY [")[0]
    switched = [t for t in mesh_play.split("TASK [")[1:] if t.startswith("kilo.mesh.connect : ")]
    assert len(switched) == 1 and "changed: [%s]" % LAPTOP in switched[0], mesh_play[-4000:]
    new = laptop_key(lab)
    assert new != old and registry_peers(lab)["laptop"]["public_key"] == new
    assert sh(lab, LAPTOP, "stat -c %a /var/lib/kilo/key").stdout.strip() == "600"
    for leader in leaders:
        assert wg_keys(lab, leader).get(new) == LAPTOP_IP + "/32" and old not in wg_keys(
            lab, leader
        ), leader
    # the mesh's own keys stay, and so do its other peers
    assert (
        own_keys(lab) == own
        and dict((h, set(wg_keys(lab, h)) - {new}) for h in mesh_hosts(lab)) == peers
    )
    # every flow carries traffic again under the new key
    for src, dst in pairs:
        assert ping(lab, src, lab.hosts[dst]["lan_ip"] if dst in lab.hosts else dst), (src, dst)
    counts = recap(connect(lab))
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts


def own_keys(lab):
    return dict(
        (h, sh(lab, h, "wg pubkey < /var/lib/kilo/key").stdout.strip()) for h in mesh_hosts(lab)
    )


def rotate(lab, host):
    return ansible_playbook(lab.connect_inventory, "rotate.yml", "-e", "hosts=%s" % host)


def assert_rerun_changes_nothing(lab):
    counts = recap(connect(lab))
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts


@needs_root
def test_check_mode_of_a_leader_s_rotation_shows_the_laptop_s_change_and_makes_none(lab):
    """rotate.yml --check --diff on a leader the laptop uses: check mode writes no registry, so
    the laptop's plan takes the mesh's keys from this run's key step (the leader's stand-in), and
    its converge reports the peer entry it would replace; no key and no peer entry changes."""
    leader = EXIT
    keys = own_keys(lab)
    held = dict((h, wg_keys(lab, h)) for h in list(lab.hosts))
    out = ansible_playbook(
        lab.connect_inventory, "rotate.yml", "-e", "hosts=%s" % leader, "--check", "--diff", "-v"
    )
    counts = recap(out)
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), counts
    last = out.split("PLAY [The connecting machines take the new keys]")[1]
    assert "changed: [%s]" % LAPTOP in last and "remove peer %s" % keys[leader] in last, last[
        -3000:
    ]
    assert own_keys(lab) == keys and dict((h, wg_keys(lab, h)) for h in list(lab.hosts)) == held


@needs_root
def test_a_leader_rotating_its_key_reaches_the_laptop_in_the_same_run(lab):
    """rotate.yml on gcp-1, the laptop's leader of location gcp, under 50 pings/s: three flows
    across that tunnel (through the leader both ways, to the leader) and one across the other
    leader's. rotate.yml's last play converges the laptop with the leader's new key. It switches
    after the mesh, so what the leader sends it in between waits in the leader's queue (128
    packets) for the handshake under the new key, and what overflows is lost (printed)."""
    leader = EXIT
    old = own_keys(lab)[leader]
    assert old in wg_keys(lab, LAPTOP)
    pairs = [(LAPTOP, "gcp-2"), (LAPTOP, leader), ("gcp-2", LAPTOP_IP), (LAPTOP, "aws-2")]
    result, out = under_traffic(
        lab,
        "a leader the laptop uses (%s) rotating (rotate.yml)" % leader,
        lambda: rotate(lab, leader),
        pairs,
        check_bound=False,
    )
    counts = recap(out)
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), counts
    assert "PLAY [The connecting machines take the new keys]" in out
    new = own_keys(lab)[leader]
    assert new != old
    held = wg_keys(lab, LAPTOP)
    assert new in held and old not in held, held
    # the other leader's tunnel is not touched; the rotated one carries traffic again
    assert not result[(LAPTOP, "aws-2")][1], result[(LAPTOP, "aws-2")]
    assert ping(lab, LAPTOP, lab.hosts["gcp-2"]["lan_ip"]) and ping(lab, "gcp-2", LAPTOP_IP)
    assert_rerun_changes_nothing(lab)


@needs_root
def test_the_laptop_accepts_a_rotated_leader_s_old_key_no_more(lab, tmp_path):
    """Revocation at an outside peer: a WireGuard client holding aws-1's private key as it was
    before rotate.yml completes a handshake with the laptop as aws-1 before the run (so the set-up
    works) and none after it."""
    leader = "aws-1"
    stolen = sh(lab, leader, "cat /var/lib/kilo/key").stdout.strip()
    old = own_keys(lab)[leader]
    port = sh(lab, LAPTOP, "wg show kilo0 listen-port").stdout.strip()
    laptop = (
        laptop_key(lab),
        "%s:%s" % (lab.hosts[LAPTOP]["public_ip"] or lab.hosts[LAPTOP]["lan_ip"], port),
        LAPTOP_IP + "/32",
    )
    attacker_net(lab, PREFIX)
    try:
        attacker = Attacker(PREFIX, tmp_path, stolen, [laptop])
        try:
            before = attacker.wait_for_handshakes()
        finally:
            attacker.stop()
        assert before.get(laptop[0]), before
        rotate(lab, leader)
        assert old not in wg_keys(lab, LAPTOP) and own_keys(lab)[leader] in wg_keys(lab, LAPTOP)
        attacker = Attacker(PREFIX, tmp_path, stolen, [laptop])
        try:
            attacker.route(LAPTOP_IP)
            started = time.monotonic()
            attacker.ping([LAPTOP_IP], 10)
            after, sent = attacker.handshakes(), attacker.sent()
        finally:
            attacker.stop()
        print(
            "\nrevocation at the laptop: the old key of %s completed a handshake with it before rotate.yml: %s;"
            " after it, in %.0f s: %s (handshake bytes sent to it: %d)"
            % (
                leader,
                "yes" if before[laptop[0]] else "no",
                time.monotonic() - started,
                "yes" if after.get(laptop[0]) else "no",
                sent.get(laptop[0], 0),
            )
        )
        assert not after[laptop[0]] and sent[laptop[0]] > 0, (after, sent)
    finally:
        remove_net(PREFIX)
    # the impersonation moved the laptop's endpoint of aws-1 to the attacker; the new entry put it back
    assert ping(lab, LAPTOP, lab.hosts["aws-2"]["lan_ip"]) and ping(lab, "aws-2", LAPTOP_IP)
    assert_rerun_changes_nothing(lab)


@needs_root
def test_the_mesh_as_vpn_exit(lab):
    assert not ping(lab, LAPTOP, FAR, count=1), "the laptop reaches %s without the exit" % FAR
    # the internet side has no way back to the peer's own address: replies need the exit's masquerade
    assert sh(lab, INTERNET, "ip route get %s" % LAPTOP_IP).returncode != 0
    counts = recap(connect(lab, "-e", EXIT_VARS))
    assert counts[LAPTOP]["changed"] > 0 and counts[LAPTOP]["failed"] == 0, counts
    assert all(counts[h]["changed"] == 0 for h in mesh_hosts(lab)), (
        counts
    )  # the mesh side is Kilo's as is
    routes = sh(lab, LAPTOP, "ip route show proto 107").stdout
    assert "0.0.0.0/1 dev kilo0" in routes and "128.0.0.0/1 dev kilo0" in routes, routes
    for leader in ("aws-1", "gcp-1"):  # endpoints pinned to the laptop's own path
        assert "%s dev eth1" % lab.hosts[leader]["public_ip"] in routes, routes
    assert ping(lab, LAPTOP, FAR)
    assert ping(lab, LAPTOP, lab.hosts["aws-2"]["lan_ip"])  # the mesh still goes its own ways
    # SSH management still works and the run is idempotent
    counts = recap(connect(lab, "-e", EXIT_VARS))
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts


@needs_root
def test_absent_leaves_nothing_of_the_laptop(lab):
    key = laptop_key(lab)
    counts = recap(connect(lab, "-e", EXIT_VARS, "-e", "kilo_connect_state=absent"))
    assert counts[LAPTOP]["failed"] == 0, counts
    assert "laptop" not in registry_peers(lab)
    for host in mesh_hosts(lab):
        assert key not in wg_keys(lab, host), host
        assert LAPTOP_IP not in sh(lab, host, "ip route show proto 107").stdout, host
    assert sh(lab, LAPTOP, "ip link show kilo0").returncode != 0
    assert sh(lab, LAPTOP, "ip route show proto 107").stdout.strip() == ""
    assert sh(lab, LAPTOP, "nft list table inet kilo_mesh").returncode != 0
    assert not ping(lab, LAPTOP, FAR, count=1)
    # the mesh itself is whole: a remote non-leader is still reached across it
    assert ping(lab, "aws-2", lab.hosts["gcp-2"]["lan_ip"])
    counts = recap(connect(lab, "-e", "kilo_connect_state=absent"))
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts


# --- the plan itself, for what the lab cannot show (a laptop whose leaders are behind its default route) ---

KEYS = ["%s=" % (c * 43) for c in "ABCDE"]  # 32-byte keys in base64, distinct


def small_mesh():
    """Two locations of one public leader each, and the laptop as a registered peer."""
    nodes = [
        {
            "name": name,
            "location": loc,
            "endpoint": "%s:51820" % ip,
            "internal_ip": lan,
            "pod_cidr": None,
            "public_key": key,
            "leader": False,
            "persistent_keepalive": 0,
            "allowed_location_ips": [],
            "discovered_endpoints": {},
        }
        for name, loc, ip, lan, key in (
            ("a-1", "a", "198.51.100.1", "172.16.1.1/24", KEYS[0]),
            ("b-1", "b", "198.51.100.2", "172.16.2.1/24", KEYS[1]),
        )
    ]
    peers = [
        {
            "name": "laptop",
            "public_key": KEYS[2],
            "allowed_ips": ["10.5.0.1/32"],
            "persistent_keepalive": 10,
        }
    ]
    return nodes, peers


HOME = [  # `ip -j route show table main` of a laptop at home, with our own routes of an earlier run
    {
        "dst": "default",
        "gateway": "192.168.1.1",
        "dev": "wlan0",
        "protocol": "dhcp",
        "metric": 600,
        "flags": [],
    },
    {"dst": "default", "gateway": "192.168.1.254", "dev": "eth0", "metric": 100, "flags": []},
    {"dst": "192.168.1.0/24", "dev": "wlan0", "protocol": "kernel", "scope": "link", "flags": []},
    {"dst": "0.0.0.0/1", "dev": "kilo0", "protocol": "107", "scope": "link", "flags": []},
    {"dst": "198.51.100.0/24", "type": "blackhole", "flags": []},
]


def plan_routes(plan):
    return [
        (d, r["gateway"], r["device"])
        for r in plan["routes"]
        for d in (r["dst"] if isinstance(r["dst"], list) else [r["dst"]])
    ]


def test_exit_pins_each_leader_endpoint_to_the_machines_own_default_route():
    nodes, peers = small_mesh()
    plan = connect_plan(
        nodes,
        peers,
        {"interface": "kilo0"},
        "lap",
        "laptop",
        "10.5.0.1/32",
        extra=["0.0.0.0/0"],
        via="b-1",
        port=51820,
        main_routes=lambda: HOME,
    )
    routes = plan_routes(plan)
    # the lowest metric of the two default routes; ours (proto 107) and the blackhole never count
    assert ("198.51.100.1/32", "192.168.1.254", "eth0") in routes
    assert ("198.51.100.2/32", "192.168.1.254", "eth0") in routes
    assert ("0.0.0.0/1", None, "kilo0") in routes and ("128.0.0.0/1", None, "kilo0") in routes
    assert not any(d == "0.0.0.0/0" for d, dummy, dummy in routes)
    by_name = dict((p["name"], p["allowed_ips"]) for p in plan["peers"])
    assert "0.0.0.0/0" in by_name["location:b"] and "0.0.0.0/0" not in by_name["location:a"]
    assert plan["address"] == "10.5.0.1/32" and plan["leader"] and plan["listen_port"] == 51820


def test_without_a_default_route_of_its_own_the_exit_refuses():
    nodes, peers = small_mesh()
    ours_only = [r for r in HOME if r.get("protocol") == "107"]
    with pytest.raises(KiloError) as e:
        connect_plan(
            nodes,
            peers,
            {"interface": "kilo0"},
            "lap",
            "laptop",
            "10.5.0.1/32",
            extra=["0.0.0.0/0"],
            main_routes=lambda: ours_only,
        )
    assert "host 'lap'" in str(e.value) and "kilo_connect_allowed_ips" in str(e.value)


def test_errors_name_the_host_and_the_variable():
    nodes, peers = small_mesh()
    cases = [
        (dict(allowed_ip="10.5.0.0/24"), "kilo_connect_allowed_ip"),
        (dict(allowed_ip="10.5.0.1/32", extra=["10.96.0.0/12"], via="nope"), "kilo_connect_via"),
        (dict(allowed_ip="10.5.0.1/32", name="stranger"), "kilo_connect_name"),
    ]
    for kw, field in cases:
        kw = dict(dict(name="laptop"), **kw)
        with pytest.raises(KiloError) as e:
            connect_plan(
                nodes,
                peers,
                {"interface": "kilo0"},
                "lap",
                kw.pop("name"),
                kw.pop("allowed_ip"),
                **kw,
            )
        assert str(e.value).startswith("host 'lap': %s:" % field), str(e.value)


def test_an_endpoint_inside_the_allowed_ips_is_reached_directly():
    """A leader whose endpoint is its internal IP (a laptop on that LAN): no loop into the tunnel."""
    nodes, peers = small_mesh()
    nodes[0]["endpoint"] = "172.16.1.1:51820"
    lan = [{"dst": "172.16.1.0/24", "dev": "eth0", "protocol": "kernel", "family": 4, "flags": []}]
    reads = []
    plan = connect_plan(
        nodes,
        peers,
        {"interface": "kilo0"},
        "lap",
        "laptop",
        "10.5.0.1/32",
        main_routes=lambda: reads.append(1) or lan,
    )
    routes = plan_routes(plan)
    assert ("172.16.1.1/32", None, "eth0") in routes and (
        "172.16.1.1/32",
        None,
        "kilo0",
    ) not in routes
    assert ("172.16.2.1/32", None, "kilo0") in routes and reads == [1]
    nodes[0]["endpoint"] = "198.51.100.1:51820"  # covered by no allowed IP: the table is not read
    connect_plan(
        nodes,
        peers,
        {"interface": "kilo0"},
        "lap",
        "laptop",
        "10.5.0.1/32",
        main_routes=lambda: 1 / 0,
    )


def test_best_path_prefers_the_longest_prefix_of_the_same_family():
    assert best_path(ipaddress.ip_address("192.168.1.7"), HOME) == (None, "wlan0")
    assert best_path(ipaddress.ip_address("2001:db8::1"), HOME) is None  # IPv4 default routes only
    v6 = [{"dst": "default", "dev": "ppp0", "family": 6, "flags": []}]
    assert best_path(ipaddress.ip_address("2001:db8::1"), HOME + v6) == (None, "ppp0")
    assert best_path(ipaddress.ip_address("198.51.100.9"), v6) is None
