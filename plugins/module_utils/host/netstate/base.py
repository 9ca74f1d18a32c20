# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""What the parts of the netstate backend share: its error, pyroute2 for changes, the links of
one reading, and the kernel's route constants. The parts (netstate.addresses, netstate.routes,
netstate.rules, netstate.tunnel, netstate.ssh) read through the one reader netstate opens
(``netlink.links.open_reader``) and change through the one pyroute2 IPRoute its apply opens.
No Ansible; pyroute2 only when asked for.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.plan import MAIN_TABLE

RTNH_F_ONLINK = 4
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_LINK = 253
RT_SCOPE_NOWHERE = 255
RTN_UNICAST = 1
FAMILIES = (socket.AF_INET, socket.AF_INET6)
_TABLE_NAMES = {MAIN_TABLE: "main", 255: "local", 253: "default"}


class NetStateError(KiloError):
    """Clear, user-facing failure of the network-state backend."""


def iproute_class():
    """pyroute2's IPRoute, imported only when something changes (or an old kernel reads): a
    missing pyroute2 is then named with the package to install."""
    try:
        from pyroute2 import IPRoute  # noqa: F401  deferred so unit tests need no netlink
    except ImportError:
        raise NetStateError(
            "python module pyroute2 is missing on this host (Debian: apt install python3-pyroute2)"
        )
    return IPRoute


def read_links(reader):
    """ifindex -> {name, up, mtu}."""
    out = {}
    for link in reader.get_links():
        out[link["index"]] = {
            "name": link.get_attr("IFLA_IFNAME"),
            "up": bool(link["flags"] & 1),
            "mtu": link.get_attr("IFLA_MTU"),
        }
    return out


def by_name(links, name):
    """The ifindex of the link called ``name`` in ``links`` (read_links), or None."""
    for idx, link in links.items():
        if link["name"] == name:
            return idx
    return None


def family_of(version):
    return socket.AF_INET if version == 4 else socket.AF_INET6


def version_of(family):
    return 4 if family == socket.AF_INET else 6


def table_name(table):
    return _TABLE_NAMES.get(table, str(table))
