"""Unit tests of a relay's host half (no kernel): the firewall's relay rule (nft and iptables), the
ICMP redirect sysctls netstate sets on a relay, and probe entries (no allowed IPs) in the WireGuard
backend's requests and in showconf. The kernel side: tests/host/test_relay_host.py."""

import json

from ansible_collections.kilo.mesh.plugins.module_utils.host import firewall as fw
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import redirects
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.kernel import (
    build_set_messages,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.uapi import build_set
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan

KEY = "A" * 43 + "="


def plan(relay=None, **firewall):
    if relay is not None:
        firewall["relay_accept"] = relay
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
    return fw.FirewallBackend(host_settings({"firewall": kind, "interface": "wgk0"}))


def test_relay_accept_stays_absent_unless_given():
    assert "relay_accept" not in plan()["firewall"]
    assert (
        plan(True)["firewall"]["relay_accept"] is True
        and plan(False)["firewall"]["relay_accept"] is False
    )


def test_nft_relay_rule_first_in_forward_and_alone_makes_a_table():
    b = backend("nftables")
    want = b.desired(plan(True), None)["rules"]
    assert want == {
        "sets": {},
        "chains": {
            "forward": (
                (("filter", "forward", 0)),
                ['meta iifname "wgk0" meta oifname "wgk0" counter accept'],
            )
        },
    }
    assert b.desired(plan(False), None)["rules"] is None
    with_fwd = b.desired(plan(True, forward_accept=["10.1.0.0/24"]), None)["rules"]["chains"][
        "forward"
    ][1]
    assert with_fwd[0] == fw.relay_rule("wgk0") and with_fwd[1] == "ip saddr @fwd_v4 accept"
    text = fw.nft_script(want)
    assert '\t\tmeta iifname "wgk0" meta oifname "wgk0" counter accept' in text.splitlines()


def test_nft_parse_of_the_relay_rule_equals_the_model_whatever_it_counted():
    """nft -j shows the counter's figures; they are not state, so a re-run compares equal."""

    def doc(packets):
        return {
            "nftables": [
                {"table": {"family": "inet", "name": "kilo_mesh"}},
                {
                    "chain": {
                        "name": "forward",
                        "type": "filter",
                        "hook": "forward",
                        "prio": 0,
                        "policy": "accept",
                    }
                },
                {
                    "rule": {
                        "chain": "forward",
                        "expr": [
                            {
                                "match": {
                                    "op": "==",
                                    "left": {"meta": {"key": "iifname"}},
                                    "right": "wgk0",
                                }
                            },
                            {
                                "match": {
                                    "op": "==",
                                    "left": {"meta": {"key": "oifname"}},
                                    "right": "wgk0",
                                }
                            },
                            {"counter": {"packets": packets, "bytes": 84 * packets}},
                            {"accept": None},
                        ],
                    }
                },
            ]
        }

    want = backend("nftables").desired(plan(True), None)["rules"]
    assert fw.nft_parse(doc(0)) == want == fw.nft_parse(doc(1234))
    b = backend("nftables")
    cur = {"kind": "nftables", "rules": fw.nft_parse(doc(7)), "leftovers": {}}
    assert b.changes(cur, b.desired(plan(True), cur)) == []
    gone = b.changes(cur, b.desired(plan(False), cur))
    assert gone == [
        "firewall (nftables): remove chain forward (filter forward 0)",
        'firewall (nftables): remove chain forward: meta iifname "wgk0" meta oifname "wgk0" counter accept',
    ]


def test_iptables_relay_rule_first_in_kilo_forward_ipv6_only_with_ipv6():
    b = backend("iptables")
    want = b.desired(plan(True, forward_accept=["10.1.0.0/24"]), None)["rules"]
    chain = want["ipv4"]["filter"]["chains"]["KILO-FORWARD"]
    assert chain[0] == '-A KILO-FORWARD -i wgk0 -o wgk0 -m comment --comment "kilo.mesh" -j ACCEPT'
    assert want["ipv4"]["filter"]["jumps"] == [
        '-A FORWARD -m comment --comment "kilo.mesh" -j KILO-FORWARD'
    ]
    assert want["ipv6"] == {}
    dual = b.desired(plan(True, forward_accept=["10.1.0.0/24", "fd00:1::/64"]), None)["rules"]
    assert dual["ipv6"]["filter"]["chains"]["KILO-FORWARD"][0] == chain[0]
    # what iptables-save prints reads back as the model
    save = (
        "*filter\n:FORWARD ACCEPT [0:0]\n:KILO-FORWARD - [0:0]\n"
        '-A FORWARD -m comment --comment "kilo.mesh" -j KILO-FORWARD\n'
        + "\n".join(chain)
        + "\nCOMMIT\n"
    )
    assert fw.ipt_parse(save) == want["ipv4"]


def test_iptables_relay_counter_sums_both_families(monkeypatch):
    rule = fw.ipt_relay_rule("wgk0")
    saves = {
        "iptables-save": "*filter\n[3:252] %s\n[9:900] -A KILO-FORWARD -s 10.1.0.0/24 -j ACCEPT\nCOMMIT\n"
        % rule,
        "ip6tables-save": "*filter\n[1:100] %s\nCOMMIT\n" % rule,
    }
    monkeypatch.setattr(fw, "run", lambda argv, stdin=None, ok_codes=(0,): (0, saves[argv[0]], ""))
    assert backend("iptables").relay_counter() == (4, 352)
    saves["ip6tables-save"] = "*filter\nCOMMIT\n"
    assert backend("iptables").relay_counter() == (3, 252)
    saves["iptables-save"] = saves["ip6tables-save"]
    assert backend("iptables").relay_counter() is None


def test_nft_relay_counter_reads_the_rule(monkeypatch):
    listing = {
        "nftables": [
            {
                "rule": {
                    "chain": "forward",
                    "expr": [
                        {
                            "match": {
                                "op": "==",
                                "left": {"meta": {"key": "iifname"}},
                                "right": "wgk0",
                            }
                        },
                        {
                            "match": {
                                "op": "==",
                                "left": {"meta": {"key": "oifname"}},
                                "right": "wgk0",
                            }
                        },
                        {"counter": {"packets": 5, "bytes": 420}},
                        {"accept": None},
                    ],
                }
            }
        ]
    }
    monkeypatch.setattr(
        fw, "run", lambda argv, stdin=None, ok_codes=(0,): (0, json.dumps(listing), "")
    )
    assert backend("nftables").relay_counter() == (5, 420)
    monkeypatch.setattr(
        fw, "run", lambda argv, stdin=None, ok_codes=(0,): (1, "", "No such file or directory")
    )
    assert backend("nftables").relay_counter() is None
    assert backend("none").relay_counter() is None


def test_redirects_only_on_a_relay(tmp_path):
    proc = tmp_path / "sys"
    conf = proc / "net" / "ipv4" / "conf"
    for d in ("all", "wgk0"):
        (conf / d).mkdir(parents=True)
        (conf / d / "send_redirects").write_text("1\n")
    assert (
        redirects.read("wgk0", plan(), str(proc)) == {}
        and redirects.desired("wgk0", plan(False)) == {}
    )
    cur = redirects.read("wgk0", plan(True), str(proc))
    want = redirects.desired("wgk0", plan(True))
    assert cur == {
        "net.ipv4.conf.all.send_redirects": "1",
        "net.ipv4.conf.wgk0.send_redirects": "1",
    }
    assert redirects.changes(cur, want) == [
        "sysctl net.ipv4.conf.all.send_redirects = 0 (was 1)",
        "sysctl net.ipv4.conf.wgk0.send_redirects = 0 (was 1)",
    ]
    redirects.apply(cur, want, str(proc))
    assert redirects.read("wgk0", plan(True), str(proc)) == want
    assert redirects.changes(want, want) == []
    # the interface not made yet (check mode, first converge): listed, applied once it exists
    assert (
        redirects.read("wgk1", plan(True), str(proc))["net.ipv4.conf.wgk1.send_redirects"] is None
    )


def test_probe_entries_carry_no_allowed_ips():
    """A probe: endpoint and keepalive, no allowed IPs, in both WireGuard requests; a relayed
    entry that becomes a probe has its allowed IPs cleared."""
    add = {
        "public_key": KEY,
        "endpoint": "203.0.113.20:51820",
        "persistent_keepalive": 25,
        "allowed_ips": [],
    }
    text = build_set(peers=[add])
    assert "allowed_ip=" not in text and "persistent_keepalive_interval=25" in text
    clear = {"public_key": KEY, "update_only": True, "replace_allowed_ips": True, "allowed_ips": []}
    text = build_set(peers=[clear])
    assert "replace_allowed_ips=true" in text and "allowed_ip=" not in text
    msgs = build_set_messages("wgk0", peers=[add])
    assert "WGPEER_A_ALLOWEDIPS" not in json.dumps(msgs, default=str)
    p = check_plan(
        {
            "name": "n",
            "leader": True,
            "segment": "location:one",
            "listen_port": 51820,
            "peers": [dict(add, name="location:b", probe=True)],
        },
        "wgk0",
    )
    assert p["peers"][0]["allowed_ips"] == [] and p["peers"][0]["probe"] is True


def test_showconf_renders_a_probe_without_allowed_ips():
    from ansible_collections.kilo.mesh.plugins.plugin_utils.showconf import wireguard_conf

    text = wireguard_conf(
        [
            {
                "public_key": KEY,
                "endpoint": "203.0.113.20:51820",
                "allowed_ips": [],
                "persistent_keepalive": 25,
            }
        ],
        51820,
    )
    assert text == (
        "[Interface]\nListenPort = 51820\n\n[Peer]\nEndpoint = 203.0.113.20:51820\n"
        "PersistentKeepalive = 25\nPublicKey = %s\n" % KEY
    )
