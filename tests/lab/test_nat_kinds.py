"""The lab's NAT kinds are what they claim (prefix knk): real nftables masquerade in a router's
namespace, real UDP sockets in the hosts.

One lab of 3 locations x 2 hosts, 2 public each: aws is public, gcp sits behind an ``eim`` router
(masquerade keeping the source port, no unsolicited inbound), azure behind a ``symmetric`` one
(``masquerade fully-random``, no unsolicited inbound). An inside host sends from one UDP socket to
two outside hosts, which print the source address and port they see:

* eim: both see one port (the host's own: masquerade kept it); symmetric: two different ones;
* a packet from outside to the router's address reaches no inside host, whether it comes first
  (before any mapping: and it must not take the port away, or hole punching breaks) or from an
  outside host the inside one never sent to (address-dependent filtering); the replies of the
  host it sent to pass;
* ``lab.remap`` gives the router a new address: the same socket's next packet arrives from it;
* ``lab.dark`` drops everything of a host, ``lab.light`` undoes it.
"""

import os

import pytest

from lab.lab import Lab, LabError, nat_kinds, nat_ruleset, plan_lab

import udp_peers

PREFIX = os.environ.get("KILO_TEST_PREFIX_NAT_KINDS", "knk")
PORT = 51820  # the inside hosts' socket (WireGuard's port, as a NAT'd leader's)
OUT_PORT = 5000  # the outside hosts' sockets

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")


def test_plan_takes_one_kind_or_one_per_location():
    assert nat_kinds([2, 3]) == {2: "plain", 3: "plain"}
    assert nat_kinds([2, 3], "eim") == {2: "eim", 3: "eim"}
    assert nat_kinds([2, 3], {3: "symmetric"}) == {2: "plain", 3: "symmetric"}
    with pytest.raises(LabError, match="not one of"):
        nat_kinds([2], "cone")
    with pytest.raises(LabError, match="not behind NAT"):
        nat_kinds([2], {1: "eim"})
    p = plan_lab(
        3,
        1,
        1,
        nat=[2, 3],
        nat_kind={2: "eim", 3: "symmetric"},
        mgmt_net="198.18.16.0/20",
        prefix="kx",
    )
    assert p["routers"]["gcp"]["kind"] == "eim" and p["routers"]["azure"]["kind"] == "symmetric"
    assert p["routers"]["gcp"]["addresses"] == ["203.0.113.20", "203.0.113.29"]
    assert "fully-random" in nat_ruleset("kx", "symmetric") and "fully-random" not in nat_ruleset(
        "kx", "eim"
    )
    assert "policy drop" in nat_ruleset("kx", "eim") and "policy drop" not in nat_ruleset(
        "kx", "plain"
    )


@pytest.fixture(scope="module")
def lab():
    lab = Lab(PREFIX)
    lab.down()
    lab.up(3, 2, 2, nat=[2, 3], nat_kind={2: "eim", 3: "symmetric"})
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture
def peers(lab):
    made = []

    def peer(host, port):
        p = udp_peers.UdpPeer(lab, host, port)
        made.append(p)
        return p

    yield peer
    for p in made:
        p.close()


def test_routers_run_the_kinds_ruleset(lab):
    for loc, kind in (("gcp", "eim"), ("azure", "symmetric")):
        r = lab.router(loc)
        assert r["kind"] == kind
        text = lab.run_router(loc, ["nft", "list", "table", "inet", "%s_nat" % PREFIX]).stdout
        assert "policy drop" in text and ("fully-random" in text) == (kind == "symmetric"), text


def mapped_ports(lab, peers, location):
    """The inside host <location>-1 sends from PORT to aws-1 and aws-2: {outside host: (address, port)}."""
    inside = peers("%s-1" % location, PORT)
    outside = dict((h, peers(h, OUT_PORT)) for h in ("aws-1", "aws-2"))
    for h in outside:
        inside.send(lab.hosts[h]["public_ip"], OUT_PORT, "hello %s" % h)
    seen = {}
    for h, p in outside.items():
        src, dummy = p.wait_for("hello %s" % h)
        seen[h] = src
    return inside, outside, seen


def test_eim_keeps_one_port_for_every_destination(lab, peers):
    inside, outside, seen = mapped_ports(lab, peers, "gcp")
    router = lab.router("gcp")["public_ip"]
    print(
        "\neim: gcp-1 %s:%d seen by aws-1 as %s:%d, by aws-2 as %s:%d"
        % ((lab.hosts["gcp-1"]["public_ip"], PORT) + seen["aws-1"] + seen["aws-2"])
    )
    assert seen["aws-1"][0] == seen["aws-2"][0] == router
    assert seen["aws-1"][1] == seen["aws-2"][1] == PORT
    # the replies pass (conntrack's established entries)
    outside["aws-1"].send(router, PORT, "reply aws-1")
    assert inside.wait_for("reply aws-1")[0] == (lab.hosts["aws-1"]["public_ip"], OUT_PORT)


def test_symmetric_maps_a_port_per_destination(lab, peers):
    inside, outside, seen = mapped_ports(lab, peers, "azure")
    router = lab.router("azure")["public_ip"]
    print(
        "\nsymmetric: azure-1 %s:%d seen by aws-1 as %s:%d, by aws-2 as %s:%d"
        % ((lab.hosts["azure-1"]["public_ip"], PORT) + seen["aws-1"] + seen["aws-2"])
    )
    assert seen["aws-1"][0] == seen["aws-2"][0] == router
    assert seen["aws-1"][1] != seen["aws-2"][1]
    # a mapping is for the destination it was made for: aws-2 sending to aws-1's port gets nowhere
    outside["aws-2"].send(router, seen["aws-1"][1], "crossed")
    outside["aws-1"].send(router, seen["aws-1"][1], "reply aws-1")
    assert inside.wait_for("reply aws-1")[0] == (lab.hosts["aws-1"]["public_ip"], OUT_PORT)
    assert not inside.saw("crossed", wait=1.0)


@pytest.mark.parametrize("location", ["gcp", "azure"])
def test_no_unsolicited_inbound(lab, peers, location):
    """Outside first (a punch before the inside host sent), then from a host never sent to: neither
    reaches the inside host; under eim the early punch did not take the port (hole punching
    works: the inside host's packet then leaves with its own port and the answer comes back)."""
    host = "%s-2" % location  # a host whose socket has sent nothing yet
    inside = peers(host, PORT)
    a1, a2 = peers("aws-1", OUT_PORT + 1), peers("aws-2", OUT_PORT + 1)
    router = lab.router(location)["public_ip"]
    a1.send(router, PORT, "punch early")
    assert not inside.saw("punch early", wait=1.0)
    inside.send(lab.hosts["aws-1"]["public_ip"], OUT_PORT + 1, "out")
    src, dummy = a1.wait_for("out")
    print(
        "\n%s (%s): %s:%d after an early punch at port %d is seen as %s:%d"
        % (
            location,
            lab.router(location)["kind"],
            lab.hosts[host]["public_ip"],
            PORT,
            PORT,
            src[0],
            src[1],
        )
    )
    if lab.router(location)["kind"] == "eim":
        assert src == (router, PORT)
    a2.send(router, src[1], "stranger")
    a1.send(router, src[1], "answer")
    assert inside.wait_for("answer")[0] == (lab.hosts["aws-1"]["public_ip"], OUT_PORT + 1)
    assert not inside.saw("stranger", wait=1.0)
    assert not inside.saw("punch early", wait=0)


def test_remap_moves_the_mapping(lab, peers):
    inside = peers("gcp-1", PORT + 1)
    a1 = peers("aws-1", OUT_PORT + 2)
    old = lab.router("gcp")["public_ip"]
    inside.send(lab.hosts["aws-1"]["public_ip"], OUT_PORT + 2, "before")
    assert a1.wait_for("before")[0] == (old, PORT + 1)
    new = lab.remap("gcp")
    try:
        assert new != old and lab.router("gcp")["public_ip"] == new == lab.hosts["gcp-1"]["nat_ip"]
        with open(lab.inventory) as f:
            assert ('kilo_lab_nat_ip: "%s"' % new) in f.read()
        inside.send(lab.hosts["aws-1"]["public_ip"], OUT_PORT + 2, "after")
        src = a1.wait_for("after")[0]
        print("\nremap: gcp-1's mapping %s:%d -> %s:%d" % (old, PORT + 1, src[0], src[1]))
        assert src[0] == new
        # the old mapping is gone: an answer to it reaches nobody
        a1.send(old, PORT + 1, "to the old one")
        assert not inside.saw("to the old one", wait=1.0)
    finally:
        assert lab.remap("gcp") == old


def test_dark_drops_everything_and_light_undoes_it(lab, peers):
    a1, a2 = peers("aws-1", OUT_PORT + 3), peers("aws-2", OUT_PORT + 3)
    to_a2 = lab.hosts["aws-2"]["public_ip"]
    a1.send(to_a2, OUT_PORT + 3, "lit")
    a2.wait_for("lit")
    lab.dark("aws-2")
    try:
        a1.send(to_a2, OUT_PORT + 3, "in the dark")
        assert not a2.saw("in the dark", wait=1.0)
        assert lab.run("aws-1", ["ping", "-c", "1", "-W", "1", to_a2]).returncode != 0
    finally:
        lab.light("aws-2")
    a1.send(to_a2, OUT_PORT + 3, "lit again")
    a2.wait_for("lit again")
    assert lab.run("aws-1", ["ping", "-c", "1", "-W", "2", to_a2]).returncode == 0
    lab.light("aws-2")  # a no-op now
