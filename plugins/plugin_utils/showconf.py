# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""``kgctl showconf`` on the controller: WireGuard configurations rendered from the topology engine.

No Ansible; the engine (``topology.Topology``) computes everything, this only picks
and renders. Behaviour read from Kilo's ``cmd/kgctl/showconf.go``, ``pkg/mesh/topology.go``
(``Conf``, ``PeerConf``, ``AsPeer``), ``pkg/wireguard/conf.go`` (``Bytes``) and
``pkg/k8s/apis/kilo/v1alpha1/types.go`` (the Peer resource).

* ``node NAME``: the node's own configuration, an ``[Interface]`` with ``ListenPort`` (no private
  key) and its plan's WireGuard peers. Only a node that leads its segment has one; for any other
  node kgctl says "is not a leader node", and so does this (as an error naming the leader).
* ``peer NAME``: the ``[Peer]`` sections the outside peer applies (``Topology.peer_config``).
* ``as_peer``: the node's segment (its leader's key and configured endpoint, the segment's
  allowed IPs without the allowed-location IPs, as Kilo's ``AsPeer``), or the outside peer itself,
  described as a peer of another network, plus ``allowed_ips``. Formats ``json`` and ``yaml`` give
  Kilo's Peer resource (``kilo.squat.ai/v1alpha1``), ``wireguard`` one ``[Peer]`` section.

The ``[Peer]`` layout is kgctl's: AllowedIPs, Endpoint, PersistentKeepalive (0 included),
PresharedKey, PublicKey. Where this differs from kgctl:

* Preshared keys are never printed (the collection's rule for secrets): a comment stands in the
  line's place and ``data`` says ``preshared_key: true``.
* ``ListenPort`` is the node's own port (the port of its forced endpoint, else ``port``); kgctl
  prints its ``--port`` flag whatever the node listens on.
* The Peer resource's ``persistentKeepalive`` is in seconds, as the resource defines it (kgctl
  writes the Go duration, nanoseconds); a DNS endpoint's name goes to ``dns`` (kgctl writes its
  port there); a peer without an endpoint has no ``endpoint`` (kgctl writes the IP ``<nil>``).
* ``format`` json and yaml without ``as_peer`` give ``data`` as JSON or YAML (kgctl ignores them);
  ``allowed_ips`` without ``as_peer`` is an error (kgctl ignores it).
"""

from __future__ import annotations

import json

import yaml

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, dedup
from ansible_collections.kilo.mesh.plugins.module_utils.kube.kube_node import (
    PEER_API_VERSION,
    spec_of,
)
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import Topology
from ansible_collections.kilo.mesh.plugins.module_utils.engine.parse import (
    TopologyError,
    node_subject,
    parse_network_list,
    peer_subject,
)

FORMATS = ("wireguard", "json", "yaml")
MASKED_PRESHARED_KEY = "# PresharedKey = (this peer's preshared key from kilo_peers)"


class _Dumper(yaml.SafeDumper):
    """Block style; strings of str subclasses (Ansible tags variables' values) as plain strings."""


_Dumper.add_multi_representer(str, yaml.SafeDumper.represent_str)


def public_entries(entries):
    """Copies of [Peer] entries whose preshared key is only flagged (``True``), never carried."""
    out = []
    for entry in entries:
        entry = dict(entry, allowed_ips=list(entry["allowed_ips"]))
        if entry.pop("preshared_key", None):
            entry["preshared_key"] = True
        out.append(entry)
    return out


def wireguard_conf(entries, listen_port=None):
    """``wg setconf`` syntax in kgctl's layout: ``[Interface]`` with ``ListenPort`` when given
    (never a private key), then one ``[Peer]`` section per entry; a preshared key is named only."""
    blocks = []
    if listen_port is not None:
        blocks.append(["[Interface]", "ListenPort = %d" % listen_port])
    for entry in entries:
        lines = ["[Peer]"]
        if entry["allowed_ips"]:
            lines.append("AllowedIPs = %s" % ", ".join(entry["allowed_ips"]))
        if entry.get("endpoint"):
            lines.append("Endpoint = %s" % entry["endpoint"])
        lines.append("PersistentKeepalive = %d" % (entry.get("persistent_keepalive") or 0))
        if entry.get("preshared_key"):
            lines.append(MASKED_PRESHARED_KEY)
        lines.append("PublicKey = %s" % entry["public_key"])
        blocks.append(lines)
    return "\n".join("\n".join(block) + "\n" for block in blocks)


def peer_resource(entry):
    """Kilo's Peer resource (``kilo.squat.ai/v1alpha1``) for one [Peer] entry, for kubectl apply;
    never with a preshared key (an entry only flags one)."""
    return {
        "apiVersion": PEER_API_VERSION,
        "kind": "Peer",
        "metadata": {"name": entry["name"]},
        "spec": spec_of(dict(entry, preshared_key=None)),
    }


def _node_view(topology, name, as_peer, extra):
    node = topology.by_name.get(name)
    if node is None:
        raise TopologyError("no such node", node_subject(name), "node")
    seg = node.segment
    if seg.leader is not node:
        raise TopologyError(
            "is not a leader node; segment %s is led by %r" % (seg.key, seg.leader.name),
            node_subject(name),
            "node",
        )
    if as_peer:
        return [
            {
                "name": name,
                "public_key": seg.leader.key,
                "endpoint": seg.leader.endpoint.text if seg.leader.endpoint else None,
                "allowed_ips": dedup(list(seg.allowed) + extra),
                "persistent_keepalive": 0,
            }
        ], None
    plan = topology.plan(name)
    return public_entries(plan["peers"]), plan["listen_port"]


def _peer_view(topology, name, as_peer, extra):
    if not as_peer:
        return public_entries(topology.peer_config(name)), None
    for peer in topology.peers:
        if peer.name == name:
            entry = {
                "name": name,
                "public_key": peer.key,
                "endpoint": peer.endpoint.text if peer.endpoint else None,
                "allowed_ips": dedup([text for dummy, text in peer.allowed] + extra),
                "persistent_keepalive": peer.persistent_keepalive,
            }
            if peer.psk:
                entry["preshared_key"] = True
            return [entry], None
    raise TopologyError("no such peer", peer_subject(name), "name")


def render(data, output):
    """``data`` as JSON (indented) or YAML (block style, keys in order)."""
    if output == "json":
        return json.dumps(data, indent=2) + "\n"
    return yaml.dump(data, Dumper=_Dumper, default_flow_style=False, sort_keys=False)


def showconf(
    nodes,
    peers,
    options=None,
    node=None,
    peer=None,
    as_peer=False,
    allowed_ips=None,
    output="wireguard",
):
    """Like ``kgctl showconf node|peer NAME [--as-peer] [--allowed-ips ...] [-o FORMAT]``.

    Returns {"config": text in ``output`` format, "data": the same as data}: for ``as_peer`` the
    Peer resource, else {"name", "interface": {"listen_port"} (nodes only), "peers": [...]}.
    """
    if (node is None) == (peer is None):
        raise KiloError("give exactly one of node and peer", "task", "node")
    if output not in FORMATS:
        raise KiloError("%r unknown; one of %s" % (output, ", ".join(FORMATS)), "task", "format")
    extra = [str(n) for n in parse_network_list(allowed_ips, "task", "allowed_ips")]
    if extra and not as_peer:
        raise KiloError("only with as_peer", "task", "allowed_ips")
    topology = Topology(nodes, peers or [], options)
    if node is not None:
        entries, listen_port = _node_view(topology, node, as_peer, extra)
    else:
        entries, listen_port = _peer_view(topology, peer, as_peer, extra)
    if as_peer:
        data = peer_resource(entries[0])
    else:
        data = {"name": node if node is not None else peer, "peers": entries}
        if listen_port is not None:
            data["interface"] = {"listen_port": listen_port}
    if output == "wireguard":
        return {"config": wireguard_conf(entries, listen_port), "data": data}
    return {"config": render(data, output), "data": data}
