# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The agent's /metrics and /healthz, with the Prometheus client library.

Kilo's agent's metric names (``kilo_nodes``, ``kilo_peers``, ``kilo_leader``,
``kilo_reconciles_total``, ``kilo_errors_total``) so dashboards made for Kilo keep working, and,
beyond Kilo, each WireGuard peer's handshake age and byte counters, labelled by the peer's name
in the plan (a node, ``location:NAME`` or an outside peer) and its public key (public data);
with relays, the push textfile's ``kilo_path`` and ``kilo_relay_forwarded_bytes_total``.
A registry of our own: nothing of the library's process defaults is mixed in unless asked.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time

try:
    from prometheus_client import (
        CollectorRegistry,
        Counter,
        Gauge,
        generate_latest,
        CONTENT_TYPE_LATEST,
    )
    from prometheus_client.core import GaugeMetricFamily, CounterMetricFamily
except ImportError:  # the host lacks python3-prometheus-client: Metrics() says so
    HAS_PROMETHEUS_CLIENT = False
else:
    HAS_PROMETHEUS_CLIENT = True

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.options import bounds

try:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
except ImportError:  # pragma: no cover - Python < 3.7
    from http.server import BaseHTTPRequestHandler, HTTPServer as ThreadingHTTPServer

DEFAULT_LISTEN = ":1107"


class PeerCollector(object):
    """Per-peer figures read at scrape time from the agent's last WireGuard reading."""

    def __init__(self):
        self.peers = []  # [(name, public key, latest handshake (unix s, 0 never), rx, tx)]

    def collect(self):
        age = GaugeMetricFamily(
            "kilo_peer_handshake_age_seconds",
            "Seconds since the latest WireGuard handshake with a peer (-1: never)",
            labels=["peer", "public_key"],
        )
        rx = CounterMetricFamily(
            "kilo_peer_receive_bytes",
            "Bytes received from a WireGuard peer",
            labels=["peer", "public_key"],
        )
        tx = CounterMetricFamily(
            "kilo_peer_transmit_bytes",
            "Bytes sent to a WireGuard peer",
            labels=["peer", "public_key"],
        )
        now = time.time()
        for name, key, handshake, rx_bytes, tx_bytes in self.peers:
            age.add_metric([name, key], (now - handshake) if handshake else -1)
            rx.add_metric([name, key], rx_bytes)
            tx.add_metric([name, key], tx_bytes)
        return [age, rx, tx]


class PathCollector(object):
    """Beyond Kilo, relays: ``kilo_path`` (a leader behind NAT: 1 per far segment, its path and
    relay) and ``kilo_relay_forwarded_bytes_total`` (a relay: its rule's counter), as the push
    textfile has them: the same rows, names and help (host/status.py), from the plan the agent
    applied last (``applied``) and its latest WireGuard reading (the direct loop's, every second);
    the counter is read at scrape time."""

    def __init__(self):
        self.plan = None
        self.settings = {}
        self.current = None  # WireGuardBackend.current(), public fields read only

    def applied(self, plan, settings):
        self.plan, self.settings = plan, settings or {}

    def collect(self):
        from ansible_collections.kilo.mesh.plugins.module_utils.host import status

        plan, settings, current = self.plan, self.settings, self.current
        if not plan:
            return []
        found = []
        rows = (
            status.path_samples(status.label_peers(status.host_status(current, time.time()), plan))
            if current
            else []
        )
        if rows:
            name, text, labels = status.PATH_METRIC
            family = GaugeMetricFamily(name, text, labels=labels)
            for values in rows:
                family.add_metric(list(values), 1)
            found.append(family)
        interface = settings.get("interface")  # the agent's host settings always name it
        forwarded = status.relay_forwarded(plan, settings, interface)
        if forwarded is not None:
            name, text, labels = status.FORWARDED_METRIC
            family = CounterMetricFamily(name, text, labels=labels)
            family.add_metric([interface], forwarded)
            found.append(family)
        return found


class Metrics(object):
    """The agent's metrics; ``health`` is (ok, reason) as /healthz answers."""

    def __init__(self):
        if not HAS_PROMETHEUS_CLIENT:
            raise KiloError(
                "the agent needs the Prometheus client library on the host"
                " (Debian: python3-prometheus-client; kilo.mesh.key with prepare installs it)"
            )
        self.registry = CollectorRegistry(auto_describe=True)
        self.nodes = Gauge("kilo_nodes", "Number of nodes in the mesh", registry=self.registry)
        self.peers = Gauge(
            "kilo_peers", "Number of outside peers in the mesh", registry=self.registry
        )
        self.leader = Gauge(
            "kilo_leader",
            "Leadership status of this node (1 leads its segment)",
            registry=self.registry,
        )
        self.reconciles = Counter(
            "kilo_reconciles", "Number of reconciliation attempts", registry=self.registry
        )
        self.errors = Counter(
            "kilo_errors",
            "Number of errors that occurred while reconciling or talking to the API",
            registry=self.registry,
        )
        self.last_reconcile = Gauge(
            "kilo_last_reconcile_timestamp_seconds",
            "Unix time of the last successful reconciliation",
            registry=self.registry,
        )
        self.wireguard = PeerCollector()
        self.registry.register(self.wireguard)
        self.paths = PathCollector()
        self.registry.register(self.paths)
        self.health = (False, "starting")

    def exposition(self):
        return generate_latest(self.registry)


def parse_listen(listen):
    """':1107' -> ('', 1107); '127.0.0.1:9107' -> ('127.0.0.1', 9107); '[::1]:1107' -> ('::1', 1107)."""
    host, _colon, port = (listen or DEFAULT_LISTEN).rpartition(":")
    host = host.strip("[]")
    port = int(port)
    low, high = bounds("port")
    if not low <= port <= high:
        raise ValueError("port %d out of range" % port)
    return host, port


def serve(metrics, listen):
    """Serve /metrics and /healthz (also /health, as Kilo) in a daemon thread; returns the server."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, ctype, code = metrics.exposition(), CONTENT_TYPE_LATEST, 200
            elif path in ("/healthz", "/health"):
                ok, reason = metrics.health
                body, ctype, code = (
                    (reason + "\n").encode(),
                    "text/plain; charset=utf-8",
                    200 if ok else 503,
                )
            else:
                body, ctype, code = b"not found\n", "text/plain; charset=utf-8", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # scrapes are not news
            pass

    host, port = parse_listen(listen)
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="metrics")
    thread.daemon = True
    thread.start()
    return server
