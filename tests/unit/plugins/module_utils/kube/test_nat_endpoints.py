"""discovered-endpoints as Kilo's agent writes it: only the endpoints learned from peers behind NAT
(those that keep alive, which the plan marks roaming), not every peer WireGuard had a handshake with;
both writers (kilo.mesh.annotate and the agent) go through kube_node.nat_endpoints."""

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn
from ansible_collections.kilo.mesh.plugins.module_utils.plan import mark_roaming

NATTED = "CDuioQ3kUUB1nnHQzczp4P4cM7g55s2H9aVKm662PzQ="
PUBLIC = "DPmNdk+9Z8GGMdfM/9Sj6EZgHZgxpxQ/TndinC4CtVM="
OUTSIDE = "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw="
LEARNED = {NATTED: "203.0.113.30:51820", PUBLIC: "203.0.113.21:51820", OUTSIDE: "198.51.100.9:4000"}


def plan_of(keepalive):
    """A leader's plan whose peers are the segments and the outside peer, marked as a run marks them."""
    plan = {"peers": [{"public_key": key} for key in (NATTED, PUBLIC, OUTSIDE)]}
    computed = {
        "segments": [
            {"public_key": NATTED, "persistent_keepalive": keepalive.get(NATTED, 0)},
            {"public_key": PUBLIC, "persistent_keepalive": keepalive.get(PUBLIC, 0)},
        ],
        "peers": [{"public_key": OUTSIDE, "persistent_keepalive": keepalive.get(OUTSIDE, 0)}],
    }
    mark_roaming([plan], computed)
    return plan


def test_only_peers_that_keep_alive():
    assert kn.nat_endpoints(LEARNED, plan_of({NATTED: 25})) == {NATTED: "203.0.113.30:51820"}
    assert kn.nat_endpoints(LEARNED, plan_of({NATTED: 25, OUTSIDE: 10})) == {
        NATTED: "203.0.113.30:51820",
        OUTSIDE: "198.51.100.9:4000",
    }
    assert kn.nat_endpoints(LEARNED, plan_of({})) == {}


def test_no_plan_or_nothing_learned():
    assert kn.nat_endpoints(LEARNED, None) == {}
    assert kn.nat_endpoints(None, plan_of({NATTED: 25})) == {}
    assert kn.nat_endpoints({}, plan_of({NATTED: 25})) == {}


def test_written_in_kilos_format():
    node = {
        "name": "aws-1",
        "public_key": PUBLIC,
        "endpoint": "203.0.113.11:51820",
        "internal_ip": None,
        "discovered_endpoints": kn.nat_endpoints(LEARNED, plan_of({NATTED: 25})),
    }
    out = kn.write_back(node, {"address": "10.4.0.1/16"}, "location", 1)
    assert (
        out[kn.DISCOVERED_ENDPOINTS]
        == '{"%s":{"IP":"203.0.113.30","Port":51820,"Zone":""}}' % NATTED
    )


def test_both_writers_want_the_same_and_share_what_counts_as_a_change():
    """kube_node.node_annotations is what kilo.mesh.annotate and the agent write; a newly learned
    endpoint or last-seen is refreshed, no change; another key or a removed observed one is one."""
    node = {
        "name": "aws-1",
        "public_key": PUBLIC,
        "endpoint": "203.0.113.11:51820",
        "internal_ip": None,
        "discovered_endpoints": LEARNED,
    }
    current = {kn.WIREGUARD_IPS: "10.4.0.1/16,fd04::1/64", "other": "kept"}
    wanted = kn.node_annotations(node, plan_of({NATTED: 25}), "location", 5, current)
    assert wanted == dict(
        kn.write_back(
            dict(node, discovered_endpoints=kn.nat_endpoints(LEARNED, plan_of({NATTED: 25}))),
            plan_of({NATTED: 25}),
            "location",
            5,
        ),
        **{kn.WIREGUARD_IPS: None},
    )
    changes, refreshed = kn.annotation_changes(wanted, current)
    assert (
        changes[kn.WIREGUARD_IPS] is None
        and kn.KEY in changes
        and set(refreshed) == set(kn.OBSERVED_ANNOTATIONS)
    )
    written = dict((k, v) for k, v in wanted.items() if v is not None)
    assert kn.annotation_changes(wanted, written) == ({}, {})
    later = dict(wanted, **{kn.LAST_SEEN: "9", kn.DISCOVERED_ENDPOINTS: "{}"})
    assert kn.annotation_changes(later, written) == (
        {},
        {kn.LAST_SEEN: "9", kn.DISCOVERED_ENDPOINTS: "{}"},
    )
    rekeyed = dict(wanted, **{kn.KEY: OUTSIDE, kn.LAST_SEEN: None})
    assert kn.annotation_changes(rekeyed, written) == ({kn.KEY: OUTSIDE, kn.LAST_SEEN: None}, {})
