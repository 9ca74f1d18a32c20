"""Tests of the namespace lab (lab/lab.py): real namespaces, sshd, wireguard-go, nft, Ansible.

Run: cd /work/main && .venv/bin/pytest tests/lab -q   (as root)
The module lab uses prefix `klt` (env KILO_LAB_TEST_PREFIX) so it can run beside a demo lab.
"""

import json
import os
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lab.lab import Lab, LabError, check_prefix, list_netns, plan_lab  # noqa: E402

PREFIX = os.environ.get("KILO_LAB_TEST_PREFIX", "klt")
PREFIX2 = PREFIX + "2"  # the tear-down test's own lab
LAB_PY = os.path.join(REPO, "lab", "lab.py")

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root")


def _cleanup(prefix):
    lab = Lab(prefix)
    lab.down()  # leftovers of an interrupted run; a no-op when nothing is there
    return lab


@pytest.fixture(scope="module")
def lab(request):
    lab = _cleanup(PREFIX)
    request.addfinalizer(lab.down)
    # 3 locations x 2 hosts, 1 public each; location 3's public host sits behind NAT, so the
    # lab has both a direct public-to-public path (aws-1 <-> gcp-1) and a NAT'd one (azure-1).
    lab.up(3, 2, 1, nat=[3])
    return lab


def sh(lab, host, script, **kw):
    return lab.run(host, ["sh", "-c", script], **kw)


def ping(lab, host, ip, count=1):
    return lab.run(host, ["ping", "-n", "-c", str(count), "-W", "1", ip])


# -- pure planning (no root needed) ---------------------------------------------------


def test_plan_addresses():
    p = plan_lab(2, 3, 1, nat=[2], ipv6=True, mgmt_net="198.18.16.0/20", prefix="kx")
    a1, a2, g1 = p["hosts"]["aws-1"], p["hosts"]["aws-2"], p["hosts"]["gcp-1"]
    assert (a1["mgmt_ip"], a1["lan_ip"], a1["public_ip"]) == (
        "198.18.17.1",
        "172.16.1.1",
        "203.0.113.11",
    )
    assert a2["public"] is False and a2["public_ip"] is None
    assert g1["nat"] and g1["public_ip"] == "198.51.100.21" and g1["nat_ip"] == "203.0.113.20"
    assert g1["public_ip6"] == "2001:db8:ffff::21" and a1["lan_ip6"] == "fd00:16:1::1"
    assert a1["netns"] == "kx-aws-1" and p["mgmt_bridge"] == "kxmgmt"
    every = [h[k] for h in p["hosts"].values() for k in ("mgmt_ip", "lan_ip", "public_ip") if h[k]]
    assert len(every) == len(set(every))
    assert not any(ip.startswith("192.0.2.") for ip in every)


def test_plan_ipv6_only_location():
    """A location of IPv6 alone: no IPv4 on its LAN and internet links, the others dual-stack."""
    p = plan_lab(2, 2, 1, ipv6_only=[2], mgmt_net="198.18.16.0/20", prefix="kx")
    a1, g1 = p["hosts"]["aws-1"], p["hosts"]["gcp-1"]
    assert p["ipv6"] and p["ipv6_only"] == [2]
    assert (a1["lan_ip"], a1["lan_ip6"], a1["public_ip"], a1["public_ip6"]) == (
        "172.16.1.1",
        "fd00:16:1::1",
        "203.0.113.11",
        "2001:db8::11",
    )
    assert (g1["lan_ip"], g1["lan_ip6"], g1["public_ip"], g1["public_ip6"]) == (
        None,
        "fd00:16:2::1",
        None,
        "2001:db8::21",
    )
    with pytest.raises(LabError, match="ipv6_only"):
        plan_lab(2, 2, 1, nat=[2], ipv6_only=[2])
    with pytest.raises(LabError, match="ipv6_only"):
        plan_lab(2, 2, 1, ipv6_only=[3])


@pytest.mark.parametrize(
    "args, field",
    [
        ((2, 2, 1, [3]), "nat"),
        ((2, 2, 0, [1]), "nat"),
        ((16, 1, 0, None), "locations"),
        ((2, 2, 3, None), "public_per_location"),
    ],
)
def test_plan_rejects_bad_input(args, field):
    with pytest.raises(LabError, match=field):
        plan_lab(*args)


def test_plan_login_user_sudo_with_and_without_a_password():
    p = plan_lab(3, 2, 1, user="kilodeploy")
    sudo = dict((name, h["sudo"]) for name, h in p["hosts"].items())
    # a checkerboard: both kinds in every location and among the leaders (host 1 of each)
    assert sudo == {
        "aws-1": "nopasswd",
        "aws-2": "password",
        "gcp-1": "password",
        "gcp-2": "nopasswd",
        "azure-1": "nopasswd",
        "azure-2": "password",
    }
    assert p["user"] == "kilodeploy"
    assert set(
        h["sudo"] for h in plan_lab(2, 2, 1, user="u", sudo_password="all")["hosts"].values()
    ) == {"password"}
    assert set(
        h["sudo"] for h in plan_lab(2, 2, 1, user="u", sudo_password="none")["hosts"].values()
    ) == {"nopasswd"}
    assert set(h["sudo"] for h in plan_lab(2, 2, 1)["hosts"].values()) == {None}
    for bad in ("root", "Deploy", "a b", ""):
        with pytest.raises(LabError, match="user"):
            plan_lab(1, 1, 1, user=bad)
    with pytest.raises(LabError, match="sudo_password"):
        plan_lab(1, 1, 1, user="u", sudo_password="half")


def test_prefix_checked():
    assert check_prefix("klt") == "klt"
    for bad in ("", "KL", "toolong", "k-l", "1k"):
        with pytest.raises(LabError, match="prefix"):
            check_prefix(bad)


# -- a live lab -------------------------------------------------------------------------


@needs_root
def test_hosts_have_own_namespaces(lab):
    root_ns = {k: os.readlink("/proc/self/ns/%s" % k) for k in ("net", "mnt", "uts", "pid")}
    seen = {}
    for name, h in lab.hosts.items():
        out = sh(
            lab,
            name,
            "for k in net mnt uts pid; do readlink /proc/self/ns/$k; done; hostname;"
            " ip -o link show | cut -d: -f2 | cut -d@ -f1; echo --; ip netns list; echo --;"
            " ps -e -o pid=,comm=",
            check=True,
        ).stdout
        ns_part, rest = out.split("\n", 4)[:4], out.split("\n", 4)[4]
        links, netns_list, procs = rest.split("--\n")
        lines = links.split()
        assert lines[0] == name, "hostname of %s" % name
        expected = {"lo", "mgmt0", "eth0"} | ({"eth1"} if h["public"] else set())
        assert set(lines[1:]) == expected, "links of %s" % name
        assert netns_list.strip() == "", "%s sees other namespaces: %s" % (name, netns_list)
        for kind, ident in zip(("net", "mnt", "uts", "pid"), ns_part):
            assert ident != root_ns[kind], "%s shares the root %s namespace" % (name, kind)
            assert ident not in seen, "%s shares a %s namespace with %s" % (
                name,
                kind,
                seen.get(ident),
            )
            seen[ident] = name
        pids = {int(line.split()[0]): line.split()[1] for line in procs.strip().splitlines()}
        assert pids[1] == "bash" and "sshd" in pids.values()
        assert len(pids) < 10, "%s sees foreign processes: %s" % (name, pids)
    assert (
        subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip() not in lab.hosts
    )


@needs_root
def test_private_run_wireguard_and_etc(lab):
    marker = "kl-lab-test-%d" % os.getpid()
    try:
        sh(
            lab,
            "aws-1",
            "touch /run/wireguard/%s /etc/%s /var/lib/%s" % ((marker,) * 3),
            check=True,
        )
        assert (
            sh(lab, "aws-1", "ls /run/wireguard /etc /var/lib", check=True).stdout.count(marker)
            == 3
        )
        other = sh(lab, "aws-2", "ls /run/wireguard /etc /var/lib", check=True).stdout
        assert marker not in other
        for d in ("/run/wireguard", "/etc", "/var/lib"):
            assert not os.path.exists(os.path.join(d, marker)), "leaked into root %s" % d
        # A fresh host starts with an empty /run/wireguard, but has /run/sshd.
        assert (
            sh(
                lab, "gcp-2", "ls -A /run/wireguard; test -d /run/sshd && echo ok", check=True
            ).stdout
            == "ok\n"
        )
        # The machine's packages stay visible through the overlays.
        assert (
            lab.run(
                "aws-2", ["dpkg-query", "-W", "-f=${Status}", "wireguard-go"], check=True
            ).stdout
            == "install ok installed"
        )
    finally:
        sh(lab, "aws-1", "rm -f /run/wireguard/%s /etc/%s /var/lib/%s" % ((marker,) * 3))


@needs_root
def test_management_isolation(lab):
    a1, a2 = lab.hosts["aws-1"], lab.hosts["aws-2"]
    g2 = lab.hosts["gcp-2"]
    for h in (a1, a2, g2):  # root reaches every host over the bridge
        r = subprocess.run(["ping", "-n", "-c", "1", "-W", "1", h["mgmt_ip"]], capture_output=True)
        assert r.returncode == 0, "root cannot ping %s" % h["name"]
    assert ping(lab, "aws-1", a2["mgmt_ip"]).returncode != 0, (
        "hosts talk over the management bridge"
    )
    assert ping(lab, "aws-1", g2["mgmt_ip"]).returncode != 0
    # ... while the same kind of ping over the LAN works (the failure above is the isolation).
    assert ping(lab, "aws-1", a2["lan_ip"]).returncode == 0
    # Two independent layers: isolated bridge ports and the root namespace's guard table.
    links = json.loads(
        subprocess.run(
            ["ip", "-d", "-j", "link", "show", "master", "%smgmt" % PREFIX],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert sorted(link["ifname"] for link in links) == sorted(
        h["mgmt_veth"] for h in lab.hosts.values()
    )
    assert all(link["linkinfo"]["info_slave_data"]["isolated"] for link in links)
    guard = subprocess.run(
        ["nft", "list", "table", "inet", "%s_guard" % PREFIX], capture_output=True, text=True
    )
    assert guard.returncode == 0 and 'iifname "%smgmt" drop' % PREFIX in guard.stdout
    for name in lab.hosts:
        assert "default" not in lab.run(name, ["ip", "route"], check=True).stdout
        assert "default" not in lab.run(name, ["ip", "-6", "route"], check=True).stdout


@needs_root
def test_ssh_with_strict_host_keys(lab, tmp_path):
    for name in ("aws-1", "gcp-2"):
        r = subprocess.run(
            ["ssh", "-F", lab.ssh_config, name, "hostname"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == name
    # Strictness is real: without the lab's known_hosts the same login is refused.
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    r = subprocess.run(
        ["ssh", "-F", lab.ssh_config, "-o", "UserKnownHostsFile=%s" % empty, "aws-1", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode != 0 and "verification failed" in r.stderr.lower()
    # sshd listens on the management address only.
    listen = lab.run("aws-1", ["ss", "-Htln"], check=True).stdout.split()
    assert "%s:22" % lab.hosts["aws-1"]["mgmt_ip"] in listen
    assert "0.0.0.0:22" not in listen and "[::]:22" not in listen


@needs_root
def test_locations_are_separate_before_overlay(lab):
    g2, g1 = lab.hosts["gcp-2"], lab.hosts["gcp-1"]
    r = ping(lab, "aws-2", g2["lan_ip"])
    assert r.returncode != 0 and "unreachable" in (r.stderr + r.stdout).lower()
    assert lab.run("aws-2", ["ip", "route", "get", g2["lan_ip"]]).returncode != 0
    # Even a public host has no route into another location's LAN.
    assert ping(lab, "aws-1", g1["lan_ip"]).returncode != 0
    # Control: inside one location the LAN works.
    assert ping(lab, "gcp-2", g1["lan_ip"]).returncode == 0
    assert (
        ping(lab, "aws-2", lab.hosts["gcp-1"]["public_ip"]).returncode != 0
    )  # non-public: no internet


@needs_root
def test_exec_errors_name_the_host(lab):
    with pytest.raises(LabError, match="nosuch"):
        lab.run("nosuch-1", ["true"])
    r = subprocess.run(
        [sys.executable, LAB_PY, "--prefix", PREFIX, "exec", "aws-1", "--", "hostname"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (r.returncode, r.stdout) == (0, "aws-1\n")


@needs_root
def test_public_hosts_reach_each_other(lab):
    a1, g1 = lab.hosts["aws-1"], lab.hosts["gcp-1"]
    assert ping(lab, "aws-1", g1["public_ip"]).returncode == 0
    assert ping(lab, "gcp-1", a1["public_ip"]).returncode == 0


LISTEN = (
    "import socket,sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind((sys.argv[1],5999));"
    "print('bound',flush=True); s.settimeout(10); d,a=s.recvfrom(100); print(a[0],d.decode(),flush=True)"
)
SEND = (
    "import socket,sys,time\nfor _ in range(20):\n"
    " socket.socket(socket.AF_INET,socket.SOCK_DGRAM).sendto(b'hi',(sys.argv[1],5999)); time.sleep(0.1)"
)


@needs_root
def test_nat_host_seen_as_router(lab):
    a1, z1 = lab.hosts["aws-1"], lab.hosts["azure-1"]
    assert z1["nat"] and z1["nat_ip"] and z1["nat_ip"] != z1["public_ip"]
    listener = subprocess.Popen(
        lab.nsenter_argv("aws-1", ["python3", "-c", LISTEN, a1["public_ip"]]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert listener.stdout.readline().strip() == "bound"
        lab.run("azure-1", ["python3", "-c", SEND, a1["public_ip"]], check=True, timeout=20)
        out, err = listener.communicate(timeout=15)
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    assert out.split() == [z1["nat_ip"], "hi"], err
    # The NAT'd host's own (configured) address is not reachable from the internet bridge.
    assert ping(lab, "aws-1", z1["public_ip"]).returncode != 0
    assert ping(lab, "azure-1", a1["public_ip"]).returncode == 0


@needs_root
def test_wireguard_go_runs_in_host(lab):
    ifname = PREFIX + "0"
    env = ["env", "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1"]
    try:
        lab.run("aws-2", env + ["wireguard-go", ifname], check=True, timeout=20)
        for _ in range(50):
            r = lab.run("aws-2", ["wg", "show", ifname, "listen-port"])
            if r.returncode == 0:
                break
            time.sleep(0.1)
        assert r.returncode == 0, r.stderr
        assert lab.run("aws-2", ["test", "-S", "/run/wireguard/%s.sock" % ifname]).returncode == 0
        assert not os.path.exists("/run/wireguard/%s.sock" % ifname)
        assert lab.run("aws-1", ["ip", "link", "show", ifname]).returncode != 0
    finally:
        lab.run("aws-2", ["ip", "link", "del", ifname])
    # Over SSH (as Ansible does it) the daemon must be detached with setsid to outlive the session.
    try:
        r = subprocess.run(
            [
                "ssh",
                "-F",
                lab.ssh_config,
                "gcp-2",
                "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1 setsid wireguard-go %s" % ifname
                + " >/dev/null 2>&1 < /dev/null",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 0, r.stderr
        for _ in range(50):
            if lab.run("gcp-2", ["wg", "show", ifname]).returncode == 0:
                break
            time.sleep(0.1)
        assert lab.run("gcp-2", ["wg", "show", ifname]).returncode == 0
    finally:
        lab.run("gcp-2", ["ip", "link", "del", ifname])


@needs_root
def test_ansible_ping(lab):
    ansible = os.path.join(REPO, ".venv", "bin", "ansible")
    if not os.path.exists(ansible):
        pytest.skip("no controller venv")
    r = subprocess.run(
        [ansible, "-i", lab.inventory, "all", "-m", "ping", "-o"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for name in lab.hosts:
        assert "%s | SUCCESS" % name in r.stdout
    listed = subprocess.run(
        [os.path.join(REPO, ".venv", "bin", "ansible-inventory"), "-i", lab.inventory, "--list"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    inv = json.loads(listed)
    assert sorted(inv["kilo"]["children"]) == ["aws", "azure", "gcp"]
    hv = inv["_meta"]["hostvars"]
    assert hv["azure-1"]["kilo_lab_nat_ip"] == lab.hosts["azure-1"]["nat_ip"]
    assert (
        hv["aws-2"]["kilo_lab_public"] is False
        and hv["aws-1"]["kilo_lab_public_ip"] == "203.0.113.11"
    )
    assert hv["gcp-1"]["kilo_location"] == "gcp"
    assert hv["aws-1"]["kilo_discovery_ignore_interfaces"] == ["mgmt0"]


@needs_root
def test_a_login_user_with_sudo_and_no_root_login():
    """lab.up(user=...): the user logs in by key (root cannot), in its own home; sudo asks no
    password on aws-1 and the lab's password on aws-2; the machine's own /etc never sees it."""
    lab = _cleanup(PREFIX + "u")
    try:
        lab.up(1, 2, 1, user="kilodeploy")
        password = lab.load()["become_password"]

        def ssh(host, command, *options, **kw):
            return subprocess.run(
                ["ssh", "-F", lab.ssh_config] + list(options) + [host, command],
                capture_output=True,
                text=True,
                timeout=30,
                **kw,
            )

        for host in ("aws-1", "aws-2"):
            r = ssh(host, "id -un; stat -c '%U %a' ~ ~/.ssh ~/.ssh/authorized_keys")
            assert r.returncode == 0, r.stderr
            assert r.stdout.split("\n")[:4] == [
                "kilodeploy",
                "kilodeploy 755",
                "kilodeploy 700",
                "kilodeploy 600",
            ], r.stdout
            r = ssh(host, "true", "-l", "root")
            assert r.returncode != 0 and "permission denied" in r.stderr.lower(), r.stderr
        assert ssh("aws-1", "sudo -n id -u").stdout.strip() == "0"
        asked = ssh("aws-2", "sudo -n id -u")
        assert asked.returncode != 0 and "password is required" in asked.stderr, asked.stderr
        r = ssh("aws-2", "sudo -S -p '' id -u", input=password + "\n")
        assert r.stdout.strip() == "0", r.stderr
        with open(lab.inventory) as f:
            text = f.read()
        assert (
            text.count('ansible_user: "kilodeploy"') == 2
            and text.count("ansible_become: true") == 2
        )
        assert text.count("ansible_become_password:") == 1
        with open("/etc/passwd") as f:
            assert "kilodeploy:" not in f.read()
    finally:
        lab.down()


# -- a second lab (CLI, IPv6) that is torn down and checked ---------------------------------


@needs_root
def test_cli_ipv6_and_teardown_leaves_nothing():
    _cleanup(PREFIX2)
    cli = [sys.executable, LAB_PY, "--prefix", PREFIX2]
    state = Lab(PREFIX2).state_dir
    try:
        r = subprocess.run(
            cli + ["up", "2", "1", "1", "--ipv6"], capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, r.stderr
        with open(os.path.join(state, "hosts.json")) as f:
            hosts = json.load(f)
        assert sorted(hosts) == ["aws-1", "gcp-1"]
        # IPv6 on the internet bridge, through the CLI's exec.
        r = subprocess.run(
            cli
            + [
                "exec",
                "aws-1",
                "--",
                "ping",
                "-6",
                "-n",
                "-c",
                "1",
                "-W",
                "2",
                hosts["gcp-1"]["public_ip6"],
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        r = subprocess.run(cli + ["status"], capture_output=True, text=True)
        assert r.returncode == 0 and "aws-1" in r.stdout
        # up refuses to build over an existing lab of the same prefix.
        r = subprocess.run(cli + ["up", "1", "1"], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "already exists" in r.stderr
        pids = [h["pid"] for h in hosts.values()]
        assert all(os.path.exists("/proc/%d" % p) for p in pids)
    finally:
        r1 = subprocess.run(cli + ["down"], capture_output=True, text=True, timeout=120)
        r2 = subprocess.run(cli + ["down"], capture_output=True, text=True, timeout=120)
    assert r1.returncode == 0, r1.stderr
    assert r2.returncode == 0, r2.stderr  # down twice is fine
    assert not any(os.path.exists("/proc/%d" % p) for p in pids), "lab processes survived"
    assert not [n for n in list_netns() if n.startswith(PREFIX2 + "-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert " %smgmt" % PREFIX2 not in links and " %sm1h1" % PREFIX2 not in links
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert "%s_guard" % PREFIX2 not in tables
    with open("/proc/self/mountinfo") as f:
        mounts = f.read()
    assert "/run/netns/%s-" % PREFIX2 not in mounts and state not in mounts
    assert not os.path.exists(os.path.join(state, "hosts"))
    r = subprocess.run(cli + ["status"], capture_output=True, text=True)
    assert "down" in r.stdout and "leftovers" not in r.stdout
