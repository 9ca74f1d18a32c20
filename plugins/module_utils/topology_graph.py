# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Graphviz DOT of a computed topology, in the spirit of ``kgctl graph``.

One dashed cluster per segment, its leader ranked first and labelled with its WireGuard IP and
endpoint; every other member linked to its leader; leaders linked to each other where a WireGuard
link exists (every pair, or under ``cross`` granularity only pairs in different locations); a
cluster of peers, each linked (dashed) to every leader. Node and peer ids carry a prefix so a
peer may share a name with a node.
"""

from __future__ import absolute_import, division, print_function


def _quote(text):
    return '"%s"' % str(text).replace("\\", "\\\\").replace('"', '\\"')


def _label(parts):
    return '"%s"' % "\\n".join(str(p).replace("\\", "\\\\").replace('"', '\\"') for p in parts if p)


def to_dot(result):
    """DOT text for the result of build_plans (uses its "segments", "peers" and "subnet")."""
    segments = result.get("segments", [])
    peers = result.get("peers", [])
    lines = ["digraph kilo {"]
    if result.get("subnet"):
        lines.append("\tlabel=%s;" % _quote(result["subnet"]))
    lines.extend(["\tlabelloc=t;", "\toutputorder=nodesfirst;", "\toverlap=false;"])
    edges = []
    leaders = []
    for seg in segments:
        lines.append("\tsubgraph %s {" % _quote("cluster_location_" + seg["key"]))
        lines.append("\t\tlabel=%s;" % _quote(seg["key"]))
        lines.append('\t\tstyle="dashed,rounded";')
        leader_id = _quote("node/" + seg["leader"])
        for member in seg.get("members") or [{"name": n} for n in seg["nodes"]]:
            is_leader = member["name"] == seg["leader"]
            parts = [seg["key"], member["name"], member.get("pod_cidr"), member.get("internal_ip")]
            attrs = ["shape=ellipse"]
            if is_leader:
                parts += [seg.get("wireguard_ip"), seg.get("endpoint")]
                attrs.insert(0, "rank=1")
                # Leaders stand out at a glance: a double outline, bold.
                attrs += ["peripheries=2", "style=bold"]
            node_id = _quote("node/" + member["name"])
            lines.append("\t\t%s [label=%s, %s];" % (node_id, _label(parts), ", ".join(attrs)))
            if not is_leader:
                edges.append("\t%s -> %s [dir=both];" % (leader_id, node_id))
        lines.append("\t}")
        leaders.append((leader_id, seg.get("group", seg["key"])))
    for i, (left, left_group) in enumerate(leaders):
        for right, right_group in leaders[i + 1:]:
            if left_group != right_group:
                edges.append("\t%s -> %s [dir=both];" % (left, right))
    if peers:
        lines.append("\tsubgraph %s {" % _quote("cluster_peers"))
        lines.append('\t\tlabel="peers";')
        lines.append('\t\tstyle="dashed,rounded";')
        for peer in peers:
            peer_id = _quote("peer/" + peer["name"])
            lines.append("\t\t%s [label=%s, shape=ellipse];" % (peer_id, _label([peer["name"], peer.get("endpoint")])))
            for leader_id, dummy in leaders:
                edges.append("\t%s -> %s [dir=both, style=dashed];" % (leader_id, peer_id))
        lines.append("\t}")
    lines.extend(edges)
    lines.append("}")
    return "\n".join(lines) + "\n"
