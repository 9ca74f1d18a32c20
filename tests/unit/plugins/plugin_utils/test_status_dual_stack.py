# -*- coding: utf-8 -*-
"""kilo.mesh.status on a dual-stack leader (issue 23): its addresses are its WireGuard IP of each
family, IPv4 first; the kernel's own IPv6 link-local address on a userspace tun device, another
link's addresses and a gone interface are not reported. Its counts are as a single-stack host's:
one tunnel per remote segment and outside peer, whatever families their allowed IPs carry."""

import socket

from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink import links as netlink_links
from ansible_collections.kilo.mesh.plugins.module_utils.host import status as st
from ansible_collections.kilo.mesh.plugins.plugin_utils.status_summary import summary
from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink.routes import RouteMessage
from ansible_collections.kilo.mesh.plugins.modules import status as module

NOW = 1700000000


def addr(index, family, address, prefixlen, scope=0):
    attrs = {"IFA_ADDRESS": address}
    if family == socket.AF_INET:
        attrs["IFA_LOCAL"] = address
    return RouteMessage(
        {"family": family, "prefixlen": prefixlen, "flags": 0, "scope": scope, "index": index},
        attrs,
    )


class Reader(object):
    """The read calls interface_addresses makes, answered as a wireguard-go leader's kernel does
    (what the lab's kilo0 showed: `ip addr` lists the link-local fe80:: beside fd04::1)."""

    def __init__(self, links):
        self.links = links

    def get_addr(self, family=None):
        return [
            addr(5, socket.AF_INET, "10.4.0.1", 16),
            addr(5, socket.AF_INET6, "fd04::1", 64),
            addr(5, socket.AF_INET6, "fe80::4605:dc0e:8d06:170e", 64, scope=253),
            addr(2, socket.AF_INET6, "fd00:16:1::1", 64),
        ]

    def close(self):
        pass


def test_a_dual_stack_leader_reports_both_addresses_and_no_link_local(monkeypatch):
    links = {"kilo0": {"index": 5}}
    monkeypatch.setattr(netlink_links, "open_reader", lambda: (Reader(links), True))
    monkeypatch.setattr(netlink_links, "link", lambda name, reader: links.get(name))
    assert module.interface_addresses("kilo0") == ["10.4.0.1/16", "fd04::1/64"]
    assert module.interface_addresses("gone0") == []


def test_counts_are_one_tunnel_per_peer_whatever_its_families():
    key = "A" * 43 + "="
    peers = [
        {
            "public_key": key.replace("A", c),
            "endpoint": "[2001:db8::20]:51820",
            "latest_handshake": NOW - 10,
            "allowed_ips": ["10.3.0.0/24", "fd10:0:0:3::/64", "10.4.0.2/32", "fd04::2/128"],
        }
        for c in "BC"
    ]
    state = {
        "interface": "kilo0",
        "backend": "userspace",
        "present": True,
        "up": True,
        "public_key": key,
        "listen_port": 51820,
        "peers": peers,
    }
    result = st.host_status(state, NOW, 180, ["10.4.0.1/16", "fd04::1/64"])
    assert result["addresses"] == ["10.4.0.1/16", "fd04::1/64"] and len(result["peers"]) == 2
    assert result["peers"][0]["allowed_ips"] == peers[0]["allowed_ips"] and result["stale"] == []
    table = summary({"a": dict(result, location="x", segment="location:x")})
    assert (
        table["hosts"] == [["a", "x", "location:x", "leader", 2, 0]] and len(table["tunnels"]) == 2
    )
