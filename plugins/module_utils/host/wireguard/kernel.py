# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Kernel WireGuard over generic netlink with pyroute2.

We build WG_CMD_SET_DEVICE messages ourselves with pyroute2's `wgmsg` attribute map instead of
calling `WireGuard.set()`: Debian's python3-pyroute2 0.7.2 defines the peer flags as bit
numbers (REMOVE_ME=0, REPLACE_ALLOWEDIPS=1, UPDATE_ONLY=2) and always sends UPDATE_ONLY's
number 2, which the kernel reads as REPLACE_ALLOWEDIPS; 0.9.x is correct. Sending the kernel's
values (1, 2, 4) from here works on both.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import socket

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    format_endpoint,
)
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import split_endpoint

# Kernel values (include/uapi/linux/wireguard.h), not pyroute2's constants.
WG_CMD_GET_DEVICE = 0
WG_CMD_SET_DEVICE = 1
WG_GENL_VERSION = 1
WGPEER_F_REMOVE_ME = 1 << 0
WGPEER_F_REPLACE_ALLOWEDIPS = 1 << 1
WGPEER_F_UPDATE_ONLY = 1 << 2
ZERO_KEY_B64 = base64.b64encode(b"\0" * 32).decode("ascii")


class KernelWGError(KiloError):
    """A netlink request to kernel WireGuard failed."""


def _b64(value):
    if isinstance(value, bytes):
        value = value.decode("ascii")
    return value


def build_set_messages(interface, private_key=None, listen_port=None, fwmark=None, peers=()):
    """List of wgmsg for one configuration change: device attributes in the first message,
    then one message per peer operation (same peer-op dicts as wireguard.uapi.build_set)."""
    from pyroute2.netlink.generic.wireguard import wgmsg

    def new():
        m = wgmsg()
        m["cmd"] = WG_CMD_SET_DEVICE
        m["version"] = WG_GENL_VERSION
        m["attrs"] = [["WGDEVICE_A_IFNAME", interface]]
        return m

    msgs = []
    first = new()
    if private_key is not None:
        first["attrs"].append(["WGDEVICE_A_PRIVATE_KEY", private_key])
    if listen_port is not None:
        first["attrs"].append(["WGDEVICE_A_LISTEN_PORT", int(listen_port)])
    if fwmark is not None:
        first["attrs"].append(["WGDEVICE_A_FWMARK", int(fwmark)])
    if len(first["attrs"]) > 1:
        msgs.append(first)
    for p in peers:
        attrs = [["WGPEER_A_PUBLIC_KEY", p["public_key"]]]
        flags = 0
        if p.get("remove"):
            flags |= WGPEER_F_REMOVE_ME
        else:
            if p.get("update_only"):
                flags |= WGPEER_F_UPDATE_ONLY
            if p.get("replace_allowed_ips"):
                flags |= WGPEER_F_REPLACE_ALLOWEDIPS
            if "preshared_key" in p:
                attrs.append(["WGPEER_A_PRESHARED_KEY", p["preshared_key"] or ZERO_KEY_B64])
            if p.get("endpoint"):
                host, port = split_endpoint(p["endpoint"])
                attrs.append(["WGPEER_A_ENDPOINT", {"addr": host, "port": port}])
            if "persistent_keepalive" in p:
                attrs.append(["WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL", p["persistent_keepalive"]])
            if p.get("allowed_ips"):  # with REPLACE_ALLOWEDIPS and none listed: cleared
                attrs.append(["WGPEER_A_ALLOWEDIPS", _allowed_ips(p["allowed_ips"])])
        attrs.append(["WGPEER_A_FLAGS", flags])
        m = new()
        m["attrs"].append(["WGDEVICE_A_PEERS", [{"attrs": attrs}]])
        msgs.append(m)
    return msgs


def _allowed_ips(cidrs):
    out = []
    for cidr in cidrs:
        addr, mask = cidr.split("/")
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        out.append(
            {
                "attrs": [
                    ["WGALLOWEDIP_A_FAMILY", family],
                    ["WGALLOWEDIP_A_IPADDR", socket.inet_pton(family, addr)],
                    ["WGALLOWEDIP_A_CIDR_MASK", int(mask)],
                ]
            }
        )
    return out


def _allowed_ip_text(nla):
    addr = nla.get("addr")
    if addr:
        return addr
    family = nla.get_attr("WGALLOWEDIP_A_FAMILY")
    raw = nla.get_attr("WGALLOWEDIP_A_IPADDR")
    mask = nla.get_attr("WGALLOWEDIP_A_CIDR_MASK")
    if isinstance(raw, str):  # pyroute2 'hex' nla decodes to 'aa:bb:..'
        raw = bytes(bytearray(int(x, 16) for x in raw.split(":")))
    return "%s/%d" % (socket.inet_ntop(family, raw), mask)


def parse_device(msgs):
    """Merge the messages of one GET_DEVICE dump into a device dict (the same shape as
    wireguard.uapi.parse_get, with private_key_b64 instead of private_key_hex). Large
    configurations arrive split over several messages, a peer possibly continued."""
    dev = {"private_key_b64": None, "listen_port": 0, "fwmark": 0, "peers": []}
    by_key = {}
    for m in msgs:
        pk = m.get_attr("WGDEVICE_A_PRIVATE_KEY")
        if pk is not None:
            dev["private_key_b64"] = _b64(pk)
        lp = m.get_attr("WGDEVICE_A_LISTEN_PORT")
        if lp is not None:
            dev["listen_port"] = lp
        fw = m.get_attr("WGDEVICE_A_FWMARK")
        if fw is not None:
            dev["fwmark"] = fw
        for p in m.get_attr("WGDEVICE_A_PEERS") or []:
            pub = _b64(p.get_attr("WGPEER_A_PUBLIC_KEY"))
            peer = by_key.get(pub)
            if peer is None:
                peer = {
                    "public_key": pub,
                    "preshared_key_b64": None,
                    "endpoint": None,
                    "persistent_keepalive": 0,
                    "last_handshake": 0,
                    "rx_bytes": 0,
                    "tx_bytes": 0,
                    "allowed_ips": [],
                }
                by_key[pub] = peer
                dev["peers"].append(peer)
            psk = p.get_attr("WGPEER_A_PRESHARED_KEY")
            if psk is not None and _b64(psk) != ZERO_KEY_B64:
                peer["preshared_key_b64"] = _b64(psk)
            ep = p.get_attr("WGPEER_A_ENDPOINT")
            if ep is not None and ep.get("addr") and ep.get("port"):
                addr = ep["addr"]
                if addr not in ("0.0.0.0", "::"):
                    peer["endpoint"] = format_endpoint(addr, ep["port"])
            ka = p.get_attr("WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL")
            if ka is not None:
                peer["persistent_keepalive"] = ka
            hs = p.get_attr("WGPEER_A_LAST_HANDSHAKE_TIME")
            if hs is not None:
                peer["last_handshake"] = int(hs.get("tv_sec") or 0)
            for name, field in (
                ("WGPEER_A_RX_BYTES", "rx_bytes"),
                ("WGPEER_A_TX_BYTES", "tx_bytes"),
            ):
                v = p.get_attr(name)
                if v is not None:
                    peer[field] = v
            for a in p.get_attr("WGPEER_A_ALLOWEDIPS") or []:
                peer["allowed_ips"].append(_allowed_ip_text(a))
    return dev


class KernelWG(object):
    def __init__(self, interface):
        self.interface = interface

    def create(self):
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            try:
                ipr.link("add", ifname=self.interface, kind="wireguard")
            except Exception as e:
                raise KernelWGError(
                    "cannot create WireGuard interface %s (kernel module missing?): %s"
                    % (self.interface, e)
                )

    def get(self):
        from pyroute2.netlink.generic.wireguard import WireGuard
        from pyroute2.netlink import NLM_F_REQUEST, NLM_F_DUMP
        from pyroute2.netlink.generic.wireguard import wgmsg

        ws = WireGuard()
        try:
            m = wgmsg()
            m["cmd"] = WG_CMD_GET_DEVICE
            m["version"] = WG_GENL_VERSION
            m["attrs"].append(["WGDEVICE_A_IFNAME", self.interface])
            msgs = list(ws.nlm_request(m, msg_type=ws.prid, msg_flags=NLM_F_REQUEST | NLM_F_DUMP))
        finally:
            ws.close()
        return parse_device(msgs)

    def set(self, **kwargs):
        from pyroute2.netlink.generic.wireguard import WireGuard
        from pyroute2.netlink import NLM_F_REQUEST, NLM_F_ACK

        msgs = build_set_messages(self.interface, **kwargs)
        if not msgs:
            return
        ws = WireGuard()
        try:
            for m in msgs:
                ws.nlm_request(m, msg_type=ws.prid, msg_flags=NLM_F_REQUEST | NLM_F_ACK)
        except Exception as e:
            # the message may carry key material: report only the error itself
            raise KernelWGError("WireGuard netlink set on %s failed: %s" % (self.interface, e))
        finally:
            ws.close()
