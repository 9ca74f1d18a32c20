"""Unit tests of the netstate helpers that need no kernel."""
import pytest

from ansible_collections.kilo.mesh.plugins.module_utils import netstate as ns


def route(**kw):
    r = {"family": 4, "dst": "10.2.1.0/24", "table": 254, "gateway": "10.4.0.2", "device": "kilo0",
         "source": "10.1.0.1", "onlink": True, "priority": None}
    r.update(kw)
    return r


def test_route_render():
    assert ns.route_str(route()) == "10.2.1.0/24 via 10.4.0.2 dev kilo0 onlink src 10.1.0.1 table main"
    assert ns.route_str(route(gateway=None, onlink=False, source=None, table=1107,
                              device="tunl0")) == "10.2.1.0/24 dev tunl0 table 1107"


def test_rule_render():
    r = {"family": 4, "src": None, "dst": "10.1.0.2/32", "iif": "kilo0", "table": 1107,
         "priority": 32000}
    assert ns.rule_str(r) == "32000: from all to 10.1.0.2/32 iif kilo0 lookup 1107"


def test_key_and_attrs():
    assert ns.route_key(route()) == ("10.2.1.0/24", 254)
    assert ns._route_attrs(route()) != ns._route_attrs(route(gateway="10.4.0.3"))
    assert ns._route_attrs(route()) == ns._route_attrs(route(priority=1024))  # metric is not ours


def test_clashing_only_same_metric():
    foreign = [{"priority": None, "proto": 4}, {"priority": 100, "proto": 4}]
    assert len(ns._clashing(foreign, route())) == 1
    assert ns._clashing([{"priority": 1024, "proto": 3}], route(family=6, dst="fd00::/64"))
    assert ns._clashing(None, route()) == []


def test_settings_validated():
    with pytest.raises(ns.NetStateError):
        ns.NetStateBackend({"route_conflict": "sometimes"})
    b = ns.NetStateBackend({})
    assert b.interface == "kilo0" and b.rule_priority == ns.DEFAULT_RULE_PRIORITY


def test_render_changes_no_private_fields():
    b = ns.NetStateBackend({"interface": "kilo0"})
    state = {"interface": "kilo0", "interface_present": True, "addresses": ["10.4.0.1/16"],
             "routes": [route()], "rules": [], "tunl0": None, "_foreign": {}, "_links": {}}
    assert b.render(state) == {"interface": "kilo0", "addresses": ["10.4.0.1/16"],
                               "routes": ["10.2.1.0/24 via 10.4.0.2 dev kilo0 onlink src 10.1.0.1 table main"],
                               "rules": []}
    empty = dict(state, addresses=[], routes=[])
    assert b.changes(state, state) == []
    assert b.changes(state, empty) == [
        "remove address 10.4.0.1/16 dev kilo0",
        "remove route 10.2.1.0/24 via 10.4.0.2 dev kilo0 onlink src 10.1.0.1 table main"]
