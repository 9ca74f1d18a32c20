# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""netstate's ICMP redirects of a relay (a plan with ``firewall.relay_accept``).

A relay forwards between two of its own WireGuard peers: the packet leaves by the interface it
came in on, to an address of the interface's subnet, which is what makes the kernel send an
ICMP redirect to the sender. The kernel sends one when ``conf.all.send_redirects`` OR the
interface's own is 1 (measured: all=1 with the interface's 0 still sends), so a relay sets
both to 0. ``all`` at 0 changes no other interface: each keeps sending by its own value (1 by
default). Neither is set back when the host stops relaying (harmless, and the interface's goes
with the interface). IPv6 has no such switch, and a WireGuard interface has no link-local
address to send an IPv6 redirect from.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.base import NetStateError
from ansible_collections.kilo.mesh.plugins.module_utils.host.prepare import (
    read_sysctl,
    write_sysctl,
)

ALL = "net.ipv4.conf.all.send_redirects"


def keys(interface):
    """The sysctls a relay sets to 0: ``all``'s and the interface's."""
    return [ALL, "net.ipv4.conf.%s.send_redirects" % interface]


def relaying(plan):
    return bool(plan and (plan.get("firewall") or {}).get("relay_accept"))


def read(interface, plan, proc_sys=None):
    """{sysctl: value as text, None where it does not exist (the interface not made yet)} of a
    relay's plan; {} otherwise (nothing of this is looked at)."""
    if not relaying(plan):
        return {}
    return dict((key, read_sysctl(key, proc_sys)) for key in keys(interface))


def desired(interface, plan):
    return dict((key, "0") for key in keys(interface)) if relaying(plan) else {}


def changes(current, wanted):
    return [
        "sysctl %s = %s (was %s)" % (key, value, current.get(key))
        for key, value in sorted(wanted.items())
        if current.get(key) != value
    ]


def apply(current, wanted, proc_sys=None):
    """Write the sysctls of ``wanted`` that differ (the interface's exists by now: the WireGuard
    backend made it)."""
    for key, value in sorted(wanted.items()):
        if read_sysctl(key, proc_sys) != value:
            try:
                write_sysctl(key, value, proc_sys)
            except KiloError as e:
                raise NetStateError(e.message)
