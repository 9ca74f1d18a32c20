# -*- coding: utf-8 -*-
"""Kilo's output, frozen: a digest of ``build_plans`` over 300 seeded random Kilo meshes.

The meshes are the reference suite's (``test_topology_reference.random_mesh``: locations, nodes
with and without internal IPs, leader hints, public/private/DNS/IPv6 endpoints, peers, allowed
location IPs, discovered endpoints, granularity location/full), none with a mark or option that
Kilo lacks. The digest was recorded on main before the relays (docs/DESIGN.md, "Relays and NAT
traversal: the plan") were built: a change that alters a plan, a segment, the peers or an error
of any mesh Kilo builds fails here. Plans are taken in their flat form (one route per
destination, as a host sees them), so the engine's grouping of routes may change freely.
"""

import hashlib
import json
import random

from flat_plans import build_plans
from test_topology_reference import random_mesh
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import TopologyError

SEEDS = 300
# recorded on main at 55333c2 (before stage 1 of the relays)
DIGEST = "75911d6eec8bce3f9e86a7ec6dd9bf8a74396c678e210e50b65fc7566c7debce"
# the same meshes under granularity cross (ours, beyond Kilo): unchanged as well
CROSS_DIGEST = "0c38ccbb91c0d86ac4497b8b1db8e6e8639b52332111b5d881e78b014238332f"


def mesh_digest(seeds=SEEDS, granularity=None):
    digest = hashlib.sha256()
    refused = 0
    for seed in range(seeds):
        nodes, peers, options = random_mesh(random.Random(seed))
        if granularity:
            options["granularity"] = granularity
        try:
            out = build_plans(nodes, peers, options)
        except TopologyError as e:
            refused += 1
            out = {"error": str(e)}
        digest.update(json.dumps(out, sort_keys=True, separators=(",", ":")).encode())
        digest.update(b"\0")
    return digest.hexdigest(), refused


def test_kilo_meshes_unchanged():
    found, refused = mesh_digest()
    print("%d meshes, %d refused, digest %s" % (SEEDS, refused, found))
    assert found == DIGEST


def test_cross_meshes_unchanged():
    found, refused = mesh_digest(granularity="cross")
    print("%d meshes (cross), %d refused, digest %s" % (SEEDS, refused, found))
    assert found == CROSS_DIGEST
