"""A relayed mesh on the controller (docs/DESIGN.md, "Relays and NAT traversal", stage 2's controller
half): a host marked behind_nat needs no endpoint, and kilo.mesh.validate warns of what it cannot
refuse (validate.relay_warnings)."""

from ansible_collections.kilo.mesh.plugins.plugin_utils import inputs

from test_missing_warning import validate

KEYS = [
    "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls=",
    "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw=",
    "aNdi7F94dUaB6O9ScwgibmXpFk7PcQSX2C5Hzcc0b2M=",
]


def relayed(**extra):
    """r reachable; u and v behind NAT, pinned by key and mark alone (no endpoint, no report)."""
    hostvars = {
        "r": {
            "kilo_location": "r",
            "kilo_public_key": KEYS[0],
            "kilo_force_endpoint": "203.0.113.1:51820",
        },
        "u": {"kilo_location": "u", "kilo_public_key": KEYS[1], "kilo_behind_nat": True},
        "v": {"kilo_location": "v", "kilo_public_key": KEYS[2], "kilo_behind_nat": "yes"},
    }
    for host, values in extra.items():
        hostvars[host].update(values)
    return hostvars


def test_a_host_behind_nat_joins_without_an_endpoint(tmp_path):
    result = validate(relayed(), ["r", "u", "v"], tmp_path)
    assert result["nodes"] == 3 and "missing" not in result and "warnings" not in result, result
    # without the mark, a key alone is no node: the host has not reported
    node, dummy, dummy = inputs.host_node(
        "u", {"kilo_public_key": KEYS[1]}, "kilo_key", None, "u", 51820
    )
    assert node is None
    node, dummy, dummy = inputs.host_node("u", relayed()["u"], "kilo_key", None, "u", 51820)
    assert node["behind_nat"] is True and node["endpoint"] is None


def test_validate_warns_of_a_mark_kilo_nodes_would_undo_and_of_an_unknown_relay(tmp_path):
    kube = {"kilo_kubernetes_node": {"public_key": KEYS[1]}}
    hostvars = relayed(u=kube)
    for h in hostvars.values():
        h["kilo_relays"] = ["r", "elsewhere"]
    result = validate(hostvars, ["r", "u", "v"], tmp_path)
    assert result["warnings"] == [
        "host 'u': kilo_behind_nat: without kilo_persistent_keepalive, Kilo's nodes (kg) of this cluster reset this"
        " node's endpoint every resync instead of following its NAT mapping; set it (25)",
        "host 'r': kilo_relays: 'elsewhere' names no location of the mesh (r, u, v)",
    ]
    # the keepalive as the engine parsed it: "0" is none (the engine keeps alive with 25 s of its
    # own, which Kilo's nodes do not read), "25" as text is set
    hostvars["u"]["kilo_persistent_keepalive"] = "0"
    assert len(validate(hostvars, ["r", "u", "v"], tmp_path)["warnings"]) == 2
    hostvars["u"]["kilo_persistent_keepalive"] = 25
    for h in hostvars.values():
        h["kilo_relays"] = ["r"]
    assert "warnings" not in validate(hostvars, ["r", "u", "v"], tmp_path)
    hostvars["u"]["kilo_persistent_keepalive"] = "25"
    assert "warnings" not in validate(hostvars, ["r", "u", "v"], tmp_path)
