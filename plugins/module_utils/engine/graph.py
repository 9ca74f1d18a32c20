# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Graphviz DOT of a computed topology, in the spirit of ``kgctl graph``, and its rendering.

One dashed cluster per segment; its leader ranked first, drawn with a double bold outline and
labelled with its WireGuard IP and endpoint; every other member linked to its leader. Leaders
are linked where a WireGuard link exists (every pair, or under ``cross`` granularity only
pairs in different locations); a cluster of peers, each linked (dashed) to every leader. Node
and peer ids carry a prefix so a peer may share a name with a node.

Beyond kgctl, for large meshes: drawing every pair of n leaders takes n(n-1)/2 edges (435 at
30 locations), which no layout keeps readable. Past ``HUB_AFTER`` leaders (or with
``mesh_edges="hub"``) the leaders and peers are linked to one "WireGuard mesh" node standing
for those links instead, and the graph asks for the ``fdp`` layout (clusters kept, drawn
around the hub rather than in one very wide row).

Beyond kgctl, for meshes with segments behind NAT (a result with ``paths``): the leaders that
may relay are labelled "relay"; a pair whose traffic goes through a relay (relayed, or probing
for a direct path meanwhile) is drawn dashed and labelled "via LOCATION" (the relay's), in hub
mode too; a direct pair stays a plain edge; probe entries are not drawn.

Controller side only (rendering runs Graphviz's ``dot``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, run_command

# More leaders than this: one hub node instead of every leader pair (mesh_edges="auto").
HUB_AFTER = 6
MESH_EDGES = ("auto", "all", "hub")
# Graphviz layout engines worth choosing here; "auto" is dot for small meshes, fdp for hubs.
LAYOUTS = ("auto", "dot", "fdp", "neato", "circo", "twopi", "sfdp")
FORMATS = ("dot", "svg", "png", "pdf")
# What a node that reported nothing yet says in a preview's picture (its key and addresses are stand-ins).
STAND_IN_LABEL = "(no key yet: after its first run)"
HUB_ID = "wireguard/mesh"
INSTALL_HINT = (
    "Graphviz's dot is not installed on the controller: apt install graphviz (Debian, Ubuntu),"
    " dnf install graphviz (Fedora, EL), pacman -S graphviz (Arch), brew install graphviz (macOS);"
    " or write the DOT text only (format dot, a .dot file)"
)


class GraphError(KiloError):
    """Rendering failed (no Graphviz, or Graphviz refused the graph)."""


def _quote(text):
    return '"%s"' % str(text).replace("\\", "\\\\").replace('"', '\\"')


def _label(parts):
    # a dual-stack node's two internal IPs or WireGuard IPs: one line each, as its pod ranges
    parts = [item for p in parts for item in (p if isinstance(p, (list, tuple)) else [p])]
    return '"%s"' % "\\n".join(str(p).replace("\\", "\\\\").replace('"', '\\"') for p in parts if p)


def uses_hub(result, mesh_edges="auto"):
    """Whether to_dot draws the leader links as one hub node."""
    if mesh_edges not in MESH_EDGES:
        raise ValueError("mesh_edges: %r is not one of %s" % (mesh_edges, ", ".join(MESH_EDGES)))
    if mesh_edges != "auto":
        return mesh_edges == "hub"
    return len(result.get("segments", [])) > HUB_AFTER


def to_dot(result, mesh_edges="auto"):
    """DOT text for the result of build_plans (uses its "segments", "peers" and "subnet")."""
    segments = result.get("segments", [])
    peers = result.get("peers", [])
    hub = uses_hub(result, mesh_edges)
    lines = ["digraph kilo {"]
    if result.get("subnet"):
        subnet = result["subnet"]  # a dual-stack mesh's two, primary first
        lines.append(
            "\tlabel=%s;" % _quote(", ".join(subnet) if isinstance(subnet, list) else subnet)
        )
    lines.extend(["\tlabelloc=t;", "\toutputorder=nodesfirst;", "\toverlap=false;"])
    if hub:
        # a hint Graphviz follows when no engine is named (dot -Tsvg FILE); -K overrides it
        lines.append("\tlayout=fdp;")
    edges = []
    leaders = []
    by_key = dict((seg["key"], seg) for seg in segments)
    # beyond Kilo: {(a, b): relay segment key} of the pairs that go through a relay
    relayed = {}
    for path in result.get("paths") or []:
        if path.get("path") in ("relayed", "probing") and path.get("via"):
            relayed[(path["a"], path["b"])] = relayed[(path["b"], path["a"])] = path["via"]
    for seg in segments:
        lines.append("\tsubgraph %s {" % _quote("cluster_location_" + seg["key"]))
        lines.append("\t\tlabel=%s;" % _quote(seg["key"]))
        lines.append('\t\tstyle="dashed,rounded";')
        leader_id = _quote("node/" + seg["leader"])
        for member in seg.get("members") or [{"name": n} for n in seg["nodes"]]:
            is_leader = member["name"] == seg["leader"]
            pods = member.get("pod_cidr")
            # a node of several pod ranges: one line each
            parts = (
                [seg["key"], member["name"]]
                + (list(pods) if isinstance(pods, list) else [pods])
                + [member.get("internal_ip")]
            )
            attrs = ["shape=ellipse"]
            styles = []
            if is_leader:
                parts += [seg.get("wireguard_ip"), seg.get("endpoint")]
                if seg.get("relay"):
                    parts.append("relay")
                if seg.get("reachable") is False:
                    parts.append("behind NAT")
                attrs.insert(0, "rank=1")
                # Leaders stand out at a glance: a double outline, bold.
                attrs.append("peripheries=2")
                styles.append("bold")
            if member.get("stand_in"):
                # a host that reported nothing yet, drawn from a preview (kilo.mesh.graph stand_ins)
                parts.append(STAND_IN_LABEL)
                styles.append("dashed")
            if styles:
                attrs.append(
                    "style=%s" % (styles[0] if len(styles) == 1 else _quote(",".join(styles)))
                )
            node_id = _quote("node/" + member["name"])
            lines.append("\t\t%s [label=%s, %s];" % (node_id, _label(parts), ", ".join(attrs)))
            if not is_leader:
                edges.append("\t%s -> %s [dir=both];" % (leader_id, node_id))
        lines.append("\t}")
        leaders.append((leader_id, seg.get("group", seg["key"]), seg["key"]))
    hub_id = _quote(HUB_ID)
    if hub:
        cross = any(group != seg["key"] for seg, (dummy, group, dummy2) in zip(segments, leaders))
        what = (
            "between leaders of different locations"
            if cross
            else "between all %d leaders" % len(leaders)
        )
        lines.append(
            '\t%s [label=%s, shape=box, style="rounded,filled", fillcolor="#fff3c4"];'
            % (hub_id, _label(["WireGuard mesh", result.get("subnet"), what]))
        )
        # plain lines: thirty arrowheads would pile up on the hub
        for leader_id, dummy, dummy2 in leaders:
            edges.append("\t%s -> %s [dir=none, penwidth=2];" % (leader_id, hub_id))
    for i, (left, left_group, left_key) in enumerate(leaders):
        for right, right_group, right_key in leaders[i + 1 :]:
            if left_group == right_group:
                continue
            via = relayed.get((left_key, right_key))
            if via is not None:
                relay = by_key.get(via) or {}
                edges.append(
                    "\t%s -> %s [dir=both, style=dashed, label=%s];"
                    % (left, right, _quote("via " + str(relay.get("location") or via)))
                )
            elif not hub:
                edges.append("\t%s -> %s [dir=both];" % (left, right))
    if peers:
        lines.append("\tsubgraph %s {" % _quote("cluster_peers"))
        lines.append('\t\tlabel="peers";')
        lines.append('\t\tstyle="dashed,rounded";')
        for peer in peers:
            peer_id = _quote("peer/" + peer["name"])
            lines.append(
                "\t\t%s [label=%s, shape=ellipse];"
                % (peer_id, _label([peer["name"], peer.get("endpoint")]))
            )
            if hub:
                edges.append("\t%s -> %s [dir=none, style=dashed];" % (hub_id, peer_id))
            else:
                for leader_id, dummy, dummy2 in leaders:
                    edges.append("\t%s -> %s [dir=both, style=dashed];" % (leader_id, peer_id))
        lines.append("\t}")
    lines.extend(edges)
    lines.append("}")
    return "\n".join(lines) + "\n"


def layout_for(dot_text, layout="auto"):
    """The Graphviz engine to run: the one asked for, else fdp for a hub graph, else dot."""
    if layout not in LAYOUTS:
        raise GraphError("layout: %r is not one of %s" % (layout, ", ".join(LAYOUTS)))
    if layout != "auto":
        return layout
    return "fdp" if "\tlayout=fdp;" in dot_text else "dot"


def format_of(path, fmt=None):
    """The output format of a file ``path``: its extension's (C(.gv) is dot); ``fmt`` may repeat
    it. GraphError when the extension names no format of FORMATS (a C(.jpg) would get DOT text or
    an SVG under its name) or another one than ``fmt``. Without ``path`` (the DOT text is only
    returned): ``fmt``, else dot."""
    if fmt and fmt not in FORMATS:
        raise GraphError("format: %r is not one of %s" % (fmt, ", ".join(FORMATS)))
    if not path:
        return fmt or "dot"
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    named = "dot" if ext == "gv" else ext if ext in FORMATS else None
    if named is None:
        raise GraphError(
            "%s: the extension %s names no format this module writes: end the name with %s"
            % (
                path,
                repr("." + ext) if ext else "(none)",
                ", ".join("." + f for f in FORMATS + ("gv",)),
            )
        )
    if fmt and fmt != named:
        raise GraphError("%s: format %s, but the extension says %s" % (path, fmt, named))
    return named


def render(dot_text, fmt, layout="auto", timeout=120, dot_command=None):
    """(bytes, argv): ``dot_text`` rendered by Graphviz's ``dot`` as ``fmt``; format dot is the
    text itself (no Graphviz needed). GraphError without Graphviz or when it refuses."""
    if fmt == "dot":
        return dot_text.encode("utf-8"), None
    command = dot_command or shutil.which("dot")
    if not command:
        raise GraphError(INSTALL_HINT)
    argv = [command, "-K" + layout_for(dot_text, layout), "-T" + fmt]
    rc, out, err = run_command(argv, dot_text.encode("utf-8"), timeout=timeout, text=False)
    stderr = err.decode("utf-8", "replace").strip()
    if rc == 124 and not out:
        raise GraphError("%s took more than %d s" % (" ".join(argv), timeout))
    if rc == 127 and not out:
        raise GraphError("%s: %s" % (" ".join(argv), stderr))
    if rc != 0 or not out:
        raise GraphError("%s failed (rc %d): %s" % (" ".join(argv), rc, stderr[-2000:]))
    return out, argv
