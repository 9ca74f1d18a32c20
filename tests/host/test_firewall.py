"""FirewallBackend against real nftables / iptables(-nft), inside namespaces this test creates (kn).

Includes a traffic test: client -> router -> server, where the router runs our NAT; the server
reports the source address it sees.
"""

import json
import os
import subprocess
import sys
import uuid

import pytest

import backendtools
from backendtools import sh

HOST_PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")


def run_backend(ns, kind, plan, ops, python=HOST_PY):
    return backendtools.run_backend(
        ns, "firewall", "FirewallBackend", plan, ops, {"firewall": kind}, python
    )


@pytest.fixture
def namespaces():
    made = []

    def make():
        ns = "kn%s" % uuid.uuid4().hex[:8]
        sh("ip", "netns", "add", ns)
        made.append(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        return ns

    yield make
    for ns in made:
        sh("ip", "netns", "del", ns, check=False)


def plan_fw(**fw):
    base = {
        "nat_sources": ["10.96.1.0/24", "fd96:1::/64"],
        "nat_exempt_destinations": ["10.96.3.0/24", "10.4.0.0/16"],
        "forward_accept": ["10.96.1.0/24"],
        "ipip_accept_sources": ["10.96.2.2/32"],
    }
    base.update(fw)
    return {
        "name": "router",
        "leader": True,
        "segment": "location:lab",
        "listen_port": 51820,
        "firewall": base,
    }


def nft_json(ns, *what):
    return json.loads(sh("ip", "netns", "exec", ns, "nft", "-j", "list", *what).stdout)["nftables"]


FOREIGN_NFT = """table inet kn_foreign {
  chain input {
    type filter hook input priority 10; policy accept;
    ip saddr 10.200.0.0/16 counter
  }
}
"""


def test_nftables_converge_idempotent_drift_remove(namespaces):
    ns = namespaces()
    sh("ip", "netns", "exec", ns, "nft", "-f", "-", input=FOREIGN_NFT)

    out = run_backend(ns, "nftables", plan_fw(), ["check"])
    assert out["before"] == [] and out["check"]
    assert "set nat_src_v4 ipv4_addr { 10.96.1.0/24 }" in out["after"]
    assert (
        sh(
            "ip", "netns", "exec", ns, "nft", "list", "table", "inet", "kilo_mesh", check=False
        ).returncode
        != 0
    )  # check mode made nothing

    out = run_backend(ns, "nftables", plan_fw(), ["apply", "check", "render"])
    assert out["planned"] and out["check"] == []
    assert "set nat_src_v4 ipv4_addr { 10.96.1.0/24 }" in out["render"]
    text = sh("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "kilo_mesh").stdout
    assert "type nat hook postrouting priority srcnat" in text
    assert "ip saddr @nat_src_v4 jump nat" in text and "ip6 saddr @nat_src_v6 jump nat" in text
    assert "masquerade" in text and "ip daddr @nat_exempt_v4 return" in text
    assert "elements = { 10.4.0.0/16, 10.96.3.0/24 }" in text
    handle = [
        i["table"]["handle"] for i in nft_json(ns, "table", "inet", "kilo_mesh") if "table" in i
    ]

    # unchanged run: the table is not even replaced (same handle)
    out = run_backend(ns, "nftables", plan_fw(), ["apply"])
    assert out["planned"] == []
    assert handle == [
        i["table"]["handle"] for i in nft_json(ns, "table", "inet", "kilo_mesh") if "table" in i
    ]

    # drift inside our table is seen and repaired; foreign edits are not ours to keep
    sh(
        "ip",
        "netns",
        "exec",
        ns,
        "nft",
        "add",
        "rule",
        "inet",
        "kilo_mesh",
        "forward",
        "ip",
        "saddr",
        "10.99.0.0/16",
        "drop",
    )
    sh(
        "ip",
        "netns",
        "exec",
        ns,
        "nft",
        "add",
        "element",
        "inet",
        "kilo_mesh",
        "nat_src_v4",
        "{",
        "10.97.0.0/16",
        "}",
    )
    out = run_backend(ns, "nftables", plan_fw(), ["check"])
    assert any("10.99.0.0/16" in c for c in out["check"])
    assert any("10.97.0.0/16" in c for c in out["check"])
    out = run_backend(ns, "nftables", plan_fw(), ["apply", "check"])
    assert out["check"] == []
    assert (
        "10.99.0.0"
        not in sh("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "kilo_mesh").stdout
    )

    # a changed plan: lists shrink, IPIP filtering goes away
    out = run_backend(
        ns,
        "nftables",
        plan_fw(ipip_accept_sources=[], nat_sources=["10.96.1.0/24"]),
        ["apply", "check"],
    )
    assert out["check"] == []
    text = sh("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "kilo_mesh").stdout
    assert "chain input" not in text and "nat_src_v6" not in text

    # foreign table untouched throughout; remove drops only ours
    out = run_backend(ns, "nftables", plan_fw(), ["remove"])
    assert out["removed"] is True
    tables = [i["table"]["name"] for i in nft_json(ns, "tables") if "table" in i]
    assert tables == ["kn_foreign"]
    assert (
        "10.200.0.0/16"
        in sh("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "kn_foreign").stdout
    )
    assert run_backend(ns, "nftables", plan_fw(), ["remove"])["removed"] is False


def test_nftables_empty_plan_means_no_table(namespaces):
    ns = namespaces()
    empty = dict(plan_fw(), firewall={})
    assert run_backend(ns, "nftables", empty, ["check"])["check"] == []
    run_backend(ns, "nftables", plan_fw(), ["apply"])
    out = run_backend(ns, "nftables", empty, ["apply", "check"])
    assert out["planned"] and out["check"] == []
    assert (
        sh(
            "ip", "netns", "exec", ns, "nft", "list", "table", "inet", "kilo_mesh", check=False
        ).returncode
        != 0
    )


def test_bad_input_names_field(namespaces):
    ns = namespaces()
    # the plan is checked at the module boundary; the backend never sees a bad list
    out = run_backend(ns, "nftables", plan_fw(forward_accept=["10.1.0.0/16", "bogus"]), ["check"])
    assert out["error"] == "host 'router': plan.firewall.forward_accept[1]: 'bogus' is not a CIDR"


def ipt_save(ns, cmd="iptables"):
    return sh("ip", "netns", "exec", ns, cmd + "-save").stdout


def nat_rules(ns):
    return [
        l
        for l in sh("ip", "netns", "exec", ns, "iptables-save", "-t", "nat").stdout.splitlines()
        if l.startswith("-A")
    ]


def test_iptables_converge_idempotent_remove(namespaces):
    ns = namespaces()
    ex = ("ip", "netns", "exec", ns)
    sh(*ex, "iptables", "-N", "KN-FOREIGN")
    sh(*ex, "iptables", "-A", "KN-FOREIGN", "-s", "10.200.0.0/16", "-j", "RETURN")
    sh(*ex, "iptables", "-A", "FORWARD", "-j", "KN-FOREIGN")
    sh(*ex, "iptables", "-A", "FORWARD", "-j", "DROP")
    sh(*ex, "iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "10.201.0.0/16", "-j", "MASQUERADE")

    out = run_backend(ns, "iptables", plan_fw(), ["check"])
    assert out["check"] and "KILO" not in ipt_save(ns)

    out = run_backend(ns, "iptables", plan_fw(), ["apply", "check"])
    assert out["planned"] and out["check"] == []
    save = ipt_save(ns)
    assert '-A POSTROUTING -s 10.96.1.0/24 -m comment --comment "kilo.mesh" -j KILO-NAT' in save
    assert '-A KILO-NAT -d 10.96.3.0/24 -m comment --comment "kilo.mesh" -j RETURN' in save
    assert '-A KILO-NAT -m comment --comment "kilo.mesh" -j MASQUERADE' in save
    assert '-A KILO-IPIP -s 10.96.2.2/32 -m comment --comment "kilo.mesh" -j ACCEPT' in save
    # our forward jump comes before the foreign DROP
    fwd = [l for l in save.splitlines() if l.startswith("-A FORWARD")]
    assert fwd[0].endswith("-j KILO-FORWARD") and fwd[-1] == "-A FORWARD -j DROP"
    save6 = ipt_save(ns, "ip6tables")
    assert '-A POSTROUTING -s fd96:1::/64 -m comment --comment "kilo.mesh" -j KILO-NAT' in save6
    assert "KILO-IPIP" not in save6  # nothing IPv6 to accept: no chain

    assert run_backend(ns, "iptables", plan_fw(), ["apply"])["planned"] == []
    nat_before = nat_rules(ns)
    # changed plan: one table changes, the other commit is skipped
    out = run_backend(
        ns, "iptables", plan_fw(forward_accept=["10.96.1.0/24", "10.96.5.0/24"]), ["apply", "check"]
    )
    assert out["check"] == [] and out["planned"]
    assert all("KILO-FORWARD" in c or "FORWARD" in c for c in out["planned"])
    assert "-A KILO-FORWARD -d 10.96.5.0/24" in ipt_save(ns)
    assert nat_rules(ns) == nat_before

    out = run_backend(ns, "iptables", plan_fw(), ["remove"])
    assert out["removed"]
    save = ipt_save(ns)
    assert "KILO" not in save and "KILO" not in ipt_save(ns, "ip6tables")
    assert "-A KN-FOREIGN -s 10.200.0.0/16 -j RETURN" in save
    assert "-A FORWARD -j KN-FOREIGN" in save and "-A FORWARD -j DROP" in save
    assert "-A POSTROUTING -s 10.201.0.0/16 -j MASQUERADE" in save


SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7107)); s.listen(8)
print("ready", flush=True)
while True:
    c, addr = s.accept()
    c.sendall(addr[0].encode()); c.close()
"""

CLIENT = r"""
import socket, sys
c = socket.create_connection((sys.argv[1], 7107), timeout=5)
print(c.recv(64).decode())
"""


@pytest.fixture
def nat_lab(namespaces):
    """client (10.96.1.2) -- router (10.96.1.1 | 10.96.2.1) -- server (10.96.2.2, 10.96.3.2)."""
    client, router, server = namespaces(), namespaces(), namespaces()
    tag = client[2:8]
    for a, b, ns_a, ns_b in (
        ("kc" + tag, "kr" + tag, client, router),
        ("ks" + tag, "kt" + tag, server, router),
    ):
        sh(
            "ip",
            "link",
            "add",
            "kn" + a,
            "netns",
            ns_a,
            "type",
            "veth",
            "peer",
            "name",
            "kn" + b,
            "netns",
            ns_b,
        )
        sh("ip", "-n", ns_a, "link", "set", "kn" + a, "up")
        sh("ip", "-n", ns_b, "link", "set", "kn" + b, "up")
    sh("ip", "-n", client, "addr", "add", "10.96.1.2/24", "dev", "knkc" + tag)
    sh("ip", "-n", client, "route", "add", "default", "via", "10.96.1.1")
    sh("ip", "-n", router, "addr", "add", "10.96.1.1/24", "dev", "knkr" + tag)
    sh("ip", "-n", router, "addr", "add", "10.96.2.1/24", "dev", "knkt" + tag)
    sh("ip", "-n", router, "route", "add", "10.96.3.0/24", "via", "10.96.2.2")
    sh("ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    sh("ip", "-n", server, "addr", "add", "10.96.2.2/24", "dev", "knks" + tag)
    sh("ip", "-n", server, "addr", "add", "10.96.3.2/24", "dev", "knks" + tag)
    sh("ip", "-n", server, "route", "add", "default", "via", "10.96.2.1")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", server, sys.executable, "-c", SERVER],
        stdout=subprocess.PIPE,
        universal_newlines=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield client, router, server
    finally:
        proc.kill()  # our own server, by its handle
        proc.wait()


def seen_source(client, dst):
    return sh("ip", "netns", "exec", client, sys.executable, "-c", CLIENT, dst).stdout.strip()


@pytest.mark.parametrize("kind", ["nftables", "iptables"])
def test_nat_masquerades_except_exempt(nat_lab, kind):
    client, router, server = nat_lab
    # without our NAT the server sees the client itself
    assert seen_source(client, "10.96.2.2") == "10.96.1.2"
    out = run_backend(router, kind, plan_fw(), ["apply"])
    assert out["planned"] and "error" not in out
    assert seen_source(client, "10.96.2.2") == "10.96.2.1"  # masqueraded to the router
    assert seen_source(client, "10.96.3.2") == "10.96.1.2"  # exempt destination: not NATed
    run_backend(router, kind, plan_fw(), ["remove"])
    assert seen_source(client, "10.96.2.2") == "10.96.1.2"


def test_switching_backend_removes_what_the_other_one_made(namespaces):
    ns = namespaces()
    sh("ip", "netns", "exec", ns, "nft", "-f", "-", input=FOREIGN_NFT)

    def ours():
        nft = (
            sh(
                "ip", "netns", "exec", ns, "nft", "list", "table", "inet", "kilo_mesh", check=False
            ).returncode
            == 0
        )
        ipt = "KILO-NAT" in sh("ip", "netns", "exec", ns, "iptables-save", "-t", "nat").stdout
        return nft, ipt

    run_backend(ns, "nftables", plan_fw(), ["apply"])
    assert ours() == (True, False)
    out = run_backend(ns, "iptables", plan_fw(), ["check"])
    assert any("firewall=nftables" in c for c in out["check"]), out["check"]
    assert ours() == (True, False)  # check mode left both as they were
    out = run_backend(ns, "iptables", plan_fw(), ["apply", "check"])
    assert out["check"] == [] and ours() == (False, True)
    assert run_backend(ns, "iptables", plan_fw(), ["check"])["check"] == []  # settled
    # firewall: none still owns (and removes) what either implementation made
    assert run_backend(ns, "none", plan_fw(), ["remove"])["removed"] is True
    assert ours() == (False, False)
    assert run_backend(ns, "none", plan_fw(), ["remove"])["removed"] is False
    assert "kn_foreign" in sh("ip", "netns", "exec", ns, "nft", "list", "tables").stdout


@pytest.mark.parametrize("kind", ["nftables", "iptables"])
def test_relay_accept_rule_is_first_idempotent_and_removed_alone(namespaces, kind):
    """A relay's rule (firewall.relay_accept) on the real tools: first in our forward chain, the
    same on a re-run whatever it counted, gone when the plan stops relaying (the rest stays)."""
    ns = namespaces()
    relay = plan_fw(relay_accept=True)
    out = run_backend(ns, kind, relay, ["apply", "check"])
    assert out["planned"] and out["check"] == []
    if kind == "nftables":
        text = sh(
            "ip", "netns", "exec", ns, "nft", "list", "chain", "inet", "kilo_mesh", "forward"
        ).stdout
        rules = [l.strip() for l in text.splitlines() if "accept" in l and "policy" not in l]
        assert rules[0].startswith(
            'iifname "kilo0" oifname "kilo0" counter packets 0 bytes 0 accept'
        ), rules
    else:
        fwd = [l for l in ipt_save(ns).splitlines() if l.startswith("-A KILO-FORWARD")]
        assert (
            fwd[0] == '-A KILO-FORWARD -i kilo0 -o kilo0 -m comment --comment "kilo.mesh" -j ACCEPT'
        ), fwd
        # the plan has IPv6 (nat_sources): the rule in ip6tables too
        assert fwd[0] in ipt_save(ns, "ip6tables")
    assert run_backend(ns, kind, relay, ["check"])["check"] == []
    out = run_backend(ns, kind, plan_fw(), ["apply", "check"])
    # only removals: the rule (with iptables, IPv6's chain and jump that held nothing else too)
    assert out["check"] == [] and any("kilo0" in line for line in out["planned"])
    assert all(line.startswith("firewall (%s): remove " % kind) for line in out["planned"]), out[
        "planned"
    ]
    listing = (
        ipt_save(ns)
        if kind == "iptables"
        else sh("ip", "netns", "exec", ns, "nft", "list", "ruleset").stdout
    )
    assert "kilo0" not in listing and "10.96.1.0/24" in listing
