# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Links and addresses of the host over rtnetlink, in the standard library.

The key call reads them on every run (IP discovery, our interface's kind and MTU). Debian's
pyroute2 0.7 loads every entry point of every installed distribution when imported: about a
third of that call's time on a host. Links and addresses are a few messages each, so a plain
dump decoded here costs less than the import. Shapes follow what the callers used of pyroute2.
No Ansible, no pyroute2.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import socket
import struct

NETLINK_ROUTE = 0
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 1
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWADDR, RTM_GETADDR = 20, 22
IFLA_IFNAME, IFLA_MTU, IFLA_LINKINFO = 3, 4, 18
IFLA_INFO_KIND = 1
IFA_ADDRESS, IFA_LOCAL = 1, 2
IFF_UP = 1
NLA_TYPE_MASK = 0x3fff
BUFSIZE = 1 << 16
RETRIES = 3

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_IFINFOMSG = struct.Struct("=BBHiII")  # family, pad, type, index, flags, change
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
_RTATTR = struct.Struct("=HH")
_U32 = struct.Struct("=I")
_I32 = struct.Struct("=i")


def attributes(buf, pos, end):
    """{type: raw bytes} of the rtattrs in ``buf[pos:end]`` (the first of each type)."""
    out = {}
    while pos + _RTATTR.size <= end:
        alen, atype = _RTATTR.unpack_from(buf, pos)
        if alen < _RTATTR.size or pos + alen > end:
            break  # malformed: the kernel never sends it; keep what came before
        out.setdefault(atype & NLA_TYPE_MASK, bytes(buf[pos + _RTATTR.size:pos + alen]))
        pos += (alen + 3) & ~3
    return out


def _string(raw):
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace") if raw is not None else None


def _u32(raw):
    return _U32.unpack(raw)[0] if raw is not None and len(raw) == 4 else None


def messages(buf, size, seq):
    """(type, payload offset, end, flags) of each message in ``buf[:size]``, and whether the
    dump ended; raises OSError for an error the kernel reports."""
    out, off = [], 0
    while off + _NLMSGHDR.size <= size:
        length, mtype, flags, mseq, dummy = _NLMSGHDR.unpack_from(buf, off)
        if length < _NLMSGHDR.size or off + length > size:
            raise OSError(errno.EBADMSG, "truncated netlink message")
        if mtype in (NLMSG_DONE, NLMSG_ERROR) and mseq == seq:
            code = _I32.unpack_from(buf, off + _NLMSGHDR.size)[0] if length >= _NLMSGHDR.size + 4 else 0
            if code < 0:
                raise OSError(-code, os.strerror(-code))
            return out, True
        out.append((mtype, off + _NLMSGHDR.size, off + length, flags))
        off += (length + 3) & ~3
    return out, False


def _dump(mtype, body, decode):
    """decode(buf, type, offset, end) of every message of one dump request; a dump the kernel
    marks interrupted (links or addresses changed meanwhile) is read again."""
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
    """{'index', 'name', 'mtu', 'kind', 'up'} of an RTM_NEWLINK message, else None."""
    if mtype != RTM_NEWLINK or end - start < _IFINFOMSG.size:
        return None
    dummy, dummy, dummy, index, flags, dummy = _IFINFOMSG.unpack_from(buf, start)
    attrs = attributes(buf, start + _IFINFOMSG.size, end)
    kind = None
    if IFLA_LINKINFO in attrs:
        info = attrs[IFLA_LINKINFO]
        kind = _string(attributes(info, 0, len(info)).get(IFLA_INFO_KIND))
    return {"index": index, "name": _string(attrs.get(IFLA_IFNAME)), "mtu": _u32(attrs.get(IFLA_MTU)),
            "kind": kind, "up": bool(flags & IFF_UP)}


def decode_address(buf, mtype, start, end):
    """{'index', 'family', 'prefixlen', 'address', 'local'} of an RTM_NEWADDR message, else None."""
    if mtype != RTM_NEWADDR or end - start < _IFADDRMSG.size:
        return None
    family, prefixlen, dummy, dummy, index = _IFADDRMSG.unpack_from(buf, start)
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    attrs = attributes(buf, start + _IFADDRMSG.size, end)

    def ip(atype):
        raw = attrs.get(atype)
        return socket.inet_ntop(family, raw) if raw is not None else None
    return {"index": index, "family": family, "prefixlen": prefixlen, "address": ip(IFA_ADDRESS),
            "local": ip(IFA_LOCAL)}


def links():
    """Every link of the host's network namespace, as decode_link."""
    return _dump(RTM_GETLINK, _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0), decode_link)


def addresses(family=socket.AF_UNSPEC):
    """Every IPv4 and IPv6 address (of ``family`` when given), as decode_address."""
    return _dump(RTM_GETADDR, _IFADDRMSG.pack(family, 0, 0, 0, 0), decode_address)


def link(name):
    """The link called ``name`` (decode_link), or None."""
    for item in links():
        if item["name"] == name:
            return item
    return None
