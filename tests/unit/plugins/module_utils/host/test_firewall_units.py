"""Unit tests: nft ruleset text, nft JSON normalisation, iptables lines (no kernel needed)."""

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.host import firewall as fw
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan


def lists(**kw):
    return fw.normalize_lists(kw)


def plan(**firewall):
    return check_plan(
        {
            "name": "n",
            "leader": True,
            "segment": "location:one",
            "listen_port": 51820,
            "firewall": firewall,
        },
        "wgk0",
    )


def backend(kind):
    return fw.FirewallBackend(host_settings({"firewall": kind}))


def test_normalize_collapses_and_splits_families():
    got = lists(
        nat_sources=["10.1.1.0/24", "10.1.0.0/16", "10.2.0.7", "fd00::1/64"], ipip_accept_sources=[]
    )
    assert got[("nat_sources", 4)] == ["10.1.0.0/16", "10.2.0.7/32"]
    assert got[("nat_sources", 6)] == ["fd00::/64"]
    assert got[("ipip_accept_sources", 4)] == [] and got[("forward_accept", 6)] == []


def test_bad_lists_stop_at_the_plan_check():
    with pytest.raises(KiloError) as err:
        plan(nat_exempt_destinations=["10.0.0.0/8", "x"])
    assert str(err.value) == "host 'n': plan.firewall.nat_exempt_destinations[1]: 'x' is not a CIDR"
    assert issubclass(fw.FirewallError, KiloError)


def test_empty_plan_has_no_table():
    assert fw.nft_model(lists()) is None
    script = fw.nft_script(None)
    assert script == "table inet kilo_mesh\ndelete table inet kilo_mesh\n"


def test_nft_script_replaces_table_in_one_batch():
    model = fw.nft_model(
        lists(
            nat_sources=["10.1.1.0/24"],
            nat_exempt_destinations=["10.4.0.0/16"],
            ipip_accept_sources=["10.1.0.2/32"],
        )
    )
    text = fw.nft_script(model)
    lines = text.splitlines()
    # declare, delete, define: the delete cannot fail and the batch is one transaction
    assert lines[:3] == [
        "table inet kilo_mesh",
        "delete table inet kilo_mesh",
        "table inet kilo_mesh {",
    ]
    assert "\t\telements = { 10.1.1.0/24 }" in lines
    assert "\t\ttype nat hook postrouting priority srcnat; policy accept;" in lines
    assert lines.index("\t\tip daddr @nat_exempt_v4 return") < lines.index("\t\tmasquerade")
    assert lines.index("\t\tmeta l4proto 4 ip saddr @ipip_src_v4 accept") < lines.index(
        "\t\tmeta l4proto 4 drop"
    )
    assert "chain forward" not in text  # nothing to accept: no chain


def test_no_masquerade_without_sources():
    model = fw.nft_model(
        lists(nat_exempt_destinations=["10.4.0.0/16"], forward_accept=["10.1.0.0/16"])
    )
    assert "nat" not in model["chains"] and "postrouting" not in model["chains"]
    assert model["chains"]["forward"][1] == ["ip saddr @fwd_v4 accept", "ip daddr @fwd_v4 accept"]


def _nft_doc(elems, l4="ipencap"):
    """The shape `nft -j list table` prints (nftables 1.0.x)."""

    def match(proto, field, right):
        return {
            "match": {
                "op": "==",
                "left": {"payload": {"protocol": proto, "field": field}},
                "right": right,
            }
        }

    return {
        "nftables": [
            {"metainfo": {"version": "1.0.6"}},
            {"table": {"family": "inet", "name": "kilo_mesh", "handle": 3}},
            {
                "set": {
                    "family": "inet",
                    "name": "ipip_src_v4",
                    "table": "kilo_mesh",
                    "type": "ipv4_addr",
                    "flags": ["interval"],
                    "elem": elems,
                }
            },
            {
                "chain": {
                    "family": "inet",
                    "table": "kilo_mesh",
                    "name": "input",
                    "handle": 1,
                    "type": "filter",
                    "hook": "input",
                    "prio": 0,
                    "policy": "accept",
                }
            },
            {
                "rule": {
                    "chain": "input",
                    "expr": [
                        {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": l4}},
                        match("ip", "saddr", "@ipip_src_v4"),
                        {"accept": None},
                    ],
                }
            },
            {
                "rule": {
                    "chain": "input",
                    "expr": [
                        {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": l4}},
                        {"drop": None},
                    ],
                }
            },
        ]
    }


def test_parse_equals_model_for_same_content():
    want = fw.nft_model(lists(ipip_accept_sources=["10.1.0.2/32", "10.1.0.3", "10.1.4.0/24"]))
    elems = ["10.1.0.2", "10.1.0.3", {"prefix": {"addr": "10.1.4.0", "len": 24}}]
    assert fw.nft_parse(_nft_doc(elems)) == want
    # a range element (adjacent intervals some nft versions merge) normalises the same way
    ranged = [{"range": ["10.1.0.2", "10.1.0.3"]}, {"prefix": {"addr": "10.1.4.0", "len": 24}}]
    assert fw.nft_parse(_nft_doc(ranged, l4=4)) == fw.nft_model(
        lists(ipip_accept_sources=["10.1.0.2/31", "10.1.4.0/24"])
    )


def test_parse_shows_foreign_rule_and_absent_table():
    doc = _nft_doc(["10.1.0.2"])
    doc["nftables"].append(
        {
            "rule": {
                "chain": "input",
                "expr": [
                    {
                        "match": {
                            "op": "==",
                            "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                            "right": {"prefix": {"addr": "10.99.0.0", "len": 16}},
                        }
                    },
                    {"drop": None},
                ],
            }
        }
    )
    got = fw.nft_parse(doc)
    assert got["chains"]["input"][1][-1] == "ip saddr 10.99.0.0/16 drop"
    assert got != fw.nft_model(lists(ipip_accept_sources=["10.1.0.2"]))
    assert fw.nft_parse({"nftables": [{"metainfo": {}}]}) is None


def state(rules=None, leftovers=None, kind="nftables"):
    return {"kind": kind, "rules": rules, "leftovers": leftovers or {}}


def test_changes_list_differences():
    b = backend("nftables")
    want = b.desired(plan(nat_sources=["10.1.0.0/16"]), state())
    assert want == state(fw.nft_model(lists(nat_sources=["10.1.0.0/16"])))
    assert b.changes(want, want) == []
    changed = b.changes(state(), want)
    assert "firewall (nftables): add set nat_src_v4 ipv4_addr { 10.1.0.0/16 }" in changed
    assert "firewall (nftables): add chain nat: masquerade" in changed
    assert b.diff(state(), want)[0] == [] and "chain nat: masquerade" in b.diff(state(), want)[1]
    assert b.diff(want, None) == (b.diff(state(), want)[1], [])


def test_leftovers_of_the_other_implementation_are_state():
    ipt = {"ipv4": fw.ipt_model(lists(nat_sources=["10.1.0.0/16"]), 4), "ipv6": {}}
    b = backend("nftables")
    want = b.desired(plan(nat_sources=["10.1.0.0/16"]), state())
    cur = state(want["rules"], {"iptables": ipt})
    assert b.changes(cur, want) == [
        "firewall (iptables): remove what an earlier run made with firewall=iptables"
    ]
    assert b.owns(cur) and b.owns(state(leftovers={"iptables": ipt})) and not b.owns(state())
    done = []
    b.others["iptables"].remove = done.append
    b.apply(cur, want)  # our table is as wanted: only the leftovers go
    assert done == [ipt]
    b.remove(state(leftovers={"iptables": ipt}))
    assert done == [ipt, ipt]


def test_iptables_model_parse_round_trip():
    ls = lists(
        nat_sources=["10.1.1.0/24"],
        nat_exempt_destinations=["10.4.0.0/16"],
        forward_accept=["10.1.1.0/24"],
        ipip_accept_sources=["10.1.0.2"],
    )
    want = fw.ipt_model(ls, 4)
    # what iptables-save prints for that (protocol 4 shown by name, /32 explicit)
    save = """*nat
:POSTROUTING ACCEPT [0:0]
:KILO-NAT - [0:0]
-A POSTROUTING -s 10.9.0.0/16 -j MASQUERADE
-A POSTROUTING -s 10.1.1.0/24 -m comment --comment "kilo.mesh" -j KILO-NAT
-A KILO-NAT -d 10.4.0.0/16 -m comment --comment "kilo.mesh" -j RETURN
-A KILO-NAT -m comment --comment "kilo.mesh" -j MASQUERADE
COMMIT
*filter
:INPUT ACCEPT [0:0]
:KILO-FORWARD - [0:0]
:KILO-IPIP - [0:0]
-A INPUT -p ipencap -m comment --comment "kilo.mesh" -j KILO-IPIP
-A FORWARD -m comment --comment "kilo.mesh" -j KILO-FORWARD
-A FORWARD -j DROP
-A KILO-FORWARD -s 10.1.1.0/24 -m comment --comment "kilo.mesh" -j ACCEPT
-A KILO-FORWARD -d 10.1.1.0/24 -m comment --comment "kilo.mesh" -j ACCEPT
-A KILO-IPIP -s 10.1.0.2/32 -m comment --comment "kilo.mesh" -j ACCEPT
-A KILO-IPIP -m comment --comment "kilo.mesh" -j DROP
COMMIT
"""
    assert fw.ipt_parse(save) == want
    assert fw.ipt_model(ls, 6) == {}


def test_iptables_restore_script():
    want = fw.ipt_model(lists(nat_sources=["10.1.1.0/24", "10.1.2.0/24"]), 4)["nat"]
    have = {
        "chains": {"KILO-NAT": ["-A KILO-NAT -j MASQUERADE"]},
        "jumps": ["-A POSTROUTING -s 10.7.0.0/16 -j KILO-NAT"],
    }
    lines = fw.ipt_restore_script("nat", have, want).splitlines()
    assert lines[0] == "*nat" and lines[-1] == "COMMIT"
    assert ":KILO-NAT - [0:0]" in lines
    assert "-D POSTROUTING -s 10.7.0.0/16 -j KILO-NAT" in lines
    inserts = [l for l in lines if l.startswith("-I POSTROUTING 1 ")]
    assert inserts[-1].startswith("-I POSTROUTING 1 -s 10.1.1.0/24")  # inserted last = first
    gone = fw.ipt_restore_script("nat", have, None).splitlines()
    assert "-X KILO-NAT" in gone and not any(l.startswith("-A") for l in gone)


def test_none_and_bad_kind(monkeypatch):
    b = backend("none")
    monkeypatch.setattr(fw, "run", lambda *a, **kw: pytest.fail("firewall 'none' ran %r" % (a,)))
    b.others = {}
    cur = b.current(plan())
    assert cur == state(kind="none") and b.desired(plan(nat_sources=["10.0.0.0/8"]), cur) == cur
    assert b.changes(cur, cur) == [] and not b.owns(cur) and b.remove(cur) is None
    with pytest.raises(KiloError):
        fw.FirewallBackend(dict(host_settings({}), firewall="pf"))


def test_commands_are_module_constants(monkeypatch):
    seen = []

    def run(argv, stdin=None, ok_codes=(0,)):
        seen.append(argv[0])
        return 1, "", "Error: No such file or directory"

    monkeypatch.setattr(fw, "NFT", "/opt/nft")
    monkeypatch.setattr(fw, "IPTABLES", {4: "/opt/ipt", 6: "/opt/ipt6"})
    monkeypatch.setattr(fw, "run", run)
    assert backend("nftables").current(plan())["rules"] is None
    # a failing iptables-save means no leftovers can be there: reading stops
    assert seen == ["/opt/nft", "/opt/ipt-save"]
