# -*- coding: utf-8 -*-
"""Pod ranges from the IPAM in agent mode (issue 23): the agent's reading of the Nodes with the
objects of the mesh's source, and the agents' rights, which follow that source."""

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.agent import mesh
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn
from ansible_collections.kilo.mesh.plugins.plugin_utils import agent_identity

KEYS = {
    "a": "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls=",
    "b": "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw=",
}


def node_object(name, annotations=None):
    notes = {
        kn.KEY: KEYS[name],
        kn.ENDPOINT: "203.0.113.%d:51820" % (ord(name) - 96),
        kn.LOCATION: name,
    }
    notes.update(annotations or {})
    return {
        "metadata": {"name": name, "annotations": notes},
        "spec": {"podCIDR": "10.244.%d.0/24" % (ord(name) - 96)},
    }


BLOCKS = [
    {
        "metadata": {"name": "a-1"},
        "spec": {"node": "a", "cidr": "10.2.0.64/26", "state": "confirmed"},
    },
    {
        "metadata": {"name": "a-0"},
        "spec": {"node": "a", "cidr": "10.2.0.0/26", "state": "confirmed"},
    },
    {
        "metadata": {"name": "b-0"},
        "spec": {"node": "b", "cidr": "10.2.1.0/26", "state": "confirmed"},
    },
]


def pods(nodes):
    return dict((n["name"], n["pod_cidr"]) for n in nodes)


def test_the_agent_reads_the_ranges_of_its_source():
    objects = {"a": node_object("a"), "b": node_object("b")}
    own = {"public_key": KEYS["a"], "endpoint": "203.0.113.1:51820"}
    ipam = {"calico": kn.calico_pod_cidrs(BLOCKS)}
    nodes, skipped = mesh.mesh_nodes(
        objects, "a", own, 51820, kn.REGION_LABEL, ipam=ipam, pod_source="calico"
    )
    assert skipped == {} and pods(nodes) == {
        "a": ["10.2.0.0/26", "10.2.0.64/26"],
        "b": "10.2.1.0/26",
    }
    nodes, skipped = mesh.mesh_nodes(objects, "a", own, 51820, kn.REGION_LABEL, ipam=ipam)
    assert pods(nodes) == {"a": "10.244.1.0/24", "b": "10.244.2.0/24"}
    # a node naming a source the agent does not watch is left out, with the reason
    objects["b"] = node_object("b", {"kilo.mesh/pod-cidr-source": "cilium"})
    nodes, skipped = mesh.mesh_nodes(
        objects, "a", own, 51820, kn.REGION_LABEL, ipam=ipam, pod_source="calico"
    )
    assert (
        list(pods(nodes)) == ["a"]
        and "kilo_pod_cidr_source: cilium: its objects were not read" in skipped["b"]
    )


def test_the_agents_may_list_and_watch_only_the_source_in_effect():
    def rules(source):
        return [
            (r["apiGroups"], r["resources"], r["verbs"])
            for r in agent_identity.shared_role(source)["rules"]
        ]

    base = [
        ([""], ["nodes"], ["get", "list", "watch"]),
        (["kilo.squat.ai"], ["peers"], ["get", "list", "watch"]),
    ]
    assert rules("node") == base
    assert rules("calico") == base + [
        (["crd.projectcalico.org"], ["blockaffinities"], ["list", "watch"])
    ]
    assert rules("cilium") == base + [(["cilium.io"], ["ciliumnodes"], ["list", "watch"])]


def test_every_host_of_a_mesh_agrees_on_its_pod_source():
    """The mesh's source is one (the agents watch one kind and share one role); a node's own is
    kilo_node_pod_cidr_source."""
    from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
    from ansible_collections.kilo.mesh.plugins.module_utils.options import defaults
    from ansible_collections.kilo.mesh.plugins.plugin_utils.validate import agree

    per_host = {"a": defaults("mesh", "inputs"), "b": defaults("mesh", "inputs")}
    agree(per_host)
    per_host["b"]["pod_cidr_source"] = "calico"
    with pytest.raises(KiloError) as e:
        agree(per_host)
    assert e.value.name == "b" and e.value.field == "kilo_pod_cidr_source"


def test_a_malformed_ipam_object_leaves_out_its_node_only_in_an_agent():
    """The inventory plugin fails on a malformed object (as on its other errors); an agent leaves the
    node it names out with the reason, and only reports an object that names no node."""
    blocks = [
        {
            "metadata": {"name": "ok"},
            "spec": {"node": "a", "cidr": "10.2.0.0/26", "state": "confirmed"},
        },
        {
            "metadata": {"name": "bad-cidr"},
            "spec": {"node": "b", "cidr": "10.2.0.300/26", "state": "confirmed"},
        },
        {
            "metadata": {"name": "b-good"},
            "spec": {"node": "b", "cidr": "10.2.1.0/26", "state": "confirmed"},
        },
        {"metadata": {"name": "no-node"}, "spec": {"cidr": "10.2.2.0/26", "state": "confirmed"}},
    ]
    with pytest.raises(kn.KiloError, match="spec.cidr"):
        kn.calico_pod_cidrs(blocks)
    errors = {}
    assert kn.calico_pod_cidrs(blocks, errors) == {
        "a": ["10.2.0.0/26"]
    }  # never b with part of its blocks
    assert set(errors) == {"b", "BlockAffinity 'no-node'"} and "spec.cidr" in errors["b"]
    errors = {}
    nodes = [
        {"metadata": {"name": "c"}, "spec": {"ipam": {"podCIDRs": "10.3.0.0/24"}}},
        {"metadata": {"name": "d"}, "spec": {"ipam": {"podCIDRs": ["10.4.0.0/24"]}}},
    ]
    assert kn.cilium_pod_cidrs(nodes, errors) == {"d": ["10.4.0.0/24"]} and list(errors) == ["c"]
