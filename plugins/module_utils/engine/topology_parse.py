# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Input validation for the topology engine: options, nodes and peers.

Everything is checked before any plan is computed; the first problem raises one
TopologyError naming the subject (node/peer/option) and the field. Parsed values are
kept as ``ipaddress`` objects next to their normalised strings so the engine never
parses twice. As in Kilo, an IPv4-mapped IPv6 endpoint is taken as plain IPv4 and keys
are kept in canonical base64 (the spelling Kilo prints).
"""

from __future__ import absolute_import, division, print_function

import ipaddress
import re

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError, check_interface_name, format_endpoint, parse_key, split_endpoint, to_bool, to_int)
from ansible_collections.kilo.mesh.plugins.module_utils.options import OPTIONS, defaults

GRANULARITIES = tuple(OPTIONS["granularity"]["choices"])
ENCAPSULATIONS = tuple(OPTIONS["encapsulate"]["choices"])
COMPATIBILITIES = tuple(OPTIONS["compatibility"]["choices"])
DEFAULT_OPTIONS = defaults("mesh")

# RFC 1123 subdomain, as Kilo accepts for DNS endpoints (case-insensitive here).
_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", re.IGNORECASE)


class TopologyError(KiloError):
    """Bad input: ``subject`` (e.g. "node 'b'") and ``field`` name where it is."""

    def __init__(self, subject, field, message):
        super(TopologyError, self).__init__(message, subject, field)


def node_subject(name):
    return "node %r" % (name,)


def peer_subject(name):
    return "peer %r" % (name,)


def parse_network(value, subject, field):
    """A CIDR (or bare address = single-address CIDR) -> network with host bits cleared."""
    if not isinstance(value, str) or not value.strip():
        raise TopologyError(subject, field, "%r is not a CIDR" % (value,))
    try:
        return ipaddress.ip_network(value.strip(), strict=False)
    except ValueError:
        raise TopologyError(subject, field, "%r is not a CIDR" % (value,))


def parse_interface(value, subject, field):
    """A host address with its prefix (e.g. 10.1.0.1/16); a bare address gets /32 or /128."""
    if not isinstance(value, str) or not value.strip():
        raise TopologyError(subject, field, "%r is not an address in CIDR form" % (value,))
    try:
        return ipaddress.ip_interface(value.strip())
    except ValueError:
        raise TopologyError(subject, field, "%r is not an address in CIDR form" % (value,))


def parse_network_list(values, subject, field):
    if values is None:
        return []
    if isinstance(values, str):
        values = [v for v in values.split(",") if v.strip()]
    if not isinstance(values, (list, tuple)):
        raise TopologyError(subject, field, "expected a list of CIDRs, got %r" % (values,))
    return [parse_network(v, subject, field) for v in values]


def parse_endpoint(value, subject, field, allow_dns=True):
    """"host:port" -> (normalised string, ip object or None for DNS names, port)."""
    host, port = split_endpoint(value, subject, field)
    if value.strip().startswith("["):
        try:
            ip = ipaddress.IPv6Address(host)
        except ValueError:
            raise TopologyError(subject, field, "%r: %r is not an IPv6 address" % (value, host))
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # Kilo keeps the 4-byte form (cutIP): private/public as IPv4
        return format_endpoint(ip, port), ip, port
    try:
        ip = ipaddress.IPv4Address(host)
    except ValueError:
        if not allow_dns:
            raise TopologyError(subject, field, "%r: %r is not an IP address" % (value, host))
        labels = host.rstrip(".").split(".")
        if len(host) > 253 or not all(_DNS_LABEL.match(label) for label in labels):
            raise TopologyError(subject, field, "%r: %r is neither an IP address nor a DNS name" % (value, host))
        if all(label.isdigit() for label in labels):
            raise TopologyError(subject, field, "%r: %r is not a valid IPv4 address" % (value, host))
        return "%s:%d" % (host.lower(), port), None, port
    return format_endpoint(ip, port), ip, port


def _name(item, kind, index):
    name = item.get("name") if isinstance(item, dict) else None
    if not isinstance(name, str) or not name:
        raise TopologyError("%s #%d" % (kind, index + 1), "name", "missing or not a string")
    return name


def parse_options(options):
    opts = dict(DEFAULT_OPTIONS)
    for key, value in (options or {}).items():
        if key not in DEFAULT_OPTIONS:
            raise TopologyError("options", key, "unknown option")
        if value is not None:
            opts[key] = value
    subject = "options"
    if opts["granularity"] not in GRANULARITIES:
        raise TopologyError(subject, "granularity", "%r unknown; one of %s" % (opts["granularity"], ", ".join(GRANULARITIES)))
    if opts["encapsulate"] not in ENCAPSULATIONS:
        raise TopologyError(subject, "encapsulate", "%r unknown; one of %s" % (opts["encapsulate"], ", ".join(ENCAPSULATIONS)))
    if opts["compatibility"] == "":
        opts["compatibility"] = "none"  # Kilo's flag default: the IPIP encapsulator
    if opts["compatibility"] not in COMPATIBILITIES:
        raise TopologyError(subject, "compatibility", "%r unknown; one of %s"
                            % (opts["compatibility"], ", ".join(COMPATIBILITIES)))
    opts["subnet"] = parse_network(opts["subnet"], subject, "subnet")
    opts["port"] = to_int(opts["port"], subject, "port", 1, 65535, OPTIONS["port"]["default"])
    check_interface_name(opts["interface"], subject, "interface")
    for key in ("local", "cni", "forward_rules"):
        opts[key] = to_bool(opts[key], subject, key)
    opts["service_cidrs"] = parse_network_list(opts["service_cidrs"], subject, "service_cidrs")
    return opts


class Node(object):
    """One parsed node; strings are normalised once here."""

    __slots__ = ("name", "location", "endpoint", "endpoint_ip", "port", "internal", "internal_ip",
                 "internal_ip_str", "internal_host_cidr", "pod", "pod_str", "cni_ip", "key", "leader_hint", "healthy",
                 "keepalive", "alips", "discovered", "segment", "index")


class Peer(object):
    __slots__ = ("name", "key", "allowed", "allowed_strs", "endpoint", "keepalive", "psk")


def parse_node(item, index, default_port):
    name = _name(item, "node", index)
    subject = node_subject(name)
    node = Node()
    node.name = name
    location = item.get("location")
    node.location = "" if location is None else str(location)
    node.endpoint = node.endpoint_ip = None
    node.port = default_port
    if item.get("endpoint") not in (None, ""):
        node.endpoint, node.endpoint_ip, node.port = parse_endpoint(item["endpoint"], subject, "endpoint")
    node.internal = node.internal_ip = node.internal_ip_str = node.internal_host_cidr = None
    if item.get("internal_ip") not in (None, "", "-"):
        node.internal = parse_interface(item["internal_ip"], subject, "internal_ip")
        node.internal_ip = node.internal.ip
        node.internal_ip_str = str(node.internal.ip)
        node.internal_host_cidr = "%s/%d" % (node.internal_ip_str, node.internal.ip.max_prefixlen)
    node.pod = node.pod_str = None
    if item.get("pod_cidr") not in (None, ""):
        node.pod = parse_network(item["pod_cidr"], subject, "pod_cidr")
        node.pod_str = str(node.pod)
    # Kilo's cni-compatibility-ip annotation (cilium_host's address): only its address is used
    node.cni_ip = None
    if item.get("cni_compatibility_ip") not in (None, ""):
        node.cni_ip = parse_interface(item["cni_compatibility_ip"], subject, "cni_compatibility_ip").ip
    node.key = parse_key(item.get("public_key"), subject, "public_key")
    node.leader_hint = to_bool(item.get("leader"), subject, "leader")
    # beyond Kilo (opt-in, kilo_leader_health): a node known to be down this run leads no one
    node.healthy = to_bool(item.get("healthy"), subject, "healthy", default=True)
    node.keepalive = to_int(item.get("persistent_keepalive"), subject, "persistent_keepalive", 0, 65535)
    node.alips = parse_network_list(item.get("allowed_location_ips"), subject, "allowed_location_ips")
    discovered = item.get("discovered_endpoints") or {}
    if not isinstance(discovered, dict):
        raise TopologyError(subject, "discovered_endpoints", "expected a mapping public key -> ip:port")
    node.discovered = {}
    for key in sorted(discovered):
        field = "discovered_endpoints[%s]" % key
        endpoint = parse_endpoint(discovered[key], subject, field, allow_dns=False)
        node.discovered[parse_key(key, subject, field)] = endpoint
    node.index = index
    return node


def parse_peer(item, index):
    name = _name(item, "peer", index)
    subject = peer_subject(name)
    peer = Peer()
    peer.name = name
    peer.key = parse_key(item.get("public_key"), subject, "public_key")
    peer.allowed = parse_network_list(item.get("allowed_ips"), subject, "allowed_ips")
    if not peer.allowed:
        raise TopologyError(subject, "allowed_ips", "a peer needs at least one allowed IP")
    peer.endpoint = None
    if item.get("endpoint") not in (None, ""):
        peer.endpoint = parse_endpoint(item["endpoint"], subject, "endpoint")
    # Kilo tells "unset" (nil) from 0; both mean: never replace the endpoint by a discovered one.
    peer.keepalive = to_int(item.get("persistent_keepalive"), subject, "persistent_keepalive", 0, 65535)
    peer.psk = parse_key(item.get("preshared_key"), subject, "preshared_key", required=False)
    return peer


def _parse_all(items, kind, parse, subject, keys):
    """Parse nodes or peers; names unique within the kind, public keys across both (``keys``)."""
    parsed, names = [], set()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise TopologyError("%s #%d" % (kind, index + 1), kind, "expected a mapping")
        obj = parse(item, index)
        if obj.name in names:
            raise TopologyError(subject(obj.name), "name", "duplicate %s name" % kind)
        names.add(obj.name)
        if obj.key in keys:
            raise TopologyError(subject(obj.name), "public_key", "same key as %s" % keys[obj.key])
        keys[obj.key] = subject(obj.name)
        parsed.append(obj)
    return parsed


def parse_inputs(nodes, peers, options):
    """Validate everything; returns (options, [Node] sorted by name, [Peer] sorted by name)."""
    opts = parse_options(options)
    if not isinstance(nodes, (list, tuple)):
        raise TopologyError("nodes", "nodes", "expected a list of nodes")
    if peers is None:
        peers = []
    if not isinstance(peers, (list, tuple)):
        raise TopologyError("peers", "peers", "expected a list of peers")
    keys = {}
    parsed_nodes = _parse_all(nodes, "node", lambda item, index: parse_node(item, index, opts["port"]),
                              node_subject, keys)
    parsed_peers = _parse_all(peers, "peer", parse_peer, peer_subject, keys)
    parsed_nodes.sort(key=lambda n: n.name)
    parsed_peers.sort(key=lambda p: p.name)
    return opts, parsed_nodes, parsed_peers
