"""Kubernetes Node/Peer objects <-> kilo.mesh data, with Kilo's annotation names and formats."""

import json

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.plugin_utils import inputs

KEY = "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="
KEY2 = "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw="
PSK = "aNdi7F94dUaB6O9ScwgibmXpFk7PcQSX2C5Hzcc0b2M="


def node(annotations=None, labels=None, pod_cidr=None, addresses=None, conditions=None, name="n1"):
    obj = {
        "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
        "spec": {},
        "status": {"addresses": addresses or [], "conditions": conditions or []},
    }
    if pod_cidr is not None:
        obj["spec"]["podCIDR"] = pod_cidr
    return obj


def peer(name="p1", **spec):
    body = {"publicKey": KEY, "allowedIPs": ["10.5.0.1/32"]}
    body.update(spec)
    return {
        "apiVersion": "kilo.squat.ai/v1alpha1",
        "kind": "Peer",
        "metadata": {"name": name},
        "spec": body,
    }


def raises(fn, *args, **kwargs):
    with pytest.raises(KiloError) as info:
        fn(*args, **kwargs)
    return info.value


def test_annotation_names_are_kilos():
    assert kn.LOCATION == "kilo.squat.ai/location"
    assert kn.FORCE_ENDPOINT == "kilo.squat.ai/force-endpoint"
    assert kn.FORCE_INTERNAL_IP == "kilo.squat.ai/force-internal-ip"
    assert kn.PERSISTENT_KEEPALIVE == "kilo.squat.ai/persistent-keepalive"
    assert kn.ALLOWED_LOCATION_IPS == "kilo.squat.ai/allowed-location-ips"
    assert kn.DISCOVERED_ENDPOINTS == "kilo.squat.ai/discovered-endpoints"
    assert kn.WIREGUARD_IP == "kilo.squat.ai/wireguard-ip"
    assert kn.LAST_SEEN == "kilo.squat.ai/last-seen"


# --- location ---------------------------------------------------------------------------------


def test_location_annotation_wins_over_the_topology_label():
    hv = kn.host_vars(node({kn.LOCATION: "home"}, {kn.REGION_LABEL: "eu-west"}))
    assert hv["kilo_location"] == "home"


def test_empty_location_annotation_still_wins_as_in_kilo():
    hv = kn.host_vars(node({kn.LOCATION: ""}, {kn.REGION_LABEL: "eu-west"}))
    assert hv["kilo_location"] == ""


def test_location_from_the_label_then_empty():
    assert kn.host_vars(node(labels={kn.REGION_LABEL: "eu-west"}))["kilo_location"] == "eu-west"
    assert kn.host_vars(node())["kilo_location"] == ""


def test_topology_label_is_configurable():
    labels = {kn.REGION_LABEL: "eu-west", "example.com/site": "berlin"}
    assert (
        kn.host_vars(node(labels=labels), topology_label="example.com/site")["kilo_location"]
        == "berlin"
    )
    assert (
        kn.host_vars(node(labels={kn.REGION_LABEL: "x"}), topology_label="example.com/site")[
            "kilo_location"
        ]
        == ""
    )


# --- leader -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "true", "false", "anything"])
def test_leader_annotation_counts_by_presence(value):
    assert kn.host_vars(node({kn.LEADER: value}))["kilo_leader"] is True


def test_no_leader_annotation_no_variable():
    assert "kilo_leader" not in kn.host_vars(node())


# --- forced endpoint, internal IP, keepalive, allowed location IPs, pod CIDR --------------------


@pytest.mark.parametrize(
    "value", ["203.0.113.5:51820", "[2001:db8::1]:51821", "vpn.example.com:51820"]
)
def test_force_endpoint(value):
    assert kn.host_vars(node({kn.FORCE_ENDPOINT: value}))["kilo_force_endpoint"] == value


def test_empty_force_endpoint_is_unset():
    assert "kilo_force_endpoint" not in kn.host_vars(node({kn.FORCE_ENDPOINT: ""}))


@pytest.mark.parametrize(
    "value", ["203.0.113.5", "203.0.113.5:0", "bad host:1", "2001:db8::1:51820"]
)
def test_bad_force_endpoint_names_node_and_annotation(value):
    err = raises(kn.host_vars, node({kn.FORCE_ENDPOINT: value}))
    assert err.subject == "node 'n1'" and err.field == kn.FORCE_ENDPOINT


@pytest.mark.parametrize("value", ["", "-"])
def test_force_internal_ip_none_kept_as_given(value):
    hv = kn.host_vars(node({kn.FORCE_INTERNAL_IP: value, kn.INTERNAL_IP: "10.1.0.5/24"}))
    assert hv["kilo_force_internal_ip"] == value
    # ... and the inventory path reads it as "no internal IP", as Kilo does.
    assert (
        inputs.node_from_host(
            "n1", hv, {"public_key": KEY, "internal_ip": "10.1.0.5/24"}, "", 51820
        )["internal_ip"]
        is None
    )


def test_force_internal_ip_keeps_the_host_address():
    assert (
        kn.host_vars(node({kn.FORCE_INTERNAL_IP: "10.1.0.5/24"}))["kilo_force_internal_ip"]
        == "10.1.0.5/24"
    )


@pytest.mark.parametrize("value", ["10.1.0.5", "10.1.0.300/24", "nope"])
def test_bad_force_internal_ip(value):
    err = raises(kn.host_vars, node({kn.FORCE_INTERNAL_IP: value}))
    assert "node 'n1'" in str(err) and kn.FORCE_INTERNAL_IP in str(err)


def test_persistent_keepalive():
    assert kn.host_vars(node({kn.PERSISTENT_KEEPALIVE: "25"}))["kilo_persistent_keepalive"] == 25
    assert kn.host_vars(node({kn.PERSISTENT_KEEPALIVE: "0"}))["kilo_persistent_keepalive"] == 0
    assert "kilo_persistent_keepalive" not in kn.host_vars(node())


@pytest.mark.parametrize("value", ["soon", "-5", "1.5", "70000"])
def test_bad_keepalive(value):
    err = raises(kn.host_vars, node({kn.PERSISTENT_KEEPALIVE: value}))
    assert err.subject == "node 'n1'" and err.field == kn.PERSISTENT_KEEPALIVE


def test_allowed_location_ips_split_on_commas_and_normalised():
    hv = kn.host_vars(node({kn.ALLOWED_LOCATION_IPS: "192.168.1.7/24, 10.9.0.0/16,"}))
    assert hv["kilo_allowed_location_ips"] == ["192.168.1.0/24", "10.9.0.0/16"]


def test_bad_allowed_location_ip():
    err = raises(kn.host_vars, node({kn.ALLOWED_LOCATION_IPS: "10.9.0.0/16,192.168.1.7"}))
    assert err.field == kn.ALLOWED_LOCATION_IPS and "192.168.1.7" in str(err)


def pod_cidr(hv, source=None):
    """The node's pod CIDR as the inventory reading gives it (node_from_host)."""
    return inputs.node_from_host("n1", hv, {}, "", 51820, pod_source=source)["pod_cidr"]


def test_pod_cidr_from_spec():
    hv = kn.host_vars(node(pod_cidr="10.244.1.0/24"))
    assert "kilo_pod_cidr" not in hv  # not forced: the source's (the Node's spec here)
    assert hv["kilo_kubernetes_node"]["pod_cidrs"] == {"node": ["10.244.1.0/24"]}
    assert pod_cidr(hv) == "10.244.1.0/24"
    assert pod_cidr(kn.host_vars(node())) is None
    # as Kilo: a spec.podCIDR that is not a CIDR is no range, not an error
    assert pod_cidr(kn.host_vars(node(pod_cidr="10.244.1.0"))) is None


def test_only_spec_pod_cidr_counts_as_kilo_reads_it():
    """spec.podCIDRs (a dual-stack cluster's list) is not read: Kilo reads spec.podCIDR alone, and
    a Node Kilo accepts gives Kilo's range whatever its podCIDRs say."""
    obj = node(pod_cidr="10.244.1.0/24")
    obj["spec"]["podCIDRs"] = ["10.9.0.0/24", "fd10:244:1::/64", "bogus"]
    assert pod_cidr(kn.host_vars(obj)) == "10.244.1.0/24"
    del obj["spec"]["podCIDR"]
    assert pod_cidr(kn.host_vars(obj)) is None


CALICO = [
    {
        "metadata": {"name": "n1-10-2-0-64-26"},
        "spec": {"node": "n1", "cidr": "10.2.0.64/26", "state": "confirmed"},
    },
    {
        "metadata": {"name": "n1-10-2-0-0-26"},
        "spec": {"node": "n1", "cidr": "10.2.0.0/26", "state": "confirmed"},
    },
    {
        "metadata": {"name": "n1-10-2-1-0-26"},
        "spec": {"node": "n1", "cidr": "10.2.1.0/26", "state": "pending"},
    },
    {
        "metadata": {"name": "n1-10-2-2-0-26"},
        "spec": {"node": "n1", "cidr": "10.2.2.0/26", "state": "confirmed", "deleted": "true"},
    },
    {
        "metadata": {"name": "n2-10-2-3-0-26"},
        "spec": {"node": "n2", "cidr": "10.2.3.0/26", "state": "confirmed"},
    },
]
CILIUM = [
    {"metadata": {"name": "n1"}, "spec": {"ipam": {"podCIDRs": ["10.8.1.0/24", "10.9.1.0/24"]}}},
    {"metadata": {"name": "n2"}, "spec": {}},
]


def test_calico_blocks_confirmed_only_in_address_order():
    assert kn.calico_pod_cidrs(CALICO) == {
        "n1": ["10.2.0.0/26", "10.2.0.64/26"],
        "n2": ["10.2.3.0/26"],
    }
    bad = [
        {
            "metadata": {"name": "b"},
            "spec": {"node": "n1", "cidr": "10.2.0.0", "state": "confirmed"},
        }
    ]
    err = raises(kn.calico_pod_cidrs, bad)
    assert (err.subject, err.field) == ("BlockAffinity 'b'", "spec.cidr")


def test_cilium_pod_cidrs_in_their_order():
    assert kn.cilium_pod_cidrs(CILIUM) == {"n1": ["10.8.1.0/24", "10.9.1.0/24"]}
    err = raises(
        kn.cilium_pod_cidrs,
        [{"metadata": {"name": "n3"}, "spec": {"ipam": {"podCIDRs": "10.8.0.0/24"}}}],
    )
    assert (err.subject, err.field) == ("CiliumNode 'n3'", "spec.ipam.podCIDRs")


def test_the_source_the_annotation_and_the_variable():
    ipam = {"calico": kn.calico_pod_cidrs(CALICO), "cilium": kn.cilium_pod_cidrs(CILIUM)}
    hv = kn.host_vars(node(pod_cidr="10.244.1.0/24"), ipam=ipam)
    assert pod_cidr(hv) == "10.244.1.0/24"
    assert pod_cidr(hv, "calico") == ["10.2.0.0/26", "10.2.0.64/26"]
    assert pod_cidr(hv, "cilium") == ["10.8.1.0/24", "10.9.1.0/24"]
    # a node's own source wins over the mesh's
    hv = kn.host_vars(
        node({"kilo.mesh/pod-cidr-source": "cilium"}, pod_cidr="10.244.1.0/24"), ipam=ipam
    )
    assert hv["kilo_node_pod_cidr_source"] == "cilium" and pod_cidr(hv, "calico") == [
        "10.8.1.0/24",
        "10.9.1.0/24",
    ]
    assert (
        "kilo_pod_cidr_source" not in hv
    )  # the mesh's stays the mesh's (the agents' one informer and role)
    # forced ranges win over any source
    hv = kn.host_vars(
        node({"kilo.mesh/pod-cidrs": "10.7.0.0/24, 10.7.1.0/24"}, pod_cidr="10.244.1.0/24"),
        ipam=ipam,
    )
    assert (
        hv["kilo_pod_cidr"] == ["10.7.0.0/24", "10.7.1.0/24"]
        and pod_cidr(hv, "calico") == hv["kilo_pod_cidr"]
    )
    assert (
        kn.host_vars(node({"kilo.mesh/pod-cidrs": "10.7.0.0/24"}))["kilo_pod_cidr"] == "10.7.0.0/24"
    )
    # a source whose objects were not read, a hand-written inventory naming an IPAM source
    err = raises(pod_cidr, kn.host_vars(node(pod_cidr="10.244.1.0/24")), "calico")
    assert (err.subject, err.field) == ("host 'n1'", "kilo_pod_cidr_source")
    assert raises(pod_cidr, {}, "cilium").field == "kilo_pod_cidr_source"
    assert raises(pod_cidr, {"kilo_pod_cidr_source": "weave"}).field == "kilo_pod_cidr_source"
    assert (
        raises(pod_cidr, {"kilo_node_pod_cidr_source": "weave"}).field
        == "kilo_node_pod_cidr_source"
    )


def test_a_malformed_pod_annotation_names_node_and_annotation():
    err = raises(kn.host_vars, node({"kilo.mesh/pod-cidrs": "10.7.0.0/24,10.7.1.300/24"}))
    assert (err.subject, err.field) == ("node 'n1'", "kilo.mesh/pod-cidrs")
    err = raises(kn.host_vars, node({"kilo.mesh/pod-cidr-source": "weave"}))
    assert (err.subject, err.field) == ("node 'n1'", "kilo.mesh/pod-cidr-source")


def test_host_vars_names_are_the_inventory_paths():
    hv = kn.host_vars(
        node(
            {
                kn.LOCATION: "a",
                kn.LEADER: "",
                kn.FORCE_ENDPOINT: "1.2.3.4:5",
                kn.FORCE_INTERNAL_IP: "-",
                kn.PERSISTENT_KEEPALIVE: "5",
                kn.ALLOWED_LOCATION_IPS: "10.0.0.0/8",
                kn.CNI_COMPATIBILITY_IP: "10.244.0.7/32",
            },
            pod_cidr="10.244.0.0/24",
        )
    )
    hv.update(
        kn.host_vars(node({"kilo.mesh/pod-cidrs": "10.244.0.0/24", "kilo.mesh/behind-nat": ""}))
    )
    assert hv["kilo_cni_compatibility_ip"] == "10.244.0.7/32"
    # ours: the mark counts by its presence, as Kilo's leader annotation; "false" is no mark
    assert hv["kilo_behind_nat"] is True
    assert kn.host_vars(node({"kilo.mesh/behind-nat": "false"}))["kilo_behind_nat"] is False
    # as Kilo: a value that does not parse is dropped, not an error
    assert "kilo_cni_compatibility_ip" not in kn.host_vars(
        node({kn.CNI_COMPATIBILITY_IP: "10.244.0.7"})
    )
    assert set(hv) - {"kilo_kubernetes_node"} == set(inputs.NODE_VARS.values()) - {
        "kilo_public_key"
    }


# --- agent-written annotations ----------------------------------------------------------------


def test_agent_annotations_parsed():
    discovered = json.dumps({KEY2: {"IP": "198.51.100.7", "Port": 40112, "Zone": ""}})
    hv = kn.host_vars(
        node(
            {
                kn.KEY: KEY,
                kn.ENDPOINT: "203.0.113.5:51820",
                kn.INTERNAL_IP: "10.1.0.5/24",
                kn.WIREGUARD_IP: "10.4.0.1/16",
                kn.LAST_SEEN: "1700000000",
                kn.GRANULARITY: "location",
                kn.DISCOVERED_ENDPOINTS: discovered,
            },
            conditions=[{"type": "Ready", "status": "True"}],
        )
    )
    assert hv["kilo_kubernetes_node"] == {
        "public_key": KEY,
        "endpoint": "203.0.113.5:51820",
        "internal_ip": "10.1.0.5/24",
        "wireguard_ip": "10.4.0.1/16",
        "last_seen": 1700000000,
        "granularity": "location",
        "discovered_endpoints": {KEY2: "198.51.100.7:40112"},
        "ready": True,
        "pod_cidrs": {"node": []},
        "relay_since": None,
        "path_state": None,
        "kg": True,
    }


def test_agent_annotations_empty_or_absent_are_none():
    facts = kn.host_vars(
        node({kn.INTERNAL_IP: "", kn.WIREGUARD_IP: "", kn.DISCOVERED_ENDPOINTS: ""})
    )["kilo_kubernetes_node"]
    assert facts == dict(
        dict.fromkeys(kn.NODE_FIELDS), discovered_endpoints={}, pod_cidrs={"node": []}, kg=True
    )


def test_relay_marks_of_our_agents():
    """kilo.mesh/relay (a relay's start) and kilo.mesh/path-state (a node behind NAT) into the
    engine's timed inputs; a Node with neither is Kilo's own agent's (kg)."""
    state = {"down": {"location:aws": 1700000100}, "direct": {}, "held": {}}
    text = kn.path_state_text(state)
    assert json.loads(text) == state
    facts = kn.host_vars(node({kn.RELAY: "1700000000"}))["kilo_kubernetes_node"]
    assert kn.relay_marks(facts) == {"relay_since": 1700000000, "path_state": None, "kg": False}
    facts = kn.host_vars(node({kn.PATH_STATE: text}))["kilo_kubernetes_node"]
    assert kn.relay_marks(facts) == {"relay_since": None, "path_state": state, "kg": False}
    assert kn.relay_marks(kn.host_vars(node({}))["kilo_kubernetes_node"])["kg"] is True
    for bad, field in (
        ("{", kn.PATH_STATE),
        ('{"gone": {}}', kn.PATH_STATE + ".gone"),
        ("soon", kn.PATH_STATE),
    ):
        with pytest.raises(KiloError) as info:
            kn.host_vars(node({kn.PATH_STATE: bad}))
        assert info.value.field == field, (bad, info.value.field)
    with pytest.raises(KiloError) as info:
        kn.host_vars(node({kn.RELAY: "-3"}))
    assert info.value.field == kn.RELAY
    # ours, so known (validate refuses unknown ones of our prefix) and removed when a node leaves
    assert kn.RELAY in kn.KNOWN_ANNOTATIONS and kn.PATH_STATE in kn.KNOWN_ANNOTATIONS
    assert kn.removed_when_leaving({kn.RELAY: "1", kn.PATH_STATE: "{}"})[kn.PATH_STATE] is None
    # a node handed back to Kilo's agent (migrate.yml -e to=kg) loses them: kg never relays
    assert kn.handed_back_removals({kn.RELAY: "1", kn.KEY: KEY}) == {kn.RELAY: None}


def test_discovered_endpoints_go_field_names_any_case_ipv6_and_null():
    discovered = json.dumps({KEY: {"ip": "2001:db8::7", "port": 1}, KEY2: None})
    facts = kn.host_vars(node({kn.DISCOVERED_ENDPOINTS: discovered}))["kilo_kubernetes_node"]
    assert facts["discovered_endpoints"] == {KEY: "[2001:db8::7]:1"}


@pytest.mark.parametrize(
    "conditions,ready",
    [
        ([{"type": "Ready", "status": "True"}], True),
        (
            [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "False"}],
            False,
        ),
        ([{"type": "Ready", "status": "Unknown"}], False),
        ([], None),
    ],
)
def test_ready_condition(conditions, ready):
    assert kn.host_vars(node(conditions=conditions))["kilo_kubernetes_node"]["ready"] is ready


@pytest.mark.parametrize(
    "annotation,value",
    [
        (kn.KEY, "not-a-key"),
        (kn.ENDPOINT, "1.2.3.4"),
        (kn.INTERNAL_IP, "10.1.0.5"),
        (kn.WIREGUARD_IP, "x/16"),
        (kn.LAST_SEEN, "yesterday"),
        (kn.GRANULARITY, "auto"),
        (kn.DISCOVERED_ENDPOINTS, "{"),
        (kn.DISCOVERED_ENDPOINTS, "[]"),
        (kn.DISCOVERED_ENDPOINTS, json.dumps({KEY: {"IP": "x", "Port": 1}})),
        (kn.DISCOVERED_ENDPOINTS, json.dumps({KEY: {"IP": "1.2.3.4"}})),
        (kn.DISCOVERED_ENDPOINTS, json.dumps({"k": {"IP": "1.2.3.4", "Port": 1}})),
    ],
)
def test_bad_agent_annotation_names_node_and_annotation(annotation, value):
    err = raises(kn.host_vars, node({annotation: value}, name="bad"))
    assert "node 'bad'" in str(err) and annotation in str(err)


def test_node_without_name():
    assert "metadata.name" in str(raises(kn.host_vars, {"metadata": {}}))


# --- addresses ----------------------------------------------------------------------------------


def test_node_address():
    obj = node(
        {
            kn.FORCE_ENDPOINT: "203.0.113.9:51820",
            kn.INTERNAL_IP: "10.1.0.5/24",
            "x/y": "host.example",
        },
        addresses=[
            {"type": "Hostname", "address": "n1"},
            {"type": "InternalIP", "address": "10.1.0.5"},
            {"type": "ExternalIP", "address": "203.0.113.5"},
        ],
    )
    assert kn.node_address(obj) == "10.1.0.5"
    assert kn.node_address(obj, "ExternalIP") == "203.0.113.5"
    assert kn.node_address(obj, kn.FORCE_ENDPOINT) == "203.0.113.9"
    assert kn.node_address(obj, kn.INTERNAL_IP) == "10.1.0.5"
    assert kn.node_address(obj, "x/y") == "host.example"
    assert kn.node_address(obj, kn.LOCATION) is None
    assert kn.node_address(node(), "InternalIP") is None


# --- peers --------------------------------------------------------------------------------------


def test_peer_minimal():
    assert kn.peer_from_resource(peer()) == {
        "name": "p1",
        "public_key": KEY,
        "allowed_ips": ["10.5.0.1/32"],
        "endpoint": None,
        "persistent_keepalive": 0,
        "preshared_key": None,
    }


def test_peer_full_and_accepted_by_the_engine():
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.parse import parse_peer

    p = kn.peer_from_resource(
        peer(
            endpoint={"dnsOrIP": {"ip": "203.0.113.7"}, "port": 51820},
            persistentKeepalive=25,
            presharedKey=PSK,
            allowedIPs=["10.5.0.1/32", "fd00::1/128"],
        )
    )
    assert (
        p["endpoint"] == "203.0.113.7:51820"
        and p["persistent_keepalive"] == 25
        and p["preshared_key"] == PSK
    )
    assert p["allowed_ips"] == ["10.5.0.1/32", "fd00::1/128"]
    assert parse_peer(p, 0).name == "p1"


@pytest.mark.parametrize(
    "target,expected",
    [
        ({"ip": "2001:db8::7"}, "[2001:db8::7]:51820"),
        ({"ip": "::ffff:203.0.113.7"}, "203.0.113.7:51820"),
        ({"dns": "vpn.example.com"}, "vpn.example.com:51820"),
        ({"dns": "vpn.example.com", "ip": "203.0.113.7"}, "vpn.example.com:51820"),
    ],
)
def test_peer_endpoints(target, expected):
    assert (
        kn.peer_from_resource(peer(endpoint={"dnsOrIP": target, "port": 51820}))["endpoint"]
        == expected
    )


@pytest.mark.parametrize(
    "spec,field",
    [
        # Kilo's webhook, rule by rule.
        ({"allowedIPs": ["10.5.0.1"]}, "spec.allowedIPs"),
        ({"allowedIPs": ["nope/32"]}, "spec.allowedIPs"),
        ({"endpoint": {"dnsOrIP": {}, "port": 51820}}, "spec.endpoint.dnsOrIP"),
        (
            {"endpoint": {"dnsOrIP": {"dns": "Bad_Name"}, "port": 51820}},
            "spec.endpoint.dnsOrIP.dns",
        ),
        (
            {"endpoint": {"dnsOrIP": {"dns": "UPPER.example.com"}, "port": 51820}},
            "spec.endpoint.dnsOrIP.dns",
        ),
        ({"endpoint": {"dnsOrIP": {"ip": "300.1.1.1"}, "port": 51820}}, "spec.endpoint.dnsOrIP.ip"),
        ({"endpoint": {"dnsOrIP": {"ip": "203.0.113.7"}, "port": 0}}, "spec.endpoint.port"),
        ({"endpoint": {"dnsOrIP": {"ip": "203.0.113.7"}, "port": 65536}}, "spec.endpoint.port"),
        ({"persistentKeepalive": -1}, "spec.persistentKeepalive"),
        ({"publicKey": "not base64!"}, "spec.publicKey"),
        ({"publicKey": "c2hvcnQ="}, "spec.publicKey"),
        ({"publicKey": ""}, "spec.publicKey"),
        # What the engine needs beyond the webhook.
        ({"allowedIPs": []}, "spec.allowedIPs"),
        ({"presharedKey": "short"}, "spec.presharedKey"),
    ],
)
def test_bad_peer_names_peer_and_field(spec, field):
    err = raises(kn.peer_from_resource, peer("bad", **spec))
    assert err.subject == "peer 'bad'" and err.field == field


def test_peer_without_spec_or_name():
    assert raises(kn.peer_from_resource, {"metadata": {"name": "p"}}).field == "spec"
    assert raises(kn.peer_from_resource, {"spec": {}}).field == "metadata.name"


# --- write-back -----------------------------------------------------------------------------------

ENGINE_NODE = {
    "name": "n1",
    "public_key": KEY,
    "endpoint": "203.0.113.5:51820",
    "internal_ip": "10.1.0.5/24",
    "discovered_endpoints": {KEY2: "198.51.100.7:40112"},
}


def test_write_back_formats():
    out = kn.write_back(
        ENGINE_NODE, {"address": "10.4.0.1/16", "leader": True}, "location", 1700000000
    )
    assert out == {
        kn.KEY: KEY,
        kn.ENDPOINT: "203.0.113.5:51820",
        kn.INTERNAL_IP: "10.1.0.5/24",
        kn.WIREGUARD_IP: "10.4.0.1/16",
        kn.LAST_SEEN: "1700000000",
        kn.GRANULARITY: "location",
        # Go's encoding of map[string]*net.UDPAddr: sorted keys, no spaces.
        kn.DISCOVERED_ENDPOINTS: '{"%s":{"IP":"198.51.100.7","Port":40112,"Zone":""}}' % KEY2,
        # as Kilo's Set: "" when the node has none
        kn.CNI_COMPATIBILITY_IP: "",
    }
    out = kn.write_back(
        dict(ENGINE_NODE, cni_compatibility_ip="10.244.0.7/32"), {"address": None}, "location", 1
    )
    assert out[kn.CNI_COMPATIBILITY_IP] == "10.244.0.7/32"


def test_write_back_none_values_as_kilo_writes_them():
    n = dict(ENGINE_NODE, internal_ip=None, endpoint="[2001:db8::5]:51820", discovered_endpoints={})
    out = kn.write_back(n, {"address": None, "leader": False}, "full", 5)
    assert out[kn.INTERNAL_IP] == "" and out[kn.WIREGUARD_IP] == ""
    assert out[kn.ENDPOINT] == "[2001:db8::5]:51820"
    assert out[kn.DISCOVERED_ENDPOINTS] == "{}"
    assert kn.write_back(n, None, "cross", 5)[kn.WIREGUARD_IP] == ""


@pytest.mark.parametrize(
    "change,field",
    [
        ({"public_key": None}, "public_key"),
        ({"endpoint": "x"}, "endpoint"),
        ({"internal_ip": "x"}, "internal_ip"),
        ({"discovered_endpoints": {KEY2: "host.example:1"}}, "discovered_endpoints[%s]" % KEY2),
    ],
)
def test_write_back_bad_inputs(change, field):
    assert raises(kn.write_back, dict(ENGINE_NODE, **change), None, "location", 1).field == field


def test_write_back_bad_granularity_and_time():
    assert raises(kn.write_back, ENGINE_NODE, None, "auto", 1).field == "granularity"
    assert raises(kn.write_back, ENGINE_NODE, None, "location", None).field == "last_seen"
    assert raises(kn.write_back, ENGINE_NODE, None, "location", -1).field == "last_seen"


def test_remove_agent_annotations_is_kilos_cleanup():
    out = kn.remove_agent_annotations()
    assert out == dict.fromkeys(
        [
            kn.ENDPOINT,
            kn.INTERNAL_IP,
            kn.KEY,
            kn.LAST_SEEN,
            kn.WIREGUARD_IP,
            kn.DISCOVERED_ENDPOINTS,
            kn.GRANULARITY,
        ]
    )
    assert kn.LOCATION not in out and kn.LEADER not in out


@pytest.mark.parametrize(
    "plan,granularity",
    [({"address": "10.4.0.1/16"}, "location"), ({"address": None}, "cross"), (None, "full")],
)
def test_round_trip(plan, granularity):
    annotations = kn.write_back(ENGINE_NODE, plan, granularity, 1700000000)
    facts = kn.host_vars(node(annotations))["kilo_kubernetes_node"]
    assert facts["public_key"] == ENGINE_NODE["public_key"]
    assert facts["endpoint"] == ENGINE_NODE["endpoint"]
    assert facts["internal_ip"] == ENGINE_NODE["internal_ip"]
    assert facts["discovered_endpoints"] == ENGINE_NODE["discovered_endpoints"]
    assert facts["wireguard_ip"] == (plan or {}).get("address")
    assert facts["granularity"] == granularity and facts["last_seen"] == 1700000000
    # Written again from what was read: the same annotations.
    fields = ("public_key", "endpoint", "internal_ip", "discovered_endpoints")
    again = dict(ENGINE_NODE, **dict((k, facts[k]) for k in fields))
    rewritten = kn.write_back(
        again, {"address": facts["wireguard_ip"]}, facts["granularity"], facts["last_seen"]
    )
    assert rewritten == annotations


def test_round_trip_ipv6_and_no_internal_ip():
    n = dict(
        ENGINE_NODE,
        endpoint="[2001:db8::5]:51820",
        internal_ip=None,
        discovered_endpoints={KEY2: "[2001:db8::9]:4000"},
    )
    facts = kn.host_vars(node(kn.write_back(n, None, "location", 1)))["kilo_kubernetes_node"]
    assert facts["endpoint"] == n["endpoint"] and facts["internal_ip"] is None
    assert facts["discovered_endpoints"] == n["discovered_endpoints"]


def test_drift_names_node_variables_the_node_says_otherwise():
    obj = node(
        annotations={kn.PREFIX + "persistent-keepalive": "10", kn.PREFIX + "location": "aws"}
    )
    # what the inventory plugin made of the Node itself: no drift
    assert kn.drift(obj, kn.host_vars(obj)) == []
    hvars = dict(
        kn.host_vars(obj),
        kilo_persistent_keepalive="25",
        kilo_force_endpoint="203.0.113.9:51820",
        kilo_location="aws",
    )
    got = dict((var, (value, have)) for var, value, have in kn.drift(obj, hvars))
    assert got == {
        "kilo_persistent_keepalive": ("25", 10),
        "kilo_force_endpoint": ("203.0.113.9:51820", kn.UNSET),
    }
