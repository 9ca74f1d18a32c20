# -*- coding: utf-8 -*-
"""kilo.mesh.showconf's renderer (plugin_utils/showconf.py), like kgctl showconf, on meshes
worked out by hand: node, peer and as-peer under location and full granularity, every format;
the Peer resource against the CRD schema (manifests/crds.yaml, else Kilo's types.go fields)."""

import base64
import json
import os

import pytest
import yaml

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.plugin_utils.showconf import showconf, wireguard_conf
from checkout import ROOT

CRDS = os.path.join(ROOT, "manifests", "crds.yaml")


def key(i):
    return base64.b64encode(bytes([i]) * 32).decode()


PSK = key(99)


def mesh():
    """Two locations: x (a leads: public endpoint; b private) and y (c alone, NAT, keepalive 25,
    an allowed-location IP); peers laptop (keepalive 10, preshared key) and phone."""
    nodes = [
        {
            "name": "a",
            "location": "x",
            "internal_ip": "10.1.0.1/24",
            "pod_cidr": "10.2.1.0/24",
            "endpoint": "203.0.113.1:51820",
            "public_key": key(1),
        },
        {
            "name": "b",
            "location": "x",
            "internal_ip": "10.1.0.2/24",
            "pod_cidr": "10.2.2.0/24",
            "endpoint": "10.1.0.2:51820",
            "public_key": key(2),
        },
        {
            "name": "c",
            "location": "y",
            "internal_ip": "172.16.0.3/24",
            "pod_cidr": "10.2.3.0/24",
            "endpoint": "198.51.100.3:51821",
            "public_key": key(3),
            "persistent_keepalive": 25,
            "allowed_location_ips": ["172.16.9.0/24"],
        },
    ]
    peers = [
        {
            "name": "laptop",
            "public_key": key(40),
            "allowed_ips": ["10.5.0.1/32"],
            "persistent_keepalive": 10,
            "preshared_key": PSK,
        },
        {
            "name": "phone",
            "public_key": key(41),
            "allowed_ips": ["10.5.0.2/32"],
            "endpoint": "gw.example.org:4000",
        },
    ]
    return nodes, peers


def run(granularity="location", **kw):
    nodes, peers = mesh()
    return showconf(nodes, peers, {"granularity": granularity}, **kw)


# --- node NAME ---------------------------------------------------------------------------------


def test_node_location_granularity_is_kgctls_layout():
    out = run(node="a")
    assert out["config"] == (
        "[Interface]\n"
        "ListenPort = 51820\n"
        "\n"
        "[Peer]\n"
        "AllowedIPs = 10.2.3.0/24, 172.16.0.3/32, 10.4.0.2/32, 172.16.9.0/24\n"
        "Endpoint = 198.51.100.3:51821\n"
        "PersistentKeepalive = 0\n"
        "PublicKey = %s\n"
        "\n"
        "[Peer]\n"
        "AllowedIPs = 10.5.0.1/32\n"
        "PersistentKeepalive = 0\n"
        "# PresharedKey = (this peer's preshared key from kilo_peers)\n"
        "PublicKey = %s\n"
        "\n"
        "[Peer]\n"
        "AllowedIPs = 10.5.0.2/32\n"
        "Endpoint = gw.example.org:4000\n"
        "PersistentKeepalive = 0\n"
        "PublicKey = %s\n" % (key(3), key(40), key(41))
    )
    assert PSK not in json.dumps(out)
    data = out["data"]
    assert data["name"] == "a" and data["interface"] == {"listen_port": 51820}
    assert [p["name"] for p in data["peers"]] == ["location:y", "laptop", "phone"]
    assert data["peers"][1]["preshared_key"] is True


def test_node_keepalive_and_own_port():
    # c keeps alive: every peer gets its keepalive (Kilo's Conf); ListenPort is c's own port
    out = run(node="c")
    assert out["config"].startswith(
        "[Interface]\nListenPort = 51821\n\n[Peer]\n"
        "AllowedIPs = 10.2.1.0/24, 10.1.0.1/32, 10.2.2.0/24, 10.1.0.2/32, 10.4.0.1/32\n"
        "Endpoint = 203.0.113.1:51820\nPersistentKeepalive = 25\n"
    )
    assert out["config"].count("PersistentKeepalive = 25") == 3


def test_non_leader_is_refused_like_kgctl():
    with pytest.raises(KiloError) as e:
        run(node="b")
    assert "is not a leader node" in str(e.value) and "'a'" in str(e.value)
    with pytest.raises(KiloError):
        run(node="b", as_peer=True)


def test_full_granularity_every_node_answers():
    out = run("full", node="b")
    assert out["data"]["interface"] == {"listen_port": 51820}
    # b's peers: the segments of a and c, then the outside peers
    assert [p["name"] for p in out["data"]["peers"]] == ["node:a", "node:c", "laptop", "phone"]
    assert out["config"].count("[Peer]") == 4
    # a's segment is a alone now: its WireGuard IP is the first of the subnet
    assert (
        "AllowedIPs = 10.2.1.0/24, 10.1.0.1/32, 10.4.0.1/32\nEndpoint = 203.0.113.1:51820\n"
        in out["config"]
    )


def test_unknown_node():
    with pytest.raises(KiloError) as e:
        run(node="zz")
    assert "node 'zz'" in str(e.value)


# --- peer NAME -----------------------------------------------------------------------------------


def test_peer_sections_reuse_the_engine():
    out = run(peer="laptop")
    assert "[Interface]" not in out["config"]
    assert out["config"].startswith(
        "[Peer]\nAllowedIPs = 10.2.1.0/24, 10.1.0.1/32, 10.2.2.0/24, 10.1.0.2/32, 10.4.0.1/32\n"
        "Endpoint = 203.0.113.1:51820\nPersistentKeepalive = 10\n"
        "# PresharedKey = (this peer's preshared key from kilo_peers)\nPublicKey = %s\n\n[Peer]\n"
        % key(1)
    )
    assert [p["name"] for p in out["data"]["peers"]] == ["location:x", "location:y", "phone"]
    assert "interface" not in out["data"]
    assert PSK not in json.dumps(out)


def test_unknown_peer():
    with pytest.raises(KiloError) as e:
        run(peer="nobody")
    assert "peer 'nobody'" in str(e.value)
    with pytest.raises(KiloError):
        run(peer="nobody", as_peer=True)


# --- as peer -------------------------------------------------------------------------------------


def test_node_as_peer_location_is_its_segment():
    out = run(node="a", as_peer=True, allowed_ips=["192.168.50.0/24", "10.2.1.0/24"], output="yaml")
    # Kilo's AsPeer: the segment's allowed IPs (no allowed-location IPs), the leader's key and
    # configured endpoint, no keepalive; extra allowed IPs appended, duplicates dropped
    assert (
        yaml.safe_load(out["config"])
        == out["data"]
        == {
            "apiVersion": "kilo.squat.ai/v1alpha1",
            "kind": "Peer",
            "metadata": {"name": "a"},
            "spec": {
                "allowedIPs": [
                    "10.2.1.0/24",
                    "10.1.0.1/32",
                    "10.2.2.0/24",
                    "10.1.0.2/32",
                    "10.4.0.1/32",
                    "192.168.50.0/24",
                ],
                "endpoint": {"dnsOrIP": {"ip": "203.0.113.1"}, "port": 51820},
                "publicKey": key(1),
            },
        }
    )


def test_node_as_peer_full_is_the_node_alone():
    out = run("full", node="b", as_peer=True, output="json")
    assert json.loads(out["config"]) == out["data"]
    assert out["data"]["metadata"]["name"] == "b"
    assert out["data"]["spec"] == {
        "allowedIPs": ["10.2.2.0/24", "10.1.0.2/32", "10.4.0.2/32"],
        "endpoint": {"dnsOrIP": {"ip": "10.1.0.2"}, "port": 51820},
        "publicKey": key(2),
    }


def test_node_as_peer_wireguard_is_one_section():
    out = run(node="c", as_peer=True, allowed_ips="10.30.0.0/16")
    assert out["config"] == (
        "[Peer]\nAllowedIPs = 10.2.3.0/24, 172.16.0.3/32, 10.4.0.2/32, 10.30.0.0/16\n"
        "Endpoint = 198.51.100.3:51821\nPersistentKeepalive = 0\nPublicKey = %s\n" % key(3)
    )


def test_peer_as_peer_dns_endpoint_and_keepalive():
    phone = run(peer="phone", as_peer=True, output="yaml")["data"]
    assert phone["spec"]["endpoint"] == {"dnsOrIP": {"dns": "gw.example.org"}, "port": 4000}
    laptop = run(peer="laptop", as_peer=True, output="json")
    # seconds, as the resource defines them; the preshared key stays out
    assert laptop["data"]["spec"] == {
        "allowedIPs": ["10.5.0.1/32"],
        "persistentKeepalive": 10,
        "publicKey": key(40),
    }
    assert PSK not in laptop["config"]
    wg = run(peer="laptop", as_peer=True)["config"]
    assert wg == (
        "[Peer]\nAllowedIPs = 10.5.0.1/32\nPersistentKeepalive = 10\n"
        "# PresharedKey = (this peer's preshared key from kilo_peers)\nPublicKey = %s\n" % key(40)
    )


# --- formats and arguments -----------------------------------------------------------------------


@pytest.mark.parametrize("granularity", ["location", "full", "cross"])
@pytest.mark.parametrize(
    "what", [{"node": "a"}, {"node": "c"}, {"peer": "laptop"}, {"peer": "phone"}]
)
@pytest.mark.parametrize("as_peer", [False, True])
def test_json_and_yaml_are_the_data(granularity, what, as_peer):
    wg = run(granularity, as_peer=as_peer, **what)
    assert (
        json.loads(run(granularity, as_peer=as_peer, output="json", **what)["config"]) == wg["data"]
    )
    assert (
        yaml.safe_load(run(granularity, as_peer=as_peer, output="yaml", **what)["config"])
        == wg["data"]
    )


def test_yaml_of_tagged_strings_is_plain():
    class Tagged(str):
        """Stands in for Ansible's tagged strings (variables' values)."""

    nodes, peers = mesh()
    for item in nodes + peers:
        item["name"] = Tagged(item["name"])
    text = showconf(nodes, peers, node=Tagged("a"), as_peer=True, output="yaml")["config"]
    assert "!!" not in text and yaml.safe_load(text)["metadata"]["name"] == "a"


@pytest.mark.parametrize(
    "kw,field",
    [
        ({}, "node"),
        ({"node": "a", "peer": "laptop"}, "node"),
        ({"node": "a", "output": "toml"}, "format"),
        ({"node": "a", "allowed_ips": ["10.9.0.0/16"]}, "allowed_ips"),
        ({"node": "a", "as_peer": True, "allowed_ips": ["nope"]}, "allowed_ips"),
    ],
)
def test_bad_arguments(kw, field):
    with pytest.raises(KiloError) as e:
        run(**kw)
    assert e.value.field == field


def test_empty_conf():
    assert wireguard_conf([]) == ""
    assert wireguard_conf([], 1) == "[Interface]\nListenPort = 1\n"


# --- the Peer resource against the CRD -------------------------------------------------------------

# Kilo's pkg/k8s/apis/kilo/v1alpha1/types.go, used when manifests/crds.yaml is not there
TYPES_GO_SCHEMA = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["allowedIPs", "publicKey"],
            "properties": {
                "allowedIPs": {"type": "array", "items": {"type": "string"}},
                "endpoint": {
                    "type": "object",
                    "required": ["dnsOrIP", "port"],
                    "properties": {
                        "dnsOrIP": {
                            "type": "object",
                            "properties": {"dns": {"type": "string"}, "ip": {"type": "string"}},
                        },
                        "port": {"type": "integer"},
                    },
                },
                "persistentKeepalive": {"type": "integer"},
                "presharedKey": {"type": "string"},
                "publicKey": {"type": "string"},
            },
        },
    },
}


def peer_schema():
    if not os.path.exists(CRDS):
        return TYPES_GO_SCHEMA
    with open(CRDS) as f:
        for doc in yaml.safe_load_all(f):
            if (
                doc
                and doc.get("kind") == "CustomResourceDefinition"
                and doc["spec"]["names"]["kind"] == "Peer"
            ):
                assert doc["spec"]["group"] == "kilo.squat.ai"
                version = [v for v in doc["spec"]["versions"] if v["name"] == "v1alpha1"][0]
                return version["schema"]["openAPIV3Schema"]
    raise AssertionError("no Peer CRD in %s" % CRDS)


def unknown_fields(obj, schema, where="$"):
    """Fields the schema does not know (the API server would prune them silently)."""
    out = []
    if isinstance(obj, dict) and "properties" in schema:
        for name, value in obj.items():
            if name not in schema["properties"]:
                out.append("%s.%s" % (where, name))
            else:
                out += unknown_fields(value, schema["properties"][name], "%s.%s" % (where, name))
    return out


@pytest.mark.parametrize("granularity", ["location", "full"])
@pytest.mark.parametrize(
    "what", [{"node": "a"}, {"node": "c"}, {"peer": "laptop"}, {"peer": "phone"}]
)
def test_peer_resource_validates_against_the_crd(granularity, what):
    jsonschema = pytest.importorskip("jsonschema")
    schema = peer_schema()
    resource = yaml.safe_load(
        run(granularity, as_peer=True, output="yaml", allowed_ips=["10.77.0.0/16"], **what)[
            "config"
        ]
    )
    jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker()).validate(resource)
    assert unknown_fields(resource, schema) == []
    assert resource["apiVersion"] == "kilo.squat.ai/v1alpha1" and resource["kind"] == "Peer"
