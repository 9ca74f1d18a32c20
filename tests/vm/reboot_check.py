#!/usr/bin/env python3
"""Boot restore across real reboots: the VM's side (tests/vm/reboot_run.py drives it).

Runs as the unit kv-test.service at every boot of one VM (run.sh --systemd --disk --reboot
--net), KV_BOOT telling which boot this is; the disk keeps /etc/systemd/system, /etc/network,
/etc/sysctl.d, /etc/cni, /var/lib/kilo and /usr/lib/kilo-mesh. The mesh has two nodes: this VM
(location a, kernel WireGuard) and a peer outside the VM (location b, wireguard-go in a network
namespace of the machine that runs qemu); the plan (built by reboot_run.py with the engine) also
names a second node of location a that never answers, so it holds IPIP routes, table 1107 rules
and the tunnel address besides the WireGuard peer and its route.

- boot 1: eth0's address in /etc/network/interfaces.d (ifupdown brings it up at every boot),
  the install's sysctl file (prepare, as kilo.mesh.prepare writes it), the key, then one converge
  as the module runs it (kernel backend, nftables, the boot backend with the zip app). Checks the
  state, the unit (enabled), the stored plan (0600, no key), traffic; then `systemctl reboot`.
- boot 2: no converge. Waits for kilo-mesh.service, prints its run time, checks everything is
  back and traffic crosses the tunnel both ways. With "userspace" in the inputs (the default):
  state absent (unit and stored plan gone) and a converge with wireguard-go, checked the same
  way. Then a hard reset (sysrq b: no sync).
- boot 3: the same checks, of wireguard-go's restore (kernel WireGuard with --no-userspace);
  then wireguard-go is killed (SIGKILL): systemd starts it again and its unit's ExecStartPost
  restores the plan, checked the same way.

Echo requests from outside (reboot_run.py pings this VM's tunnel address from the peer's
WireGuard address) are waited for and counted here; reboot_run.py times them from its side.
Lines "figure: ..." are the figures reboot_run.py prints again at the end.
"""

import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vmcheck import (
    Checker,
    TUNNEL_LABEL,
    link,
    live_routes,
    live_rules,
    nft_table,
    route_key,  # noqa: E402
    route_matches,
    run,
    tunnel_addrs,
)

from ansible_collections.kilo.mesh.plugins.module_utils.host import boot  # noqa: E402
from ansible_collections.kilo.mesh.plugins.module_utils.options import DEFAULT_KEY_PATH  # noqa: E402

INPUTS = "/kv/reboot/inputs.json"
KEY_SRC = "/kv/reboot/vm.key"
IFACE = "kilo0"
TUNL = "tunl0"
DEV = "eth0"
# The boot restore's files (docs/DESIGN.md, "Day two"), at their defaults
UNIT = boot.UNIT_NAME
UNIT_PATH = boot.unit_path()
STORED_PLAN = boot.PLAN_PATH
APP = boot.APP_PATH
SYSCTLS = {"net.ipv4.ip_forward": 1}
UNIT_WAIT = 240.0  # seconds a boot waits for the restore unit to finish
OUTSIDE_WAIT = 90.0  # seconds a boot waits for echo requests from outside
REBOOT, RESET = 100, 101  # exit codes init.sh's kv-test.service turns into a reboot, a reset
COMMIT_WAIT = 8.0  # seconds between a converge and a hard reset: past ext4's 5 s commit


def sh(*args):
    return run(*args, check=False)


def settings(backend):
    return {"backend": backend, "firewall": "nftables"}


def uptime():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


# ------------------------------------------------------------------ the code under test
def converge(c, tag, inp, backend, state="present"):
    from ansible_collections.kilo.mesh.plugins.module_utils.host import converge as host_converge
    from ansible_collections.kilo.mesh.plugins.plugin_utils import agent_zip

    s = dict(settings(backend), state=state)
    kw = {}
    if state == "present":
        data, digest = agent_zip.build()
        with open("/tmp/kilo-mesh.pyz", "wb") as f:
            f.write(data)
        kw["app"] = {"digest": digest, "src": "/tmp/kilo-mesh.pyz"}
    t0 = time.monotonic()
    try:
        out = host_converge.converge(inp["plan"], s, **kw)
    except Exception as e:  # a crash is a failure with its message, not a traceback
        out = {"error": "%s: %s" % (type(e).__name__, e)}
    print("%s converge (%s, %s): %.1f s" % (tag, backend, state, time.monotonic() - t0))
    key = read(KEY_SRC) or "no key"
    c.check(
        "%s converge %s (%s): no key in its result" % (tag, state, backend),
        key not in json.dumps(out),
    )
    c.check(
        "%s converge %s (%s) changed the host" % (tag, state, backend),
        out.get("changed") is True and "error" not in out,
        out.get("error") or out.get("changes"),
    )
    return out


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except (IOError, OSError):
        return None


# ------------------------------------------------------------------ boot 1's setup (what an admin and prepare do)
def setup_host(c, inp):
    os.makedirs("/etc/network/interfaces.d", exist_ok=True)
    with open("/etc/network/interfaces.d/%s" % DEV, "w") as f:
        f.write("auto %s\niface %s inet static\n    address %s\n" % (DEV, DEV, inp["address"]))
    r = sh("ifup", DEV)
    c.check("[boot 1] ifup %s" % DEV, r.returncode == 0, r.stderr)
    from ansible_collections.kilo.mesh.plugins.module_utils.host import prepare

    out = prepare.prepare(
        {"install_packages": False, "open_port": False, "sysctls": SYSCTLS}, False
    )
    c.check(
        "[boot 1] prepare wrote %s" % prepare.SYSCTL_FILE,
        os.path.exists(prepare.SYSCTL_FILE),
        out["changes"],
    )
    os.makedirs(os.path.dirname(DEFAULT_KEY_PATH), mode=0o700, exist_ok=True)
    shutil.copyfile(KEY_SRC, DEFAULT_KEY_PATH)
    os.chmod(DEFAULT_KEY_PATH, 0o600)


# ------------------------------------------------------------------ reading this host
def wg(*args):
    """`wg show kilo0 WHAT` lines (never the private key: no `dump`, no `private-key`)."""
    r = sh("wg", "show", IFACE, *args)
    return (
        [line.split("\t") for line in r.stdout.splitlines() if line.strip()]
        if r.returncode == 0
        else None
    )


def icmp_out_echo_replies():
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Icmp:")]
    return int(dict(zip(rows[0][1:], rows[1][1:]))["OutEchoReps"])


def packets(dev, way):
    info = link(dev) or {}
    return ((info.get("stats64") or {}).get(way) or {}).get("packets", 0)


def ping(dst, source=None, count=5):
    args = ["ping", "-n", "-c", str(count), "-i", "0.3", "-W", "2"]
    if source:
        args += ["-I", source]
    r = sh(*(args + [dst]))
    return r.returncode == 0, r.stdout.strip().splitlines()[-2:]


def flat(plan):
    from ansible_collections.kilo.mesh.plugins.module_utils.plan import flat_routes

    return flat_routes(plan["routes"])


def userspace_daemon():
    """(pid, unit) of the wireguard-go serving kilo0, (None, None) when there is none."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/cgroup" % pid) as f:
                cgroup = f.read().strip().rsplit("/", 1)[-1]
        except (IOError, OSError):
            continue
        if argv and os.path.basename(argv[0]) == b"wireguard-go" and IFACE.encode() in argv:
            return int(pid), cgroup
    return None, None


def show(unit, *props):
    r = sh("systemctl", "show", unit, *("-p%s" % p for p in props))
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


# ------------------------------------------------------------------ checks
def check_state(c, tag, inp, backend):
    """Everything the plan holds is on the host: interface, peer, routes, rules, tunnel address,
    nftables table, CNI file, sysctl."""
    plan = inp["plan"]
    info = link(IFACE)
    c.check(
        "%s %s up" % (tag, IFACE),
        info is not None and "UP" in info.get("flags", []),
        info and info["flags"],
    )
    kind = ((info or {}).get("linkinfo") or {}).get("info_kind")
    want_kind = "wireguard" if backend == "kernel" else "tun"
    c.check(
        "%s %s is a %s link (%s backend)" % (tag, IFACE, want_kind, backend),
        kind == want_kind,
        kind,
    )
    if backend == "userspace":
        pid, unit = userspace_daemon()
        # its ExecStartPost (a restore after a restart) may still run: wait for it to settle
        t0 = time.monotonic()
        props = {}
        while unit and time.monotonic() - t0 < UNIT_WAIT:
            props = show(unit, "ActiveState", "Restart")
            if props.get("ActiveState") != "activating":
                break
            time.sleep(0.5)
        print(
            "figure: %s %s %s after %.1f s of waiting, %.1f s after the kernel started"
            % (tag, unit, props.get("ActiveState"), time.monotonic() - t0, uptime())
        )
        journal = sh("journalctl", "-b", "-u", unit, "--no-pager", "-o", "short-monotonic").stdout
        lines = [
            line for line in journal.strip().splitlines() if not set(line) & set("│┌└")
        ]  # its banner
        for line in lines[-6:]:
            print("%s journal: %s" % (tag, line if len(line) < 240 else line[:240] + "..."))
        c.check(
            "%s wireguard-go serves %s from a unit that restarts it (%s)" % (tag, IFACE, unit),
            pid is not None
            and unit.endswith(".service")
            and props.get("ActiveState") == "active"
            and props.get("Restart", "no") != "no",
            (pid, unit, props),
        )
    addrs = [a for a, _ in tunnel_addrs(IFACE)]
    c.check("%s %s holds %s" % (tag, IFACE, plan["address"]), plan["address"] in addrs, addrs)
    pub = wg("public-key")
    c.check("%s %s has this host's key" % (tag, IFACE), pub == [[inp["vm_public_key"]]], pub)
    port = wg("listen-port")
    c.check(
        "%s %s listens on %d" % (tag, IFACE, plan["listen_port"]),
        port == [[str(plan["listen_port"])]],
        port,
    )
    want = dict((p["public_key"], p) for p in plan["peers"])
    endpoints = dict(wg("endpoints") or [])
    allowed = dict((k, sorted(v.split())) for k, v in (wg("allowed-ips") or []))
    c.check(
        "%s peers are the plan's (%d)" % (tag, len(want)),
        sorted(endpoints) == sorted(want),
        sorted(endpoints),
    )
    for key, p in want.items():
        c.check(
            "%s peer %s: endpoint %s" % (tag, p["name"], p["endpoint"]),
            endpoints.get(key) == p["endpoint"],
            endpoints.get(key),
        )
        c.check(
            "%s peer %s: allowed IPs %s" % (tag, p["name"], ",".join(p["allowed_ips"])),
            allowed.get(key) == sorted(p["allowed_ips"]),
            allowed.get(key),
        )
    routes = live_routes()
    bad = [
        (route_key(r), routes.get(route_key(r)))
        for r in flat(plan)
        if not route_matches(routes.get(route_key(r)), r, DEV)
    ]
    tables = sorted(set(route_key(r)[1] for r in flat(plan)))
    c.check(
        "%s the plan's %d routes (tables %s)" % (tag, len(flat(plan)), ", ".join(tables)),
        not bad,
        bad,
    )
    c.check(
        "%s no route of ours beyond the plan" % tag,
        sorted(routes) == sorted(route_key(r) for r in flat(plan)),
        sorted(routes),
    )
    want_rules = set((r.get("src"), r.get("dst"), r.get("iif")) for r in plan["rules"])
    c.check(
        "%s the plan's %d table 1107 rules" % (tag, len(want_rules)),
        live_rules() == want_rules,
        (sorted(live_rules(), key=str), sorted(want_rules, key=str)),
    )
    tunl = link(TUNL)
    c.check(
        "%s %s up with %s labelled ours" % (tag, TUNL, plan["tunnel_address"]),
        tunl is not None
        and "UP" in tunl.get("flags", [])
        and (plan["tunnel_address"], TUNNEL_LABEL) in tunnel_addrs(TUNL),
        tunnel_addrs(TUNL),
    )
    table = nft_table()
    c.check(
        "%s nftables table inet kilo_mesh, masquerading %s" % (tag, plan["pod_cidr"]),
        table is not None and plan["pod_cidr"] in table and "masquerade" in table,
        (table or "")[:600],
    )
    cni = read("/etc/cni/net.d/10-kilo.conflist") or ""
    c.check("%s CNI file names %s" % (tag, plan["pod_cidr"]), plan["pod_cidr"] in cni, cni[:300])
    c.check(
        "%s net.ipv4.ip_forward = 1 (the install's sysctl file)" % tag,
        read("/proc/sys/net/ipv4/ip_forward") == "1",
        read("/proc/sys/net/ipv4/ip_forward"),
    )


def check_files(c, tag):
    """The boot restore's files after a converge: the unit enabled, the stored plan 0600 with no key."""
    c.check("%s %s written" % (tag, UNIT_PATH), os.path.exists(UNIT_PATH))
    r = sh("systemctl", "is-enabled", UNIT)
    c.check("%s %s enabled" % (tag, UNIT), r.stdout.strip() == "enabled", r.stdout + r.stderr)
    mode = os.stat(STORED_PLAN).st_mode & 0o777 if os.path.exists(STORED_PLAN) else None
    c.check("%s %s is 0600" % (tag, STORED_PLAN), mode == 0o600, oct(mode or 0))
    text = read(STORED_PLAN) or ""
    key = read(DEFAULT_KEY_PATH)
    c.check("%s no private key in the stored plan" % tag, bool(text) and key and key not in text)
    c.check("%s the app %s" % (tag, APP), os.path.exists(APP))
    props = show(UNIT, "After", "Wants", "Before", "ExecStart")
    c.check(
        "%s %s runs after network-online.target and wants it" % (tag, UNIT),
        "network-online.target" in props.get("After", "")
        and "network-online.target" in props.get("Wants", ""),
        props,
    )


def wait_unit(c, tag):
    """Wait for kilo-mesh.service to run to its end; print its times (CLOCK_MONOTONIC, since the
    kernel started)."""
    deadline = time.monotonic() + UNIT_WAIT
    props = {}
    while time.monotonic() < deadline:
        props = show(
            UNIT,
            "LoadState",
            "ActiveState",
            "SubState",
            "Result",
            "ExecMainStatus",
            "ExecMainStartTimestampMonotonic",
            "ExecMainExitTimestampMonotonic",
        )
        if (
            props.get("LoadState") != "loaded"
            or props.get("ActiveState") == "failed"
            or int(props.get("ExecMainExitTimestampMonotonic") or 0) > 0
        ):
            break
        time.sleep(0.5)
    c.check("%s %s loaded at boot" % (tag, UNIT), props.get("LoadState") == "loaded", props)
    c.check(
        "%s %s ran and succeeded (no converge by the test)" % (tag, UNIT),
        props.get("Result") == "success"
        and props.get("ExecMainStatus") == "0"
        and int(props.get("ExecMainExitTimestampMonotonic") or 0) > 0,
        props,
    )
    start = int(props.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
    end = int(props.get("ExecMainExitTimestampMonotonic") or 0) / 1e6
    userspace = (
        sh("systemctl", "show", "-p", "UserspaceTimestampMonotonic")
        .stdout.strip()
        .split("=", 1)[-1]
    )
    if end:
        print(
            "figure: %s %s ran %.2f s (started %.1f s, done %.1f s after the kernel started; "
            "systemd started at %.1f s)"
            % (tag, UNIT, end - start, start, end, int(userspace or 0) / 1e6)
        )
    journal = sh("journalctl", "-b", "-u", UNIT, "--no-pager", "-o", "short-monotonic").stdout
    for line in journal.strip().splitlines()[-8:]:
        print("%s journal: %s" % (tag, line if len(line) < 240 else line[:240] + "..."))
    key = read(DEFAULT_KEY_PATH)
    c.check("%s no private key in the unit's journal" % tag, key and key not in journal)


def traffic(c, tag, inp):
    """Both ways through the tunnel: this VM pings the peer's WireGuard address (from its own)
    and the peer's pod range (by the plan's route); echo requests from outside are answered."""
    peer = inp["peer"]
    own = inp["plan"]["address"].split("/")[0]
    rx0 = packets(IFACE, "rx")
    ok, out = ping(peer["wireguard_ip"], source=own)
    print(
        "%s ping %s -> %s done %.1f s after the kernel started"
        % (tag, own, peer["wireguard_ip"], uptime())
    )
    c.check(
        "%s VM %s -> peer %s answers through %s (rx +%d)"
        % (tag, own, peer["wireguard_ip"], IFACE, packets(IFACE, "rx") - rx0),
        ok and packets(IFACE, "rx") - rx0 >= 1,
        out,
    )
    tx0 = packets(IFACE, "tx")
    ok, out = ping(peer["pod_ip"])
    c.check(
        "%s VM -> peer's pod %s answers, out by the route through %s (tx +%d)"
        % (tag, peer["pod_ip"], IFACE, packets(IFACE, "tx") - tx0),
        ok and packets(IFACE, "tx") - tx0 >= 5,
        out,
    )
    deadline = time.monotonic() + OUTSIDE_WAIT
    while icmp_out_echo_replies() < 5 and time.monotonic() < deadline:
        time.sleep(0.5)
    c.check(
        "%s echo requests from outside answered (%d replies since boot)"
        % (tag, icmp_out_echo_replies()),
        icmp_out_echo_replies() >= 5,
    )


# ------------------------------------------------------------------ boots
def boot1(c, inp):
    tag = "[boot 1]"
    c.check("%s a fresh host: no %s yet" % (tag, UNIT), not os.path.exists(UNIT_PATH))
    setup_host(c, inp)
    converge(c, tag, inp, "kernel")
    check_files(c, tag)
    check_state(c, tag, inp, "kernel")
    traffic(c, tag, inp)
    print("%s systemctl reboot" % tag)
    return REBOOT


def restored(c, tag, inp, backend):
    print("%s kv-test started %.1f s after the kernel started" % (tag, uptime()))
    wait_unit(c, tag)
    check_state(c, tag, inp, backend)
    if backend == "userspace":
        # the daemon's unit restores the stored plan after it starts (ExecStartPost, for a daemon
        # systemd restarted); at boot the boot restore started it and holds the converge lock, so
        # that second restore must wait and find everything in place, not converge alongside
        unit = userspace_daemon()[1]
        journal = sh("journalctl", "-b", "-u", unit or "none", "--no-pager", "-o", "cat").stdout
        second = [
            line for line in journal.splitlines() if "kilo-mesh restore: %s:" % STORED_PLAN in line
        ]
        c.check(
            "%s the daemon's own restore waited for the boot restore (%d run, all 'already in place')"
            % (tag, len(second)),
            all("already in place" in line for line in second),
            second,
        )
    traffic(c, tag, inp)
    # reboot_run.py counts the outside pings of this boot up to here: what the restore brought back
    print("KVB-RESTORED %s" % os.environ.get("KV_BOOT"))


def boot2(c, inp):
    restored(c, "[boot 2, after systemctl reboot]", inp, "kernel")
    if inp.get("userspace"):
        tag = "[boot 2, to wireguard-go]"
        converge(c, tag, inp, "kernel", state="absent")
        c.check(
            "%s state absent removed the unit, the stored plan and %s" % (tag, IFACE),
            not os.path.exists(UNIT_PATH)
            and not os.path.exists(STORED_PLAN)
            and link(IFACE) is None,
            (os.path.exists(UNIT_PATH), os.path.exists(STORED_PLAN)),
        )
        converge(c, tag, inp, "userspace")
        done = time.monotonic()
        check_files(c, tag)
        check_state(c, tag, inp, "userspace")
        traffic(c, tag, inp)
        # The converge fsyncs its files; `systemctl enable`'s symlink waits for ext4's next
        # commit (every 5 s), as after any package's install. The reset tests a stop with no
        # shutdown and no sync, not a power cut within that window.
        time.sleep(max(0.0, COMMIT_WAIT - (time.monotonic() - done)))
        print("%s hard reset %.0f s after the converge" % (tag, time.monotonic() - done))
    print("[boot 2] hard reset (sysrq b: no sync)")
    return RESET


def crash(c, inp):
    """wireguard-go killed (SIGKILL, as the OOM killer does): systemd starts it again, empty, and
    its unit's ExecStartPost restores the stored plan; traffic crosses again with no converge."""
    tag = "[boot 3, wireguard-go killed]"
    pid, unit = userspace_daemon()
    c.check("%s a wireguard-go to kill" % tag, pid is not None, unit)
    if pid is None:
        return
    t0 = time.monotonic()
    os.kill(pid, 9)
    new, props = None, {}
    while time.monotonic() - t0 < UNIT_WAIT:
        new = userspace_daemon()[0]
        props = show(unit, "ActiveState", "NRestarts")
        if new not in (None, pid) and props.get("ActiveState") == "active":
            break
        time.sleep(0.2)
    print(
        "figure: %s systemd restarted it and its restore ran in %.1f s (restarts %s)"
        % (tag, time.monotonic() - t0, props.get("NRestarts"))
    )
    c.check(
        "%s systemd started a new wireguard-go" % tag, new not in (None, pid), (pid, new, props)
    )
    journal = sh("journalctl", "-b", "-u", unit, "--no-pager", "-o", "cat").stdout
    lines = [
        line for line in journal.splitlines() if "kilo-mesh restore: %s:" % STORED_PLAN in line
    ]
    c.check(
        "%s the unit's restore put the plan back (its last line: changes, not 'already in place')"
        % tag,
        bool(lines) and "changes in" in lines[-1],
        lines[-3:],
    )
    c.check(
        "%s no \"can't open file\" in the daemon's journal (the restore waits for the app)" % tag,
        "can't open file" not in journal,
    )
    check_state(c, tag, inp, "userspace")
    traffic(c, tag, inp)
    print("figure: %s traffic back %.1f s after the kill" % (tag, time.monotonic() - t0))


def boot3(c, inp):
    backend = "userspace" if inp.get("userspace") else "kernel"
    restored(c, "[boot 3, %s, after a hard reset]" % backend, inp, backend)
    if backend == "userspace":
        crash(c, inp)
    return 0


BOOTS = {1: boot1, 2: boot2, 3: boot3}


def main():
    c = Checker()
    boot = int(os.environ.get("KV_BOOT") or 0)
    if (
        os.environ.get("KV_VM") != "1"
        or not os.path.isdir("/run/systemd/system")
        or not os.path.isdir("/kv/disk")
    ):
        c.check("in the VM with systemd and the persistent disk (reboot_run.py)", False)
        print("%d passed, %d failed" % (c.passed, c.failed))
        return 1
    with open(INPUTS) as f:
        inp = json.load(f)
    if boot not in BOOTS:
        c.check("boot %d is one of this test's %d" % (boot, len(BOOTS)), False)
        rc = 1
    else:
        try:
            rc = BOOTS[boot](c, inp)
        except Exception as e:  # a crash is a failure; the schedule goes on so later boots report
            c.check("[boot %d] ran to the end" % boot, False, "%s: %s" % (type(e).__name__, e))
            rc = {1: REBOOT, 2: RESET}.get(boot, 1)
    print("reboot-check: %d passed, %d failed (boot %d)" % (c.passed, c.failed, boot))
    if rc in (REBOOT, RESET):
        return rc
    return 1 if c.failed or rc else 0


if __name__ == "__main__":
    sys.exit(main())
