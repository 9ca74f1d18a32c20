# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Every field of a node, defined once, beside the option table (``options.py``).

A row of ``FIELDS`` says what one field of a node is everywhere it appears:

* ``name``: the key of the engine's node (``nodes`` option items, ``inputs.node_from_host``);
* ``var``: the inventory host variable that sets it (None: reported by the host or the run);
* ``source``: where Kilo keeps it on a Kubernetes Node (an annotation an operator sets, or a
  field of the Node) and ``written``: the annotation Kilo's agent writes it back to;
* ``check``: inventory value -> the engine's input value, refusing a bad one (the inventory
  reading calls it for every host, the reading of ``kilo.mesh.validate`` too). Only a field the
  reading itself reads needs one (its location, whether a value is forced or reported, behind
  NAT); any other field (the keepalive, the allowed location IPs, the CNI compatibility IP) is
  passed on as given and ``parse`` is its one check on the controller, validate and
  ``MeshReading.as_inventory_error`` naming the variable (``validate.as_host_error``);
* ``parse``: the engine's input value -> its parsed value (``engine.parse.parse_node``);
* ``kube``: the annotation's text -> the inventory value (``kube_node.host_vars``);
* ``write``: the engine's input value -> the agent's annotation text (``kube_node.write_back``);
* ``doc``: one line for the documentation (``scripts/specs.py`` writes it out).

Also here: the value parsers these use (CIDRs, addresses, endpoints), which the engine's
options and peers share. Pure Python, no Ansible: the inventory plugin and the controller
import it, and it must stay loadable on a host's Python 3.9.
"""

from __future__ import absolute_import, division, print_function
from __future__ import annotations

__metaclass__ = type

import ipaddress
import json
import re
import socket
from collections import OrderedDict

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    format_endpoint,
    host_subject,
    parse_key,
    to_bool,
    to_int,
)

from ansible_collections.kilo.mesh.plugins.module_utils.options import (  # noqa: F401 (theirs, found here too)
    NODE_POD_SOURCE_VAR,
    POD_SOURCES,
    bounds,
)

# Type hints: the annotations are never evaluated (``annotations`` above), and typing is not
# imported at run time (a host's call pays for every import); type checkers read this block.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

    Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
    Interface = Union[ipaddress.IPv4Interface, ipaddress.IPv6Interface]
    IP = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
    # a row's check, parse, kube and write: (value, subject, field) -> value
    Parser = Callable[[Any, Optional[str], Optional[str]], Any]


ANNOTATION_PREFIX = "kilo.squat.ai/"
# Annotations of our own on a Node (beyond Kilo): a node's pod ranges forced, and the source of its pod ranges.
OWN_PREFIX = "kilo.mesh/"
POD_CIDRS_ANNOTATION = OWN_PREFIX + "pod-cidrs"
POD_SOURCE_ANNOTATION = OWN_PREFIX + "pod-cidr-source"
# a node no other location reaches at its endpoint (NAT): reached through a relay (engine/relays.py)
BEHIND_NAT_ANNOTATION = OWN_PREFIX + "behind-nat"
POD_SOURCE_VAR = "kilo_pod_cidr_source"  # the mesh's (option pod_cidr_source; every host agrees)

# RFC 1123 subdomain, as Kilo accepts for DNS endpoints (case-insensitive here).
_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", re.IGNORECASE)

# A ``kube`` answer that leaves the variable unset (Kilo ignores such an annotation).
UNSET = object()


class TopologyError(KiloError):
    """Bad input of the mesh (a node, a peer, an option); ``KiloError``'s arguments."""


# --- value parsers -----------------------------------------------------------------------------


def _v4(text):
    """(address as an int, prefix length or None) of IPv4 text in the spelling ``str()`` gives
    (``a.b.c.d`` or ``a.b.c.d/n``), else None. A fast path only: text it does not take goes through
    ``ipaddress``, which gives the same values and the errors (tests/unit/plugins/module_utils/test_nodes.py holds the
    two to each other)."""
    address, slash, prefix = text.partition("/")
    try:
        packed = socket.inet_pton(
            socket.AF_INET, address
        )  # the C parser: dotted decimal, no leading zeros
    except (OSError, ValueError, UnicodeError):
        return None
    if not slash:
        return int.from_bytes(packed, "big"), None
    if (
        not (prefix.isdigit() and prefix.isascii())
        or (prefix[0] == "0" and prefix != "0")
        or int(prefix) > 32
    ):
        return None
    return int.from_bytes(packed, "big"), int(prefix)


def _typed_text(value, subject, field, kind, what):
    """(``kind`` of ``value``, its text): ``ipaddress``'s value and ``str()`` of it; canonical
    IPv4 text (the input itself) parsed by ``_v4``. ``kind`` is "network" (host bits cleared) or
    "interface"; ``what`` names it in the error."""
    if not isinstance(value, str) or not value.strip():
        raise TopologyError("%r is not %s" % (value, what), subject, field)
    text = value.strip()
    fast = _v4(text)
    if fast is not None:
        address, prefix = fast
        make = ipaddress.IPv4Network if kind == "network" else ipaddress.IPv4Interface
        if prefix is None:
            return make((address, 32)), text + "/32"
        if kind != "network" or not address & (
            (1 << (32 - prefix)) - 1
        ):  # no host bits: the text is the network's
            return make((address, prefix)), text
    try:
        parsed = (
            ipaddress.ip_network(text, strict=False)
            if kind == "network"
            else ipaddress.ip_interface(text)
        )
    except ValueError:
        raise TopologyError("%r is not %s" % (value, what), subject, field)
    return parsed, str(parsed)


def network_text(value: Any, subject: Optional[str], field: Optional[str]) -> tuple[Network, str]:
    """``parse_network`` and the network's text (its ``str()``; the input itself when spelled so)."""
    return _typed_text(value, subject, field, "network", "a CIDR")


def parse_network(value: Any, subject: Optional[str], field: Optional[str]) -> Network:
    """A CIDR (or bare address = single-address CIDR) -> network with host bits cleared."""
    return network_text(value, subject, field)[0]


def interface_text(
    value: Any, subject: Optional[str], field: Optional[str]
) -> tuple[Interface, str]:
    """``parse_interface`` and the interface's text (its ``str()``; the input itself when spelled so)."""
    return _typed_text(value, subject, field, "interface", "an address in CIDR form")


def parse_interface(value: Any, subject: Optional[str], field: Optional[str]) -> Interface:
    """A host address with its prefix (e.g. 10.1.0.1/16); a bare address gets /32 or /128."""
    return interface_text(value, subject, field)[0]


def parse_network_list(values: Any, subject: Optional[str], field: Optional[str]) -> list[Network]:
    if values is None:
        return []
    if isinstance(values, str):
        values = [v for v in values.split(",") if v.strip()]
    if not isinstance(values, (list, tuple)):
        raise TopologyError("expected a list of CIDRs, got %r" % (values,), subject, field)
    return [parse_network(v, subject, field) for v in values]


def split_endpoint(
    value: Any, subject: Optional[str] = None, field: Optional[str] = "endpoint"
) -> tuple[str, int]:
    """``host:port`` or ``[IPv6]:port`` -> (host text, port); the host is not resolved."""
    if not isinstance(value, str) or not value.strip():
        raise KiloError("%r is not host:port" % (value,), subject, field)
    text = value.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise KiloError("%r is not [IPv6]:port" % (value,), subject, field)
        port = rest[1:]
    else:
        host, sep, port = text.rpartition(":")
        if not sep or not host or ":" in host:
            raise KiloError(
                "%r is not host:port (write IPv6 as [addr]:port)" % (value,), subject, field
            )
    if not port.isdigit():
        raise KiloError("%r: port %r is not a number" % (value, port), subject, field)
    low, high = bounds("port")
    if not low <= int(port) <= high:
        raise KiloError("port %d out of range %d-%d" % (int(port), low, high), subject, field)
    return host, int(port)


class Endpoint(tuple):
    """An endpoint: its normalised ``text`` (host:port, [IPv6]:port), its ``ip`` (None for a DNS
    name) and its ``port``."""

    __slots__ = ()

    def __new__(cls, text, ip, port):
        return tuple.__new__(cls, (text, ip, port))

    def __getnewargs__(self):  # copy and pickle call __new__ with these (tuple's: one tuple)
        return tuple(self)

    text = property(lambda self: self[0])
    ip = property(lambda self: self[1])
    port = property(lambda self: self[2])


NO_ENDPOINT = Endpoint(None, None, None)  # none (the engine's way to a segment without one)
# Endpoint(text, ip, port) without the call of its __new__: parse_endpoint makes one a node
_endpoint = tuple.__new__


def parse_endpoint(
    value: Any, subject: Optional[str], field: Optional[str], allow_dns: bool = True
) -> Endpoint:
    """ "host:port" -> Endpoint (normalised text, ip object or None for DNS names, port)."""
    host, port = split_endpoint(value, subject, field)
    if value.strip().startswith("["):
        try:
            ip = ipaddress.IPv6Address(host)
        except ValueError:
            raise TopologyError("%r: %r is not an IPv6 address" % (value, host), subject, field)
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # Kilo keeps the 4-byte form (cutIP): private/public as IPv4
        return _endpoint(Endpoint, (format_endpoint(ip, port), ip, port))
    fast = _v4(host) if "/" not in host else None
    if fast is not None:  # the host is the address's own text
        return _endpoint(Endpoint, ("%s:%d" % (host, port), ipaddress.IPv4Address(fast[0]), port))
    try:
        ip = ipaddress.IPv4Address(host)
    except ValueError:
        if not allow_dns:
            raise TopologyError("%r: %r is not an IP address" % (value, host), subject, field)
        labels = host.rstrip(".").split(".")
        if len(host) > 253 or not all(_DNS_LABEL.match(label) for label in labels):
            raise TopologyError(
                "%r: %r is neither an IP address nor a DNS name" % (value, host), subject, field
            )
        if all(label.isdigit() for label in labels):
            raise TopologyError(
                "%r: %r is not a valid IPv4 address" % (value, host), subject, field
            )
        return _endpoint(Endpoint, ("%s:%d" % (host.lower(), port), None, port))
    return _endpoint(Endpoint, (format_endpoint(ip, port), ip, port))


def parse_cidr(value: Any, subject: Optional[str], field: Optional[str], host: bool = False) -> str:
    """Kilo's ``net.ParseCIDR`` (what it reads annotations with): an address *with* a prefix
    length, as text; the host part is kept when ``host``."""
    if not isinstance(value, str) or "/" not in value:
        raise KiloError("%r is not an IP address in CIDR form" % (value,), subject, field)
    return str(
        parse_interface(value, subject, field) if host else parse_network(value, subject, field)
    )


def _absent(value):
    return value is None or value == ""


def _discovered(value, subject, field):
    """{public key: "ip:port"} -> {canonical key: Endpoint}, keys in order."""
    value = value or {}
    if not isinstance(value, dict):
        raise TopologyError("expected a mapping public key -> ip:port", subject, field)
    out = {}
    for key in sorted(value):
        where = "%s[%s]" % (field, key)
        endpoint = parse_endpoint(value[key], subject, where, allow_dns=False)
        out[parse_key(key, subject, where)] = endpoint
    return out


def discovered_json(
    discovered: Any, subject: Optional[str], field: Optional[str] = "discovered_endpoints"
) -> str:
    """{public key: "ip:port"} -> Kilo's JSON (Go's encoding of map[string]*net.UDPAddr)."""
    data = {}
    for key, (_text, ip, port) in _discovered(discovered, subject, field).items():
        data[key] = {"IP": str(ip), "Port": port, "Zone": ""}
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


# --- per field: inventory check, engine parse, annotation read, agent write-back ---------------------


def _location(value, subject=None, field=None):
    return "" if value is None else str(value)


def _leader_var(value, subject, field):
    # Kilo: the presence of the leader annotation alone counts, so "" and null mean leader.
    return to_bool(value, subject, field, default=True)


def parse_keepalive(
    value: Any, subject: Optional[str] = None, field: Optional[str] = "persistent_keepalive"
) -> int:
    """WireGuard's persistent keepalive, seconds (0: none): the one parser of a keepalive (a node's
    variable and annotation, a peer's, a Peer resource's), in the option table's bounds."""
    return to_int(value, subject, field, *bounds("connect_persistent_keepalive"))


def _endpoint_var(value, subject, field):
    if not value:
        return None  # not forced: the reported endpoint, else an address of the host
    parse_endpoint(str(value), subject, field)
    return str(value)


def _internal_ip_var(value, subject, field):
    # Kilo: "" or "-" means "this node has no internal IP".
    if isinstance(value, (list, tuple)):
        # beyond Kilo: one of each IP family, for a dual-stack mesh (parse_internal_ips refuses more)
        if not value:
            return None
        parse_internal_ips([str(v) for v in value], subject, field)
        return [str(v) for v in value]
    if value is None or str(value).strip() in ("", "-"):
        return None
    try:
        ipaddress.ip_interface(str(value))
    except ValueError:
        raise KiloError("%r is not an IP address in CIDR form" % (value,), subject, field)
    return str(value)


def _optional(parse):
    """``parse`` for a field that may be absent (None or "")."""

    def optional(value, subject, field):
        return None if _absent(value) else parse(value, subject, field)

    return optional


class Internal(object):
    """A node's internal IP of one family: ``ip``, ``text`` (the address with its prefix, as
    ``str()`` of the interface gives it), ``ip_text``, ``host`` (the address as a host CIDR) and
    ``interface`` (the ``ipaddress`` interface, made when first asked). The engine routes each
    family of a dual-stack mesh through the node's internal IP of that family (``NO_INTERNAL``,
    all None, when it has none), a single-stack mesh through its first."""

    __slots__ = ("ip", "text", "ip_text", "host", "_interface")

    def __init__(self, ip=None, text=None, interface=None):
        self.ip, self.text, self._interface = ip, text, interface
        self.ip_text = self.host = None
        if ip is not None:
            self.ip_text = text.partition("/")[0]
            self.host = "%s/%d" % (self.ip_text, ip.max_prefixlen)

    @property
    def interface(self):
        if self._interface is None and self.text is not None:
            self._interface = ipaddress.ip_interface(self.text)
        return self._interface

    @property
    def version(self):
        return self.ip.version

    def __str__(self):
        return self.text


NO_INTERNAL = Internal()


class Cidr(tuple):
    """A network and its text (``str()`` of it): a pod range of a node, an allowed IP of a peer."""

    __slots__ = ()

    def __new__(cls, net, text):
        return tuple.__new__(cls, (net, text))

    def __getnewargs__(self):  # copy and pickle call __new__ with these (tuple's: one tuple)
        return tuple(self)

    net = property(lambda self: self[0])
    text = property(lambda self: self[1])


def _internal(value, subject, field):
    """One internal IP -> Internal (canonical IPv4 text without an ``ipaddress`` interface: ``_v4``)."""
    if isinstance(value, str):
        text = value.strip()
        fast = _v4(text)
        if fast is not None:
            return Internal(
                ipaddress.IPv4Address(fast[0]), text if fast[1] is not None else text + "/32"
            )
    interface, text = interface_text(value, subject, field)
    return Internal(interface.ip, text, interface)


def parse_internal_ips(value: Any, subject: Optional[str], field: Optional[str]) -> list[Internal]:
    """A node's internal IPs -> [Internal]: none ("", "-"), one (Kilo's), or a list of two of
    different families (a dual-stack mesh's node; whether the mesh has both is the engine's check)."""
    if value in (None, "", "-"):
        return []
    if not isinstance(value, (list, tuple)):
        return [_internal(value, subject, field)]
    ips = [_internal(item, subject, field) for item in value]
    if len(ips) > 2:
        raise TopologyError(
            "%d internal IPs; at most two, one of each IP family" % len(ips), subject, field
        )
    check_two_families(ips, subject, field, "two internal IPs are one of each IP family")
    return ips


def check_two_families(
    values: Sequence[Any], subject: Optional[str], field: Optional[str], why: str
) -> None:
    """Two values (addresses, networks) of a dual-stack mesh are one of each IP family: refuse two
    of one, saying ``why`` (a node's internal IPs, the mesh's subnets, a connecting machine's
    addresses)."""
    if len(values) == 2 and values[0].version == values[1].version:
        first, second = values
        raise TopologyError(
            "%s and %s are both IPv%d: %s" % (first, second, first.version, why), subject, field
        )


def parse_subnets(
    value: Any, subject: Optional[str], field: Optional[str] = "subnet"
) -> list[Network]:
    """The mesh's subnets (option ``subnet``) -> [network]: one CIDR (Kilo's), or a list of two of
    different IP families (a dual-stack mesh; the first is the primary, Kilo's one WireGuard IP);
    a list of one is that one CIDR."""
    if not isinstance(value, (list, tuple)):
        return [parse_network(value, subject, field)]
    nets = [parse_network(item, subject, field) for item in value]
    if not 1 <= len(nets) <= 2:
        raise TopologyError(
            "%d subnets; one, or two of different IP families (dual-stack)" % len(nets),
            subject,
            field,
        )
    check_two_families(nets, subject, field, "a dual-stack mesh has one subnet of each IP family")
    return nets


def mesh_families(subnet: Any) -> tuple[int, ...]:
    """The IP versions of a dual-stack mesh's two subnets (option ``subnet``), primary first; ()
    for a single-stack mesh (one CIDR, or a list of one). Raises TopologyError on a bad value."""
    nets = parse_subnets(subnet, "options", "subnet") if isinstance(subnet, (list, tuple)) else []
    return tuple(net.version for net in nets) if len(nets) == 2 else ()


def read_families(subnet: Any) -> tuple[int, ...]:
    """``mesh_families`` for a reader that only chooses how to read a node or a machine (both
    families or one): a bad subnet counts as single-stack, (), since the engine's own reading of
    the options names it (kilo.mesh.validate, before any host)."""
    try:
        return mesh_families(subnet)
    except TopologyError:
        return ()


def first_of(value: Any) -> Any:
    """The first of a value that is one item or a list of them (a dual-stack node's internal IPs,
    a plan's two addresses): Kilo's one, the primary family's; None for none."""
    if isinstance(value, (list, tuple)):
        return value[0] if value else None
    return value


def _key_var(value, subject, field):
    return parse_key(value, subject, field, required=False) and value


def _leader_kube(value, subject, field):
    return True


def _endpoint_kube(value, subject, field):
    if _absent(value):
        return UNSET
    parse_endpoint(value, subject, field)
    return value.strip()


def _internal_ip_kube(value, subject, field):
    if value is None or value.strip() in ("", "-"):
        return value or ""  # kept as given: it still means "no internal IP"
    if "," in value:
        # beyond Kilo (a dual-stack mesh): two, one of each IP family, separated by a comma
        items = [
            parse_cidr(item.strip(), subject, field, host=True)
            for item in value.split(",")
            if item.strip()
        ]
        parse_internal_ips(items, subject, field)
        return one_or_list(items)
    return parse_cidr(value.strip(), subject, field, host=True)


def _internal_ip_text(value, subject, field):
    """Kilo's ``internal-ip`` annotation: one address, so the first (the primary family's) of a
    dual-stack node's two; the second is ``kilo.mesh/internal-ips``'s (kube_node.write_back)."""
    return _interface_text(first_of(value), subject, field)


def _list_kube(value, subject, field):
    return [
        parse_cidr(item.strip(), subject, field)
        for item in (value or "").split(",")
        if item.strip()
    ]


def _cni_ip_kube(value, subject, field):
    if not isinstance(value, str) or not value.strip():
        return UNSET
    try:  # as Kilo: a value that is not an address in CIDR form is dropped, not an error
        return parse_cidr(value.strip(), subject, field, host=True)
    except KiloError:
        return UNSET


def _pod_cidrs_var(value, subject, field):
    """``kilo_pod_cidr``: one CIDR, or several (a list, or text separated by commas); kept as
    given (one CIDR stays text, so a node of one pod CIDR reads exactly as before)."""
    if _absent(value) or value == []:
        return None
    if isinstance(value, str):
        parse_network_list(value, subject, field)
        return value
    if not isinstance(value, (list, tuple)):
        raise KiloError("expected a CIDR or a list of CIDRs, got %r" % (value,), subject, field)
    items = [str(v) for v in value]
    parse_network_list(items, subject, field)
    return items


def parse_pod_cidrs(value: Any, subject: Optional[str], field: Optional[str]) -> list[Cidr]:
    """A node's pod ranges (one CIDR, a list, or text separated by commas) -> [Cidr], in the
    order given; empty when it has none."""
    if _absent(value):
        return []
    if not isinstance(value, (str, list, tuple)):
        raise TopologyError("%r is not a CIDR" % (value,), subject, field)
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    return [Cidr(*network_text(v, subject, field)) for v in value]


def one_or_list(values: Iterable[Any]) -> Any:
    """The output form of what Kilo has one of and a node or mesh may have several of (pod
    ranges; internal IPs, WireGuard addresses and subnets of a dual-stack mesh): None for none,
    the value itself for one (so single-stack output is Kilo's), the list for several."""
    values = list(values or ())
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def pod_cidr_value(cidrs: Sequence[Cidr]) -> Union[str, list[str], None]:
    """The engine's and the variable's form of a node's pod ranges (``one_or_list``): the CIDR
    itself for one, as Kilo's single ``spec.podCIDR``."""
    return one_or_list(cidrs)


def _pod_cidr_kube(value, subject, field):
    """The annotation's text (CIDRs separated by commas) -> ``kilo_pod_cidr``."""
    items = (
        [item.strip() for item in (value or "").split(",") if item.strip()]
        if isinstance(value, str)
        else value
    )
    if not items:
        return UNSET
    return pod_cidr_value([parse_cidr(item, subject, field) for item in items])


def _interface_text(value, subject, field):
    return str(parse_interface(value, subject, field)) if value else ""


PATH_STATE_KEYS = ("down", "direct", "held")


def _seconds(value, subject, field):
    """A time or a span in seconds (an int or a float, not negative)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise TopologyError("%r is not a time in seconds" % (value,), subject, field)
    return value


def _path_state(value, subject, field):
    """A node's published path state -> {"down": {relay segment: until}, "direct": {segment: since},
    "held": {segment: until}}; None (nothing published: a Kilo end, a push run) stays None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TopologyError(
            "expected a mapping of %s, got %r" % (", ".join(PATH_STATE_KEYS), value), subject, field
        )
    out = {}
    for key in sorted(value):
        if key not in PATH_STATE_KEYS:
            raise TopologyError(
                "unknown; one of %s" % ", ".join(PATH_STATE_KEYS), subject, "%s.%s" % (field, key)
            )
    for key in PATH_STATE_KEYS:
        times = value.get(key)
        times = {} if times is None else times
        if not isinstance(times, dict):
            raise TopologyError(
                "expected a mapping segment -> seconds", subject, "%s.%s" % (field, key)
            )
        out[key] = dict(
            (str(name), _seconds(when, subject, "%s.%s[%s]" % (field, key, name)))
            for name, when in times.items()
        )
    return out


class NodeField(object):
    """One row of ``FIELDS``; see the module's doc for the columns."""

    __slots__ = (
        "name",
        "var",
        "source",
        "written",
        "check",
        "parse",
        "kube",
        "write",
        "doc",
        "form",
    )

    def __init__(
        self,
        name: str,
        var: Optional[str],
        doc: str,
        check: Optional[Parser] = None,
        parse: Optional[Parser] = None,
        source: Optional[str] = None,
        kube: Optional[Parser] = None,
        written: Optional[str] = None,
        write: Optional[Parser] = None,
        form: Optional[str] = None,
    ) -> None:
        self.name, self.var, self.doc, self.form = name, var, doc, form
        self.check, self.parse = check, parse
        self.source, self.kube = source, kube
        self.written, self.write = written, write

    @property
    def annotation(self) -> Optional[str]:
        """The Node annotation an operator sets, Kilo's or ours (None: a Node field, or none)."""
        return (
            self.source
            if self.source and self.source.startswith((ANNOTATION_PREFIX, OWN_PREFIX))
            else None
        )


_A = ANNOTATION_PREFIX
FIELDS: OrderedDict[str, NodeField] = OrderedDict(
    (field.name, field)
    for field in (
        NodeField(
            "location",
            "kilo_location",
            "The node's location (segment); overrides the location group holding the host.",
            check=_location,
            parse=_location,
            source=_A + "location",
            kube=lambda v, s, f: v or "",
        ),
        NodeField(
            "leader",
            "kilo_leader",
            "Prefer this node as its location's leader - V(true), or set empty (V(\"\") or null), as Kilo's annotation"
            " counts by its presence whatever its value; V(false) or unset is no preference.",
            check=_leader_var,
            parse=to_bool,
            source=_A + "leader",
            kube=_leader_kube,
            form="bool",
        ),
        NodeField(
            "endpoint",
            "kilo_force_endpoint",
            "The endpoint other nodes reach this one at, V(host:port) or V([IPv6]:port); its port is the listen port.",
            check=_endpoint_var,
            parse=_optional(parse_endpoint),
            source=_A + "force-endpoint",
            kube=_endpoint_kube,
            written=_A + "endpoint",
            write=lambda v, s, f: parse_endpoint(v, s, f).text if v else "",
            form="V(host:port)",
        ),
        NodeField(
            "internal_ip",
            "kilo_force_internal_ip",
            'The node\'s internal IP in CIDR form, instead of the one M(kilo.mesh.key) finds; V("") or V(-) means none.'
            " In a dual-stack mesh, a list of two, one of each IP family (the annotation: both, separated by a comma).",
            check=_internal_ip_var,
            parse=parse_internal_ips,
            source=_A + "force-internal-ip",
            kube=_internal_ip_kube,
            written=_A + "internal-ip",
            write=_internal_ip_text,
            form="CIDR, a list of two (dual-stack), or null",
        ),
        NodeField(
            "persistent_keepalive",
            "kilo_persistent_keepalive",
            "WireGuard persistent keepalive in seconds for this node's tunnels (a node behind NAT needs it); V(0) is none.",
            # no check (the reading never reads it): its one check on the controller is the parse
            parse=parse_keepalive,
            source=_A + "persistent-keepalive",
            kube=parse_keepalive,
            form="seconds",
        ),
        NodeField(
            "allowed_location_ips",
            "kilo_allowed_location_ips",
            "Further CIDRs routed to this node's location (a list, or text separated by commas).",
            parse=parse_network_list,  # no check: the reading never reads it
            source=_A + "allowed-location-ips",
            kube=_list_kube,
            form="CIDRs",
        ),
        NodeField(
            "pod_cidr",
            "kilo_pod_cidr",
            "The node's pod CIDR, or several (a list, or text separated by commas: each its own route and allowed IP;"
            " of the mesh's IP family, or of both in a dual-stack mesh);"
            " set, it wins over the source of C(kilo_pod_cidr_source).",
            check=_pod_cidrs_var,
            parse=parse_pod_cidrs,
            source=POD_CIDRS_ANNOTATION,
            kube=_pod_cidr_kube,
            form="CIDR, list of CIDRs, or null",
        ),
        NodeField(
            "public_key",
            "kilo_public_key",
            "The node's WireGuard public key, instead of the one M(kilo.mesh.key) reports.",
            check=_key_var,
            parse=parse_key,
            written=_A + "key",
            write=parse_key,
        ),
        NodeField(
            "cni_compatibility_ip",
            "kilo_cni_compatibility_ip",
            "Under compatibility V(cilium), the address traffic to this node goes to (its C(cilium_host) address).",
            # no check: the reading never reads it
            parse=_optional(lambda v, s, f: parse_interface(v, s, f).ip),
            source=_A + "cni-compatibility-ip",
            kube=_cni_ip_kube,
            written=_A + "cni-compatibility-ip",
            write=_interface_text,
            form="CIDR or null",
        ),
        NodeField(
            "discovered_endpoints",
            None,
            "Endpoints of peers as WireGuard saw them (reported by M(kilo.mesh.key)).",
            parse=_discovered,
            written=_A + "discovered-endpoints",
            write=discovered_json,
            form="public key to V(ip:port)",
        ),
        NodeField(
            "behind_nat",
            "kilo_behind_nat",
            "Beyond Kilo: no other location can reach this node at its endpoint (it sits behind NAT or a"
            " firewall without a port forward); a location of such nodes alone is reached through a relay"
            " (option C(relays)), and keeps alive (C(kilo_persistent_keepalive), else 25 s).",
            check=to_bool,
            parse=to_bool,
            source=BEHIND_NAT_ANNOTATION,
            kube=lambda v, s, f: to_bool(v or True, s, f),
            form="bool",
        ),
        NodeField(
            "path_state",
            None,
            "Beyond Kilo: what the agent of a node behind NAT published of its paths (relays C(down) until,"
            " C(direct) handshakes since, pairs C(held) on the relay until; seconds); none for a Kilo end or a push"
            " run; counted only at a time (C(now)).",
            parse=_path_state,
            form="mapping",
        ),
        NodeField(
            "relay_since",
            None,
            "Beyond Kilo: when this relay's agent started relaying (a relay counts 5 s later); 0 for push runs.",
            parse=lambda v, s, f: _seconds(v or 0, s, f),
            form="seconds",
        ),
        NodeField(
            "kg",
            None,
            "Beyond Kilo, agent mode: Kilo's own agent (kg) runs this node (its Node carries none of our agents'"
            " marks): it never relays, and a pair of locations behind NAT with it as an end keeps Kilo's entries.",
            parse=lambda v, s, f: to_bool(v, s, f, default=False),
            form="bool",
        ),
        NodeField(
            "healthy",
            None,
            "Beyond Kilo: false when the run saw the host down (kilo_leader_health).",
            parse=lambda v, s, f: to_bool(v, s, f, default=True),
            form="bool",
        ),
        NodeField(
            "relay_down",
            None,
            "Beyond Kilo, push runs: true when the run saw this relay down, or the leaders behind NAT report"
            " their handshakes with it stale; its pairs go through another relay (all count when every one is).",
            parse=lambda v, s, f: to_bool(v, s, f, default=False),
            form="bool",
        ),
    )
)

# inventory variable -> field name
VARS = OrderedDict((field.var, field.name) for field in FIELDS.values() if field.var)


def check_host_vars(
    hvars: Mapping[str, Any], subject: Optional[str], typed: bool = False
) -> dict[str, Any]:
    """Check every node variable ``hvars`` sets by its row's ``check``; {field name: engine input}
    of those it sets. A row without a check (what the reading itself never reads) is passed on as
    given, the engine's parse its one check; ``typed``: parsed by that parse too, for a comparison
    of two readings (``kube_node.drift``)."""
    out = {}
    for var, name in VARS.items():
        if var in hvars:
            field = FIELDS[name]
            if field.check is not None:
                out[name] = field.check(hvars[var], subject, var)
            else:
                out[name] = field.parse(hvars[var], subject, var) if typed else hvars[var]
    return out


def field_of_var(var: str) -> Optional[str]:
    """The node field an inventory variable sets (None: not a node variable)."""
    return VARS.get(var)


def var_of_field(name: str) -> Optional[str]:
    """The inventory variable of node field ``name`` (None: not set from the inventory)."""
    field = FIELDS.get(name)
    return field.var if field else None


def doc_lines() -> list[str]:
    """One documentation line per inventory variable, with Kilo's annotation where there is one."""
    lines = []
    for field in FIELDS.values():
        if not field.var:
            continue
        where = ""
        if field.annotation and field.annotation.startswith(OWN_PREFIX):
            where = " (annotation C(%s), beyond Kilo)" % field.annotation
        elif field.annotation:
            where = " (Kilo's annotation C(%s))" % field.annotation
        elif field.source:
            where = " (Kubernetes: C(%s))" % field.source
        lines.append("C(%s)%s - %s" % (field.var, where, field.doc))
    return lines


def engine_doc() -> str:
    """The keys of an item of the ``nodes`` option, for its documentation."""
    return ", ".join(
        "C(%s)%s" % (f.name, " (%s)" % f.form if f.form else "") for f in FIELDS.values()
    )


# --- a node from one host's variables and the facts it reported --------------------------------
# The push run reads the inventory (or the inventory plugin's Nodes) with these; the agent reads
# the Node objects it watches with the same, so both compute the same node.

# Public facts a host reports about itself (kilo.mesh.key), kept in the registry.
REGISTRY_FIELDS = ("public_key", "internal_ip", "external_ip", "discovered_endpoints", "mtu")
# the node fields node_from_host takes from those facts (what kilo.mesh.key reported) unless a variable forces them
REPORTED_FIELDS = ("public_key", "internal_ip", "endpoint", "discovered_endpoints")


class InputError(KiloError):
    """Bad input of one host (its variables or what it reported); names the host and the field."""


def host_location(hvars: Mapping[str, Any], location: str, subject: Optional[str]) -> str:
    """A host's location as its node has it: its ``kilo_location`` when set at all (even empty),
    else ``location`` (the location group holding it)."""
    field = FIELDS["location"]
    return field.check(hvars[field.var], subject, field.var) if field.var in hvars else location


def pod_source_of(hvars: Mapping[str, Any], default: Optional[str], subject: Optional[str]) -> str:
    """The source of a host's pod ranges: its own ``kilo_node_pod_cidr_source`` (a variable, or the
    inventory plugin's reading of the Node's annotation), else the mesh's ``kilo_pod_cidr_source``
    (``default`` where the host has no variables: the agent's configuration), else V(node)."""
    var = NODE_POD_SOURCE_VAR if hvars.get(NODE_POD_SOURCE_VAR) else POD_SOURCE_VAR
    source = hvars.get(var) or default or POD_SOURCES[0]
    if source not in POD_SOURCES:
        raise InputError("%r unknown; one of %s" % (source, ", ".join(POD_SOURCES)), subject, var)
    return source


def source_pod_cidrs(
    hvars: Mapping[str, Any], default: Optional[str], subject: Optional[str], dual: bool = False
) -> Any:
    """A host's pod ranges from its source, as its Kubernetes Node's reading holds them
    (``kilo_kubernetes_node.pod_cidrs``: source -> CIDRs); None without a Node (a hand-written
    inventory: only ``kilo_pod_cidr`` gives pod ranges there) or without ranges. The Node's own
    (source node) are its ``spec.podCIDR`` then the other family's of ``spec.podCIDRs``: a
    single-stack mesh takes the first alone (Kilo's), a ``dual``-stack mesh both."""
    source = pod_source_of(hvars, default, subject)
    written = hvars.get("kilo_kubernetes_node")
    if not isinstance(written, dict):
        if source != POD_SOURCES[0]:
            raise InputError(
                "%s needs the host's Kubernetes Node (the inventory plugin kilo.mesh.kubernetes);"
                " set kilo_pod_cidr instead" % source,
                subject,
                POD_SOURCE_VAR,
            )
        return None
    ranges = written.get("pod_cidrs") or {}
    if source not in ranges:
        if source == POD_SOURCES[0]:
            return None
        raise InputError(
            "%s: its objects were not read (their resource type is not installed, or this reader"
            " may not list them)" % source,
            subject,
            POD_SOURCE_VAR,
        )
    if source == POD_SOURCES[0] and not dual:
        return pod_cidr_value(ranges[source][:1])
    return pod_cidr_value(ranges[source])


def node_from_host(
    name: str,
    hvars: Mapping[str, Any],
    facts: Optional[Mapping[str, Any]],
    location: str,
    port: int,
    pod_source: Optional[str] = None,
    dual: bool = False,
) -> dict[str, Any]:
    """One topology node from a host's variables and what it reported (``facts``).

    ``facts`` is the result of kilo.mesh.key for this host (this run or the registry);
    it may be empty when every field is forced in the inventory. Each variable the host sets
    is checked by its row of the node table (``nodes.check_host_vars``; a row without a check, as
    given: the engine's parse checks it, and validate's engine run names the variable).
    Its pod ranges: ``kilo_pod_cidr`` when set, else those of its source (``source_pod_cidrs``;
    ``pod_source`` is the mesh's, for a host that names none: the agent's configuration).
    ``dual``: the mesh is dual-stack (``mesh_families``); in a single-stack one, internal IPs of
    two reported earlier (a registry entry, a Node's annotations of a dual-stack past) count as
    the first alone, and a Node's ``spec.podCIDRs`` as its ``spec.podCIDR``, as Kilo reads them.
    """
    facts = facts or {}
    subject = host_subject(name)
    given = check_host_vars(hvars, subject)
    node: dict[str, Any] = {"name": name, "location": host_location(hvars, location, subject)}
    node["public_key"] = given.get("public_key") or facts.get("public_key")

    forced = hvars.get(FIELDS["internal_ip"].var) is not None
    node["internal_ip"] = given["internal_ip"] if forced else facts.get("internal_ip")
    if node["internal_ip"] and not forced:
        # one, or in a dual-stack mesh one of each IP family (kilo.mesh.key's discovery)
        reported = node["internal_ip"]
        try:
            parse_internal_ips(reported, subject, "internal_ip")
        except KiloError as e:
            text = (
                e.message
                if isinstance(reported, (list, tuple))
                else "%r is not an IP address in CIDR form" % (reported,)
            )
            raise InputError(text, subject, "internal_ip (reported by kilo.mesh.key)")
        if not dual:
            node["internal_ip"] = first_of(reported)

    if given.get("endpoint"):
        node["endpoint"] = given["endpoint"]
    elif facts.get("endpoint"):
        # as written on the host's Kubernetes Node (annotation_facts)
        node["endpoint"] = str(facts["endpoint"])
    else:
        # Kilo's endpoint is the external IP when the host has one, else its private IP.
        ip = facts.get("external_ip")
        if not ip and node["internal_ip"]:
            ip = first_of(node["internal_ip"]).split("/")[0]
        node["endpoint"] = format_endpoint(ipaddress.ip_address(ip), port) if ip else None

    node["pod_cidr"] = (
        given["pod_cidr"]
        if given.get("pod_cidr") is not None
        else source_pod_cidrs(hvars, pod_source, subject, dual)
    )
    # Kilo's cni-compatibility-ip annotation: the next hop towards this node under compatibility cilium
    node["cni_compatibility_ip"] = given.get("cni_compatibility_ip")
    # the leader annotation counts by its presence: absent is the only "no"
    node["leader"] = given.get("leader", False)
    node["allowed_location_ips"] = given.get("allowed_location_ips", [])
    node["discovered_endpoints"] = dict(facts.get("discovered_endpoints") or {})
    # any other field of the table the host sets, as check_host_vars gave it (its row's check, or as
    # given for the engine's parse; a new field needs no line here)
    for field_name, value in given.items():
        node.setdefault(field_name, value)
    return node


def facts_from_result(result: Any) -> Optional[dict[str, Any]]:
    """The public part of a kilo.mesh.key result, or None when the host did not report."""
    if (
        not isinstance(result, dict)
        or result.get("failed")
        or result.get("skipped")
        or "public_key" not in result
    ):
        return None
    return dict((k, result.get(k)) for k in REGISTRY_FIELDS)


def annotation_facts(hvars: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """A host's facts as written on its Kubernetes Node (by Kilo's agent or kilo.mesh.annotate):
    the host variable ``kilo_kubernetes_node`` of the inventory plugin kilo.mesh.kubernetes.

    None unless it holds a public key and an endpoint (Kilo's agent needs both to use a node).
    Its last-seen time and the Node's Ready condition are not consulted (docs/docsite/rst/guide_kubernetes.rst, Liveness).
    """
    written = hvars.get("kilo_kubernetes_node")
    if (
        not isinstance(written, dict)
        or not written.get("public_key")
        or not written.get("endpoint")
    ):
        return None
    return dict(
        public_key=written["public_key"],
        internal_ip=written.get("internal_ip"),
        endpoint=written["endpoint"],
        discovered_endpoints=dict(written.get("discovered_endpoints") or {}),
    )
