# -*- coding: utf-8 -*-
"""Fidelity audit against Kilo's Go code: one test per difference found, expectations by hand.

Each test names the Go function whose behaviour it pins down.
"""

import base64

from flat_plans import build_plans


def key(i):
    return base64.b64encode(bytes([i]) * 32).decode()


def node(name, location, internal, pod, endpoint, number, **extra):
    item = {
        "name": name,
        "location": location,
        "internal_ip": internal,
        "pod_cidr": pod,
        "endpoint": endpoint,
        "public_key": key(number),
    }
    item.update(extra)
    return item


def leader_of(*specs):
    """Leader of location "x" for nodes (name, endpoint, leader hint), internal IPs 10.0.0.N."""
    nodes = [
        node(name, "x", "10.0.0.%d/24" % (i + 1), "10.2.%d.0/24" % i, endpoint, i + 1, leader=hint)
        for i, (name, endpoint, hint) in enumerate(specs)
    ]
    return dict((s["key"], s["leader"]) for s in build_plans(nodes, [])["segments"])["location:x"]


# --- topology.go findLeader / ip.go isPublic: a DNS endpoint has no IP (Endpoint.IP() is nil
# until resolved), and isPublic(nil) is false, so a DNS name never counts as public.


def test_dns_endpoint_is_not_public():
    # nobody hinted, nobody public: the first by name leads, not the DNS-named node
    assert (
        leader_of(("n1", "10.0.0.1:51820", False), ("n2", "edge.example.org:51820", False)) == "n1"
    )
    # a public IP wins over a DNS name that sorts first
    assert (
        leader_of(
            ("n1", "edge.example.org:51820", False),
            ("n2", "10.0.0.2:51820", False),
            ("n3", "203.0.113.3:51820", False),
        )
        == "n3"
    )


def test_hinted_dns_endpoint_is_hinted_but_not_hinted_public():
    # hinted DNS: remembered as hinted; a later hinted public node returns at once
    assert (
        leader_of(("n1", "edge.example.org:51820", True), ("n2", "203.0.113.2:51820", True)) == "n2"
    )
    # hinted beats unhinted public
    assert (
        leader_of(("n1", "edge.example.org:51820", True), ("n2", "203.0.113.2:51820", False))
        == "n1"
    )


# --- wireguard/conf.go ParseEndpoint (cutIP): an IPv4-mapped IPv6 endpoint becomes IPv4, so
# isPublic judges it as IPv4 and it prints as a plain IPv4 endpoint.


def test_ipv4_mapped_endpoint_is_ipv4():
    # n1's endpoint is 10.0.0.1 in disguise: private; n2's fd12:: address is public for Kilo
    assert (
        leader_of(("n1", "[::ffff:10.0.0.1]:51820", False), ("n2", "[fd12::2]:51820", False))
        == "n2"
    )
    nodes = [
        node("a", "1", "10.1.0.1/16", "10.2.1.0/24", "[::FFFF:203.0.113.1]:51820", 1),
        node("b", "2", "10.20.0.1/16", "10.2.2.0/24", "[::ffff:10.20.0.1]:51821", 2),
    ]
    result = build_plans(nodes, [])
    assert [s["endpoint"] for s in result["segments"]] == ["203.0.113.1:51820", "10.20.0.1:51821"]
    # routes.go Routes (leader): b's internal IP equals b's endpoint IP, so a does not route it
    assert [r["dst"] for r in result["plans"]["a"]["routes"]] == ["10.2.2.0/24"]


def test_ipv4_mapped_discovered_endpoint_is_ipv4():
    nodes = [
        node(
            "a",
            "1",
            "10.1.0.1/16",
            "10.2.1.0/24",
            "203.0.113.1:51820",
            1,
            discovered_endpoints={key(2): "[::ffff:198.51.100.7]:40000"},
        ),
        node(
            "b", "2", "10.20.0.1/16", "10.2.2.0/24", "203.0.113.2:51820", 2, persistent_keepalive=25
        ),
    ]
    peers = build_plans(nodes, [])["plans"]["a"]["peers"]
    assert peers[0]["endpoint"] == "198.51.100.7:40000"


# --- wgtypes.ParseKey / Key.String: keys are printed in canonical base64. A key whose last
# character carries non-zero padding bits decodes to the same 32 bytes.


def test_public_keys_are_canonical_base64():
    canonical = "A" * 43 + "="
    sloppy = "A" * 42 + "B="  # same 32 zero bytes, non-zero trailing bits
    nodes = [
        node(
            "a",
            "1",
            "10.1.0.1/16",
            "10.2.1.0/24",
            "203.0.113.1:51820",
            1,
            discovered_endpoints={sloppy: "198.51.100.7:40000"},
        ),
        node(
            "b", "2", "10.20.0.1/16", "10.2.2.0/24", "203.0.113.2:51820", 2, persistent_keepalive=25
        ),
    ]
    nodes[1]["public_key"] = sloppy
    result = build_plans(
        nodes, [{"name": "p", "public_key": " " + key(7) + " ", "allowed_ips": ["10.9.0.1/32"]}]
    )
    assert result["segments"][1]["public_key"] == canonical
    peers = result["plans"]["a"]["peers"]
    assert peers[0]["public_key"] == canonical
    # the discovered endpoint recorded under the sloppy spelling still belongs to b
    assert peers[0]["endpoint"] == "198.51.100.7:40000"
    assert peers[1]["public_key"] == key(7)


# --- checks that found no difference, pinned so they stay that way ------------------------------


def route(dst, gateway, device, source, table=254, onlink=True):
    return {
        "dst": dst,
        "gateway": gateway,
        "device": device,
        "source": source,
        "table": table,
        "onlink": onlink,
    }


def test_own_segment_skips_every_member_sharing_the_own_internal_ip():
    # routes.go Routes: a member is skipped when its private IP equals the node's own, nothing else;
    # a non-leader does route its own leader's pod CIDR.
    nodes = [
        node("l", "x", "10.1.0.1/24", "10.2.1.0/24", "203.0.113.1:51820", 1),
        node("m", "x", "10.1.0.1/24", "10.2.2.0/24", "10.1.0.1:51820", 2),
        node("k", "x", "10.1.0.3/24", "10.2.3.0/24", "10.1.0.3:51820", 3),
    ]
    plans = build_plans(nodes, [], {"encapsulate": "never"})["plans"]
    assert plans["l"]["routes"] == [route("10.2.3.0/24", "10.1.0.3", "private", None)]
    assert plans["m"]["routes"] == [
        route("10.4.0.1/32", "10.1.0.1", "private", None),
        route("10.2.3.0/24", "10.1.0.3", "private", None),
    ]
    assert plans["k"]["routes"] == [
        route("10.4.0.1/32", "10.1.0.1", "private", None),
        route("10.2.1.0/24", "10.1.0.1", "private", None),
        route("10.2.2.0/24", "10.1.0.1", "private", None),
    ]


def test_mixed_families_are_not_filtered_and_crosssubnet_encapsulates_them():
    # routes.go encapsulateRoute: an IPv4 prefix never contains an IPv6 gateway (and back), so
    # crosssubnet encapsulates; Kilo drops no route for mixing families.
    nodes = [
        node("a", "x", "10.1.0.1/24", "10.2.1.0/24", "203.0.113.1:51820", 1),
        node("b", "x", "fd00:1::2/64", "fd10::/64", "[fd00:1::2]:51820", 2),
    ]
    plans = build_plans(nodes, [], {"encapsulate": "crosssubnet"})["plans"]
    assert plans["a"]["routes"] == [
        route("fd10::/64", "fd00:1::2", "tunl0", "10.1.0.1"),
        route("fd00:1::2/128", "fd00:1::2", "tunl0", "10.1.0.1", table=1107),
    ]
    assert plans["a"]["rules"] == [
        {"src": "10.2.1.0/24", "dst": "fd00:1::2/128", "iif": None, "table": 1107},
        {"src": None, "dst": "fd00:1::2/128", "iif": "kilo0", "table": 1107},
    ]
    assert plans["b"]["routes"] == [
        route("10.4.0.1/32", "10.1.0.1", "tunl0", "fd00:1::2"),
        route("10.2.1.0/24", "10.1.0.1", "tunl0", "fd00:1::2"),
        route("10.1.0.1/32", "10.1.0.1", "tunl0", "fd00:1::2", table=1107),
    ]
    assert plans["b"]["rules"] == [
        {"src": "fd10::/64", "dst": "10.1.0.1/32", "iif": None, "table": 1107}
    ]
