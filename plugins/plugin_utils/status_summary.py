# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""kilo.mesh.status with ``summary`` (controller): the mesh-wide table of every host's status result
(what ``module_utils/host/status.host_status`` made on the host). Nothing here carries a key but
public ones."""

from __future__ import annotations


def _age(seconds):
    if seconds is None:
        return "never"
    if seconds < 120:
        return "%ds" % seconds
    if seconds < 7200:
        return "%dm%02ds" % (seconds // 60, seconds % 60)
    return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)


def _bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0
    return str(n)


def _table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = "  ".join("%%-%ds" % w for w in widths)
    return [(fmt % tuple(r)).rstrip() for r in [header] + rows]


def summary(results, peer_names=None):
    """The mesh-wide view of every host's status result ({host: result}).

    Peers are named by the hosts' own public keys (and ``peer_names``, {public key: name} of
    the outside peers); unknown keys are shortened. Returns {"lines", "hosts", "tunnels",
    "stale", "leaders", "unreported"}.
    """
    names = dict(peer_names or {})
    for host, r in results.items():
        if r and r.get("public_key"):
            names[r["public_key"]] = host
    hosts, tunnels, stale, leaders, unreported = [], [], [], [], []
    for host in sorted(results):
        r = results[host]
        if not r or r.get("failed") or r.get("unreachable") or "in_mesh" not in r:
            unreported.append(host)
            hosts.append([host, "-", "-", "no result", "-", "-"])
            continue
        role = "leader" if r["leader"] else ("member" if r["in_mesh"] else "not in mesh")
        if r["leader"]:
            leaders.append(host)
        bad = [p for p in r["peers"] if p["stale"]]
        hosts.append([host, r.get("location") or "-", r.get("segment") or "-", role, len(r["peers"]), len(bad)])
        for p in r["peers"]:
            name = names.get(p["public_key"], p["public_key"][:10] + "...")
            state = "stale" if p["stale"] else "ok"
            tunnels.append([host, name, p.get("endpoint") or "-", _age(p["handshake_age"]),
                            _bytes(p["rx_bytes"]), _bytes(p["tx_bytes"]), state])
            if p["stale"]:
                stale.append("%s -> %s" % (host, name))
    lines = _table(["HOST", "LOCATION", "SEGMENT", "ROLE", "PEERS", "STALE"], hosts)
    if tunnels:
        lines += [""] + _table(["HOST", "PEER", "ENDPOINT", "HANDSHAKE", "RX", "TX", "STATE"], tunnels)
    lines += ["", "%d hosts, %d leaders, %d tunnels, %d stale%s" % (
        len(results), len(leaders), len(tunnels), len(stale),
        (", no result from: " + ", ".join(unreported)) if unreported else "")]
    return {"lines": lines, "hosts": hosts, "tunnels": tunnels, "stale": stale, "leaders": leaders,
            "unreported": unreported}
