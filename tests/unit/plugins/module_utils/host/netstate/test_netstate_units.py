"""Unit tests of the netstate backend that need no kernel (a fake netlink socket stands in)."""

import socket

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import backend as ns
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import routes as nsr
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import tunnel as nst
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.rules import RULE_PRIORITY
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan

IFACE = "wgk0"


def route(**kw):
    r = {
        "family": 4,
        "dst": "10.2.1.0/24",
        "table": 254,
        "gateway": "10.4.0.2",
        "device": IFACE,
        "source": "10.1.0.1",
        "onlink": True,
        "priority": None,
    }
    r.update(kw)
    return r


def backend(**settings):
    return ns.NetStateBackend(host_settings(dict(settings, interface=IFACE)))


def plan(**over):
    p = {
        "name": "a",
        "leader": True,
        "segment": "location:one",
        "listen_port": 51820,
        "address": "10.4.0.1/16",
        "internal_ip": "10.1.0.1/16",
        "routes": [
            {
                "dst": "10.2.1.0/24",
                "gateway": "10.4.0.2",
                "device": IFACE,
                "source": "10.1.0.1",
                "onlink": True,
            },
            {"dst": "10.1.2.0/24", "gateway": "10.1.0.2", "device": "private", "onlink": True},
        ],
        "rules": [{"dst": "10.1.0.2/32", "iif": IFACE}],
    }
    p.update(over)
    return check_plan(p, IFACE)


def current(**over):
    c = {
        "interface": IFACE,
        "interface_present": True,
        "addresses": [],
        "routes": [],
        "rules": [],
        "tunl0": None,
        "tunnel_address": None,
        "foreign": [],
        "private_devices": {"4": {"name": "eth1", "mtu": 1500}},
        "ipip": True,
    }
    c.update(over)
    return c


def test_route_render():
    assert (
        ns.route_str(route()) == "10.2.1.0/24 via 10.4.0.2 dev wgk0 onlink src 10.1.0.1 table main"
    )
    assert (
        ns.route_str(route(gateway=None, onlink=False, source=None, table=1107, device="tunl0"))
        == "10.2.1.0/24 dev tunl0 table 1107"
    )


def test_rule_render():
    r = {
        "family": 4,
        "src": None,
        "dst": "10.1.0.2/32",
        "iif": IFACE,
        "table": 1107,
        "priority": 32000,
    }
    assert ns.rule_str(r) == "32000: from all to 10.1.0.2/32 iif wgk0 lookup 1107"


def test_key_and_attrs():
    assert nsr.route_key(route()) == ("10.2.1.0/24", 254)
    assert nsr.route_attrs(route()) != nsr.route_attrs(route(gateway="10.4.0.3"))
    assert nsr.route_attrs(route()) == nsr.route_attrs(route(priority=1024))  # metric is not ours


def test_clashing_only_same_key_and_metric():
    foreign = [
        route(priority=None, proto=4),
        route(priority=100, proto=4),
        route(table=1107, proto=4),
    ]
    assert nsr.clashing(foreign, route()) == foreign[:1]
    assert nsr.clashing(
        [route(family=6, dst="fd00::/64", priority=1024, proto=3)], route(family=6, dst="fd00::/64")
    )
    assert nsr.clashing(None, route()) == []


def test_errors_are_kilo_errors():
    assert issubclass(ns.NetStateError, KiloError)


def test_desired_resolves_private_and_is_pure():
    b = backend()
    b._ipr = None  # desired() must not touch netlink
    want = b.desired(plan(), current())
    assert [(r["dst"], r["device"]) for r in want["routes"]] == [
        ("10.1.2.0/24", "eth1"),
        ("10.2.1.0/24", IFACE),
    ]
    assert want["addresses"] == ["10.4.0.1/16"] and want["tunl0"] is None
    assert want["rules"] == [
        {
            "family": 4,
            "src": None,
            "dst": "10.1.0.2/32",
            "iif": IFACE,
            "table": 1107,
            "priority": RULE_PRIORITY,
        }
    ]


def test_desired_names_host_and_field():
    with pytest.raises(ns.NetStateError) as err:
        backend().desired(plan(), current(private_devices={}))
    assert str(err.value).startswith(
        "host 'a': plan.routes[1].device: 'private' needs the interface holding"
    )
    tunnel = plan(tunnel_address="10.2.0.1/32")
    with pytest.raises(ns.NetStateError) as err:
        backend().desired(tunnel, current(ipip=False))
    assert str(err.value) == (
        "host 'a': plan.tunnel_address: host lacks IPIP (tunl0) support: load the ipip "
        "module (modprobe ipip) or set encapsulate: never"
    )
    # tunl0 MTU always comes from the private interface
    assert backend().desired(tunnel, current())["tunl0"] == {"up": True, "mtu": 1480}


def test_foreign_route_at_destination_fails_in_changes():
    """Bug 1: changes() itself refuses, so check mode and the real run fail before any change."""
    foreign = dict(
        route(dst="10.1.2.0/24", device="eth1", gateway=None, source=None, onlink=False), proto=4
    )
    cur = current(foreign=[foreign])
    b = backend()
    want = b.desired(plan(), cur)
    with pytest.raises(KiloError) as err:
        b.changes(cur, want)
    assert str(err.value) == (
        "host 'a': plan.routes[1]: a foreign route (10.1.2.0/24 dev eth1 proto 4) already "
        "holds 10.1.2.0/24 in table main; remove it or set route_conflict: replace"
    )
    b._ipr = lambda: pytest.fail("apply opened netlink before refusing")
    with pytest.raises(KiloError):
        b.apply(cur, want)
    replace = backend(route_conflict="replace")
    assert (
        "add route 10.1.2.0/24 via 10.1.0.2 dev eth1 onlink table main (taking over foreign route "
        "10.1.2.0/24 dev eth1 proto 4)" in replace.changes(cur, replace.desired(plan(), cur))
    )


def test_render_changes_removal():
    b = backend()
    state = current(addresses=["10.4.0.1/16"], routes=[route()])
    assert b.diff(state, None) == (
        {
            "interface": IFACE,
            "addresses": ["10.4.0.1/16"],
            "routes": ["10.2.1.0/24 via 10.4.0.2 dev wgk0 onlink src 10.1.0.1 table main"],
            "rules": [],
        },
        {"interface": IFACE, "addresses": [], "routes": [], "rules": []},
    )
    assert b.owns(state) and not b.owns(current())
    assert b.changes(state, b._empty()) == [
        "remove address 10.4.0.1/16 dev wgk0",
        "remove route 10.2.1.0/24 via 10.4.0.2 dev wgk0 onlink src 10.1.0.1 table main",
    ]


class Msg(dict):
    def __init__(self, attrs, **fields):
        dict.__init__(self, fields)
        self.attrs = attrs

    def get_attr(self, name):
        return self.attrs.get(name)


class FakeIPRoute(object):
    """Two links, one foreign route at a plan destination among many foreign ones, ours in
    main, 1107 and IPv6. ``strict``: nlm_request filters dumps as the kernel does under strict
    checking (family, protocol, type, RTA_TABLE); route('dump') returns every route."""

    def __init__(self, table_size=1000, strict=False, ours_too=False):
        self.dumps = []
        self.table_size = table_size
        self.strict = strict
        self.ours_too = ours_too

    def get_links(self):
        return [
            Msg({"IFLA_IFNAME": "eth1", "IFLA_MTU": 1500}, index=2, flags=1),
            Msg({"IFLA_IFNAME": IFACE, "IFLA_MTU": 1420}, index=3, flags=1),
        ]

    def get_addr(self, family=None):
        return [
            Msg(
                {"IFA_ADDRESS": "10.1.0.1", "IFA_LOCAL": "10.1.0.1"},
                index=2,
                scope=0,
                family=socket.AF_INET,
                prefixlen=16,
            )
        ]

    def table(self):
        v4, v6 = socket.AF_INET, socket.AF_INET6
        bgp = [
            Msg(
                {"RTA_DST": "172.%d.%d.0" % (i // 256, i % 256), "RTA_TABLE": 254, "RTA_OIF": 2},
                type=1,
                proto=186,
                dst_len=24,
                flags=0,
                family=v4,
            )
            for i in range(self.table_size)
        ]
        out = bgp + [
            Msg(
                {"RTA_DST": "10.1.2.0", "RTA_TABLE": 254, "RTA_OIF": 2},
                type=1,
                proto=4,
                dst_len=24,
                flags=0,
                family=v4,
            ),
            Msg(
                {"RTA_DST": "10.2.1.0", "RTA_TABLE": 1107, "RTA_OIF": 2},
                type=1,
                proto=4,
                dst_len=24,
                flags=0,
                family=v4,
            ),
            Msg(
                {"RTA_DST": "10.2.1.0", "RTA_TABLE": 254, "RTA_OIF": 3, "RTA_GATEWAY": "10.4.0.2"},
                type=1,
                proto=107,
                dst_len=24,
                flags=4,
                family=v4,
            ),
        ]
        if self.strict:
            out += [
                Msg(
                    {
                        "RTA_DST": "10.1.0.2",
                        "RTA_TABLE": 1107,
                        "RTA_OIF": 2,
                        "RTA_GATEWAY": "10.1.0.2",
                    },
                    type=1,
                    proto=107,
                    dst_len=32,
                    flags=4,
                    family=v4,
                ),
                Msg(
                    {"RTA_DST": "fd02::", "RTA_TABLE": 254, "RTA_OIF": 3},
                    type=1,
                    proto=107,
                    dst_len=64,
                    flags=0,
                    family=v6,
                ),
                Msg(
                    {"RTA_DST": "fd77::", "RTA_TABLE": 254, "RTA_OIF": 2},
                    type=1,
                    proto=3,
                    dst_len=64,
                    flags=0,
                    family=v6,
                ),
            ]
        if self.ours_too:
            out.append(
                Msg(
                    {
                        "RTA_DST": "10.1.2.0",
                        "RTA_TABLE": 254,
                        "RTA_OIF": 2,
                        "RTA_GATEWAY": "10.1.0.2",
                    },
                    type=1,
                    proto=107,
                    dst_len=24,
                    flags=4,
                    family=v4,
                )
            )
        return out

    def route(self, cmd, family):
        assert cmd == "dump" and not self.strict
        self.dumps.append(family)
        return [m for m in self.table() if m["family"] == family]

    def nlm_request(self, msg, msg_type, msg_flags):
        assert self.strict and msg_type == nsr.RTM_GETROUTE and msg_flags == 0x301
        assert all(msg[f] == 0 for f in ("dst_len", "src_len", "tos", "table", "scope", "flags"))
        table = dict(msg["attrs"]).get("RTA_TABLE", 0)
        self.dumps.append((msg["family"], table, msg["proto"], msg["type"]))
        return [
            m
            for m in self.table()
            if m["family"] == msg["family"]
            and msg["proto"] in (0, m["proto"])
            and msg["type"] in (0, m["type"])
            and table in (0, m.get_attr("RTA_TABLE"))
        ]

    def get_rules(self, family):
        return []

    def close(self):
        pass


def test_current_reads_foreign_only_at_plan_destinations(monkeypatch):
    """Without strict checking (old kernel or pyroute2): one whole dump per family."""
    fake = FakeIPRoute()
    b = backend()
    b._reader = lambda: (fake, False)
    monkeypatch.setattr(
        ns, "kernel_module_available", lambda name: pytest.fail("no tunnel in the plan")
    )
    cur = b.current(plan())
    assert fake.dumps == [socket.AF_INET, socket.AF_INET6]  # one dump per family, no more
    assert [(r["dst"], r["table"], r["proto"]) for r in cur["foreign"]] == [("10.1.2.0/24", 254, 4)]
    assert [ns.route_str(r) for r in cur["routes"]] == [
        "10.2.1.0/24 via 10.4.0.2 dev wgk0 onlink table main"
    ]
    assert (
        cur["private_devices"] == {"4": {"name": "eth1", "mtu": 1500}} and cur["interface_present"]
    )
    removing = b.current(None)
    assert removing["foreign"] == [] and removing["private_devices"] == {}
    probed = []
    monkeypatch.setattr(ns, "kernel_module_available", lambda name: probed.append(name) or False)
    assert b.current(plan(tunnel_address="10.2.0.1/32"))["ipip"] is False and probed == ["ipip"]


OURS = [
    "10.2.1.0/24 via 10.4.0.2 dev wgk0 onlink table main",
    "10.1.0.2/32 via 10.1.0.2 dev eth1 onlink table 1107",
    "fd02::/64 dev wgk0 table main",
]


def test_strict_reads_ours_by_protocol_and_foreign_only_from_tables_of_missing_routes():
    """Strict checking: the kernel returns our routes (every table, both families); foreign ones
    only from the table of the plan route not ours yet, unicast only."""
    fake = FakeIPRoute(strict=True)
    b = backend()
    b._reader = lambda: (fake, True)
    cur = b.current(plan())
    v4, v6 = socket.AF_INET, socket.AF_INET6
    assert fake.dumps == [(v4, 0, 107, 0), (v6, 0, 107, 0), (v4, 254, 0, 1)]
    assert sorted(ns.route_str(r) for r in cur["routes"]) == sorted(OURS)
    assert [(r["dst"], r["table"], r["proto"]) for r in cur["foreign"]] == [("10.1.2.0/24", 254, 4)]
    # and changes() still refuses before any change, as without strict checking
    with pytest.raises(
        KiloError, match="a foreign route .10.1.2.0/24 dev eth1 proto 4. already holds"
    ):
        b.changes(cur, b.desired(plan(), cur))
    fake.dumps = []
    assert b.current(None)["foreign"] == [] and fake.dumps == [(v4, 0, 107, 0), (v6, 0, 107, 0)]


def test_idempotent_strict_read_dumps_no_foreign_route():
    """Every plan route already ours: only the two dumps of our protocol, none of a table."""
    fake = FakeIPRoute(strict=True, ours_too=True)
    b = backend()
    b._reader = lambda: (fake, True)
    cur = b.current(plan())
    assert fake.dumps == [(socket.AF_INET, 0, 107, 0), (socket.AF_INET6, 0, 107, 0)]
    assert cur["foreign"] == []
    assert sorted(ns.route_str(r) for r in cur["routes"]) == sorted(
        OURS + ["10.1.2.0/24 via 10.1.0.2 dev eth1 onlink table main"]
    )
    assert not [c for c in b.changes(cur, b.desired(plan(), cur)) if c.startswith("add route")]


def test_missing_table_reads_as_empty():
    class NoTable(object):
        status = {}

        def nlm_request(self, msg, msg_type, msg_flags):
            err = OSError("No such file or directory")
            err.code = 2
            raise err

    assert nsr.dump(NoTable(), socket.AF_INET, table=1107) == []
    with pytest.raises(OSError):
        nsr.dump(NoTable(), socket.AF_INET, proto=107)


def test_cilium_tunl_takes_the_tunnel_routes_only_under_compatibility_cilium():
    """Kilo's cilium encapsulator reuses cilium_tunl (tunl0 renamed by Cilium) when it exists."""
    b = backend()
    links = {1: {"name": "cilium_tunl", "up": True, "mtu": 1480}}
    tunnelled = [{"dst": "10.1.2.0/24", "gateway": "10.1.0.2", "device": "tunl0", "onlink": True}]
    cilium, none = (
        plan(routes=tunnelled, compatibility="cilium"),
        plan(routes=tunnelled, compatibility="none"),
    )
    assert nst.tunnel_device(links, cilium) == "cilium_tunl"
    assert nst.tunnel_device(links, none) == "tunl0"
    assert nst.tunnel_device({}, cilium) == "tunl0"  # no cilium_tunl: Kilo makes tunl0
    assert nst.tunnel_device(links, None) == "cilium_tunl"  # removal finds our address there
    both = dict(links)
    both[2] = {"name": "tunl0", "up": True, "mtu": 1480}
    assert nst.tunnel_device(both, None) == "tunl0"
    want = b.desired(cilium, current(tunnel_device="cilium_tunl", tunl0={"up": True, "mtu": 1480}))
    assert [r["device"] for r in want["routes"]] == ["cilium_tunl"] and want[
        "tunnel_device"
    ] == "cilium_tunl"
    assert any(
        "dev cilium_tunl" in line for line in b.changes(current(tunnel_device="cilium_tunl"), want)
    )


def dual_plan():
    """A dual-stack member: an IPv4 route over IPIP, an IPv6 one over the private network."""
    return plan(
        address=None,
        internal_ip=["10.1.0.2/16", "fd00:1::2/64"],
        tunnel_address="10.2.1.1/32",
        routes=[
            {
                "dst": "10.2.0.0/24",
                "gateway": "10.1.0.1",
                "device": "tunl0",
                "source": "10.1.0.2",
                "onlink": True,
            },
            {"dst": "fd10:0:0:1::/64", "gateway": "fd00:1::1", "device": "private", "onlink": True},
        ],
        rules=[],
    )


def test_dual_stack_routes_leave_on_the_private_interface_of_their_family():
    """The IPv4 and the IPv6 internal IP may be on different links: each family's 'private'
    route takes its own, and tunl0 (IPv4 only) its MTU from the IPv4 one."""
    cur = current(
        private_devices={"4": {"name": "eth1", "mtu": 1500}, "6": {"name": "eth2", "mtu": 1400}}
    )
    want = backend().desired(dual_plan(), cur)
    assert [(r["dst"], r["device"], r["family"]) for r in want["routes"]] == [
        ("10.2.0.0/24", "tunl0", 4),
        ("fd10:0:0:1::/64", "eth2", 6),
    ]
    assert want["tunl0"] == {"up": True, "mtu": 1480}
    with pytest.raises(ns.NetStateError) as err:
        backend().desired(dual_plan(), current())  # no link holds fd00:1::2
    assert str(err.value) == (
        "host 'a': plan.routes[1].device: 'private' needs the interface holding internal_ip"
        " fd00:1::2/64, but no interface of this host has that address"
    )
    single = dual_plan()
    single["internal_ip"] = "10.1.0.2/16"
    with pytest.raises(ns.NetStateError) as err:
        backend().desired(single, current())
    assert (
        str(err.value)
        == "host 'a': plan.routes[1].device: 'private' needs an IPv6 internal_ip, but the plan has none"
    )


def test_dual_stack_addresses_of_both_families():
    b = backend()
    want = b.desired(
        plan(address=["10.4.0.1/16", "fd04::1/64"], internal_ip=["10.1.0.1/16", "fd00:1::1/64"]),
        current(addresses=["10.4.0.1/16"]),
    )
    assert want["addresses"] == ["10.4.0.1/16", "fd04::1/64"]
    assert [c for c in b.changes(current(addresses=["10.4.0.1/16"]), want) if "address" in c] == [
        "add address fd04::1/64 dev wgk0"
    ]


def test_tunl0_of_a_single_stack_ipv6_plan_takes_its_one_private_interface_s_mtu():
    """An IPv6-only plan routing through tunl0 (as Kilo's IPIP encapsulator would) sets tunl0's MTU
    from the interface of its one internal IP, as before dual-stack: only a plan with an IPv4
    internal IP takes the IPv4 one's."""
    plan = {
        "tunnel_address": None,
        "routes": [{"dst": "fd10::/64", "device": "tunl0", "table": 1107}],
    }
    cur = {"tunl0": None, "ipip": True, "private_devices": {"6": {"name": "eth1", "mtu": 1400}}}
    assert nst.desired(plan, cur, "host 'a'")[0] == {"up": True, "mtu": 1380}
    cur["private_devices"] = {
        "4": {"name": "eth0", "mtu": 1500},
        "6": {"name": "eth1", "mtu": 1400},
    }
    assert nst.desired(plan, cur, "host 'a'")[0] == {"up": True, "mtu": 1480}
