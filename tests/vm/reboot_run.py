#!/usr/bin/env python3
"""Boot restore across real reboots of the test VM, with a WireGuard peer outside it.

    sudo tests/vm/reboot_run.py [--no-userspace] [--timeout S]     (stage reboot-vm)

Runs on this machine as root. It makes two network namespaces here (names from
KILO_TEST_PREFIX_REBOOT, default "kvb"):

- kvb-host: a bridge holding the tap of the VM's NIC (qemu runs in this namespace) and one end
  of a veth;
- kvb-peer: the veth's other end (203.0.113.20/24) and wireguard-go serving kvbwg0, configured
  with `wg` and `ip` from the peer's plan: the mesh's other node, which stays up while the VM
  reboots;
- kvb-pod: a pod of the peer's range (10.41.1.2/24) behind a veth, the peer forwarding to it.

The plans come from the project's engine (three nodes: the VM and a second node of location a
that never answers, so that the VM's plan holds IPIP routes, table 1107 rules and a tunnel
address as well; the peer alone in location b). The VM (run.sh --systemd --disk --reboot --net)
runs tests/vm/reboot_check.py at every boot: boot 1 converges (kernel WireGuard, the boot
backend) and reboots with `systemctl reboot`; boot 2 finds everything back with no converge by
the test, switches to wireguard-go (state absent, then a converge; not with --no-userspace) and
ends in a hard reset; boot 3 finds that back.

From outside, the peer pings the VM's WireGuard address and its tunnel address (from its own
WireGuard address, so both ways go through the tunnel) for the whole run. This script times,
from qemu's RESET events (QMP) and the VM's serial output, every boot's first reply and the
outage, checks that each boot answered, adds the VM's PASS/FAIL lines to its own and prints
`N passed, N failed` last. Everything it made (namespaces, tap, wireguard-go, ping, qemu) is
removed on every exit path, by PID for processes.
"""

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from vmcheck import Checker  # noqa: E402

P = os.environ.get("KILO_TEST_PREFIX_REBOOT", "kvb")
HOST_NS, PEER_NS, POD_NS = P + "-host", P + "-peer", P + "-pod"
TAP, BRIDGE, VETH, PEER_WG = P + "tap0", P + "br0", P + "veth0", P + "wg0"
PORT = 51820
# name: (location, internal IP, pod range, leader); vm2 is never started: it only gives the VM's
# plan IPIP routes, rules and a tunnel address to restore
NODES = {
    "vm": ("a", "203.0.113.10/24", "10.40.1.0/24", True),
    "vm2": ("a", "203.0.113.11/24", "10.40.2.0/24", False),
    "peer": ("b", "203.0.113.20/24", "10.41.1.0/24", True),
}
POD_GATEWAY, POD_IP = "10.41.1.1/24", "10.41.1.2/24"  # the peer's side of its pod's veth, the pod
WG_SOCKET = "/var/run/wireguard/%s.sock" % PEER_WG


def run(*args, **kw):
    kw.setdefault("check", True)
    return subprocess.run(
        list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, **kw
    )


def in_peer(*args, **kw):
    return run("ip", "netns", "exec", PEER_NS, *args, **kw)


def wg_key(private=None):
    """(private, public) keys from wg(8); the private key only ever sits in files of the temp dir."""
    if private is None:
        private = run("wg", "genkey").stdout.strip()
    return private, subprocess.run(
        ["wg", "pubkey"], input=private, stdout=subprocess.PIPE, universal_newlines=True, check=True
    ).stdout.strip()


def build_plans(tmp, public):
    base = os.path.join(tmp, "collections")
    os.makedirs(os.path.join(base, "ansible_collections", "kilo"))
    os.symlink(REPO, os.path.join(base, "ansible_collections", "kilo", "mesh"))
    sys.path.insert(0, base)
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import (
        build_plans as engine,
    )

    inventory = [
        {
            "name": name,
            "location": loc,
            "internal_ip": ip,
            "pod_cidr": pod,
            "leader": leader,
            "endpoint": "%s:%d" % (ip.split("/")[0], PORT),
            "public_key": public[name],
        }
        for name, (loc, ip, pod, leader) in sorted(NODES.items())
    ]
    return engine(inventory, [], {})["plans"]


# ------------------------------------------------------------------ the world outside the VM
class Outside(object):
    """The namespaces, the tap and the peer; ``close`` removes all of it (also half made)."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.daemon = None

    def remove_stale(self):
        """What a killed earlier run of this test left: only our names."""
        for ns in (HOST_NS, PEER_NS, POD_NS):
            run("ip", "netns", "del", ns, check=False)
        if os.path.exists(WG_SOCKET) and not self._socket_alive():
            os.unlink(WG_SOCKET)

    def _socket_alive(self):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(WG_SOCKET)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def build(self, peer_plan, peer_key_file):
        for ns in (HOST_NS, PEER_NS, POD_NS):
            run("ip", "netns", "add", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "-n", HOST_NS, "link", "add", BRIDGE, "type", "bridge")
        run("ip", "-n", HOST_NS, "tuntap", "add", "dev", TAP, "mode", "tap")
        run(
            "ip",
            "link",
            "add",
            VETH,
            "netns",
            HOST_NS,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            PEER_NS,
        )
        for dev in (TAP, VETH):
            run("ip", "-n", HOST_NS, "link", "set", dev, "master", BRIDGE)
            run("ip", "-n", HOST_NS, "link", "set", dev, "up")
        run("ip", "-n", HOST_NS, "link", "set", BRIDGE, "up")
        run("ip", "-n", PEER_NS, "addr", "add", NODES["peer"][1], "dev", "eth0")
        run("ip", "-n", PEER_NS, "link", "set", "eth0", "up")
        # a pod of the peer's range, in a namespace of its own behind a veth
        run(
            "ip",
            "link",
            "add",
            "pod",
            "netns",
            PEER_NS,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            POD_NS,
        )
        run("ip", "-n", PEER_NS, "addr", "add", POD_GATEWAY, "dev", "pod")
        run("ip", "-n", PEER_NS, "link", "set", "pod", "up")
        run("ip", "-n", POD_NS, "addr", "add", POD_IP, "dev", "eth0")
        run("ip", "-n", POD_NS, "link", "set", "eth0", "up")
        run("ip", "-n", POD_NS, "route", "add", "default", "via", POD_GATEWAY.split("/")[0])
        in_peer("sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
        # no wireguard module on this machine: wireguard-go, in the peer's namespace
        env = dict(os.environ, WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD="1")
        with open(os.path.join(self.tmp, "wireguard-go.log"), "w") as log:
            self.daemon = subprocess.Popen(
                ["ip", "netns", "exec", PEER_NS, "wireguard-go", "-f", PEER_WG],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + 15
        while not self._socket_alive():
            if time.monotonic() > deadline or self.daemon.poll() is not None:
                raise RuntimeError("wireguard-go did not open %s" % WG_SOCKET)
            time.sleep(0.1)
        (peer,) = peer_plan["peers"]
        in_peer(
            "wg",
            "set",
            PEER_WG,
            "private-key",
            peer_key_file,
            "listen-port",
            str(peer_plan["listen_port"]),
            "peer",
            peer["public_key"],
            "endpoint",
            peer["endpoint"],
            "allowed-ips",
            ",".join(peer["allowed_ips"]),
        )
        run("ip", "-n", PEER_NS, "addr", "add", peer_plan["address"], "dev", PEER_WG)
        run("ip", "-n", PEER_NS, "link", "set", PEER_WG, "up")
        from ansible_collections.kilo.mesh.plugins.module_utils.plan import flat_routes

        for r in flat_routes(peer_plan["routes"]):
            assert r["table"] == 254 and r["device"] == peer_plan["interface"], r
            run(
                "ip",
                "-n",
                PEER_NS,
                "route",
                "add",
                r["dst"],
                "via",
                r["gateway"],
                "dev",
                PEER_WG,
                "onlink",
                "src",
                r["source"],
            )

    def transfer(self):
        r = in_peer("wg", "show", PEER_WG, "transfer", check=False)
        return [line.split("\t")[1:] for line in r.stdout.splitlines() if line.strip()]

    def close(self):
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.terminate()
            try:
                self.daemon.wait(5)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        for ns in (POD_NS, PEER_NS, HOST_NS):
            run("ip", "netns", "del", ns, check=False)


class Pinger(object):
    """ping -D from the peer's WireGuard address to ``dst``, in the peer's namespace, for the whole
    run; ``replies`` holds the wall-clock time of every reply."""

    def __init__(self, src, dst):
        self.dst = dst
        self.replies = []
        self.proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                PEER_NS,
                "ping",
                "-D",
                "-n",
                "-i",
                "0.2",
                "-W",
                "1",
                "-I",
                src,
                dst,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            universal_newlines=True,
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            m = re.match(r"\[(\d+\.\d+)\] \d+ bytes from", line)
            if m:
                self.replies.append(float(m.group(1)))

    def first_in(self, start, end):
        return next((t for t in self.replies if start < t <= end), None)

    def last_in(self, start, end):
        return next((t for t in reversed(self.replies) if start < t <= end), None)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


class Serial(object):
    """Follows the VM's script output (ttyS1, a file qemu writes), stamping each line when read."""

    def __init__(self, path):
        self.path = path
        self.lines = []  # (time seen, line)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _follow(self):
        while not os.path.exists(self.path) and not self.done.is_set():
            time.sleep(0.1)
        buf = b""
        with open(self.path, "rb") as f:
            while True:
                chunk = f.read()
                if chunk:
                    buf += chunk
                    *whole, buf = buf.split(b"\n")
                    now = time.time()
                    self.lines.extend(
                        (now, line.decode("utf-8", "replace").rstrip("\r")) for line in whole
                    )
                elif self.done.is_set():
                    break
                else:
                    time.sleep(0.1)

    def marks(self, word):
        """[(time, argument)] of the lines "WORD ARG" (KV-BEGIN, KV-REBOOT, KV-RESET, KV-EXIT)."""
        return [
            (t, line.split()[1] if len(line.split()) > 1 else "")
            for t, line in self.lines
            if line.split()[:1] == [word]
        ]


class QMP(object):
    """qemu's events (RESET, SHUTDOWN) with their wall-clock timestamps."""

    def __init__(self, path):
        self.path = path
        self.events = []
        self.connected = None
        self.thread = threading.Thread(target=self._listen, daemon=True)
        self.thread.start()

    def _listen(self):
        sock = socket.socket(socket.AF_UNIX)
        while True:
            try:
                sock.connect(self.path)
                break
            except OSError:
                time.sleep(0.05)
        self.connected = time.time()
        f = sock.makefile("rw")
        f.readline()  # greeting
        f.write(json.dumps({"execute": "qmp_capabilities"}) + "\n")
        f.flush()
        for line in f:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "event" in msg:
                ts = msg["timestamp"]
                self.events.append(
                    (ts["seconds"] + ts["microseconds"] / 1e6, msg["event"], msg.get("data", {}))
                )

    def resets(self):
        """[(time, data)] of the machine's resets: a reboot raises RESET two or three times
        within milliseconds (the guest's reset, then the firmware's), counted once."""
        out = []
        for t, e, d in self.events:
            if e == "RESET" and (not out or t - out[-1][0] > 2.0):
                out.append((t, d))
        return out


# ------------------------------------------------------------------ main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-userspace", action="store_true", help="kernel WireGuard in every boot")
    ap.add_argument("--timeout", type=int, default=int(os.environ.get("KV_TIMEOUT", "900")))
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (disk image, logs)")
    args = ap.parse_args()
    c = Checker()
    if os.geteuid() != 0:
        print("reboot_run: needs root (network namespaces, a tap device)")
        return 2
    for tool in ("ip", "wg", "wireguard-go", "ping", "qemu-system-x86_64"):
        if not shutil.which(tool):
            print(
                "reboot_run: missing %s (apt-get install iproute2 wireguard-tools wireguard-go iputils-ping "
                "qemu-system-x86)" % tool
            )
            return 2
    userspace = not args.no_userspace
    boots = 3
    # one run at a time on this machine (the names below are fixed): another waits here, and only
    # under this lock are leftovers of a killed run removed
    lock = open(os.path.join(tempfile.gettempdir(), "kilo-mesh-test-%s.lock" % P), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print("reboot_run: waiting for another run (%s)" % lock.name)
        sys.stdout.flush()
        fcntl.flock(lock, fcntl.LOCK_EX)
    # the image first, outside the namespaces (a first build downloads)
    if (
        subprocess.call(
            ["bash", os.path.join(HERE, "build.sh")], env=dict(os.environ, KV_SYSTEMD="1")
        )
        != 0
    ):
        print("reboot_run: building the VM image failed")
        return 1

    tmp = tempfile.mkdtemp(prefix=P + "-", dir=os.path.join(REPO, ".build"))
    outside = Outside(tmp)
    pingers = []
    vm = None
    started = time.time()
    try:
        keys = dict((name, wg_key()) for name in NODES)
        os.makedirs(os.path.join(tmp, "in"))  # what the VM finds in /kv/reboot
        for path, name in (
            (os.path.join(tmp, "in", "vm.key"), "vm"),
            (os.path.join(tmp, "peer.key"), "peer"),
        ):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
                f.write(keys[name][0] + "\n")
        plans = build_plans(tmp, dict((name, k[1]) for name, k in keys.items()))
        vm_plan, peer_plan = plans["vm"], plans["peer"]
        vm_wg = vm_plan["address"].split("/")[0]
        vm_tunnel = vm_plan["tunnel_address"].split("/")[0]
        peer_wg = peer_plan["address"].split("/")[0]
        inputs = {
            "plan": vm_plan,
            "vm_public_key": keys["vm"][1],
            "address": NODES["vm"][1],
            "peer": {"wireguard_ip": peer_wg, "pod_ip": POD_IP.split("/")[0]},
            "userspace": userspace,
        }
        with open(os.path.join(tmp, "in", "inputs.json"), "w") as f:
            json.dump(inputs, f, indent=1)

        outside.remove_stale()
        outside.build(peer_plan, os.path.join(tmp, "peer.key"))
        # both addresses of the VM the restore brings back: its WireGuard address (the interface)
        # and its tunnel address (tunl0, set after the routes)
        pingers = [Pinger(peer_wg, vm_wg), Pinger(peer_wg, vm_tunnel)]

        out_log = os.path.join(tmp, "serial.log")
        qmp_sock = os.path.join(tmp, "qmp.sock")
        serial = Serial(out_log)
        qmp = QMP(qmp_sock)
        cmd = [
            "bash",
            os.path.join(HERE, "run.sh"),
            "--systemd",
            "--pyroute2",
            "debian",
            "--timeout",
            str(args.timeout),
            "--disk",
            os.path.join(tmp, "disk.img"),
            "--reboot",
            "--net",
            "%s:%s" % (HOST_NS, TAP),
            "--qmp",
            qmp_sock,
            "--out",
            out_log,
            "--add",
            "%s:/kv/reboot" % os.path.join(tmp, "in"),
            "tests/vm/reboot_check.py",
        ]
        print("reboot_run: %s" % " ".join(cmd))
        sys.stdout.flush()
        vm = subprocess.Popen(cmd, cwd=REPO, start_new_session=True)
        rc = vm.wait()
        vm = None
        ended = time.time()
        serial.done.set()
        serial.thread.join(5)
        for p in pingers:
            p.stop()
        report(c, serial, qmp, pingers, boots, rc, ended, outside)
    except Exception as e:
        c.check("the run went to its end", False, "%s: %s" % (type(e).__name__, e))
    finally:
        if vm is not None and vm.poll() is None:  # run.sh's trap kills qemu by its PID
            os.killpg(vm.pid, signal.SIGTERM)
            try:
                vm.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(vm.pid, signal.SIGKILL)
                vm.wait()
        for p in pingers:
            p.stop()
        outside.close()
        if args.keep:
            print("reboot_run: kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("reboot_run: %.0f s in all" % (time.time() - started))
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 else 1


def report(c, serial, qmp, pingers, boots, rc, ended, outside):
    """The VM's own checks, then this side's: every boot began, qemu reset between them, the
    outside pings were answered in every boot; the figures."""
    vm_pass = [line for _, line in serial.lines if line.startswith("PASS ")]
    vm_fail = [line for _, line in serial.lines if line.startswith("FAIL ")]
    c.passed += len(vm_pass)
    c.failed += len(vm_fail)
    print("reboot_run: the VM's checks: %d passed, %d failed" % (len(vm_pass), len(vm_fail)))
    for line in vm_fail:
        print("  " + line[:300])
    begins = serial.marks("KV-BEGIN")
    c.check(
        "outside: the VM booted %d times (KV-BEGIN %s)" % (boots, " ".join(b for _, b in begins)),
        [b for _, b in begins] == [str(n) for n in range(1, boots + 1)],
        begins,
    )
    resets = qmp.resets()
    c.check(
        "outside: qemu reset the machine %d times, each asked by the guest" % (boots - 1),
        len(resets) == boots - 1 and all(d.get("guest") for _, d in resets),
        resets,
    )
    exits = serial.marks("KV-EXIT")
    c.check(
        "outside: the last boot powered off with exit 0",
        exits[-1:] and exits[-1][1] == "0" and rc == 0,
        (exits, rc),
    )
    # a boot's window for the outside pings: from qemu's reset (boot 1: qemu's start) to the end
    # of the VM's checks of what the restore brought back (KVB-RESTORED; boot 1: its reboot)
    ends = dict((b, t) for t, b in serial.marks("KV-REBOOT") + serial.marks("KV-RESET") + exits)
    ends.update((b, t) for t, b in serial.marks("KVB-RESTORED"))
    asked = dict((b, (t, "systemctl reboot")) for t, b in serial.marks("KV-REBOOT"))
    asked.update((b, (t, "hard reset")) for t, b in serial.marks("KV-RESET"))
    figures = []
    start = qmp.connected or 0
    for n in range(1, boots + 1):
        end = ends.get(str(n), ended)
        begin = start if n == 1 else (resets[n - 2][0] if len(resets) >= n - 1 else None)
        if begin is None:
            c.check("outside: boot %d started" % n, False)
            continue
        for p in pingers:
            first = p.first_in(begin, end)
            c.check(
                "outside: boot %d: the peer's pings to %s answered through the tunnel%s"
                % (n, p.dst, "" if n == 1 else " (restored, no converge by the test)"),
                first is not None,
            )
            if first is None:
                continue
            if n == 1:
                figures.append(
                    "boot 1 (the converge): first reply from %s %.1f s after qemu started"
                    % (p.dst, first - begin)
                )
                continue
            how = asked.get(str(n - 1), (None, "?"))
            before = p.last_in(0, begin)
            line = "boot %d (after %s): first reply from %s %.1f s after qemu's reset" % (
                n,
                how[1],
                p.dst,
                first - begin,
            )
            if how[0]:
                line += ", %.1f s after the reboot was asked" % (first - how[0])
            if before:
                line += ", %.1f s without replies" % (first - before)
            figures.append(line)
    print("reboot_run: peer %s transfer (rx, tx bytes): %s" % (PEER_WG, outside.transfer()))
    for _, line in serial.lines:
        if line.startswith("figure: "):
            figures.append(line[len("figure: ") :])
    print("reboot_run: figures")
    for line in figures:
        print("  " + line)


class Interrupted(Exception):
    """A signal ended the run: counted as a failure, then everything is cleaned up."""


def _terminate(signum, frame):
    raise Interrupted("signal %d" % signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    sys.exit(main())
