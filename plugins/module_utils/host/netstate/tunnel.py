# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""netstate's IPIP device: tunl0 (or cilium_tunl under compatibility cilium) brought up with its
MTU, and our labelled IPv4 address on it (netstate's module docstring says what is ours)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import socket

from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.base import (
    NetStateError,
    by_name,
    read_links,
)
from ansible_collections.kilo.mesh.plugins.module_utils.plan import CILIUM_TUNNEL, TUNNEL

IPIP_HEADER = 20
# The label marks the tunl0 address as ours, so removal needs no plan; "<dev>:" keeps `ip` happy.
TUNL_LABEL = TUNNEL + ":kilo"
IPIP_HINT = (
    "host lacks IPIP (%s) support: load the ipip module (modprobe ipip) "
    "or set encapsulate: never" % TUNNEL
)


def addr_list(value):
    """tunnel_address as a list: None, one address, or (after a foreign edit) several."""
    if not value:
        return []
    return [value] if isinstance(value, str) else list(value)


def tunnel_name(current, desired):
    """The IPIP device of this converge (the one read with the plan; tunl0 by default)."""
    return (desired or {}).get("tunnel_device") or (current or {}).get("tunnel_device") or TUNNEL


def tunnel_needed(plan):
    """Whether the plan encapsulates: an IPv4 tunnel_address or a route through tunl0."""
    return bool(tunnel_field(plan))


def tunnel_field(plan):
    """The first plan field that needs tunl0, or None."""
    if plan.get("tunnel_address") and ipaddress.ip_interface(plan["tunnel_address"]).version == 4:
        return "plan.tunnel_address"
    for i, r in enumerate(plan.get("routes") or []):
        if r["device"] == TUNNEL:
            return "plan.routes[%d].device" % i
    return None


def tunnel_device(links, plan):
    """The IPIP device this host encapsulates through: tunl0, or cilium_tunl when the plan
    says compatibility cilium and Cilium renamed tunl0 to it (Kilo reuses it then). Without
    a plan (removal): cilium_tunl when it is there and tunl0 is not."""
    if by_name(links, CILIUM_TUNNEL) is None:
        return TUNNEL
    if plan is None:
        return CILIUM_TUNNEL if by_name(links, TUNNEL) is None else TUNNEL
    return CILIUM_TUNNEL if plan.get("compatibility") == "cilium" else TUNNEL


def labelled_addresses(reader, index):
    """Our (labelled) IPv4 addresses on the tunnel device ``index``, as strings."""
    out = []
    for msg in reader.get_addr(family=socket.AF_INET):
        if msg["index"] != index or msg.get_attr("IFA_LABEL") != TUNL_LABEL:
            continue
        addr = msg.get_attr("IFA_LOCAL") or msg.get_attr("IFA_ADDRESS")
        out.append(str(ipaddress.ip_interface("%s/%d" % (addr, msg["prefixlen"]))))
    return sorted(out)


def read(reader, links, tunnel):
    """(tunl0 {up, mtu} or None, our tunnel_address: None, one, or a list) of device ``tunnel``."""
    index = by_name(links, tunnel)
    if index is None:
        return None, None
    ours = labelled_addresses(reader, index)
    # more than one only after a foreign edit; a list keeps every one visible
    return {"up": links[index]["up"], "mtu": links[index]["mtu"]}, (
        ours[0] if len(ours) == 1 else (ours or None)
    )


def desired(plan, current, subject):
    """(tunl0 wanted, tunnel_address wanted) of the plan on this host; NetStateError where the
    plan encapsulates and the host has no IPIP."""
    tunnel = current.get("tunnel_device") or TUNNEL
    # IPIP carries IPv4 over the IPv4 private network: tunl0's MTU follows that interface (a
    # single-stack IPv6 plan that encapsulates has only its one internal IP's, as before dual-stack)
    devices = current.get("private_devices") or {}
    private = devices.get("4") or next(iter(devices.values()), None)
    tunnel_address = None
    if plan["tunnel_address"] and ipaddress.ip_interface(plan["tunnel_address"]).version == 4:
        tunnel_address = plan["tunnel_address"]
    tunl = current["tunl0"]
    # Kilo creates tunl0 whenever it encapsulates, also when no route uses it yet
    # (crosssubnet inside one subnet): its address is set either way.
    if tunnel_needed(plan):
        if tunl is None and not current.get("ipip"):
            raise NetStateError(IPIP_HINT, subject, tunnel_field(plan))
        mtu = (private["mtu"] - IPIP_HEADER) if private and private["mtu"] else None
        if (mtu is None or tunnel == CILIUM_TUNNEL) and tunl:
            mtu = tunl["mtu"]  # cilium_tunl's MTU is Cilium's: only its state is ours to set
        tunl = {"up": True, "mtu": mtu}
    return tunl, tunnel_address


def changes(current, desired):
    """Change lines of the tunnel device and our address on it."""
    out = []
    want_t, have_t = desired.get("tunl0"), current.get("tunl0")
    tunnel = tunnel_name(current, desired)
    if want_t and want_t != have_t:
        if not have_t:
            out.append("create %s (mtu %s)" % (tunnel, want_t["mtu"]))
        else:
            out.append("set %s up mtu %s" % (tunnel, want_t["mtu"]))
    for a in addr_list(desired.get("tunnel_address")):
        if a not in addr_list(current.get("tunnel_address")):
            out.append("add address %s dev %s" % (a, tunnel))
    for a in addr_list(current.get("tunnel_address")):
        if a not in addr_list(desired.get("tunnel_address")):
            out.append("remove address %s dev %s" % (a, tunnel))
    return out


def apply(ipr, current, desired):
    """The device first (a host without IPIP fails before anything else changed), then our address."""
    tunnel = tunnel_name(current, desired)
    if desired.get("tunl0") and desired["tunl0"] != current.get("tunl0"):
        _apply_device(ipr, desired["tunl0"], tunnel)
    _apply_address(ipr, desired.get("tunnel_address"), tunnel)


def _apply_device(ipr, want, name=TUNNEL):
    links = read_links(ipr)
    index = by_name(links, name)
    if index is None:  # only tunl0 is ever made here: cilium_tunl is Cilium's
        try:
            ipr.link("add", ifname=TUNNEL, kind="ipip")
        except Exception as exc:
            if "exist" not in str(exc).lower():
                raise NetStateError("%s (creating %s failed: %s)" % (IPIP_HINT, TUNNEL, exc))
        links = read_links(ipr)
        index = by_name(links, TUNNEL)
        if index is None:
            raise NetStateError(IPIP_HINT)
    kw = {"index": index, "state": "up"}
    if want.get("mtu") and links[index]["mtu"] != want["mtu"]:
        kw["mtu"] = want["mtu"]
    if not links[index]["up"] or "mtu" in kw:
        try:
            ipr.link("set", **kw)
        except Exception as exc:
            raise NetStateError("cannot set %s up (mtu %s): %s" % (name, want.get("mtu"), exc))


def _apply_address(ipr, want, name=TUNNEL):
    """Our labelled address on tunl0 (or cilium_tunl): add the wanted one, remove other labelled ones."""
    index = by_name(read_links(ipr), name)
    if index is None:
        return  # no tunl0: nothing of ours can be on it (and nothing is wanted)
    want = addr_list(want)
    have = labelled_addresses(ipr, index)
    for a in want:
        if a in have:
            continue
        iface = ipaddress.ip_interface(a)
        kw = {"index": index, "address": str(iface.ip), "prefixlen": iface.network.prefixlen}
        try:
            try:
                ipr.addr("add", label=TUNL_LABEL, **kw)
            except Exception as exc:
                if "exist" not in str(exc).lower():
                    raise
                # the same address without our label (Kilo itself set it, say): the
                # kernel cannot relabel in place, so take it over by delete + add
                ipr.addr("del", **kw)
                ipr.addr("add", label=TUNL_LABEL, **kw)
        except Exception as exc:
            raise NetStateError("cannot add address %s on %s: %s" % (a, name, exc))
    for a in have:
        if a not in want:
            iface = ipaddress.ip_interface(a)
            try:
                ipr.addr(
                    "del", index=index, address=str(iface.ip), prefixlen=iface.network.prefixlen
                )
            except Exception as exc:
                raise NetStateError("cannot remove address %s from %s: %s" % (a, name, exc))
