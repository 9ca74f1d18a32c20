"""A relay's host half on real NATs, real wireguard-go and real nftables (prefix krh,
KILO_TEST_PREFIX_RELAY_HOST): ``converge`` itself (every backend) runs in each lab host with a plan
written here the way docs/DESIGN.md's relayed topology lays it out, no engine involved.

Lab: 3 locations x 1 host; aws-1 public (the relay), gcp-1 and azure-1 each behind a NAT router of
the kind under test (eim, then symmetric). WireGuard IPs 10.4.0.1-3/16.

* relay (aws-1): a peer per NAT'd leader without endpoint (it learns their mappings), and
  ``firewall.relay_accept``: the nft rule ``iifname kilo0 oifname kilo0 counter accept`` counts what
  it forwards, and ``send_redirects`` is off (all and kilo0): the pings it relays make no ICMP
  redirect (measured without the plan's switch first: they do);
* NAT'd leaders: the relay's entry with endpoint and keepalive carries the other's WireGuard IP
  (``relayed``), and a ``probe`` entry for the other with its router's address as endpoint, a
  keepalive and no allowed IPs;
* both firewall backends: nftables behind eim, iptables behind symmetric;
* re-converging changes nothing (the counter's figures are no state); check mode shows the
  relay's changes and makes none;
* the probes: through two eim NATs the two NAT'd leaders handshake directly (WireGuard's
  retries punch the hole); through two symmetric ones they never do. Printed: seconds to the
  first probe handshake.
"""

import json
import os
import shutil
import time

import pytest

from lab.lab import Lab

PREFIX = os.environ.get("KILO_TEST_PREFIX_RELAY_HOST", "krh")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(REPO, ".collections")
PORT = 51820
WG = {"aws-1": "10.4.0.1", "gcp-1": "10.4.0.2", "azure-1": "10.4.0.3"}
SEGMENT = {"aws-1": "location:aws", "gcp-1": "location:gcp", "azure-1": "location:azure"}
NATTED = ("gcp-1", "azure-1")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the lab"),
    pytest.mark.skipif(not shutil.which("wireguard-go"), reason="needs wireguard-go"),
]

# Runs in a lab host: its key (made once), then converge() of the plan (or only the public key).
DRIVER = (
    r"""
import json, sys
sys.path.insert(0, %r)
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host import keys
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import converge
from ansible_collections.kilo.mesh.plugins.module_utils.host.firewall import FirewallBackend
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
req = json.load(sys.stdin)
settings = {"backend": "userspace", "boot_restore": False, "firewall": req["firewall"]}
if req["op"] == "key":
    out = {"public_key": keys.ensure_key("/var/lib/kilo/key")["public_key"]}
elif req["op"] == "remove":
    out = converge(None, dict(settings, state="absent"))
elif req["op"] == "counter":
    out = {"counter": FirewallBackend(host_settings(settings)).relay_counter()}
else:
    try:
        out = converge(req["plan"], settings, check_mode=req["op"] == "check")
    except KiloError as e:
        out = {"error": str(e)}
print(json.dumps(out))
"""
    % COLLECTIONS
)


def call(lab, host, op, plan=None):
    r = lab.run(
        host,
        ["/usr/bin/python3", "-c", DRIVER],
        input=json.dumps({"op": op, "plan": plan, "firewall": lab.firewall}),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert "error" not in out, out["error"]
    return out


@pytest.fixture(scope="module", params=["eim", "symmetric"])
def lab(request):
    lab = Lab(PREFIX)
    lab.down()
    lab.up(3, 1, 1, nat=[2, 3], nat_kind=request.param)
    try:
        lab.kind = request.param
        # both firewall backends on real tools: nftables behind eim, iptables behind symmetric
        lab.firewall = "nftables" if lab.kind == "eim" else "iptables"
        lab.keys = dict((h, call(lab, h, "key")["public_key"]) for h in WG)
        for h in WG:  # what the install step's sysctls do on a mesh host
            lab.run(h, ["sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)
        yield lab
    finally:
        lab.down()


def peer(lab, host, allowed, endpoint=None, keepalive=0, **extra):
    p = {
        "name": SEGMENT[host],
        "public_key": lab.keys[host],
        "endpoint": endpoint,
        "allowed_ips": allowed,
        "persistent_keepalive": keepalive,
    }
    p.update(extra)
    return p


def plan(host, peers, relay=None):
    p = {
        "name": host,
        "leader": True,
        "segment": SEGMENT[host],
        "interface": "kilo0",
        "listen_port": PORT,
        "address": WG[host] + "/16",
        "peers": peers,
        "firewall": {},
    }
    if relay is not None:
        p["firewall"]["relay_accept"] = relay
    return p


def relay_plan(lab, relay=True):
    return plan(
        "aws-1", [peer(lab, h, [WG[h] + "/32"], keepalive=0, roaming=True) for h in NATTED], relay
    )


def natted_plan(lab, host):
    other = [h for h in NATTED if h != host][0]
    relay = peer(
        lab,
        "aws-1",
        [WG["aws-1"] + "/32", WG[other] + "/32"],
        "%s:%d" % (lab.hosts["aws-1"]["public_ip"], PORT),
        25,
        relayed=[SEGMENT[other]],
    )
    probe = peer(lab, other, [], "%s:%d" % (lab.hosts[other]["nat_ip"], PORT), 25, probe=True)
    return plan(host, [relay, probe])


def redirects_sent(lab, host):
    out = lab.run(host, ["nstat", "-az", "IcmpOutRedirects"]).stdout
    return int(
        next(line.split()[1] for line in out.splitlines() if line.startswith("IcmpOutRedirects"))
    )


def ping(lab, src, dst, count=5):
    r = lab.run(src, ["ping", "-c", str(count), "-i", "0.2", "-W", "2", "-q", dst])
    return r.returncode == 0, r.stdout


def wg_peers(lab, host):
    """public key -> (endpoint, allowed ips, latest handshake) of host's kilo0."""
    out = {}
    for line in lab.run(host, ["wg", "show", "kilo0", "dump"]).stdout.splitlines()[1:]:
        f = line.split("\t")
        out[f[0]] = (f[2], f[3], int(f[4]))
    return out


def reaches(lab, src, dst, within=30):
    deadline = time.monotonic() + within
    while not ping(lab, src, dst, 2)[0]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def test_relay_forwards_counts_and_sends_no_redirect(lab):
    # without relay_accept first: the relay forwards (nothing drops here) but counts nothing, and
    # the kernel sends ICMP redirects for what leaves by the interface it came in on
    out = call(lab, "aws-1", "apply", relay_plan(lab, relay=False))
    assert out["changed"] and "firewall" not in out["changes"]
    for h in NATTED:
        assert call(lab, h, "apply", natted_plan(lab, h))["changed"]
    assert reaches(lab, "gcp-1", WG["aws-1"]) and reaches(lab, "azure-1", WG["aws-1"])
    before = redirects_sent(lab, "aws-1")
    started = time.monotonic()
    assert reaches(lab, "gcp-1", WG["azure-1"])
    plain = redirects_sent(lab, "aws-1") - before
    print(
        "\n%s: gcp-1 -> azure-1 through the relay after %.1f s; redirects the relay sent without the"
        " switch: %d" % (lab.kind, time.monotonic() - started, plain)
    )
    assert call(lab, "aws-1", "counter")["counter"] is None

    # check mode: the relay's rule and sysctls listed, nothing made
    out = call(lab, "aws-1", "check", relay_plan(lab))
    assert out["changed"]
    rule = (
        'firewall (nftables): add chain forward: meta iifname "kilo0" meta oifname "kilo0" counter accept'
        if lab.firewall == "nftables"
        else 'firewall (iptables): add ipv4 filter -A KILO-FORWARD -i kilo0 -o kilo0 -m comment --comment "kilo.mesh"'
        " -j ACCEPT"
    )
    assert rule in out["changes"]["firewall"], out["changes"]["firewall"]
    assert out["changes"]["netstate"] == [
        "sysctl net.ipv4.conf.all.send_redirects = 0 (was 1)",
        "sysctl net.ipv4.conf.kilo0.send_redirects = 0 (was 1)",
    ]
    assert out["diff"]["after"]["netstate"]["sysctls"] == {
        "net.ipv4.conf.all.send_redirects": "0",
        "net.ipv4.conf.kilo0.send_redirects": "0",
    }
    assert call(lab, "aws-1", "counter")["counter"] is None
    assert (
        lab.run("aws-1", ["sysctl", "-n", "net.ipv4.conf.kilo0.send_redirects"]).stdout.strip()
        == "1"
    )

    out = call(lab, "aws-1", "apply", relay_plan(lab))
    assert set(out["changes"]) == {"firewall", "netstate"}, out["changes"]
    before = redirects_sent(lab, "aws-1")
    ok, text = ping(lab, "gcp-1", WG["azure-1"], 10)
    assert ok, text
    ok, text = ping(lab, "azure-1", WG["gcp-1"], 10)
    assert ok, text
    packets, nbytes = call(lab, "aws-1", "counter")["counter"]
    sent = redirects_sent(lab, "aws-1") - before
    print(
        "%s: 10 pings each way relayed: the relay rule (%s) counted %d packets, %d bytes; redirects sent: %d"
        % (lab.kind, lab.firewall, packets, nbytes, sent)
    )
    assert packets >= 40 and sent == 0
    # idempotent: the counter's figures are no state, the learned endpoints stay (roaming)
    for h in ("aws-1",) + NATTED:
        out = call(lab, h, "apply", relay_plan(lab) if h == "aws-1" else natted_plan(lab, h))
        assert not out["changed"], (h, out["changes"])
    # the relay's entries learned the NAT mappings (router address, port kept or not)
    learned = wg_peers(lab, "aws-1")
    for h in NATTED:
        assert learned[lab.keys[h]][0].startswith(lab.hosts[h]["nat_ip"] + ":"), learned
    # without relaying the rule goes, the sysctls stay (documented)
    out = call(lab, "aws-1", "apply", relay_plan(lab, relay=False))
    assert set(out["changes"]) == {"firewall"}
    assert call(lab, "aws-1", "counter")["counter"] is None


def test_probe_entries_have_no_allowed_ips_and_punch_through_eim_only(lab):
    for h in NATTED:  # no session left from the test before: the probes start afresh
        assert call(lab, h, "remove")["changed"]
    call(lab, "aws-1", "apply", relay_plan(lab))
    started = time.monotonic()
    for h in NATTED:
        call(lab, h, "apply", natted_plan(lab, h))
    for h in NATTED:
        other = [o for o in NATTED if o != h][0]
        entry = wg_peers(lab, h)[lab.keys[other]]
        assert entry[1] == "(none)" and entry[0] == "%s:%d" % (lab.hosts[other]["nat_ip"], PORT), (
            entry
        )
    # WireGuard retries a handshake every 5 s: two NAT'd ends sending at once meet within a few
    deadline = started + 20
    took = None
    while time.monotonic() < deadline:
        if all(wg_peers(lab, h)[lab.keys[[o for o in NATTED if o != h][0]]][2] for h in NATTED):
            took = time.monotonic() - started
            break
        time.sleep(0.5)
    print(
        "\n%s: probe handshake between gcp-1 and azure-1: %s"
        % (lab.kind, "after %.1f s" % took if took is not None else "none in 20 s")
    )
    if lab.kind == "eim":
        assert took is not None
    else:
        assert took is None
    # the relayed path is untouched either way
    assert ping(lab, "gcp-1", WG["azure-1"], 3)[0]


SHOWCONF = (
    r"""
import json, sys
sys.path.insert(0, %r)
from ansible_collections.kilo.mesh.plugins.plugin_utils.showconf import wireguard_conf
print(wireguard_conf(json.load(sys.stdin), 51821))
"""
    % COLLECTIONS
)


def test_showconf_of_a_probe_is_valid_for_wg_setconf(lab):
    """showconf's rendering of a NAT'd leader's entries (the relay's and a probe) applied with
    ``wg setconf`` to a throwaway wireguard-go interface: the probe comes out without allowed IPs."""
    if lab.kind != "eim":
        pytest.skip("once is enough")
    entries = natted_plan(lab, "gcp-1")["peers"]
    text = lab.run("gcp-1", ["/usr/bin/python3", "-c", SHOWCONF], input=json.dumps(entries)).stdout
    assert text.count("AllowedIPs") == 1, text
    script = (
        "wireguard-go kxp0 && printf '%s' > /tmp/kxp0.conf && wg setconf kxp0 /tmp/kxp0.conf && "
        "wg show kxp0 dump; ip link del kxp0" % text
    )
    out = lab.run(
        "gcp-1",
        ["sh", "-c", script],
        env=dict(os.environ, WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD="1"),
    )
    assert out.returncode == 0, out.stderr
    dump = dict((line.split("\t")[0], line.split("\t")) for line in out.stdout.splitlines()[1:])
    assert dump[lab.keys["azure-1"]][3] == "(none)" and dump[lab.keys["azure-1"]][2].endswith(
        ":%d" % PORT
    )
    assert dump[lab.keys["aws-1"]][3] == "%s/32,%s/32" % (WG["aws-1"], WG["azure-1"])
