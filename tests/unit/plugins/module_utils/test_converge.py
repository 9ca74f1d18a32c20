"""The converge glue, with backends that record calls (the real ones are tested on real
hosts in tests/host and the VM): the plan is checked first, every backend compares before
any applies, an impossible plan fails in check mode too; keys travel apart."""

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.plan import split_preshared_keys
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import (
    Backend,
    converge,
    host_settings,
)
from ansible_collections.kilo.mesh.plugins.module_utils.options import defaults
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan, flat_routes

PSK = "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="
KEY = "GhR8Qy3nKTtDRHWXGBSPXtlqw9zNW4Uo0W0aKdIuV2c="
PLAN = {"name": "a", "leader": True, "segment": "location:x", "listen_port": 51820}


class Recorder(Backend):
    def __init__(self, name, log, fail_in_changes=False, changes=("x",)):
        super(Recorder, self).__init__(host_settings({}))
        self.name, self.log, self.fail, self._changes = name, log, fail_in_changes, list(changes)

    def current(self, plan):
        self.log.append((self.name, "current"))
        return {"live": True}

    def desired(self, plan, current):
        self.log.append((self.name, "desired"))
        return {"plan": plan["name"]}

    def changes(self, current, desired):
        if self.fail:
            raise KiloError("a foreign route holds 10.0.0.0/8", "host 'a'", "plan.routes[0]")
        return self._changes

    def apply(self, current, desired):
        self.log.append((self.name, "apply"))

    def diff(self, current, desired):
        return current, desired

    def owns(self, current):
        return True

    def remove(self, current):
        self.log.append((self.name, "remove"))


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_plan_one_backend_cannot_carry_out_changes_nothing(check_mode):
    log = []
    backends = [Recorder("wireguard", log), Recorder("netstate", log, fail_in_changes=True)]
    with pytest.raises(KiloError) as info:
        converge(PLAN, {}, check_mode=check_mode, backends=backends)
    assert str(info.value) == "host 'a': plan.routes[0]: a foreign route holds 10.0.0.0/8"
    assert ("wireguard", "apply") not in log


def test_later_backends_compare_again_after_an_earlier_one_applied():
    log = []
    backends = [
        Recorder("wireguard", log),
        Recorder("netstate", log),
        Recorder("firewall", log, changes=()),
    ]
    result = converge(PLAN, {}, backends=backends)
    assert result["changes"] == {"wireguard": ["x"], "netstate": ["x"]}
    assert log == [
        ("wireguard", "current"),
        ("wireguard", "desired"),
        ("netstate", "current"),
        ("netstate", "desired"),
        ("firewall", "current"),
        ("firewall", "desired"),
        ("wireguard", "apply"),
        ("netstate", "current"),
        ("netstate", "desired"),
        ("netstate", "apply"),
    ]


def test_check_mode_and_absent():
    log = []
    converge(PLAN, {}, check_mode=True, backends=[Recorder("wireguard", log)])
    assert ("wireguard", "apply") not in log
    log = []
    result = converge(
        None, {"state": "absent"}, backends=[Recorder("wireguard", log), Recorder("netstate", log)]
    )
    assert [e for e in log if e[1] == "remove"] == [("netstate", "remove"), ("wireguard", "remove")]
    assert result["changes"] == {"netstate": ["remove netstate"], "wireguard": ["remove wireguard"]}


def test_a_bad_plan_fails_before_any_backend_runs():
    log = []
    bad = dict(PLAN, routes=[{"dst": "10.1.0.0/16", "device": "kilo%0"}])
    with pytest.raises(KiloError) as info:
        converge(bad, {}, backends=[Recorder("wireguard", log)])
    assert str(info.value).startswith("host 'a': plan.routes[0].device: ")
    assert log == []
    with pytest.raises(KiloError, match="plan: required when state is present"):
        converge(None, {}, backends=[Recorder("wireguard", log)])


def test_bad_interface_setting_is_refused():
    with pytest.raises(KiloError, match="interface: 'a/b' is not a valid Linux interface name"):
        host_settings({"interface": "a/b"})
    assert host_settings({"mtu": None}) == defaults("host")


@pytest.mark.parametrize(
    "field, value, where",
    [
        ("listen_port", 0, "plan.listen_port"),
        (
            "peers",
            [{"name": "p", "public_key": "short", "allowed_ips": []}],
            "plan.peers[0].public_key",
        ),
        (
            "peers",
            [{"name": "p", "public_key": KEY, "allowed_ips": ["10.0.0.0/33"]}],
            "plan.peers[0].allowed_ips[0]",
        ),
        (
            "peers",
            [{"name": "p", "public_key": KEY, "allowed_ips": [], "endpoint": "1.2.3.4"}],
            "plan.peers[0].endpoint",
        ),
        (
            "routes",
            [{"dst": "10.0.0.0/8", "device": "eth0", "gateway": "fd00::1"}],
            "plan.routes[0]",
        ),
        ("rules", [{"table": 1107}], "plan.rules[0]"),
        ("routes", [{"dst": [], "device": "eth0"}], "plan.routes[0].dst"),
        ("rules", [{"src": "10.0.0.0/8", "table": 254}], "plan.rules[0].table"),
        ("firewall", {"nat_sources": ["bogus"]}, "plan.firewall.nat_sources[0]"),
        ("interface", "wg1", "plan.interface"),
        ("colour", "red", "plan.colour"),
    ],
)
def test_plan_errors_name_the_host_and_the_field(field, value, where):
    with pytest.raises(KiloError) as info:
        check_plan(dict(PLAN, **{field: value}), "kilo0")
    assert (info.value.subject, info.value.field) == ("host 'a'", where)


def test_check_plan_normalises_once():
    plan = check_plan(
        dict(
            PLAN,
            peers=[{"name": "p", "public_key": KEY, "allowed_ips": ["10.1.2.3/16"]}],
            routes=[{"dst": "10.1.2.3/16", "device": "private", "onlink": "yes"}],
            firewall={"ipip_filter": "true"},
        ),
        "wg0",
    )
    assert plan["interface"] == "wg0" and plan["address"] is None and plan["rules"] == []
    assert (
        plan["peers"][0]["allowed_ips"] == ["10.1.0.0/16"]
        and plan["peers"][0]["persistent_keepalive"] == 0
    )
    assert plan["routes"][0] == {
        "dst": "10.1.0.0/16",
        "gateway": None,
        "device": "private",
        "source": None,
        "table": 254,
        "onlink": True,
    }
    assert plan["firewall"]["ipip_filter"] is True and plan["firewall"]["nat_sources"] == []


def test_check_plan_keeps_the_relay_fields_and_adds_none():
    relay = {
        "name": "location:r",
        "public_key": KEY,
        "allowed_ips": ["10.1.0.0/16"],
        "relayed": ["location:b"],
    }
    probe = {"name": "location:b", "public_key": PSK, "allowed_ips": [], "probe": "yes"}
    plan = check_plan(dict(PLAN, peers=[relay, probe], firewall={"relay_accept": True}), "wg0")
    assert plan["peers"][0]["relayed"] == ["location:b"] and "probe" not in plan["peers"][0]
    assert plan["peers"][1]["probe"] is True and plan["peers"][1]["allowed_ips"] == []
    assert plan["firewall"]["relay_accept"] is True
    assert "relay_accept" not in check_plan(PLAN, "wg0")["firewall"]
    with pytest.raises(KiloError) as info:
        check_plan(dict(PLAN, peers=[dict(relay, relayed="location:b")]), "wg0")
    assert info.value.field == "plan.peers[0].relayed"


def test_preshared_keys_leave_the_plan():
    plan = {
        "name": "a",
        "peers": [{"public_key": "k1", "preshared_key": PSK}, {"public_key": "k2"}],
    }
    keys = split_preshared_keys(plan)
    assert keys == {"k1": PSK}
    assert PSK not in repr(plan)  # what is logged on the host as module arguments


@pytest.mark.parametrize("granularity", ["location", "full", "cross"])
@pytest.mark.parametrize("encapsulate", ["always", "crosssubnet", "never"])
def test_every_plan_the_engine_writes_passes_the_check_unchanged(granularity, encapsulate):
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans

    keys = ["%s=" % (chr(65 + i) * 43) for i in range(6)]
    nodes = [
        {
            "name": "n%d" % i,
            "location": "l%d" % (i % 3),
            "public_key": keys[i],
            "endpoint": "203.0.113.%d:51820" % (i + 1),
            "internal_ip": "10.%d.0.%d/16" % (i % 3, i + 1),
            "pod_cidr": "10.244.%d.0/24" % i,
            "persistent_keepalive": 25 if i == 5 else 0,
        }
        for i in range(5)
    ]
    nodes.append(
        {
            "name": "v6",
            "location": "l9",
            "public_key": keys[5],
            "endpoint": "[2001:db8::1]:51820",
            "internal_ip": None,
        }
    )
    peers = [
        {"name": "laptop", "public_key": KEY, "allowed_ips": ["10.5.0.1/32"], "preshared_key": PSK}
    ]
    plans = build_plans(nodes, peers, {"granularity": granularity, "encapsulate": encapsulate})[
        "plans"
    ]
    for plan in plans.values():
        split_preshared_keys(plan)
        assert check_plan(plan, plan["interface"]) == dict(
            plan,
            peers=[dict(p, roaming=False) for p in plan["peers"]],
            routes=flat_routes(plan["routes"]),
        )


class Tunnels(Recorder):
    """A WireGuard backend stand-in whose changes touch the tunnels (or only the link)."""

    def __init__(self, log, moved):
        super(Tunnels, self).__init__(
            "wireguard", log, changes=(moved or ["set mtu 1420 (was 1500)"])
        )
        self.moved = moved

    def tunnel_changes(self, current, desired):
        return self.moved


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_takeover_refuses_to_change_the_tunnels_before_anything_changes(check_mode):
    log = []
    backends = [Tunnels(log, ["remove peer K="]), Recorder("netstate", log)]
    with pytest.raises(KiloError) as info:
        converge(PLAN, {}, check_mode=check_mode, backends=backends, takeover=True)
    assert "takeover: the interface runs other tunnels than the plan says (remove peer K=)" in str(
        info.value
    )
    assert [e for e in log if e[1] == "apply"] == []
    # the link alone (MTU, up), or a converge that takes nothing over, goes ahead
    log = []
    converge(PLAN, {}, backends=[Tunnels(log, []), Recorder("netstate", log)], takeover=True)
    assert ("netstate", "apply") in log and ("wireguard", "apply") in log
    log = []
    converge(PLAN, {}, backends=[Tunnels(log, ["remove peer K="]), Recorder("netstate", log)])
    assert ("wireguard", "apply") in log


def test_a_takeover_replaces_foreign_routes_for_its_call_alone():
    """takeover gives the routes route_conflict replace; the boot restore keeps the host's setting, so
    neither the stored plan nor a later restore takes anything over (and a re-run stores the same)."""
    from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import backends_for

    settings = host_settings({"route_conflict": "fail"})
    plain = dict((b.name, b.settings["route_conflict"]) for b in backends_for(settings))
    taken = dict(
        (b.name, b.settings["route_conflict"]) for b in backends_for(settings, takeover=True)
    )
    assert set(plain.values()) == {"fail"}
    assert taken["netstate"] == "replace" and taken["boot"] == "fail"
    assert settings["route_conflict"] == "fail"
