"""The node table (module_utils/nodes.py) is the one definition of a node field: the inventory
reading, the Kubernetes reading and write-back, the engine's parse and the docs follow it, and
every field's check runs for every host before any remote call (kilo.mesh.validate)."""

import ipaddress

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils import nodes, options
from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    host_subject,
    node_subject,
)
from ansible_collections.kilo.mesh.plugins.module_utils.engine.parse import parse_node
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node
from ansible_collections.kilo.mesh.plugins.plugin_utils import inputs, mesh, validate
from test_missing_warning import validate as validate_action

KEY = "aNdi7F94dUaB6O9ScwgibmXpFk7PcQSX2C5Hzcc0b2M="


def test_inventory_variables_are_the_tables():
    assert inputs.NODE_VARS == dict((f.name, f.var) for f in nodes.FIELDS.values() if f.var)
    assert set(inputs.INPUT_VARS) == set(nodes.VARS) | {
        "kilo_kubernetes_node",
        nodes.POD_SOURCE_VAR,
        nodes.NODE_POD_SOURCE_VAR,
    }


def test_the_engine_parses_every_field_of_the_table():
    seen = []

    class Recording(dict):
        def get(self, key, default=None):
            seen.append(key)
            return dict.get(self, key, default)

    parse_node(Recording(name="a", public_key=KEY), 0, 51820)
    assert [k for k in seen if k != "name"] == list(nodes.FIELDS)


def test_kubernetes_reads_and_writes_the_tables_annotations():
    annotations = dict((f.annotation, "") for f in nodes.FIELDS.values() if f.annotation)
    hvars = kube_node.host_vars(
        {
            "metadata": {"name": "n", "annotations": annotations},
            "spec": {"podCIDR": "10.244.0.0/24"},
        }
    )
    readable = set(f.var for f in nodes.FIELDS.values() if f.kube)
    # Kilo ignores an empty force-endpoint and cni-compatibility-ip; an empty kilo.mesh/pod-cidrs forces nothing
    assert set(hvars) - {"kilo_kubernetes_node"} == readable - {
        "kilo_force_endpoint",
        "kilo_cni_compatibility_ip",
        "kilo_pod_cidr",
    }
    written = kube_node.write_back({"name": "n", "public_key": KEY}, None, "location", 1)
    assert set(f.written for f in nodes.FIELDS.values() if f.written) <= set(written)


# (variable, bad value, message) - each refused by its row (its check, else the engine's parse),
# the host and the variable named
BAD = [
    ("kilo_persistent_keepalive", "abc", "'abc' is not an integer"),
    ("kilo_persistent_keepalive", -5, "-5 out of range 0-65535"),
    ("kilo_force_endpoint", "300.1.1.1:51820", "'300.1.1.1' is not a valid IPv4 address"),
    ("kilo_force_endpoint", "203.0.113.41:0", "port 0 out of range 1-65535"),
    ("kilo_force_internal_ip", "bogus", "'bogus' is not an IP address in CIDR form"),
    ("kilo_pod_cidr", "10.0.0.0/33", "is not a CIDR"),
    ("kilo_allowed_location_ips", ["nope"], "'nope' is not a CIDR"),
    ("kilo_allowed_location_ips", 7, "expected a list of CIDRs, got 7"),
    ("kilo_cni_compatibility_ip", "x", "is not an address in CIDR form"),
    ("kilo_public_key", "short", "not valid base64"),
    ("kilo_leader", "maybe", "is not a boolean"),
]


@pytest.mark.parametrize("var, value, message", BAD)
def test_validate_checks_every_host_whether_it_reported_or_not(var, value, message, tmp_path):
    # through kilo.mesh.validate's action: "fresh" never reported, so only the reading of every
    # host with stand-ins (MeshReading.planned) reads its variables
    hostvars = {
        "seen": {
            "kilo_location": "x",
            "kilo_public_key": KEY,
            "kilo_force_endpoint": "203.0.113.1:51820",
        },
        "fresh": {"kilo_location": "y", var: value},
    }
    with pytest.raises(KiloError) as e:
        validate_action(hostvars, ["seen", "fresh"], tmp_path)
    assert (e.value.kind, e.value.name, e.value.field) == ("host", "fresh", var)
    assert str(e.value).startswith("host 'fresh': %s: " % var) and message in str(e.value)


# the rows the reading checks itself (a row without a check is the engine's to refuse)
CHECKED = [bad for bad in BAD if nodes.FIELDS[nodes.field_of_var(bad[0])].check is not None]


@pytest.mark.parametrize("var, value, message", CHECKED)
def test_the_inventory_reading_refuses_the_same(var, value, message):
    with pytest.raises(KiloError, match="^host 'h': %s: " % var):
        inputs.node_from_host(
            "h", {var: value}, {"public_key": KEY, "external_ip": "203.0.113.1"}, "", 51820
        )


def test_good_values_pass_unchanged():
    hvars = {
        "kilo_location": "x",
        "kilo_leader": "",
        "kilo_force_endpoint": "example.com:51821",
        "kilo_force_internal_ip": "-",
        "kilo_persistent_keepalive": "25",
        "kilo_allowed_location_ips": "10.9.0.0/16, 10.8.0.0/16",
        "kilo_pod_cidr": "10.244.0.0/24",
        "kilo_public_key": KEY,
        "kilo_cni_compatibility_ip": "10.0.0.1/32",
    }
    assert nodes.check_host_vars(hvars, host_subject("h")) == {
        "location": "x",
        "leader": True,
        "endpoint": "example.com:51821",
        "internal_ip": None,
        "persistent_keepalive": "25",  # as given: the engine parses it
        "allowed_location_ips": "10.9.0.0/16, 10.8.0.0/16",  # as given: the engine parses it
        "pod_cidr": "10.244.0.0/24",
        "public_key": KEY,
        "cni_compatibility_ip": "10.0.0.1/32",
    }


def test_the_keepalive_is_parsed_once_on_the_controller(monkeypatch, tmp_path):
    """The keepalive's one parser runs once per host on the controller (the engine's input), not
    also in the inventory reading; the engine's error still names the host and the variable,
    through validate and through a one-host playbook's plan."""
    from test_mesh_reading import make_action, task_vars_of, two_nodes

    from ansible_collections.kilo.mesh.plugins.action import join
    from ansible_collections.kilo.mesh.plugins.module_utils.options import defaults

    assert nodes.FIELDS["persistent_keepalive"].check is None
    assert nodes.check_host_vars({"kilo_persistent_keepalive": "7"}, None, typed=True) == {
        "persistent_keepalive": 7
    }
    calls = []
    parse = nodes.FIELDS["persistent_keepalive"].parse
    row = nodes.NodeField(
        "persistent_keepalive",
        "kilo_persistent_keepalive",
        "counted",
        parse=lambda v, s, f: calls.append(v) or parse(v, s, f),
    )
    monkeypatch.setitem(nodes.FIELDS, "persistent_keepalive", row)
    hostvars, registry = two_nodes(tmp_path, internal_a="10.0.0.1/24")
    hostvars["a"]["kilo_persistent_keepalive"] = "15"
    validate_action(hostvars, ["a", "b"], tmp_path)
    assert calls == [], "the reading and validate's own steps leave it to the engine"
    from ansible_collections.kilo.mesh.plugins.module_utils.engine import parse as engine_parse

    monkeypatch.setattr(
        engine_parse,
        "PARSERS",
        [
            p if p[2] != "persistent_keepalive" else p[:1] + (row.parse,) + p[2:]
            for p in engine_parse.PARSERS
        ],
    )
    validate_action(hostvars, ["a", "b"], tmp_path)
    assert calls.count("15") == 1, calls
    hostvars["a"]["kilo_persistent_keepalive"] = "often"
    message = "host 'a': kilo_persistent_keepalive: 'often' is not an integer"
    with pytest.raises(KiloError, match="^" + message):
        validate_action(hostvars, ["a", "b"], tmp_path)
    task_vars = task_vars_of(hostvars, "a", registry=registry)
    args = dict(defaults("mesh", "inputs"), registry=registry)
    with pytest.raises(KiloError, match="^" + message):
        mesh.MeshReading(make_action(join), task_vars, args).plan("a")
    # the push run's save_plans reading (kilo.mesh.topology of a role run alone: no validate)
    with pytest.raises(KiloError, match="^" + message):
        mesh.MeshReading(make_action(join), task_vars, args).computed(only=["a", "b"], lazy=True)


def test_typed_values_copy_and_pickle():
    import copy
    import pickle

    endpoint = nodes.parse_endpoint("[2001:db8::1]:51821", None, None)
    cidr = nodes.Cidr(ipaddress.ip_network("10.4.0.0/24"), "10.4.0.0/24")
    assert (endpoint.text, str(endpoint.ip), endpoint.port) == (
        "[2001:db8::1]:51821",
        "2001:db8::1",
        51821,
    )
    for value in (endpoint, cidr, nodes.NO_ENDPOINT):
        for again in (copy.copy(value), copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
            assert again == value and isinstance(again, value.__class__)


def test_an_error_carries_its_subject_as_data():
    e = KiloError("boom", node_subject("it's"), "endpoint")
    assert (e.kind, e.name, e.field, e.message) == ("node", "it's", "endpoint", "boom")
    assert str(e) == 'node "it\'s": endpoint: boom'
    plain = KiloError("boom", "options", "port")
    assert (plain.kind, plain.name) == ("options", None)
    assert KiloError("boom").about(host_subject("b")).name == "b"


def test_an_engine_error_maps_to_its_host_by_name_not_by_text():
    """A host whose name the message quotes with double quotes (it holds a ') is still found."""
    name = "it's"
    hostvars = {name: {"kilo_pod_cidr": "10.244.0.0/24"}}
    nodes_ = [
        {
            "name": name,
            "public_key": KEY,
            "endpoint": "203.0.113.1:51820",
            "pod_cidr": "10.244.0.0/33",
        }
    ]
    with pytest.raises(KiloError) as e:
        validate.check_topology(nodes_, [], {}, hostvars, name)
    assert (e.value.kind, e.value.name, e.value.field) == ("host", name, "kilo_pod_cidr")


def test_every_integer_option_has_bounds():
    for name, spec in options.OPTIONS.items():
        if spec["type"] == "int":
            assert "bounds" in spec, name
            low, high = spec["bounds"]
            assert options.out_of_bounds(name, low) is None and options.out_of_bounds(name, low - 1)
            assert high is None or options.out_of_bounds(name, high + 1)
    assert options.out_of_bounds("mtu", -5) == "-5 out of range 0-65535"
    assert options.out_of_bounds("port", 0) == "0 out of range 1-65535"
    assert options.out_of_bounds("task_timeout", 0) == "0 out of range (at least 1)"


def test_the_docs_name_every_node_variable():
    lines = nodes.doc_lines()
    assert [line.split(")")[0][2:] for line in lines] == list(nodes.VARS)


def test_a_new_field_is_one_table_row(monkeypatch, tmp_path):
    """A row added to the table reaches the engine's input node without a line in node_from_host,
    is checked by validate for every host, and is read from its Kubernetes annotation."""
    row = nodes.NodeField(
        "weight",
        "kilo_weight",
        "A test field.",
        check=lambda v, s, f: nodes.to_int(v, s, f, 0, 9),
        parse=lambda v, s, f: v,
        source=nodes.ANNOTATION_PREFIX + "weight",
        kube=lambda v, s, f: nodes.to_int(v, s, f, 0, 9),
    )
    fields = nodes.FIELDS.copy()
    fields["weight"] = row
    monkeypatch.setattr(nodes, "FIELDS", fields)
    monkeypatch.setattr(nodes, "VARS", dict(nodes.VARS, kilo_weight="weight"))
    monkeypatch.setattr(kube_node, "FIELDS", fields)
    # the variables the mesh reads of a host, as the table gives them at import
    monkeypatch.setattr(mesh, "INPUT_VARS", inputs.INPUT_VARS + ("kilo_weight",))
    node = inputs.node_from_host(
        "a", {"kilo_weight": "3"}, {"public_key": KEY, "external_ip": "203.0.113.1"}, "x", 51820
    )
    assert node["weight"] == 3
    with pytest.raises(KiloError, match="host 'a': kilo_weight: 10 out of range"):
        validate_action({"a": {"kilo_location": "x", "kilo_weight": 10}}, ["a"], tmp_path)
    hvars = kube_node.host_vars(
        {"metadata": {"name": "n", "annotations": {nodes.ANNOTATION_PREFIX + "weight": "4"}}}
    )
    assert hvars["kilo_weight"] == 4


def _slow(parse, text):
    """What ``ipaddress`` alone makes of ``text`` (the parsers' meaning before their fast path)."""
    try:
        value = parse(text.strip())
    except ValueError:
        return None
    return value, str(value)


def _fast(parse, text):
    try:
        return parse(text, "s", "f")
    except KiloError:
        return None


def test_the_fast_ipv4_path_reads_as_ipaddress_does():
    """network_text, interface_text and parse_endpoint take canonical IPv4 text without
    ``ipaddress``'s parser: on any text they give what it gives (value, text, refusal)."""
    import ipaddress
    import random

    rnd = random.Random(7)
    samples = [
        "10.0.0.0/8",
        "10.1.2.3/8",
        "0.0.0.0/0",
        "255.255.255.255",
        "1.2.3.4/32",
        "1.2.3.4/33",
        "01.2.3.4/8",
        "1.2.3.04",
        "1.2.3.4/08",
        "1.2.3.4/0",
        "1.2.3.4/00",
        "1.2.3.4/+8",
        "1.2.3.4/ 8",
        " 1.2.3.4/8 ",
        "1.2.3",
        "1.2.3.4.5",
        "256.1.1.1",
        "1.2.3.4/255.0.0.0",
        "1.2.3.4/",
        "/8",
        "1.2.3.4\n",
        "\u0661.2.3.4",
        "1.2.3.4/\u0668",
        "1.2.3.4\x00",
        "fd00::1/64",
        "::ffff:1.2.3.4",
        "1.2.3.4/8/8",
        "0x1.2.3.4",
        "1..2.3",
    ]
    for dummy in range(20000):
        parts = [
            rnd.choice(
                ["0", "00", "1", "9", "10", "99", "100", "199", "255", "256", "999", "01", ""]
            )
            for dummy in range(5)
        ]
        text = ".".join(parts[: rnd.choice([3, 4, 4, 4, 5])])
        if rnd.random() < 0.7:
            text += "/" + rnd.choice(["0", "8", "12", "24", "31", "32", "33", "08", "", "x"])
        samples.append(text)
    for text in samples:
        assert _fast(nodes.network_text, text) == _slow(
            lambda t: ipaddress.ip_network(t, strict=False), text
        ), text
        assert _fast(nodes.interface_text, text) == _slow(ipaddress.ip_interface, text), text
        if "/" not in text and text.strip():
            endpoint = _fast(nodes.parse_endpoint, text.strip() + ":51820")
            try:
                expected = ipaddress.IPv4Address(text.strip())
            except ValueError:
                expected = None
            if expected is not None:
                assert endpoint == ("%s:51820" % expected, expected, 51820), text
