# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Kubernetes objects <-> kilo.mesh data: Node annotations, Peer resources, agent write-back.

Pure functions over the JSON of the API (plain dicts: ``metadata``, ``spec``, ``status``), no
client library. The annotation names and value formats are Kilo's (its Kubernetes backend):

* what an operator sets on a Node (location, leader, force-endpoint, force-internal-ip,
  persistent-keepalive, allowed-location-ips, cni-compatibility-ip; the Node's spec.podCIDR)
  becomes our inventory host variables, as the node table says (``nodes.FIELDS``: source, kube),
  with Kilo's precedence;
* what Kilo's agent writes (key, endpoint, internal-ip, wireguard-ip, last-seen, granularity,
  discovered-endpoints) is read into ``kilo_kubernetes_node`` and written by ``write_back``;
* a Peer resource becomes a peer of the engine, checked as Kilo's admission webhook does.

Where Kilo silently ignores a value it cannot parse, a bad value here is an error naming the
node or peer and the annotation or field.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import re

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    format_endpoint,
    node_subject,
    parse_key,
    peer_subject,
    to_int,
)
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import (
    ANNOTATION_PREFIX as PREFIX,
    FIELDS,
    NODE_POD_SOURCE_VAR,
    OWN_PREFIX,
    PATH_STATE_KEYS,
    POD_SOURCE_ANNOTATION,
    POD_SOURCE_VAR,
    POD_SOURCES,
    UNSET,
    VARS,
    check_host_vars,
    first_of,
    parse_cidr,
    parse_endpoint,
    parse_interface,
    parse_keepalive,
    pod_cidr_value,
    split_endpoint,
    read_families,
)
from ansible_collections.kilo.mesh.plugins.module_utils.options import OPTIONS, STATE_SPEC, bounds

# The node table (nodes.FIELDS) names the annotations of node fields: set by the operator ...
LOCATION = FIELDS["location"].annotation
LEADER = FIELDS["leader"].annotation
FORCE_ENDPOINT = FIELDS["endpoint"].annotation
FORCE_INTERNAL_IP = FIELDS["internal_ip"].annotation
PERSISTENT_KEEPALIVE = FIELDS["persistent_keepalive"].annotation
ALLOWED_LOCATION_IPS = FIELDS["allowed_location_ips"].annotation
CNI_COMPATIBILITY_IP = FIELDS[
    "cni_compatibility_ip"
].annotation  # written by the agent, read as a node field
# ... and written by the agent (here: by write_back).
KEY = FIELDS["public_key"].written
ENDPOINT = FIELDS["endpoint"].written
INTERNAL_IP = FIELDS["internal_ip"].written
DISCOVERED_ENDPOINTS = FIELDS["discovered_endpoints"].written
# What the agent writes that is no node field: of its plan, its loop and the mesh.
WIREGUARD_IP = PREFIX + "wireguard-ip"
LAST_SEEN = PREFIX + "last-seen"
GRANULARITY = PREFIX + "granularity"
# What Kilo's agent removes when it leaves (its CleanUp), in that order.
AGENT_ANNOTATIONS = (
    ENDPOINT,
    INTERNAL_IP,
    KEY,
    LAST_SEEN,
    WIREGUARD_IP,
    DISCOVERED_ENDPOINTS,
    GRANULARITY,
)
# Beyond Kilo (a dual-stack mesh): a node's addresses of both families, separated by a comma, the
# primary's first. Kilo's wireguard-ip and internal-ip keep the primary's alone, as Kilo writes them;
# these are written only where there are two, and read back only where their first agrees with
# Kilo's annotation (one left from a dual-stack past, or by a writer that knew only Kilo's, is ignored).
WIREGUARD_IPS = OWN_PREFIX + "wireguard-ips"
INTERNAL_IPS = OWN_PREFIX + "internal-ips"
DUAL_ANNOTATIONS = (WIREGUARD_IPS, INTERNAL_IPS)
# Our agent's own (beyond Kilo): leader health's names of the leaders it saw dead and a deposed
# leader's mark (agent/health.py), a key rotation's announcement (agent/rotation.py).
UNREACHABLE_LEADERS = OWN_PREFIX + "unreachable-leaders"
DEPOSED_AT = OWN_PREFIX + "deposed-at"
NEXT_KEY = OWN_PREFIX + "next-key"
# Relays (engine/relays.py, beyond Kilo): a relay's agent writes when it started relaying (unix
# seconds; again when its watch reconnects), a node behind NAT what it sees of its paths (JSON
# {"down", "direct", "held"}, node field ``path_state``). A Node with neither is taken for one of
# Kilo's own agent (node field ``kg``): it never relays, and keeps Kilo's entries.
RELAY = OWN_PREFIX + "relay"
PATH_STATE = OWN_PREFIX + "path-state"
OWN_AGENT_ANNOTATIONS = (UNREACHABLE_LEADERS, DEPOSED_AT, NEXT_KEY, RELAY, PATH_STATE)
# Every Node annotation of Kilo's prefix and of ours that this collection knows (the node table's,
# the agents'): kilo.mesh.validate refuses any other one of those prefixes on a host, naming the
# closest (a misspelt annotation would otherwise be ignored, as Kilo ignores it).
KNOWN_ANNOTATIONS = tuple(
    sorted(
        set(
            [
                name
                for field in FIELDS.values()
                for name in (field.annotation, field.written)
                if name
            ]
            + list(AGENT_ANNOTATIONS)
            + list(DUAL_ANNOTATIONS)
            + [POD_SOURCE_ANNOTATION]
            + list(OWN_AGENT_ANNOTATIONS)
        )
    )
)
# The inventory plugin's host variable holding a Node's annotations as they are.
ANNOTATIONS_VAR = "kubernetes_annotations"
# Of those, what the node observes rather than is configured to be: refreshed by every writer
# (an Ansible run, the agent) without counting as a change (a NAT'd peer's learned endpoint moves
# on its own; an idempotence check must not see it).
OBSERVED_ANNOTATIONS = (LAST_SEEN, DISCOVERED_ENDPOINTS)
# Of those, what the other nodes build their mesh from (and kgctl shows): a node taken over from
# another agent in place (playbooks/migrate.yml) must keep each as that agent wrote it.
SEEN_BY_OTHERS = (KEY, ENDPOINT, INTERNAL_IP, WIREGUARD_IP, GRANULARITY)

REGION_LABEL = "topology.kubernetes.io/region"
PEER_GROUP = "kilo.squat.ai"
PEER_VERSION = "v1alpha1"
PEER_PLURAL = "peers"
PEER_API_VERSION = "%s/%s" % (PEER_GROUP, PEER_VERSION)
# Where kilo.mesh.peer keeps a peer: a Peer resource, or the registry on the controller.
PEER_STORES = ("kubernetes", "registry")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Fields of a Peer resource -> the kilo.mesh.peer options they come from, so an error names what the user wrote.
PEER_OPTION_OF = (
    ("spec.publicKey", "public_key"),
    ("spec.allowedIPs", "allowed_ips"),
    ("spec.endpoint", "endpoint"),
    ("spec.persistentKeepalive", "persistent_keepalive"),
    ("spec.presharedKey", "preshared_key"),
    ("metadata.name", "name"),
)

# Where the pod ranges of the IPAM sources live (pod_cidr_source): (group, version, plural), all
# cluster-scoped. Calico: BlockAffinity (spec.node, spec.cidr, spec.state; a node owns several);
# Cilium: CiliumNode, named as its Node (spec.ipam.podCIDRs).
IPAM_KINDS = {
    "calico": ("crd.projectcalico.org", "v1", "blockaffinities"),
    "cilium": ("cilium.io", "v2", "ciliumnodes"),
}

GRANULARITIES = tuple(OPTIONS["granularity"]["choices"])
# Fields of the host variable kilo_kubernetes_node (registry names where there is one).
NODE_FIELDS = (
    "public_key",
    "internal_ip",
    "endpoint",
    "discovered_endpoints",
    "last_seen",
    "granularity",
    "wireguard_ip",
    "ready",
    "pod_cidrs",
    "relay_since",
    "path_state",
    "kg",
)


def _metadata(obj, kind):
    if not isinstance(obj, dict):
        raise KiloError("expected a %s object, got %r" % (kind, type(obj).__name__))
    meta = obj.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise KiloError("has no name", kind, "metadata.name")
    return name, meta


def _mapping(meta, key, subject):
    value = meta.get(key) or {}
    if not isinstance(value, dict):
        raise KiloError("expected a mapping", subject, "metadata." + key)
    return value


def node_name(node):
    return _metadata(node, "Node")[0]


def node_ready(node):
    """The Node's Ready condition: True, False (False or Unknown), None when it has none."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return None


def node_address(node, source="InternalIP"):
    """The address to reach a Node at: the first ``status.addresses`` entry of type ``source``
    (InternalIP, ExternalIP, Hostname ...), or the value of the annotation named ``source``
    (any name with a ``/``), without a prefix length or port. None when there is none.
    """
    if "/" in source:
        value = _mapping(
            _metadata(node, "Node")[1], "annotations", node_subject(node_name(node))
        ).get(source)
        if not isinstance(value, str) or not value.strip():
            return None
        value = value.strip()
        try:
            return str(ipaddress.ip_interface(value).ip)
        except ValueError:
            pass
        try:
            return split_endpoint(value)[0]
        except KiloError:
            return value
    for entry in (node.get("status") or {}).get("addresses") or []:
        if isinstance(entry, dict) and entry.get("type") == source and entry.get("address"):
            return entry["address"]
    return None


def _agent_facts(name, annotations, node):
    """The agent-written annotations in our field names; "" (Kilo's "none") and absent give None."""
    subject = node_subject(name)

    def text(key):
        value = annotations.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise KiloError("%r is not a string" % (value,), subject, key)
        return value

    def both(key, own):
        """Kilo's one address of ``key``, or the two of ``own`` when their first is it."""
        one = parse_cidr(text(key), subject, key, host=True)
        if not text(own):
            return one
        two = [
            parse_cidr(item.strip(), subject, own, host=True)
            for item in text(own).split(",")
            if item.strip()
        ]
        return two if len(two) == 2 and two[0] == one else one

    facts = dict.fromkeys(NODE_FIELDS)
    if text(KEY):
        facts["public_key"] = parse_key(text(KEY), subject, KEY)
    if text(ENDPOINT):
        facts["endpoint"] = parse_endpoint(text(ENDPOINT), subject, ENDPOINT).text
    if text(INTERNAL_IP):
        facts["internal_ip"] = both(INTERNAL_IP, INTERNAL_IPS)
    if text(WIREGUARD_IP):
        facts["wireguard_ip"] = both(WIREGUARD_IP, WIREGUARD_IPS)
    if text(LAST_SEEN):
        facts["last_seen"] = to_int(text(LAST_SEEN), subject, LAST_SEEN, low=0)
    if text(GRANULARITY):
        if text(GRANULARITY) not in GRANULARITIES:
            raise KiloError(
                "%r unknown; one of %s" % (text(GRANULARITY), ", ".join(GRANULARITIES)),
                subject,
                GRANULARITY,
            )
        facts["granularity"] = text(GRANULARITY)
    facts["discovered_endpoints"] = _read_discovered(text(DISCOVERED_ENDPOINTS), subject)
    facts["ready"] = node_ready(node)
    facts["pod_cidrs"] = {"node": spec_pod_cidrs(node, subject)}
    if text(RELAY):
        facts["relay_since"] = to_int(text(RELAY), subject, RELAY, low=0)
    if text(PATH_STATE):
        try:
            state = json.loads(text(PATH_STATE))
        except ValueError as e:
            raise KiloError("not JSON: %s" % e, subject, PATH_STATE)
        facts["path_state"] = FIELDS["path_state"].parse(state, subject, PATH_STATE)
    facts["kg"] = RELAY not in annotations and PATH_STATE not in annotations
    return facts


def handed_back_removals(current):
    """{annotation: None} of our agents' relay marks a Node has (``current``): what a node handed
    back to Kilo's agent loses (playbooks/migrate.yml), else our agents would still take it for one
    of theirs (a relay, an end with a path state)."""
    return dict((key, None) for key in (RELAY, PATH_STATE) if current.get(key) is not None)


def relay_marks(facts):
    """The node fields of the relays' timed inputs out of a Node's reading (``kilo_kubernetes_node``):
    ``relay_since``, ``path_state`` and ``kg`` (see RELAY), for the agents' engine input."""
    return dict((key, facts.get(key)) for key in ("relay_since", "path_state", "kg"))


def path_state_text(state):
    """The PATH_STATE annotation of a path state ({"down", "direct", "held"}: segment -> seconds)."""
    return json.dumps(
        dict((key, dict(state.get(key) or {})) for key in PATH_STATE_KEYS),
        sort_keys=True,
        separators=(",", ":"),
    )


def spec_pod_cidrs(node, subject):
    """The Node's own pod ranges: ``spec.podCIDR`` (Kilo's one), then those of ``spec.podCIDRs``
    (a dual-stack cluster's list, whose first item the API server keeps equal to ``spec.podCIDR``)
    of the other IP family. A single-stack mesh takes the first alone, as Kilo
    (``nodes.source_pod_cidrs``). A value that is not a CIDR is no range, as in Kilo, not an error."""
    spec = node.get("spec") or {}
    if not spec.get("podCIDR"):
        return []
    try:
        first = parse_cidr(spec["podCIDR"], subject, "spec.podCIDR")
    except KiloError:
        return []
    out = [first]
    for item in spec.get("podCIDRs") or ():
        try:
            cidr = parse_cidr(item, subject, "spec.podCIDRs")
        except KiloError:
            continue
        if (
            ipaddress.ip_network(cidr).version != ipaddress.ip_network(first).version
            and len(out) < 2
        ):
            out.append(cidr)
    return out


def _ipam_error(kind, name, field, message):
    return KiloError(message, "%s %r" % (kind, name), field)


def _bad_object(errors, node, error):
    """A malformed IPAM object: raised (the inventory plugin fails, as on its other errors), or, with
    ``errors`` (the agent), noted against the node it names (that node is left out with the reason,
    never routed with part of its ranges), or against the object when it names none."""
    if errors is None:
        raise error
    errors[node or error.subject] = str(error)


def _named(items, kind, errors):
    """(name, object) of each of ``items`` that has a name; one without is a bad object."""
    for obj in items:
        try:
            name, _meta = _metadata(obj, kind)
        except KiloError as e:
            _bad_object(errors, None, e)
            continue
        yield name, obj


def calico_pod_cidrs(items, errors=None):
    """{node name: [CIDR, ...]} of Calico's BlockAffinity objects: the confirmed ones not marked
    deleted, each node's blocks in address order. ``errors``: see ``_bad_object``."""
    out = {}
    for name, obj in _named(items, "BlockAffinity", errors):
        spec = obj.get("spec") or {}
        if spec.get("state") != "confirmed" or str(spec.get("deleted")).lower() == "true":
            continue
        node = spec.get("node")
        try:
            if not isinstance(node, str) or not node:
                node = None
                raise _ipam_error("BlockAffinity", name, "spec.node", "missing or not a string")
            out.setdefault(node, []).append(
                parse_cidr(spec.get("cidr"), "BlockAffinity %r" % name, "spec.cidr")
            )
        except KiloError as e:
            _bad_object(errors, node, e)
    for cidrs in out.values():
        cidrs.sort(key=lambda c: (ipaddress.ip_network(c).version, ipaddress.ip_network(c)))
    for node in errors or {}:
        out.pop(node, None)
    return out


def cilium_pod_cidrs(items, errors=None):
    """{node name: [CIDR, ...]} of CiliumNode objects (named as their Node): ``spec.ipam.podCIDRs``
    in their order (the first is the node's primary range). ``errors``: see ``_bad_object``."""
    out = {}
    for name, obj in _named(items, "CiliumNode", errors):
        ipam = (obj.get("spec") or {}).get("ipam") or {}
        cidrs = ipam.get("podCIDRs") if isinstance(ipam, dict) else None
        if cidrs is None:
            continue
        try:
            if not isinstance(cidrs, list):
                raise _ipam_error(
                    "CiliumNode", name, "spec.ipam.podCIDRs", "expected a list of CIDRs"
                )
            out[name] = [parse_cidr(c, "CiliumNode %r" % name, "spec.ipam.podCIDRs") for c in cidrs]
        except KiloError as e:
            _bad_object(errors, name, e)
    return out


# source -> the reader of its objects
IPAM_READERS = {"calico": calico_pod_cidrs, "cilium": cilium_pod_cidrs}


def _read_discovered(value, subject):
    """Kilo's JSON {public key: {"IP": ..., "Port": ...}} -> {public key: "ip:port"}."""
    if value is None:
        return {}
    try:
        data = json.loads(value)
    except ValueError as e:
        raise KiloError("not valid JSON: %s" % e, subject, DISCOVERED_ENDPOINTS)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise KiloError(
            "expected a JSON object of public key -> address", subject, DISCOVERED_ENDPOINTS
        )
    out = {}
    for key in sorted(data):
        addr = data[key]
        if addr is None:
            continue  # a peer WireGuard had no endpoint for
        field = "%s[%s]" % (DISCOVERED_ENDPOINTS, key)
        # Go decodes field names case-insensitively.
        fields = (
            dict((str(k).lower(), v) for k, v in addr.items()) if isinstance(addr, dict) else {}
        )
        try:
            ip = ipaddress.ip_address(fields.get("ip"))
        except ValueError:
            raise KiloError("%r has no valid IP" % (addr,), subject, field)
        port = to_int(fields.get("port"), subject, field, *bounds("port"), default=None)
        if port is None:
            raise KiloError("%r has no port" % (addr,), subject, field)
        out[parse_key(key, subject, field)] = parse_endpoint(
            format_endpoint(ip, port), subject, field, allow_dns=False
        ).text
    return out


def drift(node, hvars, topology_label=REGION_LABEL):
    """[(variable, its value, the Node's reading)] of the node variables ``hvars`` sets that the
    Node object says otherwise (or not at all): push runs take the variable, agents read node fields
    from the Node, so such a variable would be undone by the agents between runs."""
    name, _meta = _metadata(node, "Node")
    subject = "host %s" % name
    from_node = host_vars(node, topology_label)
    pod_var = FIELDS["pod_cidr"].var
    if (
        pod_var not in from_node
    ):  # the agents take the ranges of the node's source, spec.podCIDR(s) here
        if (
            from_node.get(NODE_POD_SOURCE_VAR)
            or hvars.get(NODE_POD_SOURCE_VAR)
            or hvars.get(POD_SOURCE_VAR)
            or POD_SOURCES[0]
        ) == POD_SOURCES[0]:
            spec = from_node["kilo_kubernetes_node"]["pod_cidrs"][POD_SOURCES[0]]
            # spec.podCIDRs' second family only counts in a dual-stack mesh
            dual = bool(read_families(hvars.get(OPTIONS["subnet"]["var"])))
            if spec:
                from_node[pod_var] = pod_cidr_value(spec if dual else spec[:1])
        else:  # an IPAM source's objects are not read here
            hvars = dict((k, v) for k, v in hvars.items() if k != pod_var)
    wanted = check_host_vars(
        dict((v, hvars[v]) for v in VARS if v in hvars and hvars[v] is not None),
        subject,
        typed=True,
    )
    have = check_host_vars(
        dict((v, from_node[v]) for v in VARS if v in from_node), "node %s" % name, typed=True
    )
    out = []
    for field_name, value in sorted(wanted.items()):
        if have.get(field_name, UNSET) != value:
            var = FIELDS[field_name].var
            out.append((var, hvars[var], from_node.get(var, UNSET)))
    return out


def host_vars(node, topology_label=REGION_LABEL, ipam=None):
    """Inventory host variables of a Node object (the rows of ``nodes.FIELDS`` with a source) and
    ``kilo_kubernetes_node``.

    As Kilo: the location annotation wins whenever it is present (even empty), else the
    topology label, else ""; the leader annotation counts by its presence alone, whatever its
    value; force-internal-ip "" or "-" means the node has no internal IP (kept as given).

    Pod ranges (beyond Kilo): ``kilo_kubernetes_node.pod_cidrs`` holds them per source,
    ``node`` (``spec_pod_cidrs``) and each source of ``ipam`` ({source: {node name: [CIDR]}}, as
    ``IPAM_READERS`` read its objects); ``nodes.node_from_host`` takes those of the node's source
    (annotation ``kilo.mesh/pod-cidr-source``, read into ``kilo_pod_cidr_source``) unless
    ``kilo_pod_cidr`` (annotation ``kilo.mesh/pod-cidrs``) forces them.
    """
    name, meta = _metadata(node, "Node")
    subject = node_subject(name)
    annotations = _mapping(meta, "annotations", subject)
    labels = _mapping(meta, "labels", subject)
    spec = node.get("spec") or {}
    hvars = {}
    for field in FIELDS.values():
        if not field.kube:
            continue
        if field.annotation:
            if field.annotation not in annotations:
                continue
            value, where = annotations[field.annotation], field.annotation
        else:  # a field of the Node
            value, where = spec.get(field.source.split(".", 1)[1]), field.source
        value = field.kube(value, subject, where)
        if value is not UNSET:
            hvars[field.var] = value
    if (
        "kilo_location" not in hvars
    ):  # Kilo's --topology-label: the location when no annotation says
        hvars["kilo_location"] = labels.get(topology_label) or ""
    if annotations.get(POD_SOURCE_ANNOTATION):  # beyond Kilo: this node's source of pod ranges
        source = annotations[POD_SOURCE_ANNOTATION]
        if source not in POD_SOURCES:
            raise KiloError(
                "%r unknown; one of %s" % (source, ", ".join(POD_SOURCES)),
                subject,
                POD_SOURCE_ANNOTATION,
            )
        hvars[NODE_POD_SOURCE_VAR] = source
    hvars["kilo_kubernetes_node"] = facts = _agent_facts(name, annotations, node)
    for source, by_node in sorted((ipam or {}).items()):
        facts["pod_cidrs"][source] = list(by_node.get(name, ()))
    return hvars


def peers_of(resources):
    """(peers, errors) of Peer resources, in name order: each valid one as ``peer_from_resource``
    gives it, and (its name, the KiloError) of each other. The inventory plugin and the agent
    read the cluster's Peers with it."""

    def name_of(obj):
        return ((obj.get("metadata") or {}).get("name") or "") if isinstance(obj, dict) else ""

    peers, errors = [], []
    for obj in sorted(resources, key=name_of):
        try:
            peers.append(peer_from_resource(obj))
        except KiloError as e:
            errors.append((name_of(obj), e))
    return peers, errors


def peer_from_resource(obj):
    """A Peer resource (kilo.squat.ai/v1alpha1) -> an engine peer (an item of ``kilo_peers``).

    Checked as Kilo's webhook checks a Peer (allowed IPs in CIDR form; an endpoint with a DNS
    name (RFC 1123, lower case) or an IP and a port 1-65535; keepalive >= 0; a 32-byte base64
    public key), plus what the engine needs: at least one allowed IP and a valid preshared key.
    A DNS name wins over an IP when both are given, as in Kilo.
    """
    name, _meta = _metadata(obj, "Peer")
    subject = peer_subject(name)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise KiloError("missing or not a mapping", subject, "spec")
    allowed = spec.get("allowedIPs")
    if allowed is None:
        allowed = []
    if not isinstance(allowed, list):
        raise KiloError("expected a list of CIDRs", subject, "spec.allowedIPs")
    allowed_ips = [parse_cidr(ip, subject, "spec.allowedIPs", host=True) for ip in allowed]
    if not allowed_ips:
        raise KiloError(
            "a peer needs at least one allowed IP (Kilo leaves such a peer out)",
            subject,
            "spec.allowedIPs",
        )
    endpoint = None
    if spec.get("endpoint") is not None:
        endpoint = _peer_endpoint(spec["endpoint"], subject)
    return {
        "name": name,
        "public_key": parse_key(spec.get("publicKey"), subject, "spec.publicKey"),
        "allowed_ips": allowed_ips,
        "endpoint": endpoint,
        "persistent_keepalive": parse_keepalive(
            spec.get("persistentKeepalive"), subject, "spec.persistentKeepalive"
        ),
        "preshared_key": parse_key(
            spec.get("presharedKey"), subject, "spec.presharedKey", required=False
        ),
    }


def peer_argument_spec():
    """kilo.mesh.peer's own options, for the module (store kubernetes) and its action (store registry)."""
    return dict(
        name=dict(type="str", required=True),
        state=dict(STATE_SPEC),
        public_key=dict(type="str", no_log=False),
        allowed_ips=dict(type="list", elements="str"),
        endpoint=dict(type="str"),
        persistent_keepalive=dict(type="int", default=0),
        preshared_key=dict(type="str", no_log=True),
        store=dict(type="str", choices=list(PEER_STORES), default=PEER_STORES[0]),
    )


def check_peer_name(name):
    """A peer's name is a Peer resource's name (a DNS-1123 subdomain) in either store."""
    if len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        raise KiloError(
            "%r is not a DNS-1123 subdomain (lower case letters, digits, '-' and '.')" % (name,),
            peer_subject(name),
            "name",
        )
    return name


def desired_peer(params):
    """The peer that kilo.mesh.peer's options describe, checked as a Peer resource (Kilo's webhook
    rules, ``peer_from_resource``) whichever store it goes to; errors name the option."""
    name = check_peer_name(params["name"])
    subject = peer_subject(name)
    spec = {
        "publicKey": params["public_key"],
        "allowedIPs": params["allowed_ips"],
        "persistentKeepalive": params["persistent_keepalive"],
        "presharedKey": params["preshared_key"],
    }
    if params["endpoint"] is not None:
        text, ip, port = parse_endpoint(params["endpoint"], subject, "endpoint")
        spec["endpoint"] = {
            "dnsOrIP": {"ip": str(ip)} if ip is not None else {"dns": text.rpartition(":")[0]},
            "port": port,
        }
    try:
        return peer_from_resource(
            {
                "apiVersion": PEER_API_VERSION,
                "kind": "Peer",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
    except KiloError as e:
        field = e.field or ""
        for prefix, option in PEER_OPTION_OF:
            if field == prefix or field.startswith(prefix + "."):
                field = option
                break
        raise KiloError(e.message, e.subject or subject, field)


def spec_of(peer):
    """The canonical Peer spec of an engine peer: optional fields only when set, the endpoint split as Kilo stores it."""
    spec = {"publicKey": peer["public_key"], "allowedIPs": list(peer["allowed_ips"])}
    if peer.get("endpoint"):
        text, ip, port = parse_endpoint(peer["endpoint"], peer_subject(peer["name"]), "endpoint")
        target = {"ip": str(ip)} if ip is not None else {"dns": text.rpartition(":")[0]}
        spec["endpoint"] = {"dnsOrIP": target, "port": port}
    if peer.get("persistent_keepalive"):
        spec["persistentKeepalive"] = peer["persistent_keepalive"]
    if peer.get("preshared_key"):
        spec["presharedKey"] = peer["preshared_key"]
    return spec


def _peer_endpoint(endpoint, subject):
    field = "spec.endpoint"
    if not isinstance(endpoint, dict):
        raise KiloError("expected a mapping with dnsOrIP and port", subject, field)
    target = endpoint.get("dnsOrIP") or {}
    if not isinstance(target, dict):
        raise KiloError("expected a mapping with dns or ip", subject, field + ".dnsOrIP")
    dns, ip = target.get("dns") or "", target.get("ip") or ""
    if not dns and not ip:
        raise KiloError(
            "either a DNS name or an IP address must be given", subject, field + ".dnsOrIP"
        )
    port = to_int(endpoint.get("port"), subject, field + ".port", *bounds("port"), default=None)
    if port is None:
        raise KiloError("missing", subject, field + ".port")
    if ip:
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            raise KiloError("%r is not an IP address" % (ip,), subject, field + ".dnsOrIP.ip")
    if dns:
        if not isinstance(dns, str) or dns != dns.lower() or ":" in dns:
            raise KiloError(
                "%r is not a lower-case RFC 1123 DNS name" % (dns,), subject, field + ".dnsOrIP.dns"
            )
        return parse_endpoint("%s:%d" % (dns, port), subject, field + ".dnsOrIP.dns").text
    return parse_endpoint(format_endpoint(address, port), subject, field).text


def nat_endpoints(discovered, plan):
    """What Kilo's agent writes as ``discovered-endpoints``: of the endpoints WireGuard learned
    ({public key: "ip:port"}), those of the peers that keep alive (behind NAT: the peers ``plan``
    marks roaming, ``plan.mark_roaming``); WireGuard reports every peer it had a handshake with."""
    roaming = set(p["public_key"] for p in (plan or {}).get("peers", []) if p.get("roaming"))
    return dict((k, v) for k, v in (discovered or {}).items() if k in roaming)


def write_back(node, plan, granularity, last_seen):
    """The annotations Kilo's agent writes on its Node, in Kilo's formats.

    ``node`` is the host's engine node (``inputs.node_from_host``: ``public_key``, ``endpoint``,
    ``internal_ip``, ``discovered_endpoints``), ``plan`` its plan (``address`` is the WireGuard IP
    of a leader; None when no plan was computed), ``granularity`` the mesh's, ``last_seen`` unix
    seconds. As Kilo, "none" is written as "" (internal IP, WireGuard IP of a non-leader). In a
    dual-stack mesh (``address`` or ``internal_ip`` of two), Kilo's annotations get the first and
    ``DUAL_ANNOTATIONS`` both; a writer sets those it does not get to None (``dual_removals``).
    A merge patch of ``{"metadata": {"annotations": write_back(...)}}`` applies it.
    """
    name = node.get("name") if isinstance(node, dict) else None
    subject = node_subject(name)
    if granularity not in GRANULARITIES:
        raise KiloError(
            "%r unknown; one of %s" % (granularity, ", ".join(GRANULARITIES)),
            subject,
            "granularity",
        )
    address = (plan or {}).get("address")
    seen = to_int(last_seen, subject, "last_seen", low=0, default=None)
    if seen is None:
        raise KiloError("missing", subject, "last_seen")
    out = dict(
        (field.written, field.write(node.get(field.name), subject, field.name))
        for field in FIELDS.values()
        if field.written
    )
    out.update(
        {
            WIREGUARD_IP: str(parse_interface(first_of(address), subject, "address"))
            if address
            else "",
            LAST_SEEN: str(seen),
            GRANULARITY: granularity,
        }
    )
    # a dual-stack node's two addresses, where Kilo's annotations hold the primary's alone
    for key, value, field in (
        (WIREGUARD_IPS, address, "address"),
        (INTERNAL_IPS, node.get("internal_ip"), "internal_ip"),
    ):
        if isinstance(value, (list, tuple)) and len(value) == 2:
            out[key] = ",".join(str(parse_interface(item, subject, field)) for item in value)
    return out


def dual_removals(wanted, current):
    """{annotation: None} of the ``DUAL_ANNOTATIONS`` the Node has (``current``) that ``wanted``
    (``write_back``'s, or ``remove_agent_annotations``') does not write: a node that left the mesh,
    became single-stack or stopped leading loses them."""
    return dict(
        (key, None)
        for key in DUAL_ANNOTATIONS
        if key not in wanted and current.get(key) is not None
    )


def node_annotations(node, plan, granularity, last_seen, current):
    """What a writer of a node's annotations (kilo.mesh.annotate, the agent) puts on its Node:
    ``write_back``'s, of the endpoints learned only those of peers behind NAT (``nat_endpoints``,
    as Kilo's agent), and the dual-stack ones the Node has (``current``) but no longer gets, removed."""
    node = dict(node, discovered_endpoints=nat_endpoints(node.get("discovered_endpoints"), plan))
    wanted = write_back(node, plan, granularity, last_seen)
    wanted.update(dual_removals(wanted, current))
    return wanted


def annotation_changes(wanted, current):
    """(changes, refreshed) of ``wanted`` ({annotation: value; None removes it}) against the Node's
    ``current`` annotations, each {annotation: value} of those that differ: ``changes`` change the
    node; ``refreshed`` are what it observes (``OBSERVED_ANNOTATIONS``), new values that are no
    change (removing one is)."""
    differ = dict((k, v) for k, v in wanted.items() if current.get(k) != v)
    refreshed = dict(
        (k, v) for k, v in differ.items() if k in OBSERVED_ANNOTATIONS and v is not None
    )
    return dict((k, v) for k, v in differ.items() if k not in refreshed), refreshed


def remove_agent_annotations():
    """What Kilo's agent removes from its Node when it leaves: every agent annotation -> None."""
    return dict.fromkeys(AGENT_ANNOTATIONS)


def removed_when_leaving(current):
    """{annotation: None} of everything a node that leaves the mesh loses (kilo.mesh.annotate
    with state absent): Kilo's agent annotations, as Kilo's agent removes them when it leaves,
    and those of ours the Node has (``current``: its annotations), the dual-stack addresses and
    our agent's own. The operator's (location, leader, forced values, our pod ranges and their
    source) stay: they are the node's configuration."""
    out = remove_agent_annotations()
    out.update(
        (key, None)
        for key in DUAL_ANNOTATIONS + OWN_AGENT_ANNOTATIONS
        if current.get(key) is not None
    )
    return out
