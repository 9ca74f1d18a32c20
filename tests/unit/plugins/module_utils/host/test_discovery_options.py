# -*- coding: utf-8 -*-
"""Kilo's --internal-cidr and --prioritise-private-addresses in IP discovery (discovery.choose_ips).

From Kilo's pkg/mesh/discoverips.go (getIP: the allowed CIDRs filter private candidates only)
and pkg/mesh/mesh.go (New: externalIP = privateIP when the flag is set and there is one).
"""

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.host import discovery
from ansible_collections.kilo.mesh.plugins.module_utils.options import OPTIONS, argument_spec


def host():
    addrs = [
        ("lo", 1, "127.0.0.1/8"),
        ("eth0", 2, "203.0.113.5/24"),
        ("eth0", 2, "192.168.1.5/24"),
        ("eth1", 3, "10.1.0.5/16"),
        ("eth2", 4, "172.16.9.5/24"),
    ]
    return {
        "links": dict((i, {"name": n, "mtu": 1500}) for n, i, dummy in addrs),
        "addrs": [{"index": i, "ifname": n, "cidr": c} for n, i, c in addrs],
        "default_index": 2,
    }


def test_defaults_unchanged():
    ips = discovery.choose_ips(host())
    # default-route interface first: its private address, then every interface's in text order
    assert ips["internal_ip"] == "192.168.1.5/24" and ips["external_ip"] == "203.0.113.5"
    assert ips["candidates"]["internal"] == ["192.168.1.5/24", "10.1.0.5/16", "172.16.9.5/24"]


def test_internal_cidrs_keep_only_private_addresses_inside():
    ips = discovery.choose_ips(host(), allowed_cidrs=["10.0.0.0/8", "172.16.9.0/24"])
    assert ips["internal_ip"] == "10.1.0.5/16"
    assert ips["candidates"]["internal"] == ["10.1.0.5/16", "172.16.9.5/24"]
    # public addresses are not filtered (getIP applies allowedCIDRs to private ones only)
    assert ips["external_ip"] == "203.0.113.5"


def test_internal_cidrs_matching_nothing_leave_no_internal_ip():
    ips = discovery.choose_ips(host(), allowed_cidrs=["10.99.0.0/16"])
    assert ips["internal_ip"] is None and ips["external_ip"] == "203.0.113.5"


def test_internal_cidrs_host_bits_allowed_bare_address_refused():
    assert (
        discovery.choose_ips(host(), allowed_cidrs=["10.1.2.3/16"])["internal_ip"] == "10.1.0.5/16"
    )
    with pytest.raises(ValueError, match="internal_cidrs: '10.1.0.0' is not a CIDR"):
        discovery.choose_ips(host(), allowed_cidrs=["10.1.0.0"])


def test_prioritise_private_addresses():
    ips = discovery.choose_ips(host(), prioritise_private=True)
    assert ips["internal_ip"] == "192.168.1.5/24" and ips["external_ip"] == "192.168.1.5"
    # together with internal_cidrs: the filtered internal IP becomes the endpoint
    ips = discovery.choose_ips(host(), allowed_cidrs=["10.0.0.0/8"], prioritise_private=True)
    assert ips["external_ip"] == "10.1.0.5"
    # no private address: the public one stays (Kilo: only "if privateIP != nil")
    ips = discovery.choose_ips(host(), allowed_cidrs=["10.99.0.0/16"], prioritise_private=True)
    assert ips["external_ip"] == "203.0.113.5"


def test_options_reach_the_key_module():
    spec = argument_spec("key")
    assert spec["internal_cidrs"] == {"type": "list", "elements": "str", "default": []}
    assert spec["prioritise_private_addresses"] == {"type": "bool", "default": False}
    assert OPTIONS["internal_cidrs"]["var"] == "kilo_internal_cidrs"
    assert OPTIONS["prioritise_private_addresses"]["var"] == "kilo_prioritise_private_addresses"
    assert OPTIONS["compatibility"]["choices"] == ["none", "flannel", "cilium"]


def test_the_cni_bridge_never_gives_the_node_its_ips():
    """Kilo's mesh.New leaves out kube-bridge (cniDeviceIndex): once a pod ran, the bridge holds
    the pod CIDR's gateway, a private address that would otherwise win as the internal IP."""
    h = host()
    h["links"][5] = {"name": "kube-bridge", "mtu": 1500}
    h["addrs"].insert(0, {"index": 5, "ifname": "kube-bridge", "cidr": "10.0.0.1/24"})
    ips = discovery.choose_ips(h)
    assert "10.0.0.1/24" not in ips["candidates"]["internal"]
    assert ips == discovery.choose_ips(host())


def test_cilium_tunl_never_gives_the_node_its_ips():
    """Where Cilium renamed tunl0 to cilium_tunl, our tunnel address sits there (Kilo ignores
    its encapsulator's interface, whatever its name)."""
    h = host()
    h["links"][6] = {"name": "cilium_tunl", "mtu": 1480}
    h["addrs"].insert(0, {"index": 6, "ifname": "cilium_tunl", "cidr": "10.0.0.1/32"})
    assert discovery.choose_ips(h) == discovery.choose_ips(host())
