#!/usr/bin/env python3
"""Smoke check of the kernel-test VM harness; run it with `tests/vm/run.sh tests/vm/smoke_check.py`.

Proves what the harness promises: the Debian kernel has WireGuard and IPIP, the kernel data
path carries traffic between two WireGuard peers, nftables works, and the project's host code
imports at its collection path. Everything happens in network namespaces prefixed "kvs"
that this script creates and removes. Prints "N passed, N failed" last; exits 1 on failure.
"""

import importlib
import os
import pkgutil
import subprocess
import sys
import traceback

NS_A, NS_B = "kvsa", "kvsb"
CHECKS = []


def sh(*argv, ns=None, stdin=None):
    if ns:
        argv = ("ip", "netns", "exec", ns) + argv
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            "%s: exit %d: %s"
            % (" ".join(argv), proc.returncode, (proc.stderr or proc.stdout).strip())
        )
    return proc.stdout


def check(name):
    def register(fn):
        CHECKS.append((name, fn))
        return fn

    return register


def run_checks():
    passed = failed = 0
    for name, fn in CHECKS:
        try:
            detail = fn()
        except Exception as exc:  # a failed check must not stop the others
            failed += 1
            print("FAIL %s: %s" % (name, exc), flush=True)
            traceback.print_exc(limit=3, file=sys.stdout)
        else:
            passed += 1
            print("PASS %s%s" % (name, (": %s" % detail) if detail else ""), flush=True)
    return passed, failed


def pyroute2_version():
    """Debian's 0.7.2 reports __version__ 'unknown'; its package metadata knows."""
    import pyroute2

    version = getattr(pyroute2, "__version__", "unknown")
    if version == "unknown":
        from importlib import metadata

        version = metadata.version("pyroute2")
    return version


def setup():
    for ns in (NS_A, NS_B):
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "set", "lo", "up", ns=ns)
    # "Public" underlay between the two namespaces.
    sh("ip", "link", "add", "kvsv0", "netns", NS_A, "type", "veth", "peer", "kvsv1", "netns", NS_B)
    sh("ip", "addr", "add", "203.0.113.1/24", "dev", "kvsv0", ns=NS_A)
    sh("ip", "addr", "add", "203.0.113.2/24", "dev", "kvsv1", ns=NS_B)
    sh("ip", "link", "set", "kvsv0", "up", ns=NS_A)
    sh("ip", "link", "set", "kvsv1", "up", ns=NS_B)


def teardown():
    for ns in (NS_A, NS_B):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@check("kernel is not this machine's (Debian kernel in the VM)")
def _():
    release = os.uname().release
    if "amd64" not in release:
        raise RuntimeError("kernel %s is not a Debian amd64 kernel" % release)
    return release


@check("wireguard link type: ip link add kvwg0 type wireguard")
def _():
    sh("ip", "link", "add", "kvwg0", "type", "wireguard", ns=NS_A)
    out = sh("ip", "-d", "link", "show", "kvwg0", ns=NS_A)
    if "wireguard" not in out:
        raise RuntimeError("kvwg0 is not a wireguard link: %s" % out)


@check("wireguard data path: ping across kvwg0 <-> kvwg1")
def _():
    keys = {}
    for ns in (NS_A, NS_B):
        private = sh("wg", "genkey").strip()
        keys[ns] = (private, sh("wg", "pubkey", stdin=private + "\n").strip())
    sh("ip", "link", "add", "kvwg1", "type", "wireguard", ns=NS_B)
    plan = [
        (NS_A, "kvwg0", "10.99.0.1/24", 51820, NS_B, "203.0.113.2:51821", "10.99.0.2/32"),
        (NS_B, "kvwg1", "10.99.0.2/24", 51821, NS_A, "203.0.113.1:51820", "10.99.0.1/32"),
    ]
    for ns, dev, addr, port, peer, endpoint, allowed in plan:
        keyfile = "/run/kvs-%s.key" % ns
        fd = os.open(keyfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(keys[ns][0] + "\n")
        sh(
            "wg",
            "set",
            dev,
            "listen-port",
            str(port),
            "private-key",
            keyfile,
            "peer",
            keys[peer][1],
            "endpoint",
            endpoint,
            "allowed-ips",
            allowed,
            ns=ns,
        )
        os.unlink(keyfile)
        sh("ip", "addr", "add", addr, "dev", dev, ns=ns)
        sh("ip", "link", "set", dev, "up", ns=ns)
    sh("ping", "-c", "2", "-W", "5", "10.99.0.2", ns=NS_A)
    handshake = sh("wg", "show", "kvwg0", "latest-handshakes", ns=NS_A).split()
    if len(handshake) != 2 or handshake[1] == "0":
        raise RuntimeError("no WireGuard handshake recorded: %r" % handshake)


@check("ipip: modprobe ipip gives tunl0")
def _():
    sh("modprobe", "ipip")
    out = sh("ip", "tunnel", "show", ns=NS_A)
    if "tunl0" not in out:
        raise RuntimeError("no tunl0 in `ip tunnel show`: %r" % out)
    sh("ip", "link", "show", "tunl0", ns=NS_A)


@check("nftables: inet table with nat chain")
def _():
    sh(
        "nft",
        "-f",
        "-",
        ns=NS_A,
        stdin=(
            "table inet kvs_smoke {\n"
            ' chain post { type nat hook postrouting priority srcnat; oif "kvsv0" masquerade; }\n'
            "}\n"
        ),
    )
    out = sh("nft", "list", "table", "inet", "kvs_smoke", ns=NS_A)
    if "masquerade" not in out:
        raise RuntimeError("masquerade rule missing: %s" % out)


@check("iptables (nf_tables backend): nat chain with masquerade")
def _():
    sh("iptables", "-t", "nat", "-N", "KVS-NAT", ns=NS_A)
    sh("iptables", "-t", "nat", "-A", "KVS-NAT", "-o", "kvsv0", "-j", "MASQUERADE", ns=NS_A)
    out = sh("iptables", "-t", "nat", "-S", "KVS-NAT", ns=NS_A)
    if "MASQUERADE" not in out:
        raise RuntimeError("masquerade rule missing: %s" % out)


@check("pyroute2 sees the wireguard link")
def _():
    import pyroute2
    from pyroute2 import NetNS

    ns = NetNS(NS_A)
    try:
        idx = ns.link_lookup(ifname="kvwg0")
        if not idx:
            raise RuntimeError("link_lookup found no kvwg0")
        link = ns.get_links(idx[0])[0]
        info = link.get_attr("IFLA_LINKINFO")
        kind = info.get_attr("IFLA_INFO_KIND") if info else None
        if kind != "wireguard":
            raise RuntimeError("kvwg0 kind is %r" % kind)
    finally:
        ns.close()
    return "pyroute2 %s from %s" % (pyroute2_version(), os.path.dirname(pyroute2.__file__))


@check("project host code imports at ansible_collections.kilo.mesh.plugins.module_utils")
def _():
    package = importlib.import_module("ansible_collections.kilo.mesh.plugins.module_utils")
    names = sorted(
        m.name
        for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
        if not m.ispkg
    )
    if package.__name__ + ".host.wireguard" not in names:
        raise RuntimeError("module_utils has no host.wireguard module: %s" % names)
    for name in names:
        importlib.import_module(name)
    return ", ".join(n[len(package.__name__) + 1 :] for n in names)


if __name__ == "__main__":
    if os.environ.get("KV_VM") != "1":
        sys.exit("smoke_check.py runs inside the VM: tests/vm/run.sh tests/vm/smoke_check.py")
    try:
        setup()
    except Exception as exc:
        teardown()
        print("FAIL setup: %s" % exc)
        print("0 passed, 1 failed")
        sys.exit(1)
    try:
        passed, failed = run_checks()
    finally:
        teardown()
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
