# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""What a host reports about itself: its addresses (Kilo's IP discovery), the MTU of its default
route and what its WireGuard interface learned (endpoints of peers, handshake ages).

One reading, two users: the ``kilo.mesh.key`` module (push mode, once per run) and the agent
(every resync). Private keys stay out of it: the public key comes from ``keys.ensure_key``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket
import time


def addresses(params):
    """(ips, mtu, host) with ``ips`` as ``discovery.choose_ips`` gives them; ``params`` holds the
    "key" options (interface, ignore_interfaces, internal_cidrs, prioritise_private_addresses,
    subnet: a dual-stack mesh's two make the internal IP one of each family)."""
    from ansible_collections.kilo.mesh.plugins.module_utils.host import discovery
    from ansible_collections.kilo.mesh.plugins.module_utils.nodes import mesh_families

    families = mesh_families(params.get("subnet"))
    host = discovery.read_host()
    ips = discovery.choose_ips(
        host,
        hostname=socket.gethostname(),
        ignore_interfaces=list(params.get("ignore_interfaces") or []) + [params["interface"]],
        allowed_cidrs=params.get("internal_cidrs") or [],
        prioritise_private=params.get("prioritise_private_addresses"),
        families=families,
    )
    return ips, discovery.default_route_mtu(host), host


def wireguard_reading(interface, current=None):
    """(current, discovered endpoints, handshake ages) of our WireGuard interface.

    ``current`` is the WireGuard backend's reading (read here when None); handshake ages are
    seconds since each peer's latest handshake, None for never. Raises what the reading raises."""
    from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
    from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.backend import (
        WireGuardBackend,
    )

    backend = WireGuardBackend(host_settings({"interface": interface}))
    if current is None:
        current = backend.current()
    discovered = backend.discovered_endpoints(current)
    now = time.time()
    handshakes = dict(
        (
            peer["public_key"],
            int(now - peer["latest_handshake"]) if peer.get("latest_handshake") else None,
        )
        for peer in current.get("peers", [])
    )
    return current, discovered, handshakes


def probe_peers(current):
    """Public keys of the peers of our WireGuard interface that carry no allowed IPs (``current``:
    the WireGuard reading): beyond Kilo, a relayed pair's direct probe (``engine/relays.py``). The
    controller of a push run with ``direct_paths: always`` tells from it whether a pair this run
    leaves out at one end is probing or direct there."""
    return sorted(
        peer["public_key"]
        for peer in (current or {}).get("peers", [])
        if not peer.get("allowed_ips")
    )


def switching_from(current, public_key):
    """The public key our interface still runs when it is not ``public_key`` (the key file's): a
    key switch to come, the key step's or the agent's rotation now or one cut short before its
    converge; None when they agree or there is no interface (``current``: the WireGuard reading)."""
    live = (current or {}).get("public_key")
    return live if live and live != public_key else None
