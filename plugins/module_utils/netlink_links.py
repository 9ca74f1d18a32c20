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
netlink_routes. Its route dumps need netlink strict checking (Linux 4.20+): where the kernel
refuses it, ``NetlinkReader()`` raises StrictCheckUnsupported and callers read through pyroute2.
Changes still go through pyroute2. No Ansible, no pyroute2.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import socket
import struct

from ansible_collections.kilo.mesh.plugins.module_utils.netlink_routes import RouteMessage as Message
from ansible_collections.kilo.mesh.plugins.module_utils.netlink_routes import dump_routes, open_strict

NETLINK_ROUTE = 0
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 1
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWADDR, RTM_GETADDR = 20, 22
RTM_NEWRULE, RTM_GETRULE = 32, 34
NLA_TYPE_MASK = 0x3fff
BUFSIZE = 1 << 16
RETRIES = 3

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_IFINFOMSG = struct.Struct("=BBHiII")  # family, pad, type, index, flags, change
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
_FIBRULEHDR = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, res1, res2, action, flags
_RTATTR = struct.Struct("=HH")
_U32 = struct.Struct("=I")
_I32 = struct.Struct("=i")

# attribute number -> (pyroute2's name, how to read it); "ip" is an address of the message's family
_LINK_ATTRS = {3: ("IFLA_IFNAME", "str"), 4: ("IFLA_MTU", "u32"), 18: ("IFLA_LINKINFO", "nested")}
_LINKINFO_ATTRS = {1: ("IFLA_INFO_KIND", "str")}
_ADDR_ATTRS = {1: ("IFA_ADDRESS", "ip"), 2: ("IFA_LOCAL", "ip"), 3: ("IFA_LABEL", "str")}
_RULE_ATTRS = {1: ("FRA_DST", "ip"), 2: ("FRA_SRC", "ip"), 3: ("FRA_IIFNAME", "str"), 6: ("FRA_PRIORITY", "u32"),
               15: ("FRA_TABLE", "u32")}


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
            raw = bytes(buf[pos + _RTATTR.size:pos + alen])
            if kind == "str":
                out[name] = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
            elif kind == "u32" and len(raw) == 4:
                out[name] = _U32.unpack(raw)[0]
            elif kind == "ip" and family is not None:
                out[name] = socket.inet_ntop(family, raw)
            elif kind == "nested":
                out[name] = Message({}, attributes(raw, 0, len(raw), _LINKINFO_ATTRS))
        pos += (alen + 3) & ~3
    return out


def messages(buf, size, seq):
    """(type, payload offset, end, flags) of each message in ``buf[:size]``, and whether the
    dump ended (its DONE message is listed too: the kernel may mark it interrupted); raises
    OSError for an error the kernel reports."""
    out, off = [], 0
    while off + _NLMSGHDR.size <= size:
        length, mtype, flags, mseq, dummy = _NLMSGHDR.unpack_from(buf, off)
        if length < _NLMSGHDR.size or off + length > size:
            raise OSError(errno.EBADMSG, "truncated netlink message")
        out.append((mtype, off + _NLMSGHDR.size, off + length, flags))
        if mtype in (NLMSG_DONE, NLMSG_ERROR) and mseq == seq:
            code = _I32.unpack_from(buf, off + _NLMSGHDR.size)[0] if length >= _NLMSGHDR.size + 4 else 0
            if code < 0:
                raise OSError(-code, os.strerror(-code))
            return out, True
        off += (length + 3) & ~3
    return out, False


def _dump(mtype, body, decode):
    """decode(buf, type, offset, end) of every message of one dump request (None: left out); a
    dump the kernel marks interrupted (changing meanwhile) is read again."""
    buf = bytearray(BUFSIZE)
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    try:
        sock.bind((0, 0))
        for attempt in range(RETRIES):
            seq = attempt + 1
            sock.sendall(_NLMSGHDR.pack(_NLMSGHDR.size + len(body), mtype, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body)
            out, done, interrupted = [], False, False
            while not done:
                size = sock.recv_into(buf)
                got, done = messages(buf, size, seq)
                for kind, start, end, flags in got:
                    interrupted = interrupted or bool(flags & NLM_F_DUMP_INTR)
                    item = decode(buf, kind, start, end)
                    if item is not None:
                        out.append(item)
            if not interrupted:
                return out
        raise OSError(errno.EINTR, "netlink dump interrupted %d times (changing meanwhile)" % RETRIES)
    finally:
        sock.close()


def decode_link(buf, mtype, start, end):
    """Message(index, flags; IFLA_IFNAME, IFLA_MTU, IFLA_LINKINFO) of an RTM_NEWLINK, else None."""
    if mtype != RTM_NEWLINK or end - start < _IFINFOMSG.size:
        return None
    family, dummy, iftype, index, flags, dummy = _IFINFOMSG.unpack_from(buf, start)
    return Message({"family": family, "ifi_type": iftype, "index": index, "flags": flags},
                   attributes(buf, start + _IFINFOMSG.size, end, _LINK_ATTRS))


def decode_address(buf, mtype, start, end):
    """Message(family, prefixlen, flags, scope, index; IFA_ADDRESS, IFA_LOCAL, IFA_LABEL) of an
    IPv4 or IPv6 RTM_NEWADDR, else None."""
    if mtype != RTM_NEWADDR or end - start < _IFADDRMSG.size:
        return None
    family, prefixlen, flags, scope, index = _IFADDRMSG.unpack_from(buf, start)
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    return Message({"family": family, "prefixlen": prefixlen, "flags": flags, "scope": scope, "index": index},
                   attributes(buf, start + _IFADDRMSG.size, end, _ADDR_ATTRS, family))


def decode_rule(buf, mtype, start, end):
    """Message(family, dst_len, src_len, tos, table, action, flags; FRA_*) of an RTM_NEWRULE."""
    if mtype != RTM_NEWRULE or end - start < _FIBRULEHDR.size:
        return None
    family, dst_len, src_len, tos, table, dummy, dummy, action, flags = _FIBRULEHDR.unpack_from(buf, start)
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    return Message({"family": family, "dst_len": dst_len, "src_len": src_len, "tos": tos, "table": table,
                    "action": action, "flags": flags},
                   attributes(buf, start + _FIBRULEHDR.size, end, _RULE_ATTRS, family))


class NetlinkReader(object):
    """Read calls of pyroute2's IPRoute, answered from stdlib netlink dumps (module docstring)."""

    def __init__(self, strict=True):
        if strict:  # the route dumps filter by strict checking: refuse now, not midway
            open_strict().close()

    def get_links(self):
        return _dump(RTM_GETLINK, _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0), decode_link)

    def get_addr(self, family=socket.AF_UNSPEC):
        return _dump(RTM_GETADDR, _IFADDRMSG.pack(family or socket.AF_UNSPEC, 0, 0, 0, 0), decode_address)

    def get_rules(self, family):
        return _dump(RTM_GETRULE, _FIBRULEHDR.pack(family, 0, 0, 0, 0, 0, 0, 0, 0), decode_rule)

    @staticmethod
    def routes(family, table=0, proto=0, rtype=0, keys=None):
        """Route messages filtered by the kernel (netlink_routes.dump_routes)."""
        return dump_routes(family, keys, table=table, proto=proto, rtype=rtype)

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def link(name, ipr=None):
    """{'index', 'kind', 'up', 'mtu'} of the link called ``name``, or None; read through ``ipr``
    (a pyroute2 IPRoute) when given, else NetlinkReader."""
    for msg in (ipr or NetlinkReader(strict=False)).get_links():
        if msg.get_attr("IFLA_IFNAME") == name:
            info = msg.get_attr("IFLA_LINKINFO")
            return {"index": msg["index"], "kind": info.get_attr("IFLA_INFO_KIND") if info is not None else None,
                    "up": bool(msg["flags"] & 1), "mtu": msg.get_attr("IFLA_MTU")}
    return None
