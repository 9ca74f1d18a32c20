# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""netstate's addresses: the global addresses on the WireGuard interface (ours), and the host's
global addresses netstate reads to find the interface holding the plan's internal_ip."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import socket

from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.base import (
    RT_SCOPE_UNIVERSE,
    NetStateError,
)


def global_addresses(reader, index=None):
    """List of (ifindex, ip_interface) of global-scope addresses (of link ``index`` only, when given)."""
    out = []
    for msg in reader.get_addr():
        if index is not None and msg["index"] != index:
            continue
        if msg["scope"] != RT_SCOPE_UNIVERSE:
            continue
        addr = msg.get_attr("IFA_ADDRESS")
        if msg["family"] == socket.AF_INET:
            addr = msg.get_attr("IFA_LOCAL") or addr
        out.append((msg["index"], ipaddress.ip_interface("%s/%d" % (addr, msg["prefixlen"]))))
    return out


def holder(host_addresses, links, address):
    """{name, mtu} of the link holding ``address`` (an interface address's IP), or None."""
    want = ipaddress.ip_interface(address).ip
    for idx, addr in host_addresses:
        if addr.ip == want:
            return {"name": links[idx]["name"], "mtu": links[idx]["mtu"]}
    return None


def holders(host_addresses, links, internal_ips):
    """{"4"/"6": holder() of the internal IP of that family} (the key a string: the state is
    JSON); a family without an internal IP, or whose address no link holds, is left out."""
    out = {}
    for address in internal_ips:
        found = holder(host_addresses, links, address)
        if found is not None:
            out[str(ipaddress.ip_interface(address).version)] = found
    return out


def changes(interface, current, desired):
    """Change lines of the interface's addresses."""
    out = []
    if desired["addresses"] and not current["interface_present"]:
        out.append("interface %s absent (addresses follow once it exists)" % interface)
    for a in desired["addresses"]:
        if a not in current["addresses"]:
            out.append("add address %s dev %s" % (a, interface))
    for a in current["addresses"]:
        if a not in desired["addresses"]:
            out.append("remove address %s dev %s" % (a, interface))
    return out


def apply(ipr, interface, index, wanted):
    """Make ``wanted`` the global addresses of ``interface`` (ifindex ``index``) through ``ipr``."""
    have = [str(pair[1]) for pair in global_addresses(ipr, index)]
    # add first: removing the last address of a link flushes every route through it
    for a in wanted:
        if a not in have:
            _addr(ipr, "add", interface, index, a)
    stale = [a for a in have if a not in wanted]
    if any(ipaddress.ip_interface(a).version == 4 for a in stale):
        _promote_secondaries(interface)
    for a in stale:
        _addr(ipr, "del", interface, index, a)
    # deleting an old primary also deletes secondaries of the same subnet: re-add them
    have = [str(pair[1]) for pair in global_addresses(ipr, index)]
    for a in wanted:
        if a not in have:
            _addr(ipr, "add", interface, index, a)


def _promote_secondaries(interface):
    """Deleting the primary IPv4 address would take the secondaries (and, with the last
    one, every route through the link) with it; promotion keeps the new one. Our link."""
    path = "/proc/sys/net/ipv4/conf/%s/promote_secondaries" % interface
    try:
        with open(path, "w") as f:
            f.write("1")
    except (IOError, OSError):
        pass  # best effort: the re-add below still converges


def _addr(ipr, cmd, interface, index, address):
    iface = ipaddress.ip_interface(address)
    kw = {"index": index, "address": str(iface.ip), "prefixlen": iface.network.prefixlen}
    if iface.version == 6:
        kw["family"] = socket.AF_INET6
    try:
        ipr.addr(cmd, **kw)
    except Exception as exc:  # NetlinkError; keep pyroute2 version differences out
        raise NetStateError("cannot %s address %s on %s: %s" % (cmd, address, interface, exc))
