#!/usr/bin/env python3
"""Check the kernel WireGuard backend of kilo.mesh on a kernel that has WireGuard.

Plain python3 (no pytest), run as root, e.g. inside the qemu test VM:

    python3 tests/vm/kernel_backend_check.py [--python /usr/bin/python3] [--backend kernel]

Two network namespaces joined by a veth (underlay 10.97.9.0/24), one WireGuard interface in
each converged with WireGuardBackend (the code under test runs inside each namespace through
`ip netns exec`, under --python, default this interpreter). Steps: create and configure, ping
across, converge again (no change), change one peer's allowed IPs by difference while another
peer is added (the first peer's session survives), shrink allowed IPs (proves REPLACE_ALLOWEDIPS
went out with the kernel's flag value, also under Debian's pyroute2 0.7.2), ping during an
update (zero loss expected), remove a peer, preshared key, non-leader down, state absent.
The last line is `N passed, N failed`; exit status 0 only when nothing failed.

`--backend userspace` runs the same steps against wireguard-go (used to dry-check this script
on machines without the kernel module; interface names then differ per namespace because
/run/wireguard is shared).
"""

import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vmcheck import Checker, run  # noqa: E402  (beside this script, also in the VM)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NS = ("kwvm1", "kwvm2")
UNDERLAY = ("10.97.9.1", "10.97.9.2")
TUNNEL = ("10.98.9.1", "10.98.9.2")
PORT = 51820

# The code under test, in a namespace: settings through host_settings and the plan through
# check_plan, as kilo.mesh.converge does; a KiloError comes back as "error".
CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard import backend as wireguard
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan
req = json.load(sys.stdin)
wireguard.RUN_DIR = req["run_dir"]  # userspace PID and log files; the kernel backend has none
try:
    be = wireguard.WireGuardBackend(host_settings(req["settings"]), req.get("preshared_keys"))
    if req["op"] == "converge":
        plan = check_plan(req["plan"], be.interface)
        cur = be.current(plan)
        des = be.desired(plan, cur)
        ch = be.changes(cur, des)
        if ch:
            be.apply(cur, des)
        now = be.current(plan)
        out = {"changes": ch, "after": be.diff(now, None)[0], "recheck": be.changes(now, be.desired(plan, now))}
    elif req["op"] == "absent":
        cur = be.current(None)
        owned = be.owns(cur)
        if owned:
            be.remove(cur)
        out = {"changes": ["remove"] if owned else [], "after": be.current(None)}
    else:
        out = be.current(None)
except KiloError as e:
    out = {"error": str(e)}
print(json.dumps(out))
"""


def collections_tree(tmp):
    """ansible_collections/kilo/mesh -> this checkout, wherever it was copied to."""
    base = os.path.join(tmp, "collections")
    os.makedirs(os.path.join(base, "ansible_collections", "kilo"))
    os.symlink(REPO, os.path.join(base, "ansible_collections", "kilo", "mesh"))
    return base


def make_key(path):
    sys.path.insert(0, COLLECTIONS)
    from ansible_collections.kilo.mesh.plugins.module_utils.host import keys

    return keys.ensure_key(path)["public_key"]


class Node(object):
    def __init__(self, i, args, tmp):
        self.i = i
        self.ns = NS[i]
        self.iface = "kilo0" if args.backend == "kernel" else "kwvm%d" % (i + 1)
        self.key_path = os.path.join(tmp, "key%d" % i)
        self.public_key = make_key(self.key_path)
        self.python = args.python
        self.backend = args.backend
        self.run_dir = os.path.join(tmp, "run%d" % i)  # userspace pid/log files; unused by kernel

    def call(self, op, plan=None, psks=None):
        req = {
            "op": op,
            "plan": plan,
            "run_dir": self.run_dir,
            "preshared_keys": psks or {},
            "settings": {
                "interface": self.iface,
                "key_path": self.key_path,
                "backend": self.backend,
            },
        }
        r = subprocess.run(
            ["ip", "netns", "exec", self.ns, self.python, "-c", CHILD, COLLECTIONS],
            input=json.dumps(req),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
            check=False,
        )
        secret = open(self.key_path).read().strip()
        if secret in r.stdout or secret in r.stderr:
            raise RuntimeError("private key leaked in output of %s" % op)
        for psk in (psks or {}).values():
            if psk in r.stdout or psk in r.stderr:
                raise RuntimeError("preshared key leaked in output of %s" % op)
        if r.returncode != 0:
            raise RuntimeError("%s on %s failed: %s" % (op, self.ns, r.stderr[-1500:]))
        out = json.loads(r.stdout)
        if "error" in out:
            raise RuntimeError("%s on %s failed: %s" % (op, self.ns, out["error"]))
        return out

    def converge(self, plan, psks=None):
        out = self.call("converge", plan, psks)
        if out["recheck"]:
            raise RuntimeError("converge on %s left changes: %s" % (self.ns, out["recheck"]))
        if out["after"]["present"]:
            run("ip", "-n", self.ns, "addr", "replace", TUNNEL[self.i] + "/24", "dev", self.iface)
        return out

    def ping(self, dst, count=3):
        return (
            run(
                "ip",
                "netns",
                "exec",
                self.ns,
                "ping",
                "-c",
                str(count),
                "-i",
                "0.2",
                "-W",
                "1",
                dst,
                check=False,
            ).returncode
            == 0
        )

    def link_kind(self):
        r = run("ip", "-n", self.ns, "-d", "-j", "link", "show", self.iface, check=False)
        if r.returncode != 0:
            return None
        info = json.loads(r.stdout)[0].get("linkinfo", {})
        return info.get("info_kind")


def peer_of(node, allowed=None, **extra):
    p = {
        "name": node.ns,
        "public_key": node.public_key,
        "endpoint": "%s:%d" % (UNDERLAY[node.i], PORT),
        "allowed_ips": allowed or [TUNNEL[node.i] + "/32"],
        "persistent_keepalive": 0,
    }
    p.update(extra)
    return p


def plan_for(node, peers, leader=True):
    return {
        "name": node.ns,
        "leader": leader,
        "segment": "node:" + node.ns,
        "listen_port": PORT,
        "peers": peers,
    }


def find(state, key):
    for p in state["peers"]:
        if p["public_key"] == key:
            return p
    return None


def kernel_has_wireguard():
    probe = "kwvmprobe"
    run("ip", "netns", "add", probe, check=False)
    try:
        r = run("ip", "-n", probe, "link", "add", "wgprobe", "type", "wireguard", check=False)
        return r.returncode == 0, r.stderr.strip()
    finally:
        run("ip", "netns", "del", probe, check=False)


def steps(c, a, b):
    fake = base64.b64encode(b"\x07" * 32).decode()
    out = a.converge(plan_for(a, [peer_of(b)]))
    c.check(
        "create: changes reported",
        any(x.startswith("create WireGuard interface") for x in out["changes"]),
        out["changes"],
    )
    c.check(
        "create: backend is %s" % a.backend,
        out["after"]["backend"] == a.backend,
        out["after"]["backend"],
    )
    if a.backend == "kernel":
        c.check("create: link kind wireguard", a.link_kind() == "wireguard", a.link_kind())
    c.check(
        "create: configured",
        out["after"]["listen_port"] == PORT
        and out["after"]["up"]
        and [p["public_key"] for p in out["after"]["peers"]] == [b.public_key],
        out["after"],
    )
    c.check("create: public key only", out["after"]["public_key"] == a.public_key)
    b.converge(plan_for(b, [peer_of(a)]))
    c.check("ping across the tunnel", a.ping(TUNNEL[1]))

    c.check(
        "second converge: no change (a)", a.converge(plan_for(a, [peer_of(b)]))["changes"] == []
    )
    c.check(
        "second converge: no change (b)", b.converge(plan_for(b, [peer_of(a)]))["changes"] == []
    )

    before = find(a.call("current"), b.public_key)
    out = a.converge(
        plan_for(
            a,
            [
                peer_of(b, [TUNNEL[1] + "/32", "10.98.20.0/24"]),
                {"name": "fake", "public_key": fake, "allowed_ips": ["10.98.30.0/24"]},
            ],
        )
    )
    ch = sorted(out["changes"])
    c.check(
        "diff update: exactly add fake + update b",
        len(ch) == 2
        and ch[0].startswith("add peer fake")
        and ch[1].startswith("update peer %s" % b.ns),
        ch,
    )
    after = find(a.call("current"), b.public_key)
    c.check(
        "diff update: b allowed IPs",
        after["allowed_ips"] == [TUNNEL[1] + "/32", "10.98.20.0/24"],
        after["allowed_ips"],
    )
    c.check(
        "diff update: fake allowed IPs",
        find(a.call("current"), fake)["allowed_ips"] == ["10.98.30.0/24"],
    )
    c.check(
        "diff update: b session kept",
        after["latest_handshake"] == before["latest_handshake"] and after["latest_handshake"] > 0,
        (before, after),
    )
    c.check("ping after update", a.ping(TUNNEL[1]))
    out = a.converge(
        plan_for(
            a, [peer_of(b), {"name": "fake", "public_key": fake, "allowed_ips": ["10.98.30.0/24"]}]
        )
    )
    c.check(
        "shrink allowed IPs: replaced, not appended",
        find(a.call("current"), b.public_key)["allowed_ips"] == [TUNNEL[1] + "/32"],
        out,
    )

    pinger = subprocess.Popen(
        ["ip", "netns", "exec", a.ns, "ping", "-i", "0.05", "-c", "80", "-W", "1", TUNNEL[1]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        universal_newlines=True,
    )
    time.sleep(1.0)
    a.converge(
        plan_for(
            a,
            [
                peer_of(b, [TUNNEL[1] + "/32", "10.98.21.0/24"], persistent_keepalive=5),
                {"name": "fake", "public_key": fake, "allowed_ips": ["10.98.31.0/24"]},
            ],
        )
    )
    text = pinger.communicate(timeout=60)[0]
    m = re.search(r"(\d+) packets transmitted, (\d+) received", text)
    sent, got = (int(m.group(1)), int(m.group(2))) if m else (0, -1)
    print("zero-drop figure: %d sent, %d received, %d lost" % (sent, got, sent - got))
    c.check("zero drop during update", sent > 0 and sent == got, text[-300:])

    out = a.converge(
        plan_for(a, [peer_of(b, [TUNNEL[1] + "/32", "10.98.21.0/24"], persistent_keepalive=5)])
    )
    c.check("remove peer: only fake", out["changes"] == ["remove peer %s" % fake], out["changes"])
    c.check("ping after peer removal", a.ping(TUNNEL[1]))
    # keepalive-only update: pyroute2 0.7.2's own set() would send REPLACE_ALLOWEDIPS here and
    # wipe the peer's allowed IPs; ours must leave them alone
    out = a.converge(
        plan_for(a, [peer_of(b, [TUNNEL[1] + "/32", "10.98.21.0/24"], persistent_keepalive=7)])
    )
    cur = find(a.call("current"), b.public_key)
    c.check(
        "keepalive-only update keeps allowed IPs",
        len(out["changes"]) == 1
        and cur["persistent_keepalive"] == 7
        and cur["allowed_ips"] == [TUNNEL[1] + "/32", "10.98.21.0/24"],
        (out["changes"], cur),
    )
    c.check("ping after keepalive update", a.ping(TUNNEL[1]))

    psk = base64.b64encode(os.urandom(32)).decode()
    out = a.converge(plan_for(a, [peer_of(b, persistent_keepalive=5)]), {b.public_key: psk})
    b.converge(plan_for(b, [peer_of(a)]), {a.public_key: psk})
    c.check(
        "psk: never shown",
        psk not in json.dumps(out) and find(out["after"], b.public_key)["preshared_key"] == "(set)",
    )
    c.check("psk: ping", a.ping(TUNNEL[1]))
    c.check(
        "psk: idempotent",
        a.converge(plan_for(a, [peer_of(b, persistent_keepalive=5)]), {b.public_key: psk})[
            "changes"
        ]
        == [],
    )

    out = b.converge(plan_for(b, [], leader=False))
    c.check(
        "non-leader: link down",
        not out["after"]["up"] and "set link down (not the leader)" in out["changes"],
        out["changes"],
    )

    for n in (a, b):
        out = n.call("absent")
        c.check("absent %s: removed" % n.ns, out["changes"] and not out["after"]["present"], out)
        c.check(
            "absent %s: no link" % n.ns,
            run("ip", "-n", n.ns, "link", "show", n.iface, check=False).returncode != 0,
        )
        c.check("absent %s: idempotent" % n.ns, n.call("absent")["changes"] == [])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter for the code under test")
    ap.add_argument("--backend", default="kernel", choices=["kernel", "userspace"])
    args = ap.parse_args()
    c = Checker()
    if os.geteuid() != 0:
        c.check("running as root", False)
        print("%d passed, %d failed" % (c.passed, c.failed))
        return 1
    if args.backend == "kernel":
        ok, err = kernel_has_wireguard()
        if not c.check("kernel can create a wireguard link", ok, err):
            print("%d passed, %d failed" % (c.passed, c.failed))
            return 1
    tmp = tempfile.mkdtemp(prefix="kwvm-")
    global COLLECTIONS
    COLLECTIONS = collections_tree(tmp)
    nodes = []
    try:
        for ns in NS:
            run("ip", "netns", "del", ns, check=False)
            run("ip", "netns", "add", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        run(
            "ip",
            "link",
            "add",
            "eth0",
            "netns",
            NS[0],
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            NS[1],
        )
        for i, ns in enumerate(NS):
            run("ip", "-n", ns, "addr", "add", UNDERLAY[i] + "/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")
        nodes = [Node(0, args, tmp), Node(1, args, tmp)]
        try:
            steps(c, nodes[0], nodes[1])
        except Exception as e:  # a crash is a failure, reported, not a traceback
            c.check("steps ran to the end", False, "%s: %s" % (type(e).__name__, e))
    finally:
        for n in nodes:
            try:
                n.call("absent")
            except Exception:
                pass
        for ns in NS:
            run("ip", "netns", "del", ns, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 else 1


COLLECTIONS = None

if __name__ == "__main__":
    sys.exit(main())
