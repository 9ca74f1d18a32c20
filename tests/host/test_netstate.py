"""NetStateBackend against real netlink, inside network namespaces this test creates (prefix kn).

The backend runs in a subprocess under `ip netns exec`, with Debian's /usr/bin/python3
(pyroute2 0.7.2, what hosts run) and with the venv's python (pyroute2 0.9.x).
"""

import json
import os
import select
import subprocess
import sys
import uuid

import pytest

import backendtools
from backendtools import sh

PYTHONS = [p for p in ("/usr/bin/python3", sys.executable) if os.path.exists(p)]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")


def run_backend(ns, plan, ops, python=PYTHONS[0], settings=None):
    return backendtools.run_backend(
        ns,
        "netstate.backend",
        "NetStateBackend",
        plan,
        ops,
        settings or {"interface": "kilo0"},
        python,
    )


def ipj(ns, *args):
    out = sh("ip", "-n", ns, "-j", *args).stdout.strip()
    return json.loads(out) if out else []


def routes(ns, family="-4", table="all"):
    return sorted(
        "%s %s %s %s" % (r["dst"], r.get("gateway", "-"), r["dev"], r.get("table", "main"))
        for r in ipj(ns, family, "route", "show", "table", table, "proto", "107")
    )


def rules(ns, family="-4"):
    return [r for r in ipj(ns, family, "rule", "show") if str(r.get("table")) == "1107"]


def _read_some(proc, wait):
    ready, dummy, dummy = select.select([proc.stdout], [], [], wait)
    return os.read(proc.stdout.fileno(), 65536).decode() if ready else ""


@pytest.fixture
def netns(request):
    """A namespace with lo, a veth 'kilo0' (stands in for WireGuard) and a 'private' veth."""
    made = []

    def make(with_kilo0=True):
        ns = "kn%s" % uuid.uuid4().hex[:8]
        sh("ip", "netns", "add", ns)
        made.append(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "add", "knpriv", "type", "veth", "peer", "name", "knpeer")
        for dev in ("knpriv", "knpeer"):
            sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "addr", "add", "10.1.0.1/16", "dev", "knpriv")
        sh("ip", "-n", ns, "addr", "add", "fd01::1/64", "dev", "knpriv", "nodad")
        if with_kilo0:
            sh("ip", "-n", ns, "link", "add", "kilo0", "type", "veth", "peer", "name", "knwgpeer")
            for dev in ("kilo0", "knwgpeer"):
                sh("ip", "-n", ns, "link", "set", dev, "up")
        return ns

    yield make
    for ns in made:
        sh("ip", "netns", "del", ns, check=False)


def leader_plan(**over):
    plan = {
        "name": "a",
        "leader": True,
        "segment": "location:one",
        "listen_port": 51820,
        "interface": "kilo0",
        "address": "10.4.0.1/16",
        "internal_ip": "10.1.0.1/16",
        "routes": [
            {
                "dst": "10.2.1.0/24",
                "gateway": "10.4.0.2",
                "device": "kilo0",
                "source": "10.1.0.1",
                "table": 254,
                "onlink": True,
            },
            {
                "dst": "10.2.0.1/32",
                "gateway": "10.4.0.2",
                "device": "kilo0",
                "source": "10.1.0.1",
                "table": 254,
                "onlink": True,
            },
            {
                "dst": "10.9.0.0/24",
                "gateway": None,
                "device": "kilo0",
                "source": "10.1.0.1",
                "table": 254,
                "onlink": False,
            },
            {
                "dst": "10.1.2.0/24",
                "gateway": "10.1.0.2",
                "device": "private",
                "source": None,
                "table": 254,
                "onlink": True,
            },
            {
                "dst": "10.1.0.2/32",
                "gateway": "10.1.0.2",
                "device": "private",
                "source": "10.1.0.1",
                "table": 1107,
                "onlink": True,
            },
            {
                "dst": "fd02::/64",
                "gateway": "fd04::2",
                "device": "kilo0",
                "source": None,
                "table": 254,
                "onlink": True,
            },
        ],
        "rules": [
            {"src": "10.1.1.0/24", "dst": "10.1.0.2/32", "iif": None, "table": 1107},
            {"src": None, "dst": "10.1.0.2/32", "iif": "kilo0", "table": 1107},
            {"src": None, "dst": "fd01::2/128", "iif": "kilo0", "table": 1107},
        ],
    }
    plan.update(over)
    return plan


EXPECTED_V4 = sorted(
    [
        "10.2.1.0/24 10.4.0.2 kilo0 main",
        "10.2.0.1 10.4.0.2 kilo0 main",
        "10.9.0.0/24 - kilo0 main",
        "10.1.2.0/24 10.1.0.2 knpriv main",
        "10.1.0.2 10.1.0.2 knpriv 1107",
    ]
)


@pytest.mark.parametrize("python", PYTHONS)
def test_converge_check_idempotent_foreign_survives(netns, python):
    ns = netns()
    # foreign state: another protocol's route, a rule of another table, a boot route in 1107
    sh("ip", "-n", ns, "route", "add", "10.77.0.0/24", "dev", "knpriv", "proto", "static")
    sh(
        "ip",
        "-n",
        ns,
        "route",
        "add",
        "10.78.0.0/24",
        "dev",
        "knpriv",
        "proto",
        "boot",
        "table",
        "1107",
    )
    sh("ip", "-n", ns, "rule", "add", "from", "10.79.0.0/24", "lookup", "200", "pref", "500")
    sh("ip", "-n", ns, "-6", "route", "add", "fd77::/64", "dev", "knpriv", "proto", "static")

    # check mode: reports, changes nothing
    out = run_backend(ns, leader_plan(), ["check"], python)
    assert "error" not in out, out
    assert "add address 10.4.0.1/16 dev kilo0" in out["check"]
    assert any(
        c.startswith("add route 10.2.1.0/24 via 10.4.0.2 dev kilo0 onlink src 10.1.0.1")
        for c in out["check"]
    )
    assert (
        "10.2.1.0/24 via 10.4.0.2 dev kilo0 onlink src 10.1.0.1 table main"
        in out["after"]["routes"]
    )
    assert routes(ns) == [] and rules(ns) == []
    assert out["before"]["addresses"] == []

    out = run_backend(ns, leader_plan(), ["apply", "check", "render"], python)
    assert "error" not in out, out
    assert "add address 10.4.0.1/16 dev kilo0" in out["planned"] and out["check"] == []
    assert (
        "10.2.1.0/24 via 10.4.0.2 dev kilo0 onlink src 10.1.0.1 table main"
        in out["render"]["routes"]
    )
    assert routes(ns) == EXPECTED_V4
    assert routes(ns, "-6") == ["fd02::/64 fd04::2 kilo0 main"]
    got_rules = sorted((r.get("src", "all"), r.get("dst"), r.get("iif")) for r in rules(ns))
    assert got_rules == [("10.1.1.0", "10.1.0.2", None), ("all", "10.1.0.2", "kilo0")]
    assert [(r.get("dst"), r.get("iif")) for r in rules(ns, "-6")] == [("fd01::2", "kilo0")]
    addrs = [
        a["local"] + "/" + str(a["prefixlen"])
        for a in ipj(ns, "addr", "show", "dev", "kilo0")[0]["addr_info"]
        if a["scope"] == "global"
    ]
    assert addrs == ["10.4.0.1/16"]
    onlink = ipj(ns, "route", "show", "10.2.1.0/24", "proto", "107")
    assert "onlink" in onlink[0]["flags"] and onlink[0]["prefsrc"] == "10.1.0.1"

    # second run: nothing to do, nothing done
    out = run_backend(ns, leader_plan(), ["check", "apply"], python)
    assert out["check"] == [] and out["planned"] == []

    # foreign state untouched
    assert ipj(ns, "route", "show", "10.77.0.0/24")[0]["protocol"] == "static"
    assert (
        ipj(ns, "route", "show", "table", "1107", "10.78.0.0/24")[0].get("protocol", "boot")
        == "boot"
    )
    assert any(r.get("src") == "10.79.0.0" for r in ipj(ns, "rule", "show"))
    assert ipj(ns, "-6", "route", "show", "fd77::/64")

    # remove: ours gone, foreign stays
    out = run_backend(ns, leader_plan(), ["remove"], python)
    assert "error" not in out and out["removed"]
    assert routes(ns) == [] and routes(ns, "-6") == [] and rules(ns) == [] and rules(ns, "-6") == []
    assert not [
        a for a in ipj(ns, "addr", "show", "dev", "kilo0")[0]["addr_info"] if a["scope"] == "global"
    ]
    assert ipj(ns, "route", "show", "10.77.0.0/24") and ipj(ns, "route", "show", "table", "1107")
    assert any(r.get("src") == "10.79.0.0" for r in ipj(ns, "rule", "show"))


@pytest.mark.parametrize("python", PYTHONS)
def test_stale_removed_changed_replaced(netns, python):
    ns = netns()
    out = run_backend(ns, leader_plan(), ["apply"], python)
    assert "error" not in out, out
    # a leftover of ours that no plan mentions, in table 1107
    sh(
        "ip",
        "-n",
        ns,
        "route",
        "add",
        "10.66.0.0/24",
        "dev",
        "knpriv",
        "proto",
        "107",
        "table",
        "1107",
    )

    plan = leader_plan(address="10.4.0.3/16")
    plan["routes"] = [
        dict(r) for r in plan["routes"] if r["dst"] not in ("10.9.0.0/24", "fd02::/64")
    ]
    plan["routes"][0]["gateway"] = "10.4.0.9"  # 10.2.1.0/24 moves to another leader
    plan["rules"] = plan["rules"][:1]
    # watch netlink: a changed route must be replaced in place, and the address change must not
    # make the kernel flush the routes through kilo0 (that would be a traffic gap)
    mon = subprocess.Popen(["ip", "-n", ns, "monitor", "route"], stdout=subprocess.PIPE)
    try:
        # a start marker proves the monitor is subscribed before we change anything
        seen = ""
        for dummy in range(200):
            sh("ip", "-n", ns, "route", "add", "10.110.0.0/24", "dev", "knpriv")
            seen += _read_some(mon, 0.1)
            if "10.110.0.0/24" in seen:
                break
            sh("ip", "-n", ns, "route", "del", "10.110.0.0/24", "dev", "knpriv")  # emit again
        assert "10.110.0.0/24" in seen, "ip monitor never reported the start marker"
        out = run_backend(ns, plan, ["apply"], python)
        sh("ip", "-n", ns, "route", "add", "10.111.0.0/24", "dev", "knpriv")  # end marker
        seen = ""
        while "10.111.0.0/24" not in seen:
            chunk = _read_some(mon, 30)
            assert chunk, "ip monitor stopped before the end marker"
            seen += chunk
        events = [e.strip() for e in seen.splitlines()]
    finally:
        mon.terminate()  # our own monitor, by its handle
        mon.wait()
    assert "error" not in out, out
    deleted = [e for e in events if e.startswith("Deleted")]
    assert not [e for e in deleted if "10.2.1.0/24" in e or "10.2.0.1" in e], events
    assert any(e.startswith("10.2.1.0/24 via 10.4.0.9") for e in events), events
    planned = out["planned"]
    assert (
        "replace route 10.2.1.0/24 via 10.4.0.2 dev kilo0 onlink src 10.1.0.1 table main -> "
        "10.2.1.0/24 via 10.4.0.9 dev kilo0 onlink src 10.1.0.1 table main"
    ) in planned
    assert "remove route 10.66.0.0/24 dev knpriv table 1107" in planned
    assert "remove address 10.4.0.1/16 dev kilo0" in planned
    assert routes(ns) == sorted(
        [
            "10.2.1.0/24 10.4.0.9 kilo0 main",
            "10.2.0.1 10.4.0.2 kilo0 main",
            "10.1.2.0/24 10.1.0.2 knpriv main",
            "10.1.0.2 10.1.0.2 knpriv 1107",
        ]
    )
    assert routes(ns, "-6") == []
    assert len(rules(ns)) == 1 and rules(ns, "-6") == []
    out = run_backend(ns, plan, ["check"], python)
    assert out["check"] == []


def test_check_mode_without_interface(netns):
    ns = netns(with_kilo0=False)
    out = run_backend(ns, leader_plan(), ["check"])
    assert "error" not in out, out
    assert "interface kilo0 absent (addresses follow once it exists)" in out["check"]
    assert (
        "add route 10.2.1.0/24 via 10.4.0.2 dev kilo0 onlink src 10.1.0.1 table main"
        in out["check"]
    )
    assert routes(ns) == []
    out = run_backend(ns, leader_plan(), ["apply"])
    assert "interface kilo0 does not exist" in out["error"]
    assert routes(ns) == []


def test_non_leader_needs_no_interface(netns):
    ns = netns(with_kilo0=False)
    plan = leader_plan(
        address=None,
        leader=False,
        rules=[],
        routes=[
            {
                "dst": "10.4.0.1/32",
                "gateway": "10.1.0.2",
                "device": "private",
                "source": None,
                "table": 254,
                "onlink": True,
            }
        ],
    )
    out = run_backend(ns, plan, ["apply", "check"])
    assert "error" not in out, out
    assert routes(ns) == ["10.4.0.1 10.1.0.2 knpriv main"] and out["check"] == []


def test_tunl0_missing_is_a_clear_error(netns):
    probe = sh("ip", "link", "show", "tunl0", check=False).returncode == 0 or os.path.isdir(
        "/sys/module/ipip"
    )
    if probe:
        pytest.skip("this host has IPIP; the error path needs a host without it")
    ns = netns()
    plan = leader_plan()
    plan["routes"].append(
        {
            "dst": "10.1.0.3/32",
            "gateway": "10.1.0.3",
            "device": "tunl0",
            "source": "10.1.0.1",
            "table": 1107,
            "onlink": True,
        }
    )
    for ops in (["check"], ["apply"]):
        out = run_backend(ns, plan, ops, PYTHONS[0])
        assert out["error"] == (
            "host 'a': plan.routes[6].device: host lacks IPIP (tunl0) support: "
            "load the ipip module (modprobe ipip) or set encapsulate: never"
        )
    out = run_backend(ns, plan, ["apply_without_probe"], PYTHONS[-1])
    assert out["error"].startswith(
        "host lacks IPIP (tunl0) support: load the ipip module "
        "(modprobe ipip) or set encapsulate: never (creating tunl0 failed:"
    )
    assert not sh("ip", "-n", ns, "link", "show", "tunl0", check=False).stdout
    assert routes(ns) == [] and not [
        a for a in ipj(ns, "addr", "show", "dev", "kilo0")[0]["addr_info"] if a["scope"] == "global"
    ]  # failed before changing anything


def test_bad_input_and_unresolvable_private(netns):
    ns = netns()
    plan = leader_plan(internal_ip="10.50.0.1/16")
    out = run_backend(ns, plan, ["check"])
    assert out["error"] == (
        "host 'a': plan.routes[3].device: 'private' needs the interface holding "
        "internal_ip 10.50.0.1/16, but no interface of this host has that address"
    )
    # bad input stops at the module boundary (check_plan), before the backend reads the plan
    plan = leader_plan()
    plan["routes"][1]["gateway"] = "not-an-ip"
    out = run_backend(ns, plan, ["check"])
    assert out["error"] == "host 'a': plan.routes[1].gateway: 'not-an-ip' is not an IP address"
    # two different routes to one destination cannot both be carried out
    plan = leader_plan()
    plan["routes"].append(dict(plan["routes"][0], gateway="10.4.0.7"))
    out = run_backend(ns, plan, ["check"])
    assert out["error"] == (
        "host 'a': plan.routes[6]: a second, different route to 10.2.1.0/24 in table main "
        "(first: plan.routes[0])"
    )
    assert routes(ns) == []


def global_addresses(ns, dev="kilo0"):
    return [
        a["local"] + "/" + str(a["prefixlen"])
        for a in ipj(ns, "addr", "show", "dev", dev)[0]["addr_info"]
        if a["scope"] == "global"
    ]


@pytest.mark.parametrize("python", PYTHONS)
def test_foreign_route_at_plan_destination_fails_in_check_and_before_any_change(netns, python):
    """Bug 1: check mode reported nothing wrong and the real run failed half-way (after the
    addresses were set). Now both fail, naming the host, the plan field and the foreign route."""
    ns = netns()
    sh("ip", "-n", ns, "route", "add", "10.1.2.0/24", "dev", "knpriv", "proto", "static")
    for ops in (["check"], ["apply"]):
        out = run_backend(ns, leader_plan(), ops, python)
        assert out.get("error") == (
            "host 'a': plan.routes[3]: a foreign route (10.1.2.0/24 dev knpriv proto 4) already holds "
            "10.1.2.0/24 in table main; remove it or set route_conflict: replace"
        ), out
        assert "planned" not in out
        # nothing changed: no address, no route or rule of ours, the foreign route as it was
        assert global_addresses(ns) == [] and routes(ns) == [] and rules(ns) == []
        assert routes(ns, "-6") == [] and rules(ns, "-6") == []
        assert ipj(ns, "route", "show", "10.1.2.0/24")[0]["protocol"] == "static"

    # route_conflict: replace takes it over, and says so beforehand
    replace = {"interface": "kilo0", "route_conflict": "replace"}
    out = run_backend(ns, leader_plan(), ["check"], python, settings=replace)
    assert "error" not in out, out
    assert (
        "add route 10.1.2.0/24 via 10.1.0.2 dev knpriv onlink table main (taking over foreign route "
        "10.1.2.0/24 dev knpriv proto 4)"
    ) in out["check"], out["check"]
    out = run_backend(ns, leader_plan(), ["apply", "check"], python, settings=replace)
    assert "error" not in out, out
    assert out["check"] == []
    assert [r["protocol"] for r in ipj(ns, "route", "show", "10.1.2.0/24")] == ["107"]
    assert global_addresses(ns) == ["10.4.0.1/16"]


READ_DRIVER = r"""
import json, sys
sys.path.insert(0, %(collections)r)
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import backend as ns
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import routes as nsr
b = ns.NetStateBackend(host_settings({"interface": "kilo0"}))
dumps, light = [], []
real = nsr.dump
def counted(ipr, family, table=0, proto=0, rtype=0):
    msgs = real(ipr, family, table, proto, rtype)
    dumps.append([family, table, proto, len(msgs)])
    return msgs
nsr.dump = counted
from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink import links as nl
real_light = nl.dump_routes
def counted_light(family, keys, table=0, proto=0, rtype=0):
    msgs = real_light(family, keys, table=table, proto=proto, rtype=rtype)
    if keys is not None:  # a table's routes at the plan's keys only
        light.append([family, table, proto, rtype, len(msgs)])
    return msgs
nl.dump_routes = counted_light
plan = check_plan(json.load(sys.stdin), "kilo0")
ipr, strict = b._reader()
ipr.close()
cur = b.current(plan)
imported = "pyroute2" in sys.modules
# the same state read through pyroute2, strict and whole dumps: the standard library's reading agrees
from pyroute2 import IPRoute
nsr.dump = real
with IPRoute(strict_check=True) as ipr:
    strict_p2 = b._read(ipr, True, plan)
with IPRoute() as ipr:
    whole_p2 = b._read(ipr, False, plan)
print(json.dumps({"strict": strict, "dumps": dumps, "light": light, "routes": sorted(ns.route_str(r) for r in cur["routes"]),
                  "foreign": [nsr.foreign_str(r) for r in cur["foreign"]], "pyroute2_imported": imported,
                  "same_as_pyroute2": cur == strict_p2 == whole_p2, "rules": len(cur["rules"]),
                  "addresses": cur["addresses"]}))
"""


@pytest.mark.parametrize("python", PYTHONS)
def test_kernel_filters_route_reads(netns, python):
    """Strict checking (Linux 4.20+): the kernel returns only our routes, all of them; foreign
    ones only from the table of a plan route not ours yet, never on an idempotent re-run."""
    ns = netns()
    batch = "".join(
        "route add 10.%d.%d.0/24 dev knpriv proto bgp\n" % (100 + i // 256, i % 256)
        for i in range(2000)
    )
    sh("ip", "-n", ns, "-batch", "-", input=batch)
    sh(
        "ip",
        "-n",
        ns,
        "route",
        "add",
        "10.1.2.0/24",
        "dev",
        "knpriv",
        "proto",
        "static",
        "metric",
        "5",
    )

    def read():
        proc = sh(
            "ip",
            "netns",
            "exec",
            ns,
            python,
            "-c",
            READ_DRIVER % {"collections": backendtools.COLLECTIONS},
            input=json.dumps(leader_plan()),
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    first = read()
    if not first["strict"]:
        pytest.skip("no netlink strict checking here (kernel < 4.20)")
    # ours: two dumps of protocol 107 (pyroute2), empty; then the unicast routes of the tables of
    # the missing plan routes (netlink.routes): of the 2002 in main, only the one at a plan
    # destination comes back (1107 does not exist yet: empty)
    assert first["same_as_pyroute2"] and not first["pyroute2_imported"]
    assert first["dumps"] == [[2, 0, 107, 0], [10, 0, 107, 0]] and first["routes"] == []
    assert sorted(first["light"]) == [[2, 254, 0, 1, 1], [2, 1107, 0, 1, 0], [10, 254, 0, 1, 0]]
    # seen at a plan destination; another metric, so not in the way of ours
    assert first["foreign"] == ["10.1.2.0/24 dev knpriv proto 4"]
    out = run_backend(ns, leader_plan(), ["apply"], python)
    assert "error" not in out, out
    again = read()
    # read with the standard library alone (no pyroute2 import), the same as pyroute2 reads it
    assert again["same_as_pyroute2"] and not again["pyroute2_imported"], again
    assert again["rules"] > 0 and again["addresses"], again
    assert again["dumps"] == [[2, 0, 107, 5], [10, 0, 107, 1]]  # no foreign dump at all
    assert again["light"] == []
    assert (
        len(again["routes"]) == 6
        and "10.1.0.2/32 via 10.1.0.2 dev knpriv onlink src 10.1.0.1 table 1107" in again["routes"]
    )


def test_ssh_guard_refuses_a_route_that_takes_over_the_ssh_path(netns, monkeypatch):
    """The client of this run's SSH connection (SSH_CONNECTION, read by the backend) sits in a
    plan route's destination: the run fails before any change, naming the route; a more
    specific route to the client, ssh_guard: false, or the route already ours let it pass."""
    ns = netns()
    # the path the connection came in on: a main-table route less specific than the plan's
    sh("ip", "-n", ns, "route", "add", "10.8.0.0/14", "dev", "knpriv", "proto", "static")
    monkeypatch.setenv("SSH_CONNECTION", "10.9.0.7 40000 10.1.0.1 22")
    for ops in (["check"], ["apply"]):
        out = run_backend(ns, leader_plan(), ops)
        assert out.get("error") == (
            "host 'a': plan.routes[2]: route 10.9.0.0/24 dev kilo0 src 10.1.0.1 table main would carry this run's"
            " SSH connection (from 10.9.0.7) into the mesh; keep the management network out of allowed IPs and"
            " pod CIDRs, add a more specific route to it, or set ssh_guard: false"
        ), out
        assert routes(ns) == [] and global_addresses(ns) == []
    # a client outside every plan route: no check, no main-table read
    monkeypatch.setenv("SSH_CONNECTION", "198.18.0.1 40000 10.1.0.1 22")
    assert "error" not in run_backend(ns, leader_plan(), ["check"])
    # the management path is more specific than the plan's route: it stays where it is
    monkeypatch.setenv("SSH_CONNECTION", "10.9.0.7 40000 10.1.0.1 22")
    sh("ip", "-n", ns, "route", "add", "10.9.0.0/28", "dev", "knpriv", "proto", "static")
    assert "error" not in run_backend(ns, leader_plan(), ["check"])
    sh("ip", "-n", ns, "route", "del", "10.9.0.0/28", "dev", "knpriv")
    # switched off, the route goes in; the next run finds the path already ours and passes
    out = run_backend(
        ns, leader_plan(), ["apply"], settings={"interface": "kilo0", "ssh_guard": False}
    )
    assert "error" not in out, out
    out = run_backend(ns, leader_plan(), ["check"])
    assert "error" not in out and out["check"] == [], out


COMPARE_DRIVER = r"""
import json, socket, sys
sys.path.insert(0, %(collections)r)
from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink import links as nl
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import backend as ns
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import routes as nsr
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.base import read_links
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
watch = set(tuple(k) for k in json.load(sys.stdin))
b = ns.NetStateBackend(host_settings({"interface": "kilo0"}))
light = []
real_light = nl.dump_routes
def counted(family, keys, **kw):
    if keys is not None:
        light.append([family, kw["table"]])
    return real_light(family, keys, **kw)
nl.dump_routes = counted
def read(how):
    if how == "light":
        ipr, strict = b._reader()
        assert isinstance(ipr, nl.NetlinkReader) and strict
    else:
        strict = how == "pyroute2"
        ipr = b._ipr(strict_check=True) if strict else b._ipr()
    try:
        ours, foreign = nsr.read(ipr, strict, read_links(ipr), watch)
    finally:
        ipr.close()
    return {"ours": sorted(map(ns.route_str, ours)), "foreign": sorted(foreign, key=json.dumps)}
out = {"light": read("light"), "pyroute2": read("pyroute2")}
if %(whole)r:
    out["whole"] = read("whole")
out["light_dumps"] = sorted(light)
print(json.dumps(out))
"""


def test_light_dump_finds_the_foreign_routes_pyroute2_finds():
    """netlink.routes (the first converge's foreign scan) against pyroute2's strict per-table dump
    and its whole dump, on 100,000 foreign routes plus foreign ones at watched keys: main and
    tables 200 and 1107 (above 255: RTA_TABLE), both families, two metrics at one key, ours at one
    key, non-unicast and unwatched-table routes at watched prefixes (the last three kept out)."""
    ns = "knr-%d" % os.getpid()
    sh("ip", "netns", "add", ns)
    try:
        ip = ("ip", "-n", ns)
        sh(*ip + ("link", "set", "lo", "up"))
        for dev, addr in (
            ("knpriv", "10.1.0.1/16"),
            ("kilo0", "10.4.0.1/16"),
            ("knbgp", "10.255.0.1/24"),
        ):
            sh(*ip + ("link", "add", dev, "type", "veth", "peer", "name", dev + "p"))
            for name in (dev, dev + "p"):
                sh(*ip + ("link", "set", name, "up"))
            sh(*ip + ("addr", "add", addr, "dev", dev))
        sh(*ip + ("-6", "addr", "add", "fd01::1/64", "dev", "knpriv", "nodad"))
        batch = [
            "route add 10.%d.%d.%d/28 via 10.255.0.2 dev knbgp proto bgp"
            % (128 + (i >> 12), (i >> 4) & 255, (i & 15) << 4)
            for i in range(100000)
        ]
        batch += [
            "route add 10.1.2.0/24 dev knpriv proto static",
            "route add 10.1.2.0/24 dev knpriv proto static metric 5",
            "route add 10.2.0.1/32 via 10.4.0.2 dev kilo0 onlink proto bgp src 10.1.0.1",
            "route add 10.9.0.0/24 dev kilo0 proto 107",  # ours: not foreign
            "route add blackhole 10.3.0.0/24 proto static",  # not unicast
            "route add 10.1.0.2/32 via 10.1.0.2 dev knpriv proto boot table 1107",
            "route add 10.1.3.0/24 dev knpriv proto static table 200",
            "route add 10.1.3.0/24 dev knpriv proto static table 201",  # table not watched
            "route add 10.128.0.0/28 dev knpriv proto static table 1107",
            "route add fd02::/64 via fd01::2 dev knpriv proto static",
            "route add fd03::/64 dev knpriv proto bgp table 1107 metric 7",
            "route add unreachable fd04::/64 proto static",
        ]
        sh(*ip + ("-batch", "-"), input="\n".join(batch) + "\n")
        watch = [
            ["10.1.2.0/24", 254],
            ["10.2.0.1/32", 254],
            ["10.9.0.0/24", 254],
            ["10.3.0.0/24", 254],
            ["10.1.0.2/32", 1107],
            ["10.128.0.0/28", 1107],
            ["10.1.3.0/24", 200],
            ["10.7.0.0/24", 200],
            ["fd02::/64", 254],
            ["fd03::/64", 1107],
            ["fd04::/64", 254],
            ["fd05::/64", 1107],
        ]
        expected = sorted(
            [
                "10.1.2.0/24 dev knpriv proto 4",
                "10.1.2.0/24 dev knpriv proto 4",
                "10.2.0.1/32 via 10.4.0.2 dev kilo0 proto 186",
                "10.1.0.2/32 via 10.1.0.2 dev knpriv proto 3",
                "10.1.3.0/24 dev knpriv proto 4",
                "10.128.0.0/28 dev knpriv proto 4",
                "fd02::/64 via fd01::2 dev knpriv proto 4",
                "fd03::/64 dev knpriv proto 186",
            ]
        )
        for python in PYTHONS:
            # the whole dump (no strict checking) once: reading 100,000 routes through pyroute2 is slow
            driver = COMPARE_DRIVER % {
                "collections": backendtools.COLLECTIONS,
                "whole": python == PYTHONS[0],
            }
            proc = sh(
                "ip",
                "netns",
                "exec",
                ns,
                python,
                "-c",
                driver,
                input=json.dumps(watch),
                check=False,
            )
            assert proc.returncode == 0, proc.stderr
            out = json.loads(proc.stdout)
            assert out["light_dumps"] == [[2, 200], [2, 254], [2, 1107], [10, 254], [10, 1107]], (
                python
            )
            assert out["light"] == out["pyroute2"] == out.get("whole", out["light"]), python
            assert out["light"]["ours"] == ["10.9.0.0/24 dev kilo0 table main"]
            foreign = out["light"]["foreign"]
            assert (
                sorted(
                    "%s%s dev %s proto %s"
                    % (
                        f["dst"],
                        " via " + f["gateway"] if f["gateway"] else "",
                        f["device"],
                        f["proto"],
                    )
                    for f in foreign
                )
                == expected
            ), python
            assert sorted(
                (
                    (f["dst"], f["table"], f["priority"], f["source"], f["onlink"])
                    for f in foreign
                    if f["dst"] in ("10.1.2.0/24", "10.2.0.1/32", "fd03::/64")
                ),
                key=str,
            ) == [
                ("10.1.2.0/24", 254, 5, None, False),
                ("10.1.2.0/24", 254, None, None, False),
                ("10.2.0.1/32", 254, None, "10.1.0.1", True),
                ("fd03::/64", 1107, 7, None, False),
            ], python
    finally:
        sh("ip", "netns", "del", ns, check=False)  # ours, by the name made above
