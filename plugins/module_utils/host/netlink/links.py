# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The host's links, addresses, rules and routes read over rtnetlink in the standard library.

Every key and converge call reads them, most often to find nothing to change. Debian's
pyroute2 0.7 loads every entry point of every installed distribution when imported, about a
third of such a call on a host; the few messages of these dumps cost less decoded here.

``NetlinkReader`` answers the read calls of pyroute2's IPRoute that discovery, the WireGuard
backend and netstate make (``get_links``, ``get_addr``, ``get_rules``, ``close``) with messages
read the same way (``msg["index"]``, ``msg.get_attr("IFLA_IFNAME")``), and route dumps through
netlink.routes. Its route dumps need netlink strict checking (Linux 4.20+): where the kernel
refuses it, ``NetlinkReader()`` raises StrictCheckUnsupported. ``open_reader`` is the one way
readers are opened: NetlinkReader, else pyroute2's IPRoute. Changes still go through pyroute2.
No Ansible; pyroute2 only on that fallback.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import socket
import struct

from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink.routes import (
    RouteMessage as Message,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink.routes import (
    NETLINK_ROUTE,
    NLM_F_DUMP,
    NLM_F_DUMP_INTR,
    NLM_F_REQUEST,
    NLMSGHDR,
    StrictCheckUnsupported,
    attributes,
    dump_routes,
    ends,
    open_strict,
    run_dump,
)

RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWADDR, RTM_GETADDR = 20, 22
RTM_NEWRULE, RTM_GETRULE = 32, 34
BUFSIZE = 1 << 16

_IFINFOMSG = struct.Struct("=BBHiII")  # family, pad, type, index, flags, change
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
_FIBRULEHDR = struct.Struct(
    "=BBBBBBBBI"
)  # family, dst_len, src_len, tos, table, res1, res2, action, flags

# attribute tables as netlink.routes.attributes reads them
_LINKINFO_ATTRS = {1: ("IFLA_INFO_KIND", "str")}
_LINK_ATTRS = {
    3: ("IFLA_IFNAME", "str"),
    4: ("IFLA_MTU", "u32"),
    18: ("IFLA_LINKINFO", _LINKINFO_ATTRS),
}
_ADDR_ATTRS = {1: ("IFA_ADDRESS", "ip"), 2: ("IFA_LOCAL", "ip"), 3: ("IFA_LABEL", "str")}
_RULE_ATTRS = {
    1: ("FRA_DST", "ip"),
    2: ("FRA_SRC", "ip"),
    3: ("FRA_IIFNAME", "str"),
    6: ("FRA_PRIORITY", "u32"),
    15: ("FRA_TABLE", "u32"),
}


def messages(buf, size, seq):
    """(type, payload offset, end, flags) of each message in ``buf[:size]``, and whether the
    dump ended (its DONE message is listed too: the kernel may mark it interrupted); raises
    OSError for an error the kernel reports."""
    out, off = [], 0
    while off + NLMSGHDR.size <= size:
        length, mtype, flags, mseq, dummy = NLMSGHDR.unpack_from(buf, off)
        if length < NLMSGHDR.size or off + length > size:
            raise OSError(errno.EBADMSG, "truncated netlink message")
        out.append((mtype, off + NLMSGHDR.size, off + length, flags))
        if ends(buf, off, length, mtype, mseq, seq):
            return out, True
        off += (length + 3) & ~3
    return out, False


def _dump(mtype, body, decode):
    """decode(buf, type, offset, end) of every message of one dump request (None: left out)."""

    def parse(buf, size, seq, out):
        got, done = messages(buf, size, seq)
        interrupted = False
        for kind, start, end, flags in got:
            interrupted = interrupted or bool(flags & NLM_F_DUMP_INTR)
            item = decode(buf, kind, start, end)
            if item is not None:
                out.append(item)
        return done, interrupted

    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    try:
        sock.bind((0, 0))
        header = NLMSGHDR.size + len(body), mtype, NLM_F_REQUEST | NLM_F_DUMP
        return run_dump(
            sock, lambda seq: NLMSGHDR.pack(*(header + (seq, 0))) + body, parse, BUFSIZE
        )
    finally:
        sock.close()


def decode_link(buf, mtype, start, end):
    """Message(index, flags; IFLA_IFNAME, IFLA_MTU, IFLA_LINKINFO) of an RTM_NEWLINK, else None."""
    if mtype != RTM_NEWLINK or end - start < _IFINFOMSG.size:
        return None
    family, dummy, iftype, index, flags, dummy = _IFINFOMSG.unpack_from(buf, start)
    return Message(
        {"family": family, "ifi_type": iftype, "index": index, "flags": flags},
        attributes(buf, start + _IFINFOMSG.size, end, _LINK_ATTRS),
    )


def decode_address(buf, mtype, start, end):
    """Message(family, prefixlen, flags, scope, index; IFA_ADDRESS, IFA_LOCAL, IFA_LABEL) of an
    IPv4 or IPv6 RTM_NEWADDR, else None."""
    if mtype != RTM_NEWADDR or end - start < _IFADDRMSG.size:
        return None
    family, prefixlen, flags, scope, index = _IFADDRMSG.unpack_from(buf, start)
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    return Message(
        {"family": family, "prefixlen": prefixlen, "flags": flags, "scope": scope, "index": index},
        attributes(buf, start + _IFADDRMSG.size, end, _ADDR_ATTRS, family),
    )


def decode_rule(buf, mtype, start, end):
    """Message(family, dst_len, src_len, tos, table, action, flags; FRA_*) of an RTM_NEWRULE."""
    if mtype != RTM_NEWRULE or end - start < _FIBRULEHDR.size:
        return None
    family, dst_len, src_len, tos, table, dummy, dummy, action, flags = _FIBRULEHDR.unpack_from(
        buf, start
    )
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    return Message(
        {
            "family": family,
            "dst_len": dst_len,
            "src_len": src_len,
            "tos": tos,
            "table": table,
            "action": action,
            "flags": flags,
        },
        attributes(buf, start + _FIBRULEHDR.size, end, _RULE_ATTRS, family),
    )


class NetlinkReader(object):
    """Read calls of pyroute2's IPRoute, answered from stdlib netlink dumps (module docstring)."""

    def __init__(self, strict=True):
        if strict:  # the route dumps filter by strict checking: refuse now, not midway
            open_strict().close()

    def get_links(self):
        return _dump(RTM_GETLINK, _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0), decode_link)

    def get_addr(self, family=socket.AF_UNSPEC):
        return _dump(
            RTM_GETADDR, _IFADDRMSG.pack(family or socket.AF_UNSPEC, 0, 0, 0, 0), decode_address
        )

    def get_rules(self, family):
        return _dump(RTM_GETRULE, _FIBRULEHDR.pack(family, 0, 0, 0, 0, 0, 0, 0, 0), decode_rule)

    @staticmethod
    def routes(family, table=0, proto=0, rtype=0, keys=None):
        """Route messages filtered by the kernel (netlink.routes.dump_routes)."""
        return dump_routes(family, keys, table=table, proto=proto, rtype=rtype)

    def close(self):
        pass


def open_reader(iproute=None):
    """(reader, strict) for one reading of the host; the caller closes the reader.

    NetlinkReader with strict True: the kernel filters its route dumps (by protocol, table,
    type), so a read that finds nothing to change never imports pyroute2. A kernel before 4.20
    refuses strict checking: then pyroute2's IPRoute, made by ``iproute()`` (default: IPRoute
    itself; netstate passes its own for a clear error where pyroute2 is missing), with strict
    False: its route dumps return every route, and the caller filters them."""
    try:
        return NetlinkReader(), True
    except StrictCheckUnsupported:
        pass
    if iproute is None:
        from pyroute2 import IPRoute as iproute  # noqa: N813  deferred, only old kernels pay its import
    return iproute(), False


def link(name, ipr=None):
    """{'index', 'kind', 'up', 'mtu'} of the link called ``name``, or None; read through ``ipr``
    (a pyroute2 IPRoute) when given, else NetlinkReader."""
    for msg in (ipr or NetlinkReader(strict=False)).get_links():
        if msg.get_attr("IFLA_IFNAME") == name:
            info = msg.get_attr("IFLA_LINKINFO")
            return {
                "index": msg["index"],
                "kind": info.get_attr("IFLA_INFO_KIND") if info is not None else None,
                "up": bool(msg["flags"] & 1),
                "mtu": msg.get_attr("IFLA_MTU"),
            }
    return None
