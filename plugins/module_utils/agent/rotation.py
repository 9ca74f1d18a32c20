# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""A key rotation announced between agents, so that the rotating node switches just before its
peers do (the order that loses no packet; docs/docsite/rst/guide_rotation.rst).

The agent whose key rotates (kilo_key_max_age) writes ``kilo.mesh/next-key`` on its Node: the
new public key and the moment it switches, LEAD seconds ahead. Every other agent sees the
announcement on its watch, computes its plan with the new key at once and applies it SWITCH_STEP
seconds after that moment. The rotating agent then writes Kilo's own ``key`` annotation and
removes the announcement. Kilo's agents (kg) read only ``key``, so they switch after the node
did, as they would for any key change.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import zlib

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, parse_key
from ansible_collections.kilo.mesh.plugins.module_utils.kube.kube_node import (
    NEXT_KEY,
)  # our own annotation, never Kilo's
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import FIELDS
from ansible_collections.kilo.mesh.plugins.module_utils.plan import SWITCH_STEP

KEY = FIELDS["public_key"].written
# From the announcement to the switch: the watch event, the peers' debounce (0.2 s) and their
# reconcile must fit, with room for a loaded host.
LEAD = 2.0


def announcement(public_key, at):
    """The annotation's value: the new public key and the moment of the switch."""
    return "%s@%.3f" % (public_key, at)


def parse(value):
    """(public key, moment) of an announcement, or None when it is absent or malformed (another
    node's bad annotation is ignored, not fatal)."""
    if not isinstance(value, str) or "@" not in value:
        return None
    key, _sep, at = value.rpartition("@")
    try:
        return parse_key(key, field=NEXT_KEY), float(at)
    except (KiloError, ValueError):
        return None


def pending(node_objects, own, now):
    """(node objects, switch_at): other nodes announcing a new key get it in place of their ``key``
    annotation (copies; the informer's objects are left alone), and the moment this node
    applies them (SWITCH_STEP after the latest announced switch, at most LEAD + SWITCH_STEP ahead; None when
    there is none ahead, or none at all: apply at once)."""
    out, moments = {}, []
    for name, obj in node_objects.items():
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        announced = parse(annotations.get(NEXT_KEY)) if name != own else None
        if announced is None or announced[0] == annotations.get(KEY):
            out[name] = obj
            continue
        key, at = announced
        metadata = dict(obj.get("metadata") or {}, annotations=dict(annotations, **{KEY: key}))
        out[name] = dict(obj, metadata=metadata)
        if at + SWITCH_STEP > now:
            # a moment far ahead is a clock far off: no later than this node's own lead would give
            moments.append(min(at + SWITCH_STEP, now + LEAD + SWITCH_STEP))
    return out, (max(moments) if moments else None)


def spread(max_age, node):
    """``max_age`` plus a delay of this node's own (up to a tenth of it, at most 10 minutes): keys
    written in one run share their age, and agents rotating one by one each keep the order that
    loses nothing, where all at once would not."""
    if not max_age:
        return 0
    return max_age + zlib.crc32(node.encode("utf-8")) % max(1, min(600, max_age // 10))
