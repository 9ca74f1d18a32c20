# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""kilo.mesh.status: what a host's WireGuard interface says about its place in the mesh.

Pure functions over ``WireGuardBackend.current()`` and the node_exporter textfile (Prometheus
text format); the mesh-wide table the controller prints from every host's result is
``plugin_utils/status_summary.py``. Nothing here carries a key but public ones.

A tunnel is stale when its latest handshake is older than ``stale_after`` seconds, or never
happened. WireGuard handshakes again every 2 minutes while traffic flows, so 180 s is the
default bound; an idle tunnel without persistent keepalive does not handshake and looks stale.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kilo.mesh.plugins.module_utils.options import DEFAULT_STALE_AFTER


def peer_status(peer, now, stale_after):
    """One live peer as reported: public data and counters, handshake age, stale or not."""
    latest = peer.get("latest_handshake") or 0
    age = int(max(0, now - latest)) if latest else None
    return {"public_key": peer["public_key"], "endpoint": peer.get("endpoint"),
            "allowed_ips": list(peer.get("allowed_ips") or []),
            "persistent_keepalive": int(peer.get("persistent_keepalive") or 0),
            "latest_handshake": int(latest) if latest else None, "handshake_age": age,
            "rx_bytes": int(peer.get("rx_bytes") or 0), "tx_bytes": int(peer.get("tx_bytes") or 0),
            "stale": age is None or age > stale_after}


def host_status(state, now, stale_after=DEFAULT_STALE_AFTER, addresses=None):
    """The status of one host from ``WireGuardBackend.current()``'s state.

    A leader's interface is up (the converge brings it up for leaders only, as Kilo does); a
    member's is down with no peers; ``in_mesh`` is false when there is no interface at all.
    """
    peers = [peer_status(p, now, stale_after) for p in state.get("peers", [])]
    present = bool(state.get("present"))
    return {"interface": state.get("interface"), "backend": state.get("backend"), "in_mesh": present,
            "leader": present and bool(state.get("up")), "up": bool(state.get("up")),
            "public_key": state.get("public_key"), "listen_port": state.get("listen_port"),
            "addresses": list(addresses or []), "stale_after": stale_after, "peers": peers,
            "stale": [p["public_key"] for p in peers if p["stale"]]}


# ---------------------------------------------------------------- Prometheus textfile

_LABEL_ESCAPE = {"\\": "\\\\", '"': '\\"', "\n": "\\n"}


def _label(value):
    return "".join(_LABEL_ESCAPE.get(c, c) for c in str(value))


def _number(value):
    if value is None:
        return "+Inf"
    return str(int(value)) if float(value) == int(value) else repr(float(value))


def metrics(status, nodes=None, peers=None):
    """Prometheus text: Kilo's gauges where they apply (kilo_leader; kilo_nodes and kilo_peers
    when the mesh size is known), and per WireGuard peer the handshake age (+Inf: never), the
    byte counters and whether the tunnel is stale."""
    iface = _label(status["interface"])
    out = []

    def family(name, kind, text, samples):
        out.append("# HELP %s %s" % (name, text))
        out.append("# TYPE %s %s" % (name, kind))
        for labels, value in samples:
            inner = ",".join('%s="%s"' % (k, v) for k, v in labels)
            out.append("%s{%s} %s" % (name, inner, _number(value)) if inner else "%s %s" % (name, _number(value)))

    family("kilo_leader", "gauge", "Leadership status of the node.", [((), 1 if status["leader"] else 0)])
    if nodes is not None:
        family("kilo_nodes", "gauge", "Number of nodes in the mesh.", [((), nodes)])
    if peers is not None:
        family("kilo_peers", "gauge", "Number of peers in the mesh.", [((), peers)])
    family("kilo_interface_up", "gauge", "Whether the WireGuard interface exists and is up.",
           [((("interface", iface),), 1 if status["up"] else 0)])
    rows = [(("interface", iface), ("peer", _label(p["public_key"]))) for p in status["peers"]]
    family("kilo_peer_handshake_age_seconds", "gauge", "Seconds since the latest handshake with the peer (+Inf: never).",
           [(r, p["handshake_age"]) for r, p in zip(rows, status["peers"])])
    family("kilo_peer_stale", "gauge", "1 when the latest handshake is older than %d s or never happened."
           % status["stale_after"], [(r, 1 if p["stale"] else 0) for r, p in zip(rows, status["peers"])])
    family("kilo_peer_receive_bytes_total", "counter", "Bytes received from the peer.",
           [(r, p["rx_bytes"]) for r, p in zip(rows, status["peers"])])
    family("kilo_peer_transmit_bytes_total", "counter", "Bytes sent to the peer.",
           [(r, p["tx_bytes"]) for r, p in zip(rows, status["peers"])])
    return "\n".join(out) + "\n"


# One sample line of the text format (no timestamps written here).
SAMPLE_RE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? '
                       r'([-+]?[0-9.eE+-]+|[+-]Inf|NaN)$')
