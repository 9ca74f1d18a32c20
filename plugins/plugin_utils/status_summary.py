# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""kilo.mesh.status with ``summary`` (controller): the mesh-wide table of every host's status result
(what ``module_utils/host/status.host_status`` made on the host). Nothing here carries a key but
public ones."""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import text_table


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


def reported_paths(result):
    """[(a, b, path, via, handshake age)] of one host's result: its ``own_paths`` (the pairs its
    applied plan carries through a relay, as the host labelled them)."""
    return [
        (p["a"], p["b"], p["path"], p.get("via"), p.get("handshake_age"))
        for p in result.get("own_paths") or ()
    ]


def mesh_paths(results, engine_paths=None):
    """Beyond Kilo: the PATHS rows [a, b, path, via, handshake] of a mesh with segments behind NAT.

    The pairs are the engine's (``engine_paths``, the result's ``paths``: every pair with an end
    behind NAT), else those the hosts' labelled peers show. Each pair's state is what the leader
    of its first end (else its second) applied, from its stored plan: relayed or probing through
    a relay's entry, else direct on the far segment's own entry; the engine's when neither end
    reported. The handshake is that entry's (a probe's while probing)."""
    leaders = {}
    for host in sorted(results):
        r = results[host]
        if r and r.get("leader") and r.get("plan_segment"):
            leaders.setdefault(r["plan_segment"], r)
    pairs = [(p["a"], p["b"], p.get("path"), p.get("via")) for p in engine_paths or ()]
    if engine_paths is None:
        seen = set()
        for _own, r in sorted(leaders.items()):
            for a, b, path, via, dummy in reported_paths(r):
                if (b, a) not in seen:
                    seen.add((a, b))
                    pairs.append((a, b, path, via))
    rows = []
    for a, b, path, via in pairs:
        age, known = None, False
        for near, far in ((a, b), (b, a)):
            r = leaders.get(near)
            if r is None:
                continue
            live = dict((row[1], row) for row in reported_paths(r))
            if far in live:
                dummy, dummy2, path, via, age = live[far]
                known = True
                break
            entry = [p for p in r["peers"] if p.get("name") == far and not p.get("probe")]
            if entry:
                path, via, age, known = "direct", None, entry[0]["handshake_age"], True
                break
        rows.append([a, b, path or "-", via or "-", _age(age) if known else "-"])
    return rows


def summary(results, peer_names=None, engine_paths=None):
    """The mesh-wide view of every host's status result ({host: result}).

    Peers are named by the hosts' own public keys (and ``peer_names``, {public key: name} of
    the outside peers); unknown keys are shortened. A mesh with segments behind NAT (the
    engine's ``paths``, or hosts whose stored plans have relays' entries) adds PATHS
    (``mesh_paths``). Returns {"lines", "hosts", "tunnels", "stale", "leaders", "unreported",
    "paths"}.
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
        hosts.append(
            [
                host,
                r.get("location") or "-",
                r.get("segment") or "-",
                role,
                len(r["peers"]),
                len(bad),
            ]
        )
        for p in r["peers"]:
            name = names.get(p["public_key"], p["public_key"][:10] + "...")
            state = "stale" if p["stale"] else "ok"
            tunnels.append(
                [
                    host,
                    name,
                    p.get("endpoint") or "-",
                    _age(p["handshake_age"]),
                    _bytes(p["rx_bytes"]),
                    _bytes(p["tx_bytes"]),
                    state,
                ]
            )
            if p["stale"]:
                stale.append("%s -> %s" % (host, name))
    lines = text_table(["HOST", "LOCATION", "SEGMENT", "ROLE", "PEERS", "STALE"], hosts)
    if tunnels:
        lines += [""] + text_table(
            ["HOST", "PEER", "ENDPOINT", "HANDSHAKE", "RX", "TX", "STATE"], tunnels
        )
    paths = mesh_paths(results, engine_paths)
    if paths:
        lines += [""] + text_table(["A", "B", "PATH", "VIA", "HANDSHAKE"], paths)
    lines += [
        "",
        "%d hosts, %d leaders, %d tunnels, %d stale%s"
        % (
            len(results),
            len(leaders),
            len(tunnels),
            len(stale),
            (", no result from: " + ", ".join(unreported)) if unreported else "",
        ),
    ]
    return {
        "lines": lines,
        "hosts": hosts,
        "tunnels": tunnels,
        "stale": stale,
        "leaders": leaders,
        "unreported": unreported,
        "paths": paths,
    }
