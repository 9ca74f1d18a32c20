"""Faults against a real lab (issue 9): secrets never leak, and a converge killed at any
point heals with one site.yml run.

Real parts only: network-namespace hosts with sshd, wireguard-go, nftables, iproute2; the
kill test runs the collection's own converge code on a lab host through faultdriver.py,
which only wraps it to SIGKILL itself at a chosen point. Tests share one lab, in file order.
"""

import base64
import binascii
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from sitetools import REPO, fresh_lab, recap

PREFIX = "kfl"
KEY_PATH = "/var/lib/kilo/key"  # kilo_key_path's default (module_utils/options.py)
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "faultdriver.py")
ANSIBLE_BIN = os.path.join(REPO, ".venv", "bin")


def sh(lab, host, cmd, timeout=60):
    return lab.run(host, ["sh", "-c", cmd], timeout=timeout)


def wg_keypair():
    priv = subprocess.run(
        ["wg", "genkey"], stdout=subprocess.PIPE, text=True, check=True
    ).stdout.strip()
    pub = subprocess.run(
        ["wg", "pubkey"], input=priv, stdout=subprocess.PIPE, text=True, check=True
    ).stdout.strip()
    return priv, pub


def ansible_env(**extra):
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
    )
    env.update(extra)
    return env


def playbook(lab, *extra, **kw):
    """site.yml (or kw['playbook']) over SSH; asserts rc 0; returns the whole output."""
    argv = [
        os.path.join(ANSIBLE_BIN, "ansible-playbook"),
        "-i",
        lab.inventory,
        kw.get("playbook") or os.path.join(REPO, "playbooks", "site.yml"),
    ] + list(extra)
    proc = subprocess.run(
        argv,
        cwd=REPO,
        env=ansible_env(**kw.get("env", {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-5000:]
    return proc.stdout


def leaders(lab):
    return sorted(h for h, v in lab.hosts.items() if v["public"])


def foreign_intact(lab, host):
    assert sh(lab, host, "nft list table inet foreign").returncode == 0, host
    assert "blackhole" in sh(lab, host, "ip route show 10.99.0.0/24").stdout, host
    assert "10.98.0.0/24" in sh(lab, host, "ip rule show").stdout, host


def wg_addresses(lab):
    """Addresses on the leaders' WireGuard interfaces."""
    out = []
    for h in leaders(lab):
        for link in json.loads(sh(lab, h, "ip -j -4 addr show dev kilo0").stdout or "[]"):
            out += [a["local"] for a in link.get("addr_info", [])]
    return out


def wg_dump(lab):
    return dict(
        (
            h,
            sh(
                lab, h, "wg show kilo0 dump; ip -br link show kilo0; ip route show proto 107"
            ).stdout,
        )
        for h in sorted(lab.hosts)
    )


def connectivity(lab):
    """{src: [targets that did not answer]}: every host pings every other host's LAN
    (internal) address and every leader's WireGuard address; a few rounds, as WireGuard
    handshakes lazily."""
    targets = dict((h, v["lan_ip"]) for h, v in lab.hosts.items())
    wg = wg_addresses(lab)
    assert len(wg) == len(leaders(lab)), wg
    failed = {}
    for src in sorted(lab.hosts):
        want = [ip for h, ip in sorted(targets.items()) if h != src] + wg
        for attempt in range(8):
            script = (
                "for ip in %s; do (ping -c 3 -i 0.5 -W 2 -q $ip >/dev/null 2>&1 || echo $ip) & done; wait"
                % " ".join(want)
            )
            want = sh(lab, src, script, timeout=60).stdout.split()
            if not want:
                break
        if want:
            failed[src] = want
    return failed


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 3, 2, 1) as lab:
        yield from _with_peers_and_foreign_state(lab)


def _with_peers_and_foreign_state(lab):
    # Two outside peers, one of them with a preshared key.
    laptop_priv, laptop_pub = wg_keypair()
    dummy, phone_pub = wg_keypair()
    psk = subprocess.run(
        ["wg", "genpsk"], stdout=subprocess.PIPE, text=True, check=True
    ).stdout.strip()
    with open(lab.inventory) as f:
        inv = yaml.safe_load(f)
    inv["all"]["children"]["kilo"]["vars"]["kilo_peers"] = [
        {
            "name": "laptop",
            "public_key": laptop_pub,
            "allowed_ips": ["10.5.0.1/32"],
            "preshared_key": psk,
        },
        {"name": "phone", "public_key": phone_pub, "allowed_ips": ["10.5.0.2/32"]},
    ]
    with open(lab.inventory, "w") as f:
        yaml.safe_dump(inv, f)
    lab.secrets = {"psk": {laptop_pub: psk}, "peer_private": laptop_priv}
    for host in lab.hosts:
        sh(
            lab,
            host,
            "nft add table inet foreign && nft add chain inet foreign c '{ type filter hook input priority 5; }'"
            " && ip route add blackhole 10.99.0.0/24 proto static && ip rule add to 10.98.0.0/24 table 99 priority 500",
        )
    yield lab


# ---- 1. secrets never leak ---------------------------------------------------------------


def forms(key):
    """A base64 key as it could show up: base64 and hex (the UAPI's form)."""
    raw = base64.b64decode(key)
    hx = binascii.hexlify(raw).decode()
    return [key, hx, hx.upper()]


def leaks(secrets, text):
    """Names of the secrets found in text (any form)."""
    return sorted(name for name, key in secrets.items() if any(f in text for f in forms(key)))


def read_tree(path):
    """Every regular file under path (or path itself) as text, keyed by file name."""
    out = {}
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return {path: f.read().decode("utf-8", "replace")}
    for root, dummy, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    out[p] = f.read().decode("utf-8", "replace")
    return out


def test_secrets_never_leak(lab, tmp_path):
    work = tmp_path
    cache_real, cache_check = str(work / "facts-real"), str(work / "facts-check")
    local_tmp = str(work / "local-tmp")
    os.makedirs(local_tmp)
    # site.yml gathers no facts and caches nothing itself; a gathering play first makes sure
    # the cache plugin really writes, then site.yml runs unchanged.
    wrapper = str(work / "site-with-facts.yml")
    with open(wrapper, "w") as f:
        yaml.safe_dump(
            [
                {
                    "name": "Facts into the cache",
                    "hosts": "kilo",
                    "gather_facts": True,
                    "gather_subset": ["min"],
                },
                {"import_playbook": os.path.join(REPO, "playbooks", "site.yml")},
            ],
            f,
        )

    def env(cache, log):
        return {
            "ANSIBLE_CACHE_PLUGIN": "jsonfile",
            "ANSIBLE_CACHE_PLUGIN_CONNECTION": cache,
            "ANSIBLE_GATHERING": "smart",
            "ANSIBLE_LOCAL_TEMP": local_tmp,
            "ANSIBLE_LOG_PATH": str(work / log),
            "ANSIBLE_KEEP_REMOTE_FILES": "0",
        }

    real = playbook(lab, "-vvv", "--diff", playbook=wrapper, env=env(cache_real, "real.log"))
    counts = recap(real)
    assert all(
        c["changed"] > 0 and c["failed"] == 0 for h, c in counts.items() if h in lab.hosts
    ), counts
    check = playbook(lab, "-vvv", "--check", "--diff", env=env(cache_check, "check.log"))
    assert all(c["failed"] == 0 for c in recap(check).values())

    # The secrets, read from where they live.
    secrets = {}
    publics = {}
    for host in lab.hosts:
        priv = sh(lab, host, "cat %s" % KEY_PATH).stdout.strip()
        assert len(base64.b64decode(priv)) == 32, (host, priv)
        secrets["private key of %s" % host] = priv
        publics[host] = subprocess.run(
            ["wg", "pubkey"], input=priv, stdout=subprocess.PIPE, text=True, check=True
        ).stdout.strip()
        # 0700 directory, 0600 file, both root's
        assert sh(
            lab, host, "stat -c '%%a %%U %%G' %s" % os.path.dirname(KEY_PATH)
        ).stdout.split() == ["700", "root", "root"], host
        assert sh(lab, host, "stat -c '%%a %%U %%G' %s" % KEY_PATH).stdout.split() == [
            "600",
            "root",
            "root",
        ], host
    for pub, psk in lab.secrets["psk"].items():
        secrets["preshared key of %s" % pub] = psk
    secrets["outside peer's private key"] = lab.secrets["peer_private"]
    # The preshared key really reached WireGuard on every leader (so it went through the run).
    for h in leaders(lab):
        dump = sh(lab, h, "wg show kilo0 preshared-keys").stdout
        assert list(lab.secrets["psk"].values())[0] in dump, (h, dump)

    # The grep can find what it looks for, in every form ...
    some = secrets["private key of %s" % sorted(lab.hosts)[0]]
    assert leaks(secrets, "x%sy" % some) and leaks(
        secrets, binascii.hexlify(base64.b64decode(some)).decode()
    )
    # ... and looks at the right output: long, verbose, naming every public key and the diff.
    for out in (real, check):
        assert len(out) > 20000 and "<%s>" % lab.hosts[sorted(lab.hosts)[0]]["mgmt_ip"] in out
        for host, pub in publics.items():
            assert pub in out, (host, "public key missing from the output")
        assert "wireguard" in out and "peers" in out  # the diff
    assert re.search(r"add peer laptop", real), "the first run's diff/changes name the new peer"

    places = {"-vvv --diff output": real, "--check --diff -vvv output": check}
    for name in ("real.log", "check.log"):
        places.update(read_tree(str(work / name)))
    registry = os.path.join(lab.state_dir, "kilo-registry.json")
    assert os.path.exists(registry)
    places.update(read_tree(registry))
    cached = read_tree(cache_real)
    assert cached, "the fact cache stayed empty"
    places.update(cached)
    places.update(read_tree(cache_check))
    # The run's plan store (0600 files holding preshared keys) must be gone; anything left of
    # Ansible's local temp is searched too.
    stores = set(re.findall(r'plan_store"?:\s*"?(/[^"\s,}]+)', real + check))
    assert stores, "no plan_store path in the -vvv output"
    for store in stores:
        assert not os.path.exists(store), "plan store %s left behind" % store
    places.update(read_tree(local_tmp))
    for host in lab.hosts:  # what the modules logged on the hosts
        places["%s:/var/log" % host] = lab.run(
            host,
            [
                "sh",
                "-c",
                "find /var/log -type f -mmin -30 -exec cat {} +;"
                " journalctl -q --since -30min 2>/dev/null; true",
            ],
            errors="replace",
        ).stdout
    found = dict((where, leaks(secrets, text)) for where, text in places.items())
    assert not any(found.values()), dict((k, v) for k, v in found.items() if v)


# ---- 2. a kill at any point heals with one re-run ----------------------------------------

POINTS = [
    "wireguard.create",
    "wireguard.peers",
    "after:wireguard",
    "after:netstate",
    "after:firewall",
]


def plans(lab):
    """Every host's plan from the real kilo.mesh.topology (inventory + registry)."""
    proc = subprocess.run(
        [
            os.path.join(ANSIBLE_BIN, "ansible"),
            "-i",
            lab.inventory,
            "localhost",
            "-m",
            "kilo.mesh.topology",
            "-o",
        ],
        cwd=REPO,
        env=ansible_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and "=>" in proc.stdout, proc.stdout[-3000:]
    return json.loads(proc.stdout.split("=>", 1)[1])["plans"]


def break_host(lab, host):
    """Take away what we own, so each backend's apply has work to do."""
    sh(
        lab,
        host,
        "ip link del kilo0; nft delete table inet kilo_mesh; ip -4 route flush table all proto 107;"
        " for i in $(seq 50); do wg show kilo0 >/dev/null 2>&1 || break; sleep 0.1; done; true",
    )
    assert sh(lab, host, "ip link show kilo0").returncode != 0
    assert sh(lab, host, "ip -4 route show table all proto 107").stdout.strip() == ""
    assert sh(lab, host, "nft list table inet kilo_mesh").returncode != 0


def driver_in_lab(lab):
    """(driver path, PYTHONPATH) as a lab host sees them: a lab host mounts its own /tmp and
    /root, where a CI checkout may live, but binds the lab's state dir back, so the driver and
    the collection's module_utils are copied there."""
    root = os.path.join(lab.state_dir, "faultdriver")
    if not os.path.isdir(root):
        shutil.copytree(
            os.path.join(REPO, "plugins", "module_utils"),
            os.path.join(root, "ansible_collections", "kilo", "mesh", "plugins", "module_utils"),
        )
        shutil.copy(DRIVER, root)
    return os.path.join(root, os.path.basename(DRIVER)), root


def kill_converge(lab, host, point, plan):
    data = {"plan": plan, "settings": {}, "preshared_keys": lab.secrets["psk"]}
    driver, path = driver_in_lab(lab)
    argv = ["env", "PYTHONPATH=%s" % path, "/usr/bin/python3", driver, point]
    proc = lab.run(host, argv, input=json.dumps(data), timeout=120)
    assert "KILLPOINT %s" % point in proc.stdout, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.returncode != 0, proc.stdout


def left_half_done(lab, host, point, plan):
    """What the kill left: proof that it struck where it should."""
    link = sh(lab, host, "ip link show kilo0")
    routes = sh(lab, host, "ip -4 route show table all proto 107").stdout.strip()
    table = sh(lab, host, "nft list table inet kilo_mesh").returncode == 0
    peers = sh(lab, host, "wg show kilo0 peers").stdout.split()
    assert link.returncode == 0, (point, "no interface")
    if point == "wireguard.create":
        assert peers == [] and "UP" not in link.stdout.split(">")[0], (point, peers, link.stdout)
    elif point == "wireguard.peers":
        assert 0 < len(peers) < len(plan["peers"]), (point, peers)
    if point.startswith("wireguard") or point == "after:wireguard":
        assert routes == "" and not table, (point, routes, table)
    if point == "after:wireguard":
        assert sorted(peers) == sorted(p["public_key"] for p in plan["peers"]), (point, peers)
    if point == "after:netstate":
        assert routes and not table, (point, routes, table)
    if point == "after:firewall":
        assert routes and table, (point, routes, table)


def test_converged_mesh_connects(lab):
    """After test 1's converge: every pair connects, and a second run changes nothing."""
    failed = connectivity(lab)
    assert failed == {}, failed
    second = recap(playbook(lab))
    assert all(c["changed"] == 0 for c in second.values()), second
    for host in lab.hosts:
        foreign_intact(lab, host)


@pytest.mark.parametrize("point", POINTS)
def test_kill_at_any_point_heals_with_one_run(lab, point):
    host = leaders(lab)[POINTS.index(point) % len(leaders(lab))]
    plan = plans(lab)[host]
    assert plan["leader"] and len(plan["peers"]) >= 3, plan["peers"]
    break_host(lab, host)
    kill_converge(lab, host, point, plan)
    left_half_done(lab, host, point, plan)

    playbook(lab)  # the one healing run
    failed = connectivity(lab)
    assert failed == {}, (failed, wg_dump(lab))
    again = recap(playbook(lab))
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in again.values()), again
    for h in lab.hosts:
        foreign_intact(lab, h)
