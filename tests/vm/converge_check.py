#!/usr/bin/env python3
"""Converge a 2-location, 4-node mesh with IPIP encapsulation on a kernel that has ipip and WireGuard.

Plain python3 (no pytest), run as root inside the qemu test VM (it refuses to run without KV_VM=1):

    tests/vm/run.sh [--pyroute2 debian] tests/vm/converge_check.py

Layout (every name starts with "kcv"): four node namespaces a1 a2 (location a) and b1 b2
(location b), each node's LAN link "lan" (a: 10.20.1.0/24, one subnet; b: 10.30.1.0/24 and
10.30.2.0/24 on one wire with underlay routes, so `crosssubnet` encapsulates in b only), a
"pub" veth between the leaders a1 and b1 (203.0.113.0/24, the WireGuard endpoints), and per node
a pod namespace behind a veth holding the first host of the node's pod CIDR (.2; .1 on the node).

Plans come from the project's topology engine; each node is converged inside its namespace by
plugins/module_utils/host/converge.py (`ip netns exec NS python3 -c ...`, so pyroute2, nft and the
WireGuard kernel link all act on that namespace), with backend kernel and firewall nftables.

Two passes, `encapsulate: always` then `crosssubnet`, each: tunl0 up, every plan route and rule
present as planned, tunl0 carries the plan's tunnel_address (labelled ours), nft table
`inet kilo_mesh` accepts IPIP from the location's internal IPs and drops other IPIP, pod-to-pod
inside a location (through tunl0 when encapsulating, proven by tunl0 counters; not through it
when crosssubnet keeps a subnet plain), pod to another node's internal IP (table 1107), pod to
pod across locations (tunl0, both leaders' WireGuard, tunl0), foreign IPIP dropped, second
converge unchanged, check mode after a drift reports it and changes nothing, state absent
removes our state and leaves foreign state alone (a static route, an unlabelled tunl0 address),
and a second state absent changes nothing and says so. a2's tunl0 starts with its tunnel
address unlabelled, as Kilo leaves it: converge must take it over. A last pass renames tunl0 to
cilium_tunl (as Cilium's IPIP termination does) and converges with compatibility cilium: routes
and the tunnel address on cilium_tunl, no tunl0 made, traffic through it, absent cleans it.
Before it, a dual-stack pass (dual_pass) adds IPv6 to every node, LAN and pod (location a's IPv6
LAN on a link of its own) and converges a plan of both families with IPIP for the IPv4 half.
Last line: `N passed, N failed`.
"""

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vmcheck  # noqa: E402  (beside this script, also in the VM)
from vmcheck import Checker, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
P = "kcv"
PORT = 51820
TUNL = "tunl0"
LABEL = vmcheck.TUNNEL_LABEL
CILIUM_TUNL = "cilium_tunl"  # tunl0 as Cilium renames it (enable-ipip-termination)

# name: (location, lan address/prefix, pod CIDR, public address or None)
NODES = {
    "a1": ("a", "10.20.1.1/24", "10.21.1.0/24", "203.0.113.1"),
    "a2": ("a", "10.20.1.2/24", "10.21.2.0/24", None),
    "b1": ("b", "10.30.1.1/24", "10.31.1.0/24", "203.0.113.2"),
    "b2": ("b", "10.30.2.2/24", "10.31.2.0/24", None),
}
# underlay between b's two subnets (a router would do this on a real network)
UNDERLAY_ROUTES = {"b1": "10.30.2.0/24", "b2": "10.30.1.0/24"}
# foreign state that must survive everything we do
FOREIGN_ROUTE = "172.16.9.0/24"
FOREIGN_TUNL_ADDR = "172.16.99.1/32"

CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import converge
req = json.load(sys.stdin)
try:
    out = converge(req["plan"], req["settings"], req["check_mode"])
except Exception as e:
    out = {"error": "%s: %s" % (type(e).__name__, e)}
print(json.dumps(out))
"""


def ns(name):
    return "%s-%s" % (P, name)


def pod_ns(name):
    return "%s-p%s" % (P, name)


def nsx(name, *args, **kw):
    """Run a command inside node `name`'s namespace."""
    return run("ip", "netns", "exec", ns(name), *args, **kw)


def host(cidr, n):
    return str(ipaddress.ip_network(cidr)[n])


def internal_ip(name):
    return NODES[name][1].split("/")[0]


def pod_ip(name):
    return host(NODES[name][2], 2)


def collections_tree(tmp):
    base = os.path.join(tmp, "collections")
    os.makedirs(os.path.join(base, "ansible_collections", "kilo"))
    os.symlink(REPO, os.path.join(base, "ansible_collections", "kilo", "mesh"))
    return base


# ------------------------------------------------------------------ underlay
def build_underlay():
    for name in NODES:
        for n in (ns(name), pod_ns(name)):
            run("ip", "netns", "del", n, check=False)
            run("ip", "netns", "add", n)
            run("ip", "-n", n, "link", "set", "lo", "up")
        for key, val in (
            ("net.ipv4.ip_forward", "1"),
            # Debian's default (systemd): loose reverse-path filter
            ("net.ipv4.conf.all.rp_filter", "2"),
            ("net.ipv4.conf.default.rp_filter", "2"),
        ):
            # no sysctl(8) in the VM; ip netns exec mounts this namespace's /proc/sys view
            nsx(name, "sh", "-c", "echo %s > /proc/sys/%s" % (val, key.replace(".", "/")))
    run(
        "ip",
        "link",
        "add",
        "lan",
        "netns",
        ns("a1"),
        "type",
        "veth",
        "peer",
        "name",
        "lan",
        "netns",
        ns("a2"),
    )
    run(
        "ip",
        "link",
        "add",
        "lan",
        "netns",
        ns("b1"),
        "type",
        "veth",
        "peer",
        "name",
        "lan",
        "netns",
        ns("b2"),
    )
    run(
        "ip",
        "link",
        "add",
        "pub",
        "netns",
        ns("a1"),
        "type",
        "veth",
        "peer",
        "name",
        "pub",
        "netns",
        ns("b1"),
    )
    for name, (_, lan, pod, pub) in NODES.items():
        n = ns(name)
        run("ip", "-n", n, "addr", "add", lan, "dev", "lan")
        run("ip", "-n", n, "link", "set", "lan", "up")
        if pub:
            run("ip", "-n", n, "addr", "add", pub + "/24", "dev", "pub")
            run("ip", "-n", n, "link", "set", "pub", "up")
        if name in UNDERLAY_ROUTES:
            run("ip", "-n", n, "route", "add", UNDERLAY_ROUTES[name], "dev", "lan")
        # the pod: .2 in its own namespace, .1 on the node (as a CNI bridge would hold it)
        plen = pod.split("/")[1]
        run(
            "ip",
            "link",
            "add",
            "pod",
            "netns",
            n,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            pod_ns(name),
        )
        run("ip", "-n", n, "addr", "add", "%s/%s" % (host(pod, 1), plen), "dev", "pod")
        run("ip", "-n", n, "link", "set", "pod", "up")
        run("ip", "-n", pod_ns(name), "addr", "add", "%s/%s" % (host(pod, 2), plen), "dev", "eth0")
        run("ip", "-n", pod_ns(name), "link", "set", "eth0", "up")
        run("ip", "-n", pod_ns(name), "route", "add", "default", "via", host(pod, 1))
    # foreign state on a1: a static route and an unlabelled tunl0 address
    run("ip", "-n", ns("a1"), "route", "add", FOREIGN_ROUTE, "dev", "lan", "proto", "static")
    run("ip", "-n", ns("a1"), "addr", "add", FOREIGN_TUNL_ADDR, "dev", TUNL)
    # what Kilo itself leaves on a2's tunl0: the same address we want, without our label
    run("ip", "-n", ns("a2"), "addr", "add", host(NODES["a2"][2], 1) + "/32", "dev", TUNL)


def teardown():
    for name in NODES:
        for n in (ns(name), pod_ns(name)):
            run("ip", "netns", "del", n, check=False)


# ------------------------------------------------------------------ the code under test
class Node(object):
    def __init__(self, name, tmp):
        from ansible_collections.kilo.mesh.plugins.module_utils.host import keys

        self.name = name
        self.key_path = os.path.join(tmp, "keys", name, "key")
        self.public_key = keys.ensure_key(self.key_path)["public_key"]
        self.plan = None

    def converge(self, plan=None, check_mode=False, state="present"):
        # the nodes are network namespaces sharing one /etc and /var/lib: a CNI conflist each, and
        # no boot restore (one stored plan per host; tests/vm/reboot_run.py tests it)
        settings = {
            "backend": "kernel",
            "firewall": "nftables",
            "key_path": self.key_path,
            "cni_path": os.path.join(os.path.dirname(self.key_path), "10-kilo.conflist"),
            "boot_restore": False,
            "state": state,
        }
        req = {
            "plan": plan if plan is not None else self.plan,
            "settings": settings,
            "check_mode": check_mode,
        }
        r = subprocess.run(
            ["ip", "netns", "exec", ns(self.name), sys.executable, "-c", CHILD, COLLECTIONS],
            input=json.dumps(req),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
        )
        secret = open(self.key_path).read().strip()
        if secret in r.stdout or secret in r.stderr:
            raise RuntimeError("private key of %s leaked in converge output" % self.name)
        if r.returncode != 0:
            raise RuntimeError("converge on %s crashed: %s" % (self.name, r.stderr[-1500:]))
        return json.loads(r.stdout)


def inventory(nodes):
    out = []
    for name, (loc, lan, pod, pub) in sorted(NODES.items()):
        out.append(
            {
                "name": name,
                "location": loc,
                "internal_ip": lan,
                "pod_cidr": pod,
                "endpoint": "%s:%d" % (pub or lan.split("/")[0], PORT),
                "public_key": nodes[name].public_key,
                "leader": bool(pub),
            }
        )
    return out


# ------------------------------------------------------------------ reading live state
# vmcheck's readers, in a node's namespace
def at(name):
    return ("ip", "netns", "exec", ns(name))


def live_routes(name):
    """(dst, table) -> route dict, for routes of protocol 107 only."""
    return vmcheck.live_routes(at(name))


def live_rules(name):
    return vmcheck.live_rules(at(name))


def link(name, dev):
    return vmcheck.link(dev, at(name))


def tunl_packets(name, dev=TUNL):
    info = link(name, dev)
    s = info.get("stats64") or info.get("stats") or {}
    return s["tx"]["packets"], s["rx"]["packets"]


def tunl_addrs(name, dev=TUNL):
    """[(address/prefix, label)] on tunl0 (or dev)."""
    return vmcheck.tunnel_addrs(dev, at(name))


def wg_rx(name):
    r = nsx(name, "wg", "show", "kilo0", "transfer", check=False)
    return sum(int(line.split()[1]) for line in r.stdout.splitlines() if line.strip())


def pod_ping(src, dst_ip, count=3):
    r = run(
        "ip",
        "netns",
        "exec",
        pod_ns(src),
        "ping",
        "-c",
        str(count),
        "-i",
        "0.2",
        "-W",
        "2",
        dst_ip,
        check=False,
    )
    return r.returncode == 0, r.stdout[-300:]


def nft_table(name):
    return vmcheck.nft_table(at(name))


# ------------------------------------------------------------------ checks
def route_matches(live, want):
    return vmcheck.route_matches(live, want, "lan")  # the plan's "private" is the node's link "lan"


def check_node_state(c, tag, name, plan):
    routes = live_routes(name)
    bad = []
    for r in plan["routes"]:
        key = (
            str(ipaddress.ip_network(r["dst"])),
            "main" if r["table"] == 254 else str(r["table"]),
        )
        if not route_matches(routes.get(key), r):
            bad.append((key, r, routes.get(key)))
    tunl_routes = [r for r in plan["routes"] if r["device"] == TUNL]
    c.check(
        "%s %s: all %d plan routes live (%d via tunl0, %d in table 1107)"
        % (
            tag,
            name,
            len(plan["routes"]),
            len(tunl_routes),
            len([r for r in plan["routes"] if r["table"] == 1107]),
        ),
        not bad,
        bad[:3],
    )
    c.check(
        "%s %s: no route of ours beyond the plan" % (tag, name),
        len(routes)
        == len(set((str(ipaddress.ip_network(r["dst"])), r["table"]) for r in plan["routes"])),
        sorted(routes),
    )
    want_rules = set(((r.get("src"), r.get("dst"), r.get("iif")) for r in plan["rules"]))
    have_rules = live_rules(name)
    c.check(
        "%s %s: table 1107 rules as planned (%d)" % (tag, name, len(want_rules)),
        have_rules == want_rules,
        (sorted(have_rules, key=str), sorted(want_rules, key=str)),
    )
    t = link(name, TUNL)
    c.check(
        "%s %s: tunl0 exists and is up" % (tag, name),
        t is not None and "UP" in t.get("flags", []),
        t,
    )
    addrs = tunl_addrs(name)
    want = plan.get("tunnel_address")
    # (a2 starts with that address unlabelled, as Kilo leaves it: taken over, not duplicated)
    c.check(
        "%s %s: tunl0 holds tunnel_address %s, labelled ours" % (tag, name, want),
        want is not None
        and (want, LABEL) in addrs
        and len([a for a in addrs if a[0] == want]) == 1
        and len([a for a in addrs if a[1] == LABEL]) == 1,
        addrs,
    )
    kilo0 = link(name, "kilo0")
    c.check(
        "%s %s: kilo0 %s"
        % (tag, name, "up with %s" % plan["address"] if plan["leader"] else "down"),
        kilo0 is not None and (("UP" in kilo0["flags"]) == plan["leader"]),
        kilo0 and kilo0["flags"],
    )
    text = nft_table(name) or ""
    privs = sorted(plan["firewall"]["ipip_accept_sources"])
    m = re.search(r"set ipip_src_v4 \{[^}]*elements = \{([^}]*)\}", text)
    elems = (
        sorted(e.strip() + ("/32" if "/" not in e else "") for e in m.group(1).split(","))
        if m
        else []
    )
    c.check(
        "%s %s: nft ipip accept set = location internal IPs %s" % (tag, name, privs),
        elems == privs and len(privs) == 2,
        (elems, text[:600]),
    )
    c.check(
        "%s %s: nft input accepts IPIP from the set, then drops other IPIP" % (tag, name),
        re.search(
            r"hook input.*meta l4proto (ipencap|ipip|4) ip saddr @ipip_src_v4 accept\s+"
            r"meta l4proto (ipencap|ipip|4) drop",
            text,
            re.S,
        )
        is not None,
        text,
    )


def traffic(c, tag, encap):
    """encap: location -> whether its members talk through tunl0."""
    # inside location a: pod a1 -> pod a2
    for src, dst in (("a1", "a2"), ("b1", "b2")):
        loc = NODES[src][0]
        t0, r0 = tunl_packets(src)[0], tunl_packets(dst)[1]
        ok, out = pod_ping(src, pod_ip(dst))
        t1, r1 = tunl_packets(src)[0], tunl_packets(dst)[1]
        c.check("%s: pod %s -> pod %s (location %s) answers" % (tag, src, dst, loc), ok, out)
        if encap[loc]:
            c.check(
                "%s: ...through tunl0 (%s tx +%d, %s rx +%d)" % (tag, src, t1 - t0, dst, r1 - r0),
                t1 - t0 >= 3 and r1 - r0 >= 3,
            )
        else:
            c.check(
                "%s: ...not through tunl0 (crosssubnet, one subnet: %s tx +%d)"
                % (tag, src, t1 - t0),
                t1 - t0 == 0,
            )
        # pod -> the other node's internal IP: table 1107 when encapsulating
        t0 = tunl_packets(src)[0]
        ok, out = pod_ping(src, internal_ip(dst))
        t1 = tunl_packets(src)[0]
        c.check(
            "%s: pod %s -> %s's internal IP %s answers" % (tag, src, dst, internal_ip(dst)), ok, out
        )
        if encap[loc]:
            c.check(
                "%s: ...through tunl0 by the table 1107 rule (%s tx +%d)" % (tag, src, t1 - t0),
                t1 - t0 >= 3,
            )
    # across locations, non-leader pod to non-leader pod: a2 -(a)-> a1 =WG=> b1 -(b)-> b2
    before = dict((n, tunl_packets(n)) for n in NODES)
    wg0 = wg_rx("b1")
    ok, out = pod_ping("a2", pod_ip("b2"))
    after = dict((n, tunl_packets(n)) for n in NODES)
    c.check("%s: pod a2 -> pod b2 across locations answers" % tag, ok, out)
    c.check(
        "%s: ...through both leaders' WireGuard (b1 kilo0 +%d bytes)" % (tag, wg_rx("b1") - wg0),
        wg_rx("b1") - wg0 > 0,
    )
    if encap["a"]:
        c.check(
            "%s: ...a2 -> a1 leg through tunl0" % tag,
            after["a2"][0] - before["a2"][0] >= 3 and after["a1"][1] - before["a1"][1] >= 3,
            (before["a2"], after["a2"], before["a1"], after["a1"]),
        )
    if encap["b"]:
        c.check(
            "%s: ...b1 -> b2 leg through tunl0" % tag,
            after["b1"][0] - before["b1"][0] >= 3 and after["b2"][1] - before["b2"][1] >= 3,
            (before["b1"], after["b1"], before["b2"], after["b2"]),
        )


def foreign_ipip_dropped(c, tag):
    """IPIP from outside location a (b1's public address) to a1 dies in a1's input hook."""
    probe = "%sprobe" % P
    nsx(
        "b1",
        "ip",
        "tunnel",
        "add",
        probe,
        "mode",
        "ipip",
        "local",
        "203.0.113.2",
        "remote",
        "203.0.113.1",
    )
    try:
        nsx("b1", "ip", "link", "set", probe, "up")
        nsx("b1", "ip", "route", "add", pod_ip("a1") + "/32", "dev", probe)
        rx0 = tunl_packets("a1")[1]
        tx0 = link("b1", probe)["stats64"]["tx"]["packets"]
        r = nsx("b1", "ping", "-c", "2", "-i", "0.2", "-W", "1", pod_ip("a1"), check=False)
        sent = link("b1", probe)["stats64"]["tx"]["packets"] - tx0
        got = tunl_packets("a1")[1] - rx0
        c.check(
            "%s: foreign IPIP to a1 dropped (%d sent, a1 tunl0 rx +%d)" % (tag, sent, got),
            sent >= 2 and got == 0 and r.returncode != 0,
        )
    finally:
        nsx("b1", "ip", "link", "del", probe, check=False)


def check_absent(c, tag, node):
    name = node.name
    out = node.converge(state="absent")
    c.check(
        "%s %s: state absent changes" % (tag, name),
        out.get("changed") is True and "error" not in out,
        out,
    )
    c.check(
        "%s %s: no route of ours left" % (tag, name), live_routes(name) == {}, live_routes(name)
    )
    c.check(
        "%s %s: no table 1107 rule left" % (tag, name), live_rules(name) == set(), live_rules(name)
    )
    c.check("%s %s: nft table gone" % (tag, name), nft_table(name) is None)
    c.check(
        "%s %s: our tunl0 address gone" % (tag, name),
        not [a for a in tunl_addrs(name) if a[1] == LABEL],
        tunl_addrs(name),
    )
    c.check("%s %s: kilo0 gone" % (tag, name), link(name, "kilo0") is None)
    snap = host_snapshot(name)
    again = node.converge(state="absent")
    c.check(
        "%s %s: state absent again leaves the host as it was" % (tag, name),
        "error" not in again and host_snapshot(name) == snap,
        again.get("error"),
    )
    c.check(
        "%s %s: state absent again reports no change" % (tag, name),
        again.get("changed") is False,
        again.get("changes"),
    )


def host_snapshot(name):
    return [
        nsx(name, *cmd).stdout
        for cmd in (
            ("ip", "-d", "addr"),
            ("ip", "route", "show", "table", "all"),
            ("ip", "rule"),
            ("nft", "list", "ruleset"),
        )
    ]


def one_pass(c, nodes, encapsulate):
    from ansible_collections.kilo.mesh.plugins.module_utils.plan import flat_routes
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans

    tag = "[%s]" % encapsulate
    result = build_plans(inventory(nodes), [], {"encapsulate": encapsulate})
    # one route per destination, as the host sees them after the module's plan check
    plans = dict(
        (name, dict(plan, routes=flat_routes(plan["routes"])))
        for name, plan in result["plans"].items()
    )
    leaders = dict((s["key"], s["leader"]) for s in result["segments"])
    c.check(
        "%s engine: leaders a1, b1" % tag,
        leaders == {"location:a": "a1", "location:b": "b1"},
        leaders,
    )
    for name, n in nodes.items():
        n.plan = plans[name]
    encap = {"a": encapsulate == "always", "b": True}
    for name in ("a1", "b2"):
        on_tunl = [r for r in plans[name]["routes"] if r["device"] == TUNL]
        c.check(
            "%s engine: %s routes on tunl0: %d" % (tag, name, len(on_tunl)),
            bool(on_tunl) == encap[NODES[name][0]],
            on_tunl,
        )
    c.check(
        "%s engine: tunnel_address = pod .1/32 on every node" % tag,
        all(plans[n]["tunnel_address"] == host(NODES[n][2], 1) + "/32" for n in NODES),
        dict((n, plans[n]["tunnel_address"]) for n in NODES),
    )

    t0 = time.time()
    for name in sorted(nodes):
        out = nodes[name].converge()
        c.check(
            "%s %s: converge applies" % (tag, name),
            out.get("changed") is True and "error" not in out,
            out.get("error") or out.get("changes"),
        )
    print("%s first converge of 4 nodes: %.1f s" % (tag, time.time() - t0))
    # let the leaders' first handshake happen before timing anything on traffic
    nsx("a1", "ping", "-c", "1", "-W", "3", internal_ip("b1"), check=False)
    for name in sorted(nodes):
        check_node_state(c, tag, name, plans[name])
    traffic(c, tag, encap)
    if encap["a"]:
        foreign_ipip_dropped(c, tag)

    for name in sorted(nodes):
        out = nodes[name].converge()
        c.check(
            "%s %s: second converge: no change" % (tag, name),
            out.get("changed") is False,
            out.get("error") or out.get("changes"),
        )

    # drift: one tunl0 route goes missing; check mode reports it and leaves it missing
    drift_node = "a1" if encap["a"] else "b1"
    victim = [r for r in plans[drift_node]["routes"] if r["device"] == TUNL and r["table"] == 254][
        0
    ]
    nsx(drift_node, "ip", "route", "del", victim["dst"], "table", "main")
    out = nodes[drift_node].converge(check_mode=True)
    ns_changes = out.get("changes", {}).get("netstate", [])
    c.check(
        "%s %s: check mode reports the deleted tunl0 route %s" % (tag, drift_node, victim["dst"]),
        out.get("changed") is True
        and len(ns_changes) == 1
        and ns_changes[0].startswith("add route %s via" % victim["dst"])
        and list(out["changes"]) == ["netstate"],
        out.get("error") or out.get("changes"),
    )
    c.check(
        "%s %s: check mode changed nothing" % (tag, drift_node),
        (str(ipaddress.ip_network(victim["dst"])), "main") not in live_routes(drift_node),
    )
    out = nodes[drift_node].converge()
    c.check(
        "%s %s: converge repairs the drift" % (tag, drift_node),
        out.get("changes", {}).get("netstate") == ns_changes
        and route_matches(
            live_routes(drift_node).get((str(ipaddress.ip_network(victim["dst"])), "main")), victim
        ),
        out.get("error") or out.get("changes"),
    )
    ok, text = pod_ping(
        "a2" if drift_node == "a1" else "b1", pod_ip("a1" if drift_node == "a1" else "b2")
    )
    c.check("%s: traffic over the repaired route" % tag, ok, text)

    for name in sorted(nodes):
        check_absent(c, tag, nodes[name])
    # foreign state on a1 survived
    fr = nsx("a1", "ip", "route", "show", FOREIGN_ROUTE).stdout
    c.check("%s a1: foreign route survived" % tag, FOREIGN_ROUTE.split("/")[0] in fr, fr)
    c.check(
        "%s a1: foreign tunl0 address survived" % tag,
        any(a[0] == FOREIGN_TUNL_ADDR for a in tunl_addrs("a1")),
        tunl_addrs("a1"),
    )


# dual-stack pass: each node's IPv6 internal IP and pod range. In location a the IPv6 LAN is a link
# of its own ("lan6"), so the IPv6 routes of a2 must leave by it while the IPv4 ones use tunl0
# over "lan": the private interface is per family.
V6 = {
    "a1": ("fd20:1::1/64", "lan6", "fd21:1::/64"),
    "a2": ("fd20:1::2/64", "lan6", "fd21:2::/64"),
    "b1": ("fd30:1::1/64", "lan", "fd31:1::/64"),
    "b2": ("fd30:1::2/64", "lan", "fd31:2::/64"),
}


def add_ipv6():
    run(
        "ip",
        "link",
        "add",
        "lan6",
        "netns",
        ns("a1"),
        "type",
        "veth",
        "peer",
        "name",
        "lan6",
        "netns",
        ns("a2"),
    )
    for name, (lan6, dev, pod6) in V6.items():
        nsx(name, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/all/forwarding")
        run("ip", "-n", ns(name), "link", "set", dev, "up")
        run("ip", "-n", ns(name), "addr", "add", lan6, "dev", dev, "nodad")
        run("ip", "-n", ns(name), "addr", "add", "%s/64" % host(pod6, 1), "dev", "pod", "nodad")
        run(
            "ip", "-n", pod_ns(name), "addr", "add", "%s/64" % host(pod6, 2), "dev", "eth0", "nodad"
        )
        run("ip", "-n", pod_ns(name), "-6", "route", "add", "default", "via", host(pod6, 1))


def converge_each(c, tag, nodes, plans, changed):
    """Every node to its plan: a first converge applies (``changed``), a second changes nothing."""
    for name in sorted(nodes):
        out = nodes[name].converge(plans[name])
        c.check(
            "%s %s: %s"
            % (tag, name, "converge applies" if changed else "second converge: no change"),
            out.get("changed") is changed and "error" not in out,
            out.get("error") or out.get("changes"),
        )


def live_routes6(name):
    out = {}
    for r in json.loads(
        nsx(name, "ip", "-6", "-j", "route", "show", "table", "all", "proto", "107").stdout or "[]"
    ):
        out[str(ipaddress.ip_network(r["dst"]))] = r
    return out


def dual_pass(c, nodes):
    """A dual-stack plan (two subnets, internal IPs and pod ranges of both families) with the
    kernel WireGuard and IPIP for the IPv4 half: both families' addresses on the WireGuard link,
    IPv4 inside a location through tunl0, IPv6 over the private link of its own family, pods
    reaching each other in both families, a second converge unchanged, state absent clean."""
    from ansible_collections.kilo.mesh.plugins.module_utils.plan import flat_routes
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans

    tag = "[dual-stack]"
    add_ipv6()
    inv = inventory(nodes)
    for item in inv:
        lan6, dev, pod6 = V6[item["name"]]
        item["internal_ip"] = [item["internal_ip"], lan6]
        item["pod_cidr"] = [item["pod_cidr"], pod6]
    result = build_plans(inv, [], {"encapsulate": "always", "subnet": ["10.4.0.0/16", "fd04::/64"]})
    plans = dict(
        (name, dict(plan, routes=flat_routes(plan["routes"])))
        for name, plan in result["plans"].items()
    )
    converge_each(c, tag, nodes, plans, True)
    for name in ("a1", "b1"):
        addrs = nsx(name, "ip", "addr", "show", "dev", "kilo0").stdout
        c.check(
            "%s %s: kilo0 holds an address of each family" % (tag, name),
            "inet 10.4." in addrs and "inet6 fd04::" in addrs,
            addrs,
        )
    r6 = live_routes6("a2")
    c.check(
        "%s a2: IPv6 routes leave by lan6, the interface of its IPv6 internal IP" % tag,
        r6 and all(r.get("dev") == "lan6" for r in r6.values()),
        r6,
    )
    r4 = dict(
        (key, r) for key, r in live_routes("a2").items() if ":" not in key[0]
    )  # it reads both families
    c.check(
        "%s a2: IPv4 routes through tunl0 (IPIP for the IPv4 half only)" % tag,
        r4 and all(r.get("dev") == TUNL for r in r4.values()),
        r4,
    )
    nsx("a1", "ping", "-c", "1", "-W", "3", internal_ip("b1"), check=False)
    t0 = tunl_packets("a2")[0]
    ok, text = pod_ping("a2", pod_ip("a1"))
    sent = tunl_packets("a2")[0] - t0
    c.check(
        "%s: IPv4 pod a2 -> pod a1 through tunl0 (tx +%d)" % (tag, sent), ok and sent >= 3, text
    )
    for src, dst in (("a2", "a1"), ("a2", "b2"), ("b2", "a2"), ("a1", "b1")):
        ok, text = pod_ping(src, host(V6[dst][2], 2))
        c.check("%s: IPv6 pod %s -> pod %s answers" % (tag, src, dst), ok, text)
        ok, text = pod_ping(src, pod_ip(dst))
        c.check("%s: IPv4 pod %s -> pod %s answers" % (tag, src, dst), ok, text)
    converge_each(c, tag, nodes, plans, False)
    for name in sorted(nodes):
        out = nodes[name].converge(plans[name], state="absent")
        c.check(
            "%s %s: state absent leaves no route of ours in either family" % (tag, name),
            "error" not in out and live_routes(name) == {} and live_routes6(name) == {},
            out.get("error") or live_routes6(name),
        )


def cilium_pass(c, nodes):
    """compatibility cilium where Cilium renamed tunl0 to cilium_tunl: Kilo's cilium encapsulator
    reuses that device, so the converge must too (routes and tunnel address on it, no tunl0)."""
    from ansible_collections.kilo.mesh.plugins.module_utils.plan import flat_routes
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans

    tag = "[cilium]"
    for name in NODES:
        nsx(name, "ip", "link", "set", TUNL, "down")
        nsx(name, "ip", "link", "set", TUNL, "name", CILIUM_TUNL)
    inv = inventory(nodes)
    for item in inv:  # cilium_host's address; here the LAN one, so the outer packets have a way
        item["cni_compatibility_ip"] = item["internal_ip"]
    result = build_plans(inv, [], {"encapsulate": "always", "compatibility": "cilium"})
    plans = dict(
        (name, dict(plan, routes=flat_routes(plan["routes"])))
        for name, plan in result["plans"].items()
    )
    c.check(
        "%s engine: a2 routes through tunl0 and says compatibility cilium" % tag,
        any(r["device"] == TUNL for r in plans["a2"]["routes"])
        and plans["a2"]["compatibility"] == "cilium",
    )
    converge_each(c, tag, nodes, plans, True)
    for name in sorted(nodes):
        routes = live_routes(name)
        want = [r for r in plans[name]["routes"] if r["device"] == TUNL]
        bad = [
            r["dst"]
            for r in want
            if (
                routes.get(
                    (
                        str(ipaddress.ip_network(r["dst"])),
                        "main" if r["table"] == 254 else str(r["table"]),
                    )
                )
                or {}
            ).get("dev")
            != CILIUM_TUNL
        ]
        c.check(
            "%s %s: the %d tunl0 routes of the plan leave by cilium_tunl" % (tag, name, len(want)),
            want and not bad,
            bad,
        )
        c.check("%s %s: no tunl0 made beside it" % (tag, name), link(name, TUNL) is None)
        c.check(
            "%s %s: cilium_tunl up, holding tunnel_address %s labelled ours"
            % (tag, name, plans[name]["tunnel_address"]),
            "UP" in (link(name, CILIUM_TUNL) or {}).get("flags", [])
            and (plans[name]["tunnel_address"], LABEL) in tunl_addrs(name, CILIUM_TUNL),
            tunl_addrs(name, CILIUM_TUNL),
        )
    t0 = tunl_packets("a2", CILIUM_TUNL)[0]
    ok, out = pod_ping("a2", pod_ip("a1"))
    sent = tunl_packets("a2", CILIUM_TUNL)[0] - t0
    c.check(
        "%s: pod a2 -> pod a1 answers, through cilium_tunl (tx +%d)" % (tag, sent),
        ok and sent >= 3,
        out,
    )
    ok, out = pod_ping("a2", pod_ip("b2"))
    c.check("%s: pod a2 -> pod b2 across locations answers" % tag, ok, out)
    converge_each(c, tag, nodes, plans, False)
    for name in sorted(nodes):
        out = nodes[name].converge(plans[name], state="absent")
        c.check(
            "%s %s: state absent removes our routes and our cilium_tunl address" % (tag, name),
            "error" not in out
            and live_routes(name) == {}
            and not [a for a in tunl_addrs(name, CILIUM_TUNL) if a[1] == LABEL],
            out.get("error") or tunl_addrs(name, CILIUM_TUNL),
        )
    c.check(
        "%s a1: the foreign address (renamed along with the device) survived" % tag,
        any(a[0] == FOREIGN_TUNL_ADDR for a in tunl_addrs("a1", CILIUM_TUNL)),
        tunl_addrs("a1", CILIUM_TUNL),
    )


def main():
    c = Checker()
    if os.geteuid() != 0 or os.environ.get("KV_VM") != "1":
        c.check("running as root inside the test VM (KV_VM=1)", False)
        print("%d passed, %d failed" % (c.passed, c.failed))
        return 1
    tmp = tempfile.mkdtemp(prefix="%s-" % P)
    global COLLECTIONS
    COLLECTIONS = collections_tree(tmp)
    sys.path.insert(0, COLLECTIONS)
    nodes = {}
    start = time.time()
    try:
        try:
            build_underlay()
            nodes = dict((name, Node(name, tmp)) for name in NODES)
        except Exception as e:
            c.check(
                "underlay and keys set up",
                False,
                "%s: %s %s" % (type(e).__name__, e, getattr(e, "stderr", "")),
            )
            raise SystemExit(finish(c, start))
        for encapsulate in ("always", "crosssubnet"):
            try:
                one_pass(c, nodes, encapsulate)
            except Exception as e:  # a crash is a failure, reported, not a traceback
                c.check(
                    "[%s] pass ran to the end" % encapsulate,
                    False,
                    "%s: %s" % (type(e).__name__, e),
                )
                for n in nodes.values():
                    try:
                        n.converge(state="absent")
                    except Exception:
                        pass
        try:
            dual_pass(c, nodes)
        except Exception as e:
            c.check("[dual-stack] pass ran to the end", False, "%s: %s" % (type(e).__name__, e))
        try:  # last: it renames tunl0 for good
            cilium_pass(c, nodes)
        except Exception as e:
            c.check("[cilium] pass ran to the end", False, "%s: %s" % (type(e).__name__, e))
    finally:
        teardown()
        shutil.rmtree(tmp, ignore_errors=True)
    return finish(c, start)


def finish(c, start):
    print("runtime in the VM: %.0f s" % (time.time() - start))
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 else 1


COLLECTIONS = None

if __name__ == "__main__":
    sys.exit(main())
