"""Helpers shared by the VM check scripts (copied into the VM beside them by run.sh)."""

import ipaddress
import json
import subprocess
import sys


class Checker(object):
    """Counts checks and prints PASS/FAIL lines; the script ends with `N passed, N failed`."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("PASS %s" % name)
        else:
            self.failed += 1
            print("FAIL %s %s" % (name, str(detail)[:1500]))
        sys.stdout.flush()
        return ok


def run(*args, **kw):
    kw.setdefault("check", True)
    return subprocess.run(
        list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, **kw
    )


# --- what the host holds, read back (prefix: ("ip", "netns", "exec", NS) to read a namespace) ---

TUNNEL_LABEL = "tunl0:kilo"  # the label our tunnel address carries (netstate.tunnel)


def _out(prefix, *args):
    r = run(*(tuple(prefix) + args), check=False)
    return r.stdout if r.returncode == 0 else None


def live_routes(prefix=()):
    """(dst, table) -> route dict of the IPv4 routes of protocol 107 (ours), every table."""
    out = {}
    for r in json.loads(
        _out(prefix, "ip", "-j", "route", "show", "table", "all", "proto", "107") or "[]"
    ):
        dst = str(ipaddress.ip_network(r["dst"]))
        out[(dst, str(r.get("table", "main")))] = r
    return out


def live_rules(prefix=()):
    """{(src, dst, iif)} of the IPv4 rules that look up table 1107."""
    out = set()
    for r in json.loads(_out(prefix, "ip", "-j", "rule", "show") or "[]"):
        if r.get("table") != "1107":
            continue
        src = None if r.get("src", "all") == "all" else "%s/%s" % (r["src"], r.get("srclen", 32))
        dst = "%s/%s" % (r["dst"], r.get("dstlen", 32)) if r.get("dst") else None
        out.add((src, dst, r.get("iif")))
    return out


def link(dev, prefix=()):
    """`ip -s -d -j link show DEV` as a dict, None when there is no such link."""
    text = _out(prefix, "ip", "-s", "-d", "-j", "link", "show", "dev", dev)
    return json.loads(text)[0] if text else None


def tunnel_addrs(dev, prefix=()):
    """[(address/prefix, label)] of the IPv4 addresses on DEV."""
    text = _out(prefix, "ip", "-j", "addr", "show", "dev", dev)
    if not text:
        return []
    return [
        ("%s/%s" % (a["local"], a["prefixlen"]), a.get("label"))
        for a in json.loads(text)[0].get("addr_info", [])
        if a.get("family") == "inet"
    ]


def nft_table(prefix=()):
    """The text of our nftables table `inet kilo_mesh`, None when there is none."""
    return _out(prefix, "nft", "list", "table", "inet", "kilo_mesh")


def route_key(want):
    """The live_routes key of one plan route (after plan.flat_routes)."""
    return str(ipaddress.ip_network(want["dst"])), "main" if want["table"] == 254 else str(
        want["table"]
    )


def route_matches(live, want, private_dev):
    """Whether a live route (live_routes) is the plan route ``want``; the plan's device
    "private" is the host's interface ``private_dev``."""
    dev = {"private": private_dev}.get(want["device"], want["device"])
    return (
        live is not None
        and live.get("dev") == dev
        and (live.get("gateway") or None) == (want.get("gateway") or None)
        and (live.get("prefsrc") or None) == (want.get("source") or None)
        and ("onlink" in (live.get("flags") or []))
        == bool(want.get("onlink") and want.get("gateway"))
    )
