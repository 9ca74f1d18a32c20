# -*- coding: utf-8 -*-
"""Every bad input raises one KiloError naming the subject and the field, before any plan."""

import base64

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans


def key(i):
    return base64.b64encode(bytes([i]) * 32).decode()


def good_nodes():
    return [
        {
            "name": "a",
            "location": "x",
            "endpoint": "203.0.113.1:51820",
            "internal_ip": "10.1.0.1/24",
            "pod_cidr": "10.2.1.0/24",
            "public_key": key(1),
        },
        {
            "name": "b",
            "location": "y",
            "endpoint": "203.0.113.2:51820",
            "internal_ip": "10.1.1.1/24",
            "pod_cidr": "10.2.2.0/24",
            "public_key": key(2),
        },
    ]


def good_peers():
    return [{"name": "p", "public_key": key(9), "allowed_ips": ["10.9.0.1/32"]}]


def fails(nodes=None, peers=None, options=None, only=None):
    with pytest.raises(KiloError) as info:
        build_plans(
            good_nodes() if nodes is None else nodes,
            good_peers() if peers is None else peers,
            options,
            only,
        )
    return info.value


def with_node(index, **fields):
    nodes = good_nodes()
    nodes[index].update(fields)
    return nodes


def with_peer(**fields):
    peers = good_peers()
    peers[0].update(fields)
    return peers


def test_good_input_passes():
    assert sorted(build_plans(good_nodes(), good_peers())["plans"]) == ["a", "b"]


@pytest.mark.parametrize(
    "field,value,fragment",
    [
        ("endpoint", "203.0.113.2:0", "port 0 out of range 1-65535"),
        ("endpoint", "203.0.113.2:65536", "port 65536 out of range 1-65535"),
        ("endpoint", "203.0.113.2", "not host:port"),
        ("endpoint", "203.0.113.2:http", "not a number"),
        ("endpoint", "2001:db8::1:51820", "not host:port"),
        ("endpoint", "[2001:db8::zz]:51820", "not an IPv6 address"),
        ("endpoint", "bad_name.example:51820", "neither an IP address nor a DNS name"),
        ("endpoint", "300.1.1.1:51820", "not a valid IPv4 address"),
        ("internal_ip", "10.1.1.300/24", "not an address in CIDR form"),
        ("internal_ip", "10.1.1.1/33", "not an address in CIDR form"),
        ("pod_cidr", "10.2.2.0/40", "not a CIDR"),
        ("pod_cidr", 17, "not a CIDR"),
        ("allowed_location_ips", ["192.168.1.0/24", "nope"], "not a CIDR"),
        ("public_key", "not-base64!", "not valid base64"),
        ("public_key", base64.b64encode(b"short").decode(), "decodes to 5 bytes"),
        ("public_key", None, "missing"),
        ("persistent_keepalive", -1, "out of range"),
        ("persistent_keepalive", "often", "not an integer"),
        ("leader", "maybe", "not a boolean"),
        ("discovered_endpoints", {key(1): "edge.example.org:51820"}, "not an IP address"),
        ("discovered_endpoints", {"bogus": "203.0.113.9:1"}, "not valid base64"),
        ("discovered_endpoints", ["203.0.113.9:1"], "expected a mapping"),
    ],
)
def test_bad_node_field(field, value, fragment):
    error = fails(nodes=with_node(1, **{field: value}))
    assert error.subject == "node 'b'"
    assert error.field.startswith(field)
    assert fragment in str(error)
    assert str(error).startswith("node 'b': " + field)


def test_message_format():
    error = fails(nodes=with_node(1, endpoint="203.0.113.2:0"))
    assert str(error) == "node 'b': endpoint: port 0 out of range 1-65535"
    assert isinstance(error, KiloError)


def test_missing_node_name():
    error = fails(nodes=with_node(1, name=""))
    assert error.subject == "node #2" and error.field == "name"


def test_duplicate_node_name():
    error = fails(nodes=with_node(1, name="a"))
    assert (error.subject, error.field) == ("node 'a'", "name")
    assert "duplicate" in str(error)


def test_duplicate_node_key():
    error = fails(nodes=with_node(1, public_key=key(1)))
    assert (error.subject, error.field) == ("node 'b'", "public_key")
    assert "node 'a'" in str(error)


def test_peer_key_equal_to_node_key():
    error = fails(peers=with_peer(public_key=key(2)))
    assert (error.subject, error.field) == ("peer 'p'", "public_key")
    assert "node 'b'" in str(error)


def test_duplicate_peer_name():
    peers = good_peers() + [{"name": "p", "public_key": key(10), "allowed_ips": ["10.9.0.2/32"]}]
    error = fails(peers=peers)
    assert (error.subject, error.field) == ("peer 'p'", "name")


@pytest.mark.parametrize("allowed", [[], None])
def test_peer_without_allowed_ips(allowed):
    error = fails(peers=with_peer(allowed_ips=allowed))
    assert (error.subject, error.field) == ("peer 'p'", "allowed_ips")


@pytest.mark.parametrize(
    "field,value",
    [
        ("allowed_ips", ["10.9.0.1/32", "10.9.0.300/32"]),
        ("endpoint", "198.51.100.1:99999"),
        ("preshared_key", "abc"),
        ("public_key", ""),
        ("persistent_keepalive", 70000),
    ],
)
def test_bad_peer_field(field, value):
    error = fails(peers=with_peer(**{field: value}))
    assert (error.subject, error.field) == ("peer 'p'", field)


@pytest.mark.parametrize(
    "option,value",
    [
        ("granularity", "region"),
        ("encapsulate", "sometimes"),
        ("subnet", "10.4.0.0/33"),
        ("port", 0),
        ("interface", "a-very-long-interface-name"),
        ("local", "perhaps"),
        ("service_cidrs", ["10.96.0.0/12", "x"]),
        ("colour", "blue"),
    ],
)
def test_bad_option(option, value):
    error = fails(options={option: value})
    assert (error.subject, error.field) == ("options", option)


def test_subnet_too_small():
    error = fails(options={"subnet": "10.4.0.0/31"})  # one usable address, two segments
    assert (error.subject, error.field) == ("options", "subnet")
    assert "2 segments" in str(error)
    assert sorted(build_plans(good_nodes(), [], {"subnet": "10.4.0.0/30"})["plans"]) == ["a", "b"]


def test_location_without_any_endpoint():
    # beyond Kilo (which leaves such nodes out): reached by the others at the mapping its keepalives
    # come from; with a second such location and nobody to relay between them, refused
    nodes = good_nodes() + [
        {
            "name": "c",
            "location": "z",
            "endpoint": None,
            "internal_ip": "10.1.2.1/24",
            "public_key": key(3),
        },
        {"name": "d", "location": "z", "internal_ip": "10.1.2.2/24", "public_key": key(4)},
    ]
    result = build_plans(nodes, [])
    assert [
        (s["key"], s["leader"], s["reachable"], s["persistent_keepalive"])
        for s in result["segments"]
    ][-1] == ("location:z", "c", False, 25)
    error = fails(
        nodes=nodes
        + [{"name": "e", "location": "w", "internal_ip": "10.1.3.1/24", "public_key": key(5)}],
        options={"relays": ["nowhere"]},
    )
    assert (error.subject, error.field) == ("options", "relays")
    assert "location:w nor location:z" in str(error) and "nowhere names no location" in str(error)
    assert str(error).endswith("add one (x, y)")


def test_node_segment_without_endpoint():
    plans = build_plans(with_node(1, endpoint=None, internal_ip=None), [])["plans"]
    assert plans["b"]["leader"] and plans["a"]["peers"][0]["endpoint"] is None
    error = fails(nodes=with_node(0, endpoint=None, internal_ip=None)[:1])
    assert (error.subject, error.field) == ("node 'a'", "endpoint")
    nodes = with_node(1, endpoint=None)
    nodes[0]["behind_nat"] = True
    error = fails(nodes=nodes, options={"granularity": "full"})
    assert (error.subject, error.field) == ("node 'a'", "behind_nat")
    assert "no segment of the mesh is reachable" in str(error)
    error = fails(nodes=with_node(0, behind_nat=True)[:1])
    assert (error.subject, error.field) == ("node 'a'", "behind_nat")


def test_node_without_endpoint_may_follow_a_leader():
    nodes = good_nodes() + [
        {"name": "c", "location": "x", "internal_ip": "10.1.0.2/24", "public_key": key(3)}
    ]
    result = build_plans(nodes, [])
    assert result["plans"]["c"]["leader"] is False
    assert result["plans"]["c"]["listen_port"] == 51820


def test_first_error_wins_and_nothing_is_planned():
    nodes = with_node(0, pod_cidr="bad")
    nodes[1]["endpoint"] = "203.0.113.2:0"
    error = fails(nodes=nodes)
    assert error.subject == "node 'a'"


def test_only_unknown_node():
    error = fails(only=["a", "ghost"])
    assert (error.subject, error.field) == ("node 'ghost'", "only")
