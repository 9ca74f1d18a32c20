# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Input validation for the topology engine: options, nodes and peers.

Everything is checked before any plan is computed; the first problem raises one
TopologyError naming the subject (node/peer/option) and the field. Addresses and networks are
kept as typed values of the node table (``nodes.Internal``, ``nodes.Cidr``: the ``ipaddress``
object with its normalised text) so the engine never parses or formats twice. As in Kilo, an IPv4-mapped IPv6 endpoint is taken as plain IPv4 and keys
are kept in canonical base64 (the spelling Kilo prints).
"""

from __future__ import absolute_import, division, print_function

import operator

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    Subject,
    check_interface_name,
    did_you_mean,
    node_subject,
    peer_subject,
    parse_key,
    to_bool,
    to_int,
)

# The value parsers and the error live with the node table; the engine's importers find them here too.
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import (  # noqa: F401 pylint: disable=unused-import
    FIELDS,
    NO_INTERNAL,
    Cidr,
    TopologyError,
    parse_endpoint,
    parse_interface,
    parse_keepalive,
    parse_network,
    parse_network_list,
    parse_subnets,
)
from ansible_collections.kilo.mesh.plugins.module_utils.options import (
    OPTIONS,
    bounds,
    engine_defaults,
)
from ansible_collections.kilo.mesh.plugins.module_utils.engine.relays import relay_locations

GRANULARITIES = tuple(OPTIONS["granularity"]["choices"])
ENCAPSULATIONS = tuple(OPTIONS["encapsulate"]["choices"])
COMPATIBILITIES = tuple(OPTIONS["compatibility"]["choices"])
DEFAULT_OPTIONS = engine_defaults()
OPTIONS_SUBJECT = Subject("options")
# The fields of a peer besides its name (an item of ``kilo_peers``, a registry peer, a Peer
# resource as read); a node's are the node table's. Anything else is refused, naming the closest
# known field: a misspelt one would otherwise be dropped without a word.
PEER_FIELDS = ("public_key", "allowed_ips", "endpoint", "persistent_keepalive", "preshared_key")
KNOWN_FIELDS = frozenset(("name",) + tuple(FIELDS))


def check_fields(item, known, subject, what):
    """Refuse a key of ``item`` that is neither ``name`` nor one of ``known``, naming it and the
    closest known one."""
    for key in sorted(str(k) for k in item):
        if key != "name" and key not in known:
            raise TopologyError(
                "unknown field of %s%s" % (what, did_you_mean(key, ["name"] + list(known))),
                subject,
                key,
            )


def _name(item, kind, index):
    name = item.get("name") if isinstance(item, dict) else None
    if not isinstance(name, str) or not name:
        raise TopologyError(
            "missing or not a string", Subject(kind, None, "%s #%d" % (kind, index + 1)), "name"
        )
    return name


def parse_options(options):
    opts = dict(DEFAULT_OPTIONS)
    for key, value in (options or {}).items():
        if key not in DEFAULT_OPTIONS:
            raise TopologyError("unknown option", OPTIONS_SUBJECT, key)
        if value is not None:
            opts[key] = value
    subject = OPTIONS_SUBJECT
    if opts["granularity"] not in GRANULARITIES:
        raise TopologyError(
            "%r unknown; one of %s" % (opts["granularity"], ", ".join(GRANULARITIES)),
            subject,
            "granularity",
        )
    if opts["encapsulate"] not in ENCAPSULATIONS:
        raise TopologyError(
            "%r unknown; one of %s" % (opts["encapsulate"], ", ".join(ENCAPSULATIONS)),
            subject,
            "encapsulate",
        )
    if opts["compatibility"] == "":
        opts["compatibility"] = "none"  # Kilo's flag default: the IPIP encapsulator
    if opts["compatibility"] not in COMPATIBILITIES:
        raise TopologyError(
            "%r unknown; one of %s" % (opts["compatibility"], ", ".join(COMPATIBILITIES)),
            subject,
            "compatibility",
        )
    opts["subnets"] = parse_subnets(opts["subnet"], subject)
    # the first subnet is the primary: Kilo's one WireGuard IP per segment comes from it
    opts["subnet"] = opts["subnets"][0]
    if len(opts["subnets"]) == 2 and opts["compatibility"] != "none":
        raise TopologyError(
            "%s in a dual-stack mesh: its encapsulation is modelled for"
            " one IP family only; use none" % opts["compatibility"],
            subject,
            "compatibility",
        )
    opts["port"] = to_int(
        opts["port"], subject, "port", *bounds("port"), default=OPTIONS["port"]["default"]
    )
    check_interface_name(opts["interface"], subject, "interface")
    for key in ("local", "cni", "forward_rules"):
        opts[key] = to_bool(opts[key], subject, key)
    opts["service_cidrs"] = parse_network_list(opts["service_cidrs"], subject, "service_cidrs")
    opts["relays"] = relay_locations(opts["relays"], subject)
    return opts


# Node attributes of the table's fields where the engine's name differs from the field's; any
# other field of the table (nodes.FIELDS) is kept on the Node under its own name, as parsed.
ATTRIBUTES = {
    "internal_ip": "internals",
    "pod_cidr": "pods",
    "cni_compatibility_ip": "cni_ip",
    "public_key": "key",
    "leader": "leader_hint",
    "allowed_location_ips": "alips",
    "discovered_endpoints": "discovered",
}


class Node(object):
    """One parsed node: one value per field of the node table (``internals``: ``Internal``s,
    ``pods``: ``Cidr``s, in the node's order; the first of each is Kilo's one; ``endpoint``: an
    ``Endpoint``, None for none), its listen ``port`` (its endpoint's, else the mesh's), and
    where the engine put it (``segment``, ``index``)."""

    __slots__ = ("name", "port", "segment", "index") + tuple(
        ATTRIBUTES.get(name, name) for name in FIELDS
    )

    @property
    def first(self):
        """Kilo's one internal IP (an ``Internal``; ``NO_INTERNAL`` for none)."""
        return self.internals[0] if self.internals else NO_INTERNAL

    @property
    def internal(self):
        """Kilo's one internal IP as an interface (None: none)."""
        return self.internals[0].interface if self.internals else None

    @property
    def pod(self):
        """Kilo's one pod CIDR (None: none)."""
        return self.pods[0][0] if self.pods else None

    def side(self, family):
        """The internal IP of ``family`` (an IP version; None: the first, Kilo's one)."""
        if family is None:
            return self.first
        for internal in self.internals:
            if internal.ip.version == family:
                return internal
        return NO_INTERNAL


# What a field's parser gives for a field left out (None), where that is one immutable value
# (None, a boolean, a number, a text): most of a node's fields are absent from most nodes, and
# a parser's call costs more than its answer known in advance. A parser that refuses None (the
# public key) or answers with a container is called every time.
_NOT_KNOWN = object()


def _absent_value(parse, field):
    try:
        value = parse(None, OPTIONS_SUBJECT, field)
    except KiloError:
        return _NOT_KNOWN
    return value if value is None or type(value) in (bool, int, float, str) else _NOT_KNOWN


PARSERS = tuple(
    (ATTRIBUTES.get(name, name), field.parse, name, _absent_value(field.parse, name))
    for name, field in FIELDS.items()
)


_NAME = operator.attrgetter("name")


class Peer(object):
    """One parsed outside peer: ``allowed``: ``Cidr``s, in its order (a CIDR another peer claimed
    first left out, ``Topology._peers``); ``endpoint``: an ``Endpoint``, None for none."""

    __slots__ = (
        "name",
        "key",
        "allowed",
        "endpoint",
        "persistent_keepalive",
        "psk",
    )


def parse_node(item, index, default_port, subnets=None):
    """One node; ``subnets`` (the mesh's, parsed) decides which IP families it may carry."""
    name = _name(item, "node", index)
    if not KNOWN_FIELDS.issuperset(item):
        check_fields(item, FIELDS, node_subject(name), "a node")
    node = Node()
    node.name = name
    try:
        _fields(node, item, default_port, subnets, None)
    except KiloError:
        # the same refusal again, naming the node: its subject is made for an error only (it
        # costs more than most fields of a node, and the parsers give the same answer twice)
        _fields(node, item, default_port, subnets, node_subject(name))
        raise
    node.index = index
    return node


def _fields(node, item, default_port, subnets, subject):
    """``node``'s values of the node table's fields out of ``item``; ``subject`` for errors."""
    # every field of the node table, parsed by its row, in the table's order
    get = item.get
    for attribute, parse, field, absent in PARSERS:
        value = get(field)
        if value is None and absent is not _NOT_KNOWN:
            setattr(node, attribute, absent)
        else:
            setattr(node, attribute, parse(value, subject, field))
    # the endpoint's port is the listen port
    node.port = default_port if node.endpoint is None else node.endpoint.port
    # the first internal IP is Kilo's one (segment key, a single-stack mesh's routes); a second,
    # of the other family, only counts in a dual-stack mesh (Node.side). A node's pod ranges
    # (several: Calico's blocks, Cilium's pool CIDRs) are each its own route and allowed IP; the
    # first is Kilo's one pod CIDR (tunnel address, CNI, the add-on gateway)
    _check_families(node, subnets or [], subject)


def _check_families(node, subnets, subject):
    """A single-stack mesh takes a node's addresses of one family, as Kilo (which of them is
    Kilo's business: an IPv6 node in an IPv4 mesh is taken as Kilo takes it, its routes mixing
    families that netlink refuses on Kilo's hosts; kilo.mesh.validate refuses it instead, in
    validate.check_one_family); a second family needs a dual-stack mesh, whose two subnets
    cover both families."""
    if len(subnets) == 2:
        return
    _check_pod_family([pod.net for pod in node.pods], subject)
    if len(node.internals) == 2:
        mesh = ("subnet %s" % subnets[0]) if subnets else "one subnet"
        second = node.internals[1]
        raise TopologyError(
            "%s is IPv%d but the mesh is single-stack (%s): a second IP family"
            " needs a second subnet" % (second, second.version, mesh),
            subject,
            "internal_ip",
        )


def _check_pod_family(pods, subject):
    """A node's pod ranges are of one IP family (a second family is a dual-stack mesh's)."""
    for net in pods[1:]:
        if net.version != pods[0].version:
            raise TopologyError(
                "%s is IPv%d but %s is IPv%d: a node's pod ranges are of one"
                " family in a single-stack mesh" % (net, net.version, pods[0], pods[0].version),
                subject,
                "pod_cidr",
            )


def relation(equal, prefixlen, other_prefixlen):
    """How one network stands to another that it overlaps, as the errors of two claims say it
    (here and engine/conflicts.py)."""
    if equal:
        return "is also"
    return "holds" if prefixlen < other_prefixlen else "lies inside"


def check_pod_overlaps(nodes):
    """No two pod ranges overlap, of one node or of two (two nodes claiming one block, a block
    inside another's range): each range is a route to exactly one node. Two nodes of one range
    each are Kilo's case, and Kilo takes them as they are: so does this check (Kilo's output is
    matched on every input it accepts); a node of several ranges (an IPAM's blocks) is ours."""
    ranges = sorted(
        (
            (int(net.network_address), -net.prefixlen, net.version, net, node)
            for node in nodes
            for net, dummy in node.pods
        ),
        key=lambda r: r[:3],
    )
    last = {}  # version -> (last address covered so far, its network, its node)
    for start, dummy, version, net, node in ranges:
        seen = last.get(version)
        if (
            seen is not None
            and start <= seen[0]
            and (seen[2] is node or len(node.pods) > 1 or len(seen[2].pods) > 1)
        ):
            other = (
                "its own pod range %s" % seen[1]
                if seen[2] is node
                else "the pod range %s of node %r" % (seen[1], seen[2].name)
            )
            raise TopologyError(
                "%s %s %s"
                % (net, relation(net == seen[1], net.prefixlen, seen[1].prefixlen), other),
                node_subject(node.name),
                "pod_cidr",
            )
        end = start | ((1 << (net.max_prefixlen - net.prefixlen)) - 1)  # its broadcast address
        if seen is None or end > seen[0]:
            last[version] = (end, net, node)


def parse_peer(item, index):
    name = _name(item, "peer", index)
    subject = peer_subject(name)
    check_fields(item, PEER_FIELDS, subject, "a peer")
    peer = Peer()
    peer.name = name
    peer.key = parse_key(item.get("public_key"), subject, "public_key")
    peer.allowed = [
        Cidr(net, str(net))
        for net in parse_network_list(item.get("allowed_ips"), subject, "allowed_ips")
    ]
    if not peer.allowed:
        raise TopologyError("a peer needs at least one allowed IP", subject, "allowed_ips")
    peer.endpoint = None
    if item.get("endpoint") not in (None, ""):
        peer.endpoint = parse_endpoint(item["endpoint"], subject, "endpoint")
    # Kilo tells "unset" (nil) from 0; both mean: never replace the endpoint by a discovered one.
    peer.persistent_keepalive = parse_keepalive(item.get("persistent_keepalive"), subject)
    peer.psk = parse_key(item.get("preshared_key"), subject, "preshared_key", required=False)
    return peer


def _parse_all(items, kind, parse, subject, keys):
    """Parse nodes or peers; names unique within the kind, public keys across both (``keys``)."""
    parsed, names = [], set()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise TopologyError(
                "expected a mapping", Subject(kind, None, "%s #%d" % (kind, index + 1)), kind
            )
        obj = parse(item, index)
        if obj.name in names:
            raise TopologyError("duplicate %s name" % kind, subject(obj.name), "name")
        names.add(obj.name)
        if obj.key in keys:
            other = keys[obj.key]
            raise TopologyError(
                "same key as %s" % other[0](other[1]), subject(obj.name), "public_key"
            )
        keys[obj.key] = (subject, obj.name)  # its subject made only for the error
        parsed.append(obj)
    return parsed


def parse_inputs(nodes, peers, options):
    """Validate everything; returns (options, [Node] sorted by name, [Peer] sorted by name)."""
    opts = parse_options(options)
    if not isinstance(nodes, (list, tuple)):
        raise TopologyError("expected a list of nodes", "nodes", "nodes")
    if peers is None:
        peers = []
    if not isinstance(peers, (list, tuple)):
        raise TopologyError("expected a list of peers", "peers", "peers")
    keys = {}
    port, subnets = opts["port"], opts["subnets"]
    parsed_nodes = _parse_all(
        nodes,
        "node",
        lambda item, index: parse_node(item, index, port, subnets),
        node_subject,
        keys,
    )
    parsed_peers = _parse_all(peers, "peer", parse_peer, peer_subject, keys)
    parsed_nodes.sort(key=_NAME)
    check_pod_overlaps(parsed_nodes)
    parsed_peers.sort(key=_NAME)
    return opts, parsed_nodes, parsed_peers
