# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""netstate's SSH guard: a main-table route of the plan must not take over the path of this
run's SSH connection (the host would answer the controller through the mesh)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import (
    routes as netstate_routes,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.host_checks import ssh_client_address
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.base import (
    RTN_UNICAST,
    NetStateError,
    family_of,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.routes import (
    route_attrs,
    route_key,
    route_str,
)
from ansible_collections.kilo.mesh.plugins.module_utils.plan import MAIN_TABLE, ROUTE_PROTO


def read(reader, plan):
    """Where this run's SSH client is reached now, when a main-table route of the plan covers
    it: {client, prefixlen (of the best route to it now), ours}; else None. The main table
    is read only in that case (rare: a peer with 0.0.0.0/0, a controller inside a pod CIDR)."""
    client = ssh_client_address()
    if client is None:
        return None
    ip = ipaddress.ip_address(client)
    if not any(
        r["table"] == MAIN_TABLE and ip in ipaddress.ip_network(r["dst"])
        for r in plan.get("routes") or []
    ):
        return None
    best = (-1, None)
    for msg in netstate_routes.dump(
        reader, family_of(ip.version), table=MAIN_TABLE, rtype=RTN_UNICAST
    ):
        if (
            msg["type"] != RTN_UNICAST
            or msg["dst_len"] <= best[0]
            or (msg.get_attr("RTA_TABLE") or msg["table"]) != MAIN_TABLE
        ):
            continue  # (a kernel without strict checking returns every table)
        dst = msg.get_attr("RTA_DST") or ("0.0.0.0" if ip.version == 4 else "::")
        if ip in ipaddress.ip_network("%s/%d" % (dst, msg["dst_len"]), strict=False):
            best = (msg["dst_len"], msg["proto"])
    return {"client": client, "prefixlen": best[0], "ours": best[1] == ROUTE_PROTO}


def check(current, desired):
    """Raise when a main-table route we add or replace would take over the path of this
    run's SSH connection (``current["ssh"]``: read())."""
    ssh = current.get("ssh")
    if not ssh or ssh["ours"] or ssh["prefixlen"] < 0:
        # no plan route covers the client, its path already is ours, or no main-table route
        # reaches it (the connection runs through a policy-routing table: not ours to judge)
        return
    ip = ipaddress.ip_address(ssh["client"])
    have = dict((route_key(r), r) for r in current["routes"])
    for r in desired["routes"]:
        net = ipaddress.ip_network(r["dst"])
        old = have.get(route_key(r))
        if (
            r["table"] != MAIN_TABLE
            or ip not in net
            or (old and route_attrs(old) == route_attrs(r))
        ):
            continue
        if net.prefixlen >= ssh["prefixlen"]:
            raise NetStateError(
                "route %s would carry this run's SSH connection (from %s) into the mesh; keep the management"
                " network out of allowed IPs and pod CIDRs, add a more specific route to it, or set"
                " ssh_guard: false" % (route_str(r), ssh["client"]),
                desired.get("subject"),
                r.get("field"),
            )
