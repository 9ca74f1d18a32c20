# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""kilo.mesh.status: what a host's WireGuard interface says about its place in the mesh.

Pure functions over ``WireGuardBackend.current()`` and the node_exporter textfile (Prometheus
text format), but ``relay_forwarded`` (the relay rule's counter); the agent's /metrics exports
``kilo_path`` and ``kilo_relay_forwarded_bytes_total`` from the same rows (``PATH_METRIC``,
``FORWARDED_METRIC``). The mesh-wide table the controller prints from every host's result is
``plugin_utils/status_summary.py``. Nothing here carries a key but public ones.

A tunnel is stale when its latest handshake is older than ``stale_after`` seconds, or never
happened. WireGuard handshakes again every 2 minutes while traffic flows, so 180 s is the
default bound; an idle tunnel without persistent keepalive does not handshake and looks stale.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

from ansible_collections.kilo.mesh.plugins.module_utils.options import DEFAULT_STALE_AFTER


def peer_status(peer, now, stale_after):
    """One live peer as reported: public data and counters, handshake age, stale or not."""
    latest = peer.get("latest_handshake") or 0
    age = int(max(0, now - latest)) if latest else None
    return {
        "public_key": peer["public_key"],
        "endpoint": peer.get("endpoint"),
        "allowed_ips": list(peer.get("allowed_ips") or []),
        "persistent_keepalive": int(peer.get("persistent_keepalive") or 0),
        "latest_handshake": int(latest) if latest else None,
        "handshake_age": age,
        "rx_bytes": int(peer.get("rx_bytes") or 0),
        "tx_bytes": int(peer.get("tx_bytes") or 0),
        "stale": age is None or age > stale_after,
    }


def host_status(state, now, stale_after=DEFAULT_STALE_AFTER, addresses=None):
    """The status of one host from ``WireGuardBackend.current()``'s state.

    A leader's interface is up (the converge brings it up for leaders only, as Kilo does); a
    member's is down with no peers; ``in_mesh`` is false when there is no interface at all.
    """
    peers = [peer_status(p, now, stale_after) for p in state.get("peers", [])]
    present = bool(state.get("present"))
    return {
        "interface": state.get("interface"),
        "backend": state.get("backend"),
        "in_mesh": present,
        "leader": present and bool(state.get("up")),
        "up": bool(state.get("up")),
        "public_key": state.get("public_key"),
        "listen_port": state.get("listen_port"),
        "addresses": list(addresses or []),
        "stale_after": stale_after,
        "peers": peers,
        "stale": [p["public_key"] for p in peers if p["stale"]],
    }


def stored_plan(paths):
    """(plan, settings) this host last applied: of the files ``paths`` (the boot restore's stored
    plan, {"plan": ..., "settings": ...}, and the agent's plan file, the plan itself) the newest
    that reads; (None, {})."""
    found = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                data = json.loads(f.read().decode("utf-8"))
            mtime = os.stat(path).st_mtime
        except (IOError, OSError, ValueError):
            continue
        stored = isinstance(data, dict) and "format" in data
        plan = data.get("plan") if stored else data
        settings = data.get("settings") if stored and isinstance(data.get("settings"), dict) else {}
        if isinstance(plan, dict) and isinstance(plan.get("peers"), list):
            found.append((mtime, plan, settings))
    if not found:
        return None, {}
    dummy, plan, settings = max(found, key=lambda item: item[0])
    return plan, settings


def label_peers(status, plan):
    """Beyond Kilo: each live peer named as the stored ``plan`` names its entry (a segment key or
    an outside peer's name), with the segments it carries as a relay's entry (``relayed``) and
    whether it is a probe for a direct path (``probe``); the plan's own ``segment``; the pairs
    through a relay (``own_paths``, ``path_rows`` as dicts: the controller's summary reads them).
    In place."""
    if not plan:
        return status
    entries = dict((e.get("public_key"), e) for e in plan.get("peers") or () if isinstance(e, dict))
    for peer in status["peers"]:
        entry = entries.get(peer["public_key"])
        if entry is None:
            continue
        peer["name"] = entry.get("name")
        if entry.get("relayed"):
            peer["relayed"] = list(entry["relayed"])
        if entry.get("probe"):
            peer["probe"] = True
            # a probe that never handshook is probing, not stale: the traffic takes the relay
            peer["stale"] = False
    status["stale"] = [p["public_key"] for p in status["peers"] if p["stale"]]
    status["plan_segment"] = plan.get("segment")
    rows = path_rows(status)
    if rows:
        status["own_paths"] = rows
    return status


def path_rows(status):
    """Beyond Kilo: the pairs of a leader's own segment that its labelled peers send through a
    relay, as dicts: ``a`` (own), ``b``, ``path`` (``relayed``: the relay's entry carries ``b``),
    ``via`` (the relay), ``handshake_age`` (the relay's entry's), ``probing`` (whether a probe
    entry tries a direct path to ``b`` meanwhile: the traffic still takes the relay, behind
    symmetric NATs for good) and ``probe_handshake_age`` (the probe's; None: never, or no probe)."""
    own = status.get("plan_segment")
    if not own:
        return []
    probes = dict((p.get("name"), p) for p in status["peers"] if p.get("probe"))
    rows = []
    for peer in status["peers"]:
        for far in peer.get("relayed") or ():
            probe = probes.get(far)
            rows.append(
                dict(
                    a=own,
                    b=far,
                    path="relayed",
                    via=peer.get("name"),
                    handshake_age=peer["handshake_age"],
                    probing=probe is not None,
                    probe_handshake_age=probe["handshake_age"] if probe else None,
                )
            )
    return rows


# Beyond Kilo, relays: the two metrics the push textfile (``metrics``) and the agent's /metrics
# (agent/metrics.py) both export, of one definition: names, help texts, label names.
PATH_METRIC = (
    "kilo_path",
    "1 per far segment reached through a relay: its path (relayed), the relay it goes through and"
    " whether a probe tries a direct path meanwhile (probing).",
    ("segment", "path", "via", "probing"),
)
FORWARDED_METRIC = (
    "kilo_relay_forwarded_bytes_total",
    "Bytes this relay forwarded between its WireGuard peers (the relay rule's counter).",
    ("interface",),
)


def path_samples(status):
    """[(far segment, path, via, probing)]: the label values of kilo_path of an unreachable leader
    (1 each)."""
    return [
        (r["b"], r["path"], r["via"] or "", "true" if r["probing"] else "false")
        for r in path_rows(status)
    ]


def path_metrics_samples(status):
    """kilo_path{segment, path, via} samples of the textfile (escaped): 1 per far segment."""
    return [
        (tuple(zip(PATH_METRIC[2], (_label(v) for v in values))), 1)
        for values in path_samples(status)
    ]


def relay_forwarded(plan, settings, interface):
    """Bytes the relay rule counted (``FirewallBackend.relay_counter``), when ``plan`` makes this host
    a relay (``relay_accept``); else None. The firewall kind of ``settings``, else each kind tried."""
    if (
        not (plan and (plan.get("firewall") or {}).get("relay_accept"))
        or (settings or {}).get("firewall") == "none"
    ):
        return None
    from ansible_collections.kilo.mesh.plugins.module_utils.host.firewall import (
        KINDS,
        FirewallBackend,
    )
    from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings

    kinds = [settings["firewall"]] if (settings or {}).get("firewall") in KINDS else list(KINDS)
    for kind in kinds:
        try:
            counted = FirewallBackend(
                host_settings({"firewall": kind, "interface": interface})
            ).relay_counter()
        except Exception:  # pylint: disable=broad-exception-caught
            counted = None  # that firewall's tool is missing: the other kind's rule, or none
        if counted is not None:
            return counted[1]
    return None


# ---------------------------------------------------------------- Prometheus textfile

_LABEL_ESCAPE = {"\\": "\\\\", '"': '\\"', "\n": "\\n"}


def _label(value):
    return "".join(_LABEL_ESCAPE.get(c, c) for c in str(value))


def _number(value):
    if value is None:
        return "+Inf"
    return str(int(value)) if float(value) == int(value) else repr(float(value))


def metrics(status, nodes=None, peers=None, relay_forwarded=None):
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
            out.append(
                "%s{%s} %s" % (name, inner, _number(value))
                if inner
                else "%s %s" % (name, _number(value))
            )

    family(
        "kilo_leader",
        "gauge",
        "Leadership status of the node.",
        [((), 1 if status["leader"] else 0)],
    )
    if nodes is not None:
        family("kilo_nodes", "gauge", "Number of nodes in the mesh.", [((), nodes)])
    if peers is not None:
        family("kilo_peers", "gauge", "Number of peers in the mesh.", [((), peers)])
    family(
        "kilo_interface_up",
        "gauge",
        "Whether the WireGuard interface exists and is up.",
        [((("interface", iface),), 1 if status["up"] else 0)],
    )
    rows = [(("interface", iface), ("peer", _label(p["public_key"]))) for p in status["peers"]]
    family(
        "kilo_peer_handshake_age_seconds",
        "gauge",
        "Seconds since the latest handshake with the peer (+Inf: never).",
        [(r, p["handshake_age"]) for r, p in zip(rows, status["peers"])],
    )
    family(
        "kilo_peer_stale",
        "gauge",
        "1 when the latest handshake is older than %d s or never happened." % status["stale_after"],
        [(r, 1 if p["stale"] else 0) for r, p in zip(rows, status["peers"])],
    )
    family(
        "kilo_peer_receive_bytes_total",
        "counter",
        "Bytes received from the peer.",
        [(r, p["rx_bytes"]) for r, p in zip(rows, status["peers"])],
    )
    family(
        "kilo_peer_transmit_bytes_total",
        "counter",
        "Bytes sent to the peer.",
        [(r, p["tx_bytes"]) for r, p in zip(rows, status["peers"])],
    )
    # beyond Kilo: the paths of a leader behind NAT, and what a relay forwarded
    paths = path_metrics_samples(status)
    if paths:
        family(PATH_METRIC[0], "gauge", PATH_METRIC[1], paths)
    if relay_forwarded is not None:
        family(
            FORWARDED_METRIC[0],
            "counter",
            FORWARDED_METRIC[1],
            [(((FORWARDED_METRIC[2][0], iface),), relay_forwarded)],
        )
    return "\n".join(out) + "\n"


# One sample line of the text format (no timestamps written here).
SAMPLE_RE = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? '
    r"([-+]?[0-9.eE+-]+|[+-]Inf|NaN)$"
)
