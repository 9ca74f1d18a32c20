# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""A light route dump for netstate: the routes at a few (destination, table) keys out of a table
that may hold a full BGP table (1M routes).

pyroute2 builds a parsed object of every attribute of every message of a dump; here each message
costs a look at two bytes of its fixed header, and only those whose prefix length and table fit
a key are decoded further. Pure stdlib (socket, struct): runs on the host, no pyroute2, no Ansible.

The dump is filtered by the kernel (netlink strict checking, Linux 4.20+), as netstate's pyroute2
dump is; a kernel that refuses the socket option raises StrictCheckUnsupported, and the caller
reads through pyroute2 as before.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import ipaddress
import os
import socket
import struct

NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_GET_STRICT_CHK = 12
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 1
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
RTM_NEWROUTE = 24
RTM_GETROUTE = 26
RT_TABLE_COMPAT = 252  # rtm_table of a route in a table above 255: RTA_TABLE has the real one
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_PREFSRC, RTA_MULTIPATH, RTA_TABLE = (
    1,
    4,
    5,
    6,
    7,
    9,
    15,
)
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER
BUFSIZE = 1 << 20  # the kernel fills at most ~32 KiB per datagram: never truncated
RETRIES = 3  # a dump the kernel marks interrupted (changing meanwhile) is read again

NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_RTMSG = struct.Struct(
    "=BBBBBBBBI"
)  # family, dst_len, src_len, tos, table, protocol, scope, type, flags
_RTATTR = struct.Struct("=HH")
_RTNEXTHOP = struct.Struct("=HBBi")  # len, flags, hops, ifindex
_U32 = struct.Struct("=I")
_I32 = struct.Struct("=i")
_HEAD = NLMSGHDR.size + _RTMSG.size
# attribute number -> (pyroute2's name, how to read it): "ip" an address of the message's family,
# "u32", "str", "nexthops" (RTA_MULTIPATH), or a table like this one for nested attributes
_ROUTE_ATTRS = {
    RTA_DST: ("RTA_DST", "ip"),
    RTA_GATEWAY: ("RTA_GATEWAY", "ip"),
    RTA_PREFSRC: ("RTA_PREFSRC", "ip"),
    RTA_OIF: ("RTA_OIF", "u32"),
    RTA_PRIORITY: ("RTA_PRIORITY", "u32"),
    RTA_TABLE: ("RTA_TABLE", "u32"),
    RTA_MULTIPATH: ("RTA_MULTIPATH", "nexthops"),
}


class StrictCheckUnsupported(OSError):
    """The kernel (before 4.20) refuses netlink strict checking: it would not filter the dump."""


class RouteMessage(dict):
    """One decoded route message, read like pyroute2's rtmsg: header fields by pyroute2's names
    (``msg["dst_len"]``, ``msg["proto"]``), the six attributes netstate uses by ``get_attr``."""

    def __init__(self, header, attrs):
        super(RouteMessage, self).__init__(header)
        self.attrs = attrs

    def get_attr(self, name):
        return self.attrs.get(name)


def request(seq, family, table=0, proto=0, rtype=0):
    """RTM_GETROUTE dump request; under strict checking the kernel returns only routes of
    ``table``, ``proto`` and ``rtype`` (0: any). The table goes in RTA_TABLE (u32: also tables
    above 255), the header's fields stay 0: strict checking refuses a dump request with
    dst_len, src_len, tos, scope or flags set."""
    attrs = _RTATTR.pack(8, RTA_TABLE) + _U32.pack(table) if table else b""
    body = _RTMSG.pack(family, 0, 0, 0, 0, proto, 0, rtype, 0) + attrs
    return (
        NLMSGHDR.pack(NLMSGHDR.size + len(body), RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, seq, 0)
        + body
    )


def key_index(family, keys):
    """(tables by prefix length, {(dst_len, table, packed dst): True}) of the ``keys``
    ((dst, table) pairs, dst a network) of ``family``; the others are left out."""
    version = 4 if family == socket.AF_INET else 6
    by_len, wanted = {}, {}
    for dst, table in keys:
        net = ipaddress.ip_network(dst)
        if net.version != version:
            continue
        by_len.setdefault(net.prefixlen, set()).add(table)
        wanted[(net.prefixlen, table, net.network_address.packed)] = True
    return by_len, wanted


def attributes(buf, pos, end, names, family=None):
    """{name: value} of the rtattrs in ``buf[pos:end]`` that ``names`` knows (the first of each)."""
    out = {}
    while pos + _RTATTR.size <= end:
        alen, atype = _RTATTR.unpack_from(buf, pos)
        if alen < _RTATTR.size or pos + alen > end:
            break  # malformed: the kernel never sends it; keep what came before
        known = names.get(atype & NLA_TYPE_MASK)
        if known is not None and known[0] not in out:
            name, kind = known
            raw = bytes(buf[pos + _RTATTR.size : pos + alen])
            if kind == "str":
                out[name] = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
            elif kind == "u32" and len(raw) == 4:
                out[name] = _U32.unpack(raw)[0]
            elif kind == "ip" and family is not None:
                out[name] = socket.inet_ntop(family, raw)
            elif kind == "nexthops":
                out[name] = _nexthops(raw)
            elif isinstance(kind, dict):
                out[name] = RouteMessage({}, attributes(raw, 0, len(raw), kind, family))
        pos += (alen + 3) & ~3
    return out


def _decode(buf, off, length, family):
    """RouteMessage of the route message at ``off``: the header and the attributes used."""
    head = _RTMSG.unpack_from(buf, off + NLMSGHDR.size)
    header = dict(
        zip(
            ("family", "dst_len", "src_len", "tos", "table", "proto", "scope", "type", "flags"),
            head,
        )
    )
    return RouteMessage(header, attributes(buf, off + _HEAD, off + length, _ROUTE_ATTRS, family))


def _nexthops(data):
    """[{'oif'}] of an RTA_MULTIPATH attribute (the device of each next hop, as pyroute2 names it)."""
    out, pos = [], 0
    while pos + _RTNEXTHOP.size <= len(data):
        length, dummy, dummy, oif = _RTNEXTHOP.unpack_from(data, pos)
        if length < _RTNEXTHOP.size:
            break
        out.append({"oif": oif})
        pos += (length + 3) & ~3
    return out


def _packed_dst(msg, family):
    dst = msg.get_attr("RTA_DST")
    return socket.inet_pton(family, dst) if dst else b"\0" * (4 if family == socket.AF_INET else 16)


def parse(buf, size, seq, family, index, out):
    """Append to ``out`` the route messages in ``buf[:size]`` whose (dst_len, table, dst) is in
    ``index`` (from key_index; None: every one). Returns (done, interrupted); raises OSError for an error the
    kernel reports (NLMSG_ERROR, or a negative errno in NLMSG_DONE)."""
    by_len, wanted = index if index is not None else (None, None)
    unpack = NLMSGHDR.unpack_from
    interrupted = False
    off = 0
    while off + NLMSGHDR.size <= size:
        length, mtype, flags, mseq, dummy = unpack(buf, off)
        if length < NLMSGHDR.size or off + length > size:
            raise OSError(errno.EBADMSG, "truncated netlink message in route dump")
        if flags & NLM_F_DUMP_INTR:
            interrupted = True
        if mtype == RTM_NEWROUTE and length >= _HEAD and buf[off + NLMSGHDR.size] != family:
            pass  # another family's route (a kernel without IPv6 answers an IPv6 dump with all)
        elif mtype == RTM_NEWROUTE and length >= _HEAD and index is None:
            out.append(_decode(buf, off, length, family))  # every route the kernel returned
        elif mtype == RTM_NEWROUTE and length >= _HEAD:
            # the hot path: two header bytes, dst_len and rtm_table, decide most messages
            tables = by_len.get(buf[off + 17])
            if tables is not None and (buf[off + 20] in tables or buf[off + 20] == RT_TABLE_COMPAT):
                msg = _decode(buf, off, length, family)
                table = msg.get_attr("RTA_TABLE") or msg["table"]
                if (msg["dst_len"], table, _packed_dst(msg, family)) in wanted:
                    out.append(msg)
        elif ends(buf, off, length, mtype, mseq, seq):
            return True, interrupted
        off += (length + 3) & ~3
    return False, interrupted


def ends(buf, off, length, mtype, mseq, seq):
    """Whether the message at ``off`` ends request ``seq``: its DONE, or an ACK (error 0); raises
    OSError for an error the kernel reports (NLMSG_ERROR, or a negative errno in NLMSG_DONE)."""
    if mtype not in (NLMSG_DONE, NLMSG_ERROR) or mseq != seq:
        return False
    code = _I32.unpack_from(buf, off + NLMSGHDR.size)[0] if length >= NLMSGHDR.size + 4 else 0
    if code < 0:
        raise OSError(-code, os.strerror(-code))
    return True


def run_dump(sock, request_of, parse, bufsize=BUFSIZE):
    """The messages ``parse(buf, size, seq, out) -> (done, interrupted)`` keeps out of the answer
    to ``request_of(seq)`` on ``sock``; a dump the kernel marks interrupted (changing meanwhile)
    is asked again."""
    buf = bytearray(bufsize)
    for attempt in range(RETRIES):
        seq = attempt + 1
        sock.sendall(request_of(seq))
        out = []
        done = interrupted = False
        while not done:
            size = sock.recv_into(buf)
            done, intr = parse(buf, size, seq, out)
            interrupted = interrupted or intr
        if not interrupted:
            return out
    raise OSError(errno.EINTR, "netlink dump interrupted %d times (changing meanwhile)" % RETRIES)


def open_strict():
    """A bound rtnetlink socket with strict checking on; StrictCheckUnsupported where refused."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    try:
        sock.bind((0, 0))
        try:
            sock.setsockopt(SOL_NETLINK, NETLINK_GET_STRICT_CHK, 1)
        except OSError as exc:
            raise StrictCheckUnsupported(exc.errno, "netlink strict checking unsupported: %s" % exc)
    except Exception:
        sock.close()
        raise
    return sock


def dump_routes(family, keys, table=0, proto=0, rtype=0):
    """Route messages (RouteMessage) of ``family`` at the (dst, table) ``keys`` (None: all) among
    the routes of ``table``, ``proto`` and ``rtype`` (0: any), filtered by the kernel. A table that
    does not exist yet reads as empty. StrictCheckUnsupported: read another way."""
    index = key_index(family, keys) if keys is not None else None
    sock = open_strict()
    try:
        return run_dump(
            sock,
            lambda seq: request(seq, family, table, proto, rtype),
            lambda buf, size, seq, out: parse(buf, size, seq, family, index, out),
        )
    except OSError as exc:
        if table and exc.errno == errno.ENOENT:
            return []  # the table does not exist yet, so nothing is in it
        raise
    finally:
        sock.close()
