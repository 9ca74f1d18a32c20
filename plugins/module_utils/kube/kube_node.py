# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Kubernetes objects <-> kilo.mesh data: Node annotations, Peer resources, agent write-back.

Pure functions over the JSON of the API (plain dicts: ``metadata``, ``spec``, ``status``), no
client library. The annotation names and value formats are Kilo's (its Kubernetes backend):

* what an operator sets on a Node (location, leader, force-endpoint, force-internal-ip,
  persistent-keepalive, allowed-location-ips) becomes our inventory host variables
  (``inputs.NODE_VARS``), with Kilo's precedence;
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
    KiloError, format_endpoint, parse_key, split_endpoint, to_int)
from ansible_collections.kilo.mesh.plugins.module_utils.options import OPTIONS
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology_parse import (
    node_subject, parse_endpoint, parse_interface, parse_network, peer_subject)

PREFIX = "kilo.squat.ai/"
# Set by the operator.
LOCATION = PREFIX + "location"
LEADER = PREFIX + "leader"
FORCE_ENDPOINT = PREFIX + "force-endpoint"
FORCE_INTERNAL_IP = PREFIX + "force-internal-ip"
PERSISTENT_KEEPALIVE = PREFIX + "persistent-keepalive"
ALLOWED_LOCATION_IPS = PREFIX + "allowed-location-ips"
# Written by the agent (here: by write_back).
KEY = PREFIX + "key"
ENDPOINT = PREFIX + "endpoint"
INTERNAL_IP = PREFIX + "internal-ip"
WIREGUARD_IP = PREFIX + "wireguard-ip"
LAST_SEEN = PREFIX + "last-seen"
GRANULARITY = PREFIX + "granularity"
DISCOVERED_ENDPOINTS = PREFIX + "discovered-endpoints"
CNI_COMPATIBILITY_IP = PREFIX + "cni-compatibility-ip"  # written by the agent, read as a node field
# What Kilo's agent removes when it leaves (its CleanUp), in that order.
AGENT_ANNOTATIONS = (ENDPOINT, INTERNAL_IP, KEY, LAST_SEEN, WIREGUARD_IP, DISCOVERED_ENDPOINTS, GRANULARITY)

REGION_LABEL = "topology.kubernetes.io/region"
PEER_GROUP = "kilo.squat.ai"
PEER_VERSION = "v1alpha1"
PEER_PLURAL = "peers"
PEER_API_VERSION = "%s/%s" % (PEER_GROUP, PEER_VERSION)
# Where kilo.mesh.peer keeps a peer: a Peer resource, or the registry on the controller.
PEER_STORES = ("kubernetes", "registry")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Fields of a Peer resource -> the kilo.mesh.peer options they come from, so an error names what the user wrote.
PEER_OPTION_OF = (("spec.publicKey", "public_key"), ("spec.allowedIPs", "allowed_ips"), ("spec.endpoint", "endpoint"),
                  ("spec.persistentKeepalive", "persistent_keepalive"), ("spec.presharedKey", "preshared_key"),
                  ("metadata.name", "name"))

GRANULARITIES = tuple(OPTIONS["granularity"]["choices"])
# Fields of the host variable kilo_kubernetes_node (registry names where there is one).
NODE_FIELDS = ("public_key", "internal_ip", "endpoint", "discovered_endpoints", "last_seen", "granularity",
               "wireguard_ip", "ready")


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


def _cidr(value, subject, field, host=False):
    """Kilo's ``net.ParseCIDR``: an address *with* a prefix length; the host part is kept when ``host``."""
    if not isinstance(value, str) or "/" not in value:
        raise KiloError("%r is not an IP address in CIDR form" % (value,), subject, field)
    return str(parse_interface(value, subject, field) if host else parse_network(value, subject, field))


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
        value = _mapping(_metadata(node, "Node")[1], "annotations", node_subject(node_name(node))).get(source)
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

    facts = dict.fromkeys(NODE_FIELDS)
    if text(KEY):
        facts["public_key"] = parse_key(text(KEY), subject, KEY)
    if text(ENDPOINT):
        facts["endpoint"] = parse_endpoint(text(ENDPOINT), subject, ENDPOINT)[0]
    if text(INTERNAL_IP):
        facts["internal_ip"] = _cidr(text(INTERNAL_IP), subject, INTERNAL_IP, host=True)
    if text(WIREGUARD_IP):
        facts["wireguard_ip"] = _cidr(text(WIREGUARD_IP), subject, WIREGUARD_IP, host=True)
    if text(LAST_SEEN):
        facts["last_seen"] = to_int(text(LAST_SEEN), subject, LAST_SEEN, low=0)
    if text(GRANULARITY):
        if text(GRANULARITY) not in GRANULARITIES:
            raise KiloError("%r unknown; one of %s" % (text(GRANULARITY), ", ".join(GRANULARITIES)), subject, GRANULARITY)
        facts["granularity"] = text(GRANULARITY)
    facts["discovered_endpoints"] = _read_discovered(text(DISCOVERED_ENDPOINTS), subject)
    facts["ready"] = node_ready(node)
    return facts


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
        raise KiloError("expected a JSON object of public key -> address", subject, DISCOVERED_ENDPOINTS)
    out = {}
    for key in sorted(data):
        addr = data[key]
        if addr is None:
            continue  # a peer WireGuard had no endpoint for
        field = "%s[%s]" % (DISCOVERED_ENDPOINTS, key)
        # Go decodes field names case-insensitively.
        fields = dict((str(k).lower(), v) for k, v in addr.items()) if isinstance(addr, dict) else {}
        try:
            ip = ipaddress.ip_address(fields.get("ip"))
        except ValueError:
            raise KiloError("%r has no valid IP" % (addr,), subject, field)
        port = to_int(fields.get("port"), subject, field, 1, 65535, default=None)
        if port is None:
            raise KiloError("%r has no port" % (addr,), subject, field)
        out[parse_key(key, subject, field)] = parse_endpoint(format_endpoint(ip, port), subject, field, allow_dns=False)[0]
    return out


def host_vars(node, topology_label=REGION_LABEL):
    """Inventory host variables of a Node object (see ``inputs.NODE_VARS``) and ``kilo_kubernetes_node``.

    As Kilo: the location annotation wins whenever it is present (even empty), else the
    topology label, else ""; the leader annotation counts by its presence alone, whatever its
    value; force-internal-ip "" or "-" means the node has no internal IP (kept as given).
    """
    name, meta = _metadata(node, "Node")
    subject = node_subject(name)
    annotations = _mapping(meta, "annotations", subject)
    labels = _mapping(meta, "labels", subject)
    hvars = {}
    if LOCATION in annotations:
        hvars["kilo_location"] = annotations[LOCATION] or ""
    else:
        hvars["kilo_location"] = labels.get(topology_label) or ""
    if LEADER in annotations:
        hvars["kilo_leader"] = True
    forced = annotations.get(FORCE_ENDPOINT)
    if forced not in (None, ""):
        parse_endpoint(forced, subject, FORCE_ENDPOINT)
        hvars["kilo_force_endpoint"] = forced.strip()
    if FORCE_INTERNAL_IP in annotations:
        forced = annotations[FORCE_INTERNAL_IP]
        if forced is None or forced.strip() in ("", "-"):
            hvars["kilo_force_internal_ip"] = forced or ""
        else:
            hvars["kilo_force_internal_ip"] = _cidr(forced.strip(), subject, FORCE_INTERNAL_IP, host=True)
    if PERSISTENT_KEEPALIVE in annotations:
        hvars["kilo_persistent_keepalive"] = to_int(annotations[PERSISTENT_KEEPALIVE], subject, PERSISTENT_KEEPALIVE,
                                                    0, 65535)
    if ALLOWED_LOCATION_IPS in annotations:
        hvars["kilo_allowed_location_ips"] = [
            _cidr(item.strip(), subject, ALLOWED_LOCATION_IPS)
            for item in (annotations[ALLOWED_LOCATION_IPS] or "").split(",") if item.strip()]
    compat = annotations.get(CNI_COMPATIBILITY_IP)
    if isinstance(compat, str) and compat.strip():
        try:  # as Kilo: a value that is not an address in CIDR form is dropped, not an error
            hvars["kilo_cni_compatibility_ip"] = _cidr(compat.strip(), subject, CNI_COMPATIBILITY_IP, host=True)
        except KiloError:
            pass
    pod_cidr = (node.get("spec") or {}).get("podCIDR")
    if pod_cidr:
        hvars["kilo_pod_cidr"] = _cidr(pod_cidr, subject, "spec.podCIDR")
    hvars["kilo_kubernetes_node"] = _agent_facts(name, annotations, node)
    return hvars


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
    allowed_ips = [_cidr(ip, subject, "spec.allowedIPs", host=True) for ip in allowed]
    if not allowed_ips:
        raise KiloError("a peer needs at least one allowed IP (Kilo leaves such a peer out)", subject,
                        "spec.allowedIPs")
    endpoint = None
    if spec.get("endpoint") is not None:
        endpoint = _peer_endpoint(spec["endpoint"], subject)
    return {
        "name": name,
        "public_key": parse_key(spec.get("publicKey"), subject, "spec.publicKey"),
        "allowed_ips": allowed_ips,
        "endpoint": endpoint,
        "persistent_keepalive": to_int(spec.get("persistentKeepalive"), subject, "spec.persistentKeepalive", 0, 65535),
        "preshared_key": parse_key(spec.get("presharedKey"), subject, "spec.presharedKey", required=False),
    }


def peer_argument_spec():
    """kilo.mesh.peer's own options, for the module (store kubernetes) and its action (store registry)."""
    return dict(
        name=dict(type="str", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
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
        raise KiloError("%r is not a DNS-1123 subdomain (lower case letters, digits, '-' and '.')" % (name,),
                        peer_subject(name), "name")
    return name


def desired_peer(params):
    """The peer that kilo.mesh.peer's options describe, checked as a Peer resource (Kilo's webhook
    rules, ``peer_from_resource``) whichever store it goes to; errors name the option."""
    name = check_peer_name(params["name"])
    subject = peer_subject(name)
    spec = {"publicKey": params["public_key"], "allowedIPs": params["allowed_ips"],
            "persistentKeepalive": params["persistent_keepalive"], "presharedKey": params["preshared_key"]}
    if params["endpoint"] is not None:
        text, ip, port = parse_endpoint(params["endpoint"], subject, "endpoint")
        spec["endpoint"] = {"dnsOrIP": {"ip": str(ip)} if ip is not None else {"dns": text.rpartition(":")[0]},
                            "port": port}
    try:
        return peer_from_resource({"apiVersion": PEER_API_VERSION, "kind": "Peer", "metadata": {"name": name},
                                   "spec": spec})
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
        raise KiloError("either a DNS name or an IP address must be given", subject, field + ".dnsOrIP")
    port = to_int(endpoint.get("port"), subject, field + ".port", 1, 65535, default=None)
    if port is None:
        raise KiloError("missing", subject, field + ".port")
    if ip:
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            raise KiloError("%r is not an IP address" % (ip,), subject, field + ".dnsOrIP.ip")
    if dns:
        if not isinstance(dns, str) or dns != dns.lower() or ":" in dns:
            raise KiloError("%r is not a lower-case RFC 1123 DNS name" % (dns,), subject, field + ".dnsOrIP.dns")
        return parse_endpoint("%s:%d" % (dns, port), subject, field + ".dnsOrIP.dns")[0]
    return parse_endpoint(format_endpoint(address, port), subject, field)[0]


def _discovered_json(discovered, subject):
    """{public key: "ip:port"} -> Kilo's JSON (Go's encoding of map[string]*net.UDPAddr)."""
    data = {}
    for key, value in (discovered or {}).items():
        field = "discovered_endpoints[%s]" % key
        _text, ip, port = parse_endpoint(value, subject, field, allow_dns=False)
        data[parse_key(key, subject, field)] = {"IP": str(ip), "Port": port, "Zone": ""}
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def write_back(node, plan, granularity, last_seen):
    """The annotations Kilo's agent writes on its Node, in Kilo's formats.

    ``node`` is the host's engine node (``inputs.node_from_host``: ``public_key``, ``endpoint``,
    ``internal_ip``, ``discovered_endpoints``), ``plan`` its plan (``address`` is the WireGuard IP
    of a leader; None when no plan was computed), ``granularity`` the mesh's, ``last_seen`` unix
    seconds. As Kilo, "none" is written as "" (internal IP, WireGuard IP of a non-leader).
    A merge patch of ``{"metadata": {"annotations": write_back(...)}}`` applies it.
    """
    name = node.get("name") if isinstance(node, dict) else None
    subject = node_subject(name)
    if granularity not in GRANULARITIES:
        raise KiloError("%r unknown; one of %s" % (granularity, ", ".join(GRANULARITIES)), subject, "granularity")
    endpoint = node.get("endpoint")
    internal_ip = node.get("internal_ip")
    compat = node.get("cni_compatibility_ip")
    address = (plan or {}).get("address")
    seen = to_int(last_seen, subject, "last_seen", low=0, default=None)
    if seen is None:
        raise KiloError("missing", subject, "last_seen")
    return {
        KEY: parse_key(node.get("public_key"), subject, "public_key"),
        ENDPOINT: parse_endpoint(endpoint, subject, "endpoint")[0] if endpoint else "",
        INTERNAL_IP: str(parse_interface(internal_ip, subject, "internal_ip")) if internal_ip else "",
        WIREGUARD_IP: str(parse_interface(address, subject, "address")) if address else "",
        LAST_SEEN: str(seen),
        GRANULARITY: granularity,
        DISCOVERED_ENDPOINTS: _discovered_json(node.get("discovered_endpoints"), subject),
        CNI_COMPATIBILITY_IP: str(parse_interface(compat, subject, "cni_compatibility_ip")) if compat else "",
    }


def remove_agent_annotations():
    """What Kilo's agent removes from its Node when it leaves: every agent annotation -> None."""
    return dict.fromkeys(AGENT_ANNOTATIONS)
