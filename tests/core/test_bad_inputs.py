"""Every wrong inventory is refused before any host is contacted, by the one validation path every
playbook that reads a mesh takes (plugin_utils/validate.py): each case runs through
playbooks/plan.yml and playbooks/site.yml --check (connect.yml's cases through connect.yml
--check), and both must fail with the same message, naming the host (or the peer) and the field.

The inventory is inventory/example.yml (every host pins its key, endpoint, internal IP and pod
CIDR; the laptop is a peer) with one edit. Its hosts do not exist: reaching any of them would show
as UNREACHABLE, so every case must fail on the controller, in plan.yml's first task or in
kilo.mesh.validate, site.yml's first. The good controls (a correct mesh of each feature) must pass
both. docs/docsite/rst/guide_bad_inputs.rst lists these cases (tests/unit/test_docs.py keeps the
two equal). tests/host/test_bad_inputs.py runs a sample on a fresh lab with no keys.

Runs go through the ansible-playbook beside the Python running pytest (so the ansible-core stages
run them on their release), several at a time; each test waits for its own run.
"""

import concurrent.futures
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import threading

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "inventory", "example.yml")
ANSIBLE_BIN = os.path.dirname(os.path.abspath(sys.executable))
GOOD_KEY = "aNdi7F94dUaB6O9ScwgibmXpFk7PcQSX2C5Hzcc0b2M="  # aws-1's
LAPTOP_KEY = "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw="
OTHER_KEY = "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="
PLAN_SITE = ("plan.yml", "site.yml")
CONNECT = ("connect.yml",)


def peers(*extra, **laptop):
    """kilo_peers: the example's laptop (``laptop`` changes its fields) and ``extra`` peers."""
    first = dict(
        name="laptop", public_key=LAPTOP_KEY, allowed_ips=["10.5.0.1/32"], persistent_keepalive=25
    )
    first.update(laptop)
    return {
        "kilo": {
            "kilo_peers": [dict((k, v) for k, v in first.items() if v is not None)] + list(extra)
        }
    }


def peer(name, allowed, key=OTHER_KEY, **fields):
    return dict(name=name, public_key=key, allowed_ips=allowed, **fields)


# gcp and home behind NAT (every node marked): reached through aws, the one location left to relay
BEHIND_NAT = dict(
    (host, {"kilo_behind_nat": True}) for host in ("gcp-1", "gcp-2", "home-1", "home-2")
)

# (what, {target: edits} (see inventory_with), the expected message[, the playbooks, default plan.yml and site.yml])
CASES = [
    ("port not a number", {"kilo": {"kilo_port": "many"}}, "host 'aws-1': kilo_port:"),
    (
        "port out of range",
        {"kilo": {"kilo_port": 70000}},
        "host 'aws-1': kilo_port: 70000 out of range 1-65535",
    ),
    (
        "subnet not a CIDR",
        {"kilo": {"kilo_subnet": "10.4.0.0/33"}},
        "host 'aws-1': kilo_subnet: '10.4.0.0/33' is not a CIDR",
    ),
    (
        "subnet too small for the segments",
        {"kilo": {"kilo_subnet": "10.4.0.0/31"}},
        "host 'aws-1': kilo_subnet: 10.4.0.0/31 holds",
    ),
    (
        "unknown granularity",
        {"kilo": {"kilo_granularity": "galaxy"}},
        "host 'aws-1': kilo_granularity: value of granularity must be one of",
    ),
    (
        "unknown encapsulation",
        {"kilo": {"kilo_encapsulate": "sometimes"}},
        "host 'aws-1': kilo_encapsulate: value of encapsulate must be one of",
    ),
    (
        "interface name the kernel refuses",
        {"kilo": {"kilo_interface": "kilo%0"}},
        "host 'aws-1': kilo_interface: 'kilo%0' is not a valid Linux interface name",
    ),
    (
        "interface name too long",
        {"kilo": {"kilo_interface": "a-very-long-name0"}},
        "host 'aws-1': kilo_interface: 'a-very-long-name0' is not a valid",
    ),
    ("boolean that is not one", {"kilo": {"kilo_local": "maybe"}}, "host 'aws-1': kilo_local:"),
    (
        "service CIDR that is not one",
        {"kilo": {"kilo_service_cidrs": ["10.96.0.0/99"]}},
        "host 'aws-1': kilo_service_cidrs: '10.96.0.0/99' is not a CIDR",
    ),
    (
        "peer without a key",
        {"kilo": {"kilo_peers": [{"name": "p", "allowed_ips": ["10.5.0.1/32"]}]}},
        "peer 'p': public_key: missing",
    ),
    (
        "peer without allowed IPs",
        {
            "kilo": {
                "kilo_peers": [
                    {"name": "p", "public_key": "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw="}
                ]
            }
        },
        "peer 'p': allowed_ips: a peer needs at least one allowed IP",
    ),
    (
        "peer with a node's key",
        {
            "kilo": {
                "kilo_peers": [
                    {"name": "p", "public_key": GOOD_KEY, "allowed_ips": ["10.5.0.1/32"]}
                ]
            }
        },
        "peer 'p': public_key: same key as node 'aws-1'",
    ),
    (
        "unknown WireGuard backend",
        {"kilo": {"kilo_backend": "magic"}},
        "host 'aws-1': kilo_backend: value of backend must be one of",
    ),
    (
        "unknown firewall",
        {"gcp-1": {"kilo_firewall": "pf"}},
        "host 'gcp-1': kilo_firewall: value of firewall must be one of",
    ),
    ("MTU not a number", {"home-2": {"kilo_mtu": "big"}}, "host 'home-2': kilo_mtu:"),
    (
        "unknown route conflict policy",
        {"aws-2": {"kilo_route_conflict": "maybe"}},
        "host 'aws-2': kilo_route_conflict: value of route_conflict must be",
    ),
    (
        "unknown state",
        {"aws-3": {"kilo_state": "gone"}},
        "host 'aws-3': kilo_state: value of state must be one of",
    ),
    (
        "mesh-wide setting that differs on one host",
        {"home-1": {"kilo_subnet": "10.9.0.0/16"}},
        "host 'home-1': kilo_subnet: '10.9.0.0/16' here, '10.4.0.0/16' on host 'aws-1'",
    ),
    (
        "endpoint port out of range",
        {"gcp-2": {"kilo_force_endpoint": "203.0.113.7:99999"}},
        "host 'gcp-2': kilo_force_endpoint: port 99999 out of range 1-65535",
    ),
    (
        "endpoint without a port",
        {"gcp-2": {"kilo_force_endpoint": "203.0.113.7"}},
        "host 'gcp-2': kilo_force_endpoint: '203.0.113.7' is not host:port",
    ),
    (
        "IPv6 endpoint without brackets",
        {"gcp-2": {"kilo_force_endpoint": "2001:db8::7:51820"}},
        "host 'gcp-2': kilo_force_endpoint: '2001:db8::7:51820' is not host:port",
    ),
    (
        "internal IP that is not one",
        {"aws-2": {"kilo_force_internal_ip": "bogus"}},
        "host 'aws-2': kilo_force_internal_ip: 'bogus' is not an IP address",
    ),
    (
        "pod CIDR that is not one",
        {"aws-2": {"kilo_pod_cidr": "10.244.2.0/33"}},
        "host 'aws-2': kilo_pod_cidr: '10.244.2.0/33' is not a CIDR",
    ),
    (
        "public key that is not one",
        {"aws-3": {"kilo_public_key": "short"}},
        "host 'aws-3': kilo_public_key: not valid base64",
    ),
    (
        "two hosts with one key",
        {"aws-3": {"kilo_public_key": GOOD_KEY}},
        "host 'aws-3': kilo_public_key: same key as node 'aws-1'",
    ),
    (
        "leader flag that is not a boolean",
        {"home-2": {"kilo_leader": "maybe"}},
        "host 'home-2': kilo_leader: 'maybe' is not a boolean",
    ),
    (
        "keepalive that is not a number",
        {"home-2": {"kilo_persistent_keepalive": "soon"}},
        "host 'home-2': kilo_persistent_keepalive: 'soon' is not an integer",
    ),
    (
        "allowed location IP that is not a CIDR",
        {"home-2": {"kilo_allowed_location_ips": ["nope"]}},
        "host 'home-2': kilo_allowed_location_ips: 'nope' is not a CIDR",
    ),
    (
        "behind-NAT mark that is not a boolean",
        {"home-1": {"kilo_behind_nat": "maybe"}},
        "host 'home-1': kilo_behind_nat: 'maybe' is not a boolean",
    ),
    (
        "two locations behind NAT, relays naming neither other",
        dict(BEHIND_NAT, kilo={"kilo_relays": ["home"]}),
        "host 'aws-1': kilo_relays: neither location:gcp nor location:home can be reached (every node of each is"
        " behind_nat or has no endpoint), and home names no location with a reachable leader to relay between them:"
        " add one (aws)",
    ),
    (
        "every location behind NAT",
        dict(
            BEHIND_NAT,
            **{
                "aws-1": {"kilo_behind_nat": True},
                "aws-2": {"kilo_behind_nat": True},
                "aws-3": {"kilo_behind_nat": True},
            },
        ),
        "host 'aws-1': kilo_behind_nat: no segment of the mesh is reachable",
    ),
    (
        "host in two location groups",
        {"two-groups": {}},
        "host 'gcp-1': location: in location groups aws, gcp",
    ),
    (
        "task timeout below one second",
        {"kilo": {"kilo_task_timeout": 0}},
        "host 'aws-1': kilo_task_timeout: 0 out of range",
    ),
    (
        "handshake bound shorter than WireGuard's rekey",
        {"kilo": {"kilo_leader_handshake_timeout": 60}},
        "host 'aws-1': kilo_leader_handshake_timeout: 60 s is below WireGuard's rekey interval",
    ),
    (
        "MTU below zero",
        {"home-2": {"kilo_mtu": -5}},
        "host 'home-2': kilo_mtu: -5 out of range 0-65535",
    ),
    # "fresh": no host pins a key or an endpoint, as a first run: every host takes part with
    # stand-ins for what its key step reports, so the checks of the segments run before it
    (
        "fresh mesh: keepalive that is not a number",
        {"fresh": {}, "home-2": {"kilo_persistent_keepalive": "abc"}},
        "host 'home-2': kilo_persistent_keepalive: 'abc' is not an integer",
    ),
    (
        "fresh mesh: keepalive below zero",
        {"fresh": {}, "home-2": {"kilo_persistent_keepalive": -5}},
        "host 'home-2': kilo_persistent_keepalive: -5 out of range 0-65535",
    ),
    (
        "fresh mesh: endpoint IPv4 out of range",
        {"fresh": {}, "gcp-2": {"kilo_force_endpoint": "300.1.1.1:51820"}},
        "host 'gcp-2': kilo_force_endpoint: '300.1.1.1:51820': '300.1.1.1' is not a valid IPv4 address",
    ),
    (
        "fresh mesh: MTU below zero",
        {"fresh": {}, "home-2": {"kilo_mtu": -5}},
        "host 'home-2': kilo_mtu: -5 out of range 0-65535",
    ),
    (
        "fresh mesh: endpoint port zero",
        {"fresh": {}, "gcp-2": {"kilo_force_endpoint": "203.0.113.41:0"}},
        "host 'gcp-2': kilo_force_endpoint: port 0 out of range 1-65535",
    ),
    # --- what plan.yml let through before it took validate's path
    (
        "plan too: unknown WireGuard backend on one host",
        {"gcp-2": {"kilo_backend": "magic"}},
        "host 'gcp-2': kilo_backend: value of backend must be one of",
    ),
    (
        "plan too: MTU not a number on one host",
        {"aws-3": {"kilo_mtu": "big"}},
        "host 'aws-3': kilo_mtu:",
    ),
    (
        "plan too: mesh-wide granularity that differs on one host",
        {"gcp-1": {"kilo_granularity": "full"}},
        "host 'gcp-1': kilo_granularity: 'full' here, 'location' on host 'aws-1'",
    ),
    (
        "plan too: an option of the agent that is not a number",
        {"kilo": {"kilo_agent_resync_period": "often"}},
        "host 'aws-1': kilo_agent_resync_period:",
    ),
    (
        "plan too: key age below zero",
        {"aws-2": {"kilo_key_max_age": -1}},
        "host 'aws-2': kilo_key_max_age: -1 out of range",
    ),
    # --- unknown names
    (
        "misspelt mesh-wide variable",
        {"kilo": {"kilo_granulartiy": "full"}},
        "host 'aws-1': kilo_granulartiy: unknown variable; did you mean kilo_granularity?",
    ),
    (
        "misspelt leader flag",
        {"home-2": {"kilo_leadr": True}},
        "host 'home-2': kilo_leadr: unknown variable; did you mean kilo_leader?",
    ),
    (
        "misspelt forced endpoint",
        {"gcp-2": {"kilo_force_endpiont": "203.0.113.22:51820"}},
        "host 'gcp-2': kilo_force_endpiont: unknown variable; did you mean kilo_force_endpoint?",
    ),
    (
        "pod CIDR variable in the plural",
        {"aws-3": {"kilo_pod_cidrs": ["10.244.9.0/24"]}},
        "host 'aws-3': kilo_pod_cidrs: unknown variable; did you mean kilo_pod_cidr?",
    ),
    (
        "subnet variable in the plural",
        {"kilo": {"kilo_subnets": ["10.4.0.0/16"]}},
        "host 'aws-1': kilo_subnets: unknown variable; did you mean kilo_subnet?",
    ),
    (
        "variable close to no known name",
        {"home-1": {"kilo_colour": "blue"}},
        "host 'home-1': kilo_colour: unknown variable (",
    ),
    (
        "misspelt variable given with -e",
        {"extra": {"kilo_encapsulte": "never"}},
        "host 'aws-1': kilo_encapsulte: unknown variable; did you mean kilo_encapsulate?",
    ),
    (
        "misspelt field of a peer",
        peers(allowed_ips=None, allowed_ip=["10.5.0.1/32"]),
        "peer 'laptop': allowed_ip: unknown field of a peer; did you mean allowed_ips?",
    ),
    (
        "misspelt endpoint of a peer",
        peers(endpiont="198.51.100.9:51820"),
        "peer 'laptop': endpiont: unknown field of a peer; did you mean endpoint?",
    ),
    (
        "keepalive of a peer under Kilo's short name",
        peers(persistent_keepalive=None, keepalive=25),
        "peer 'laptop': keepalive: unknown field of a peer; did you mean persistent_keepalive?",
    ),
    (
        "misspelt field of a peer in the registry",
        {
            "registry": {
                "peers": {"phone": {"public_key": OTHER_KEY, "allowedips": ["10.5.0.2/32"]}}
            }
        },
        "peer 'phone': allowedips: unknown field of a peer; did you mean allowed_ips?",
    ),
    (
        "fresh mesh: misspelt leader flag",
        {"fresh": {}, "home-2": {"kilo_leadr": True}},
        "host 'home-2': kilo_leadr: unknown variable; did you mean kilo_leader?",
    ),
    # --- the mesh group and the locations
    (
        "mesh group named by kilo_group in the inventory only",
        {"rename": {"group": "mesh", "kilo_group": "mesh"}},
        "host 'aws-1': kilo_group: 'mesh' in the inventory, but this run reads group 'kilo'",
    ),
    (
        "mesh group that is not named kilo",
        {"rename": {"group": "mesh"}},
        "inventory: kilo_group: no host in group 'kilo', the mesh group (the inventory's groups with child groups: mesh)",
    ),
    (
        "mesh group that differs on one host",
        {"home-1": {"kilo_group": "other"}},
        "host 'home-1': kilo_group: 'other' here, 'kilo' on host 'aws-1'",
    ),
    (
        "host directly under the mesh group",
        {
            "direct": {
                "stray": {"kilo_public_key": OTHER_KEY, "kilo_force_endpoint": "203.0.113.99:51820"}
            }
        },
        "host 'stray': location: directly in group 'kilo', in none of its location groups (aws, gcp, home)",
    ),
    # --- conflicts: two parties claiming one address or range, both named
    (
        "same pod CIDR on two nodes",
        {"aws-2": {"kilo_pod_cidr": "10.244.1.0/24"}},
        "host 'aws-2': kilo_pod_cidr: 10.244.1.0/24 is also the pod range 10.244.1.0/24 of node 'aws-1'",
    ),
    (
        "overlapping pod ranges of two nodes",
        {"gcp-2": {"kilo_pod_cidr": "10.244.0.0/16"}},
        "host 'gcp-2': kilo_pod_cidr: 10.244.0.0/16 holds the pod range 10.244.1.0/24 of node 'aws-1'",
    ),
    (
        "pod range inside another node's",
        {"home-2": {"kilo_pod_cidr": "10.244.4.128/25"}},
        "host 'home-2': kilo_pod_cidr: 10.244.4.128/25 lies inside the pod range 10.244.4.0/24 of node 'gcp-1'",
    ),
    (
        "same internal IP twice in a location",
        {"aws-3": {"kilo_force_internal_ip": "10.1.0.12/16"}},
        "host 'aws-3': kilo_force_internal_ip: 10.1.0.12 is also the internal IP 10.1.0.12 of node 'aws-2'",
    ),
    (
        "same internal IP in two locations",
        {"home-1": {"kilo_force_internal_ip": "10.1.0.11/24"}},
        "host 'home-1': kilo_force_internal_ip: 10.1.0.11 is also the internal IP 10.1.0.11 of node 'aws-1'",
    ),
    (
        "two nodes at one endpoint",
        {"gcp-2": {"kilo_force_endpoint": "198.51.100.21:51820"}},
        "host 'gcp-2': kilo_force_endpoint: 198.51.100.21:51820 is also the endpoint of node 'gcp-1'",
    ),
    (
        "two nodes at one IPv6 endpoint",
        {
            "gcp-1": {"kilo_force_endpoint": "[2001:db8::21]:51820"},
            "gcp-2": {"kilo_force_endpoint": "[2001:db8::21]:51820"},
        },
        "host 'gcp-2': kilo_force_endpoint: [2001:db8::21]:51820 is also the endpoint of node 'gcp-1'",
    ),
    (
        "endpoint at another node's internal IP",
        {"home-2": {"kilo_force_endpoint": "10.3.0.31:51999"}},
        "host 'home-2': kilo_force_endpoint: 10.3.0.31:51999 is at the internal IP 10.3.0.31 of node 'home-1'",
    ),
    (
        "endpoint inside the subnet",
        {"gcp-2": {"kilo_force_endpoint": "10.4.0.9:51820"}},
        "host 'gcp-2': kilo_force_endpoint: 10.4.0.9:51820 lies inside the mesh's subnet 10.4.0.0/16",
    ),
    (
        "peer endpoint inside the subnet",
        peers(endpoint="10.4.3.3:51820"),
        "peer 'laptop': endpoint: 10.4.3.3:51820 lies inside the mesh's subnet 10.4.0.0/16",
    ),
    (
        "pod range holding another node's internal IP",
        {"aws-2": {"kilo_pod_cidr": "10.2.0.0/16"}},
        "host 'aws-2': kilo_pod_cidr: 10.2.0.0/16 holds the internal IP 10.2.0.21 of node 'gcp-1'",
    ),
    (
        "pod range holding its own node's internal IP",
        {"aws-1": {"kilo_pod_cidr": "10.1.0.0/24"}},
        "host 'aws-1': kilo_pod_cidr: 10.1.0.0/24 holds the internal IP 10.1.0.11 of node 'aws-1'",
    ),
    (
        "same CNI compatibility IP on two nodes",
        {
            "kilo": {"kilo_compatibility": "cilium"},
            "aws-1": {"kilo_cni_compatibility_ip": "10.244.1.5/32"},
            "aws-2": {"kilo_cni_compatibility_ip": "10.244.1.5/32"},
        },
        "host 'aws-2': kilo_cni_compatibility_ip: 10.244.1.5 is also the CNI compatibility IP 10.244.1.5 of node 'aws-1'",
    ),
    (
        "subnet holding the hosts' internal IPs",
        {"kilo": {"kilo_subnet": "10.1.0.0/16"}},
        "host 'aws-1': kilo_force_internal_ip: 10.1.0.11 lies inside the mesh's subnet 10.1.0.0/16",
    ),
    (
        "subnet holding the pod ranges",
        {"kilo": {"kilo_subnet": "10.244.0.0/16"}},
        "host 'aws-1': kilo_pod_cidr: 10.244.1.0/24 lies inside the mesh's subnet 10.244.0.0/16",
    ),
    (
        "service CIDR holding the pod ranges",
        {"kilo": {"kilo_service_cidrs": ["10.244.0.0/16"]}},
        "host 'aws-1': kilo_pod_cidr: 10.244.1.0/24 lies inside the service CIDR 10.244.0.0/16",
    ),
    (
        "service CIDR holding an internal IP",
        {"kilo": {"kilo_service_cidrs": ["10.2.0.0/16"]}},
        "host 'gcp-1': kilo_force_internal_ip: 10.2.0.21 lies inside the service CIDR 10.2.0.0/16",
    ),
    (
        "service CIDR that is the subnet",
        {"kilo": {"kilo_service_cidrs": ["10.4.0.0/16"]}},
        "host 'aws-1': kilo_service_cidrs: 10.4.0.0/16 is also the mesh's subnet 10.4.0.0/16",
    ),
    (
        "allowed location IPs holding another location's pod range",
        {"home-1": {"kilo_allowed_location_ips": ["10.244.0.0/16"]}},
        "host 'home-1': kilo_allowed_location_ips: 10.244.0.0/16 holds the pod range 10.244.1.0/24 of node 'aws-1'",
    ),
    (
        "allowed location IPs holding another location's internal IP",
        {"home-1": {"kilo_allowed_location_ips": ["10.1.0.0/16"]}},
        "host 'home-1': kilo_allowed_location_ips: 10.1.0.0/16 holds the internal IP 10.1.0.11 of node 'aws-1'",
    ),
    (
        "allowed location IPs of two locations overlapping",
        {
            "aws-1": {"kilo_allowed_location_ips": ["192.168.10.0/24"]},
            "home-1": {"kilo_allowed_location_ips": ["192.168.0.0/16"]},
        },
        "host 'home-1': kilo_allowed_location_ips: 192.168.0.0/16 holds the allowed location IP 192.168.10.0/24 of node 'aws-1'",
    ),
    (
        "allowed location IPs inside the subnet",
        {"home-1": {"kilo_allowed_location_ips": ["10.4.1.0/24"]}},
        "host 'home-1': kilo_allowed_location_ips: 10.4.1.0/24 lies inside the mesh's subnet 10.4.0.0/16",
    ),
    (
        "peer whose allowed IPs hold a node's pod range",
        peers(allowed_ips=["10.244.0.0/16"]),
        "peer 'laptop': allowed_ips: 10.244.0.0/16 holds the pod range 10.244.1.0/24 of node 'aws-1'",
    ),
    (
        "peer at a leader's WireGuard IP",
        peers(allowed_ips=["10.4.0.1/32"]),
        "peer 'laptop': allowed_ips: 10.4.0.1/32 is also the WireGuard IP 10.4.0.1 of segment location:aws (led by node 'aws-1')",
    ),
    (
        "peer holding the whole subnet",
        peers(allowed_ips=["10.4.0.0/16"]),
        "peer 'laptop': allowed_ips: 10.4.0.0/16 holds the WireGuard IP 10.4.0.1 of segment location:aws",
    ),
    (
        "peer at a node's internal IP",
        peers(allowed_ips=["10.2.0.21/32"]),
        "peer 'laptop': allowed_ips: 10.2.0.21/32 is also the internal IP 10.2.0.21 of node 'gcp-1'",
    ),
    (
        "peer inside a location's allowed location IPs",
        dict(peers(), **{"home-1": {"kilo_allowed_location_ips": ["10.5.0.0/24"]}}),
        "peer 'laptop': allowed_ips: 10.5.0.1/32 lies inside the allowed location IP 10.5.0.0/24 of node 'home-1'",
    ),
    (
        "peer holding the service CIDR",
        {
            "kilo": dict(
                peers(allowed_ips=["10.96.0.0/12"])["kilo"], kilo_service_cidrs=["10.96.0.0/12"]
            )
        },
        "peer 'laptop': allowed_ips: 10.96.0.0/12 is also the service CIDR 10.96.0.0/12",
    ),
    (
        "two peers with one allowed IP",
        peers(peer("p2", ["10.5.0.1/32"])),
        "peer 'p2': allowed_ips: 10.5.0.1/32 is also the allowed IP 10.5.0.1/32 of peer 'laptop'",
    ),
    (
        "two peers with overlapping allowed IPs",
        peers(peer("p2", ["10.5.0.0/24"])),
        "peer 'p2': allowed_ips: 10.5.0.0/24 holds the allowed IP 10.5.0.1/32 of peer 'laptop'",
    ),
    (
        "peers of both stores with one allowed IP",
        {
            "registry": {
                "peers": {"phone": {"public_key": OTHER_KEY, "allowed_ips": ["10.5.0.1/32"]}}
            }
        },
        "peer 'phone': allowed_ips: 10.5.0.1/32 is also the allowed IP 10.5.0.1/32 of peer 'laptop'",
    ),
    (
        "peers of both stores with one key",
        {
            "registry": {
                "peers": {"phone": {"public_key": LAPTOP_KEY, "allowed_ips": ["10.5.0.2/32"]}}
            }
        },
        "peer 'phone': public_key: same key as peer 'laptop'",
    ),
    (
        "peer at a node's endpoint",
        peers(endpoint="203.0.113.11:51820"),
        "peer 'laptop': endpoint: 203.0.113.11:51820 is the endpoint of node 'aws-1'",
    ),
    (
        "two peers of one name",
        peers(peer("laptop", ["10.5.0.9/32"])),
        "peer 'laptop': name: duplicate peer name",
    ),
    (
        "internal IP a host reported that another pins",
        {
            "add": {"aws": {"aws-4": {}}},
            "registry": {
                "hosts": {
                    "aws-4": {
                        "public_key": OTHER_KEY,
                        "internal_ip": "10.1.0.11/16",
                        "external_ip": None,
                    }
                }
            },
        },
        "host 'aws-4': internal_ip (reported by kilo.mesh.key): 10.1.0.11 is also the internal IP 10.1.0.11 of node 'aws-1'",
    ),
    (
        "dual-stack: same IPv6 pod range on two nodes",
        {"dual": {}, "aws-2": {"kilo_pod_cidr": ["10.244.2.0/24", "fd10:244:1::/64"]}},
        "host 'aws-2': kilo_pod_cidr: fd10:244:1::/64 is also the pod range fd10:244:1::/64 of node 'aws-1'",
    ),
    (
        "dual-stack: peer at a leader's IPv6 WireGuard IP",
        dict(peers(allowed_ips=["10.5.0.1/32", "fd04::2/128"]), dual={}),
        "peer 'laptop': allowed_ips: fd04::2/128 is also the WireGuard IP fd04::2 of segment location:gcp (led by node 'gcp-1')",
    ),
    (
        "dual-stack: IPv6 subnet holding the hosts' IPv6 internal IPs",
        {"dual": {}, "kilo": {"kilo_subnet": ["10.4.0.0/16", "fd00:1::/48"]}},
        "host 'aws-1': kilo_force_internal_ip: fd00:1::11 lies inside the mesh's subnet fd00:1::/48",
    ),
    # --- before the key step of a fresh mesh, with stand-ins for what the hosts report
    (
        "fresh mesh: subnet too small for the segments",
        {"fresh": {}, "kilo": {"kilo_subnet": "10.4.0.0/31"}},
        "host 'aws-1': kilo_subnet: 10.4.0.0/31 holds 1 WireGuard IPs, 3 segments need one each",
    ),
    (
        "fresh mesh: subnet too small for full granularity",
        {"fresh": {}, "kilo": {"kilo_subnet": "10.4.0.0/30", "kilo_granularity": "full"}},
        "host 'aws-1': kilo_subnet: 10.4.0.0/30 holds 3 WireGuard IPs, 7 segments need one each",
    ),
    (
        "fresh mesh: peer at a leader's WireGuard IP",
        dict(peers(allowed_ips=["10.4.0.2/32"]), fresh={}),
        "peer 'laptop': allowed_ips: 10.4.0.2/32 is also the WireGuard IP 10.4.0.2 of segment location:gcp",
    ),
    (
        "fresh mesh: same pod CIDR on two nodes",
        {"fresh": {}, "aws-2": {"kilo_pod_cidr": "10.244.1.0/24"}},
        "host 'aws-2': kilo_pod_cidr: 10.244.1.0/24 is also the pod range 10.244.1.0/24 of node 'aws-1'",
    ),
    (
        "fresh mesh: same internal IP twice",
        {"fresh": {}, "aws-3": {"kilo_force_internal_ip": "10.1.0.12/16"}},
        "host 'aws-3': kilo_force_internal_ip: 10.1.0.12 is also the internal IP 10.1.0.12 of node 'aws-2'",
    ),
    (
        "fresh mesh: subnet holding the hosts' internal IPs",
        {"fresh": {}, "kilo": {"kilo_subnet": "10.2.0.0/16"}},
        "host 'gcp-1': kilo_force_internal_ip: 10.2.0.21 lies inside the mesh's subnet 10.2.0.0/16",
    ),
    (
        "fresh mesh: two hosts pin one endpoint",
        {
            "fresh": {},
            "aws-1": {"kilo_force_endpoint": "203.0.113.11:51820"},
            "gcp-1": {"kilo_force_endpoint": "203.0.113.11:51820"},
        },
        "host 'gcp-1': kilo_force_endpoint: 203.0.113.11:51820 is also the endpoint of node 'aws-1'",
    ),
    (
        "fresh mesh: host directly under the mesh group",
        {"fresh": {}, "direct": {"stray": {}}},
        "host 'stray': location: directly in group 'kilo', in none of its location groups",
    ),
    # --- connect.yml: its machines as peers, checked with the mesh before any of them changes
    (
        "connect: two machines at the default address",
        {"connect": {"laptop1": {}, "laptop2": {}}},
        "peer 'laptop2': allowed_ips: 10.10.10.10/32 is also the allowed IP 10.10.10.10/32 of peer 'laptop1'",
        CONNECT,
    ),
    (
        "connect: a machine inside a node's pod range",
        {"connect": {"laptop1": {"kilo_connect_allowed_ip": "10.244.1.7/32"}}},
        "peer 'laptop1': allowed_ips: 10.244.1.7/32 lies inside the pod range 10.244.1.0/24 of node 'aws-1'",
        CONNECT,
    ),
    (
        "connect: a machine at a peer's address",
        {"connect": {"laptop1": {"kilo_connect_allowed_ip": "10.5.0.1/32"}}},
        "peer 'laptop1': allowed_ips: 10.5.0.1/32 is also the allowed IP 10.5.0.1/32 of peer 'laptop'",
        CONNECT,
    ),
    (
        "connect: misspelt variable of a machine",
        {"connect": {"laptop1": {"kilo_connect_alowed_ip": "10.5.0.9/32"}}},
        "host 'laptop1': kilo_connect_alowed_ip: unknown variable; did you mean kilo_connect_allowed_ip?",
        CONNECT,
    ),
    (
        "connect: a node of the mesh as a machine",
        {"connect": {"laptop1": {}}, "extra": {"connect_hosts": "aws-1"}},
        "host 'aws-1': connect_hosts: is a node of the mesh (group 'kilo')",
        CONNECT,
    ),
]

# (what, {target: edits}[, the playbooks]): correct meshes of each feature, which must pass
CONTROLS = [
    ("the example: three locations, a peer", {}),
    ("a first run: no key or endpoint pinned", {"fresh": {}}),
    ("dual-stack", {"dual": {}}),
    ("dual-stack peer", dict(peers(allowed_ips=["10.5.0.1/32", "fd05::1/128"]), dual={})),
    (
        "add-on beside Flannel",
        {"kilo": {"kilo_compatibility": "flannel", "kilo_cni": False, "kilo_local": False}},
    ),
    (
        "add-on beside Cilium",
        {
            "kilo": {"kilo_compatibility": "cilium"},
            "aws-1": {"kilo_cni_compatibility_ip": "10.244.1.1/32"},
            "aws-2": {"kilo_cni_compatibility_ip": "10.244.2.1/32"},
        },
    ),
    ("full granularity", {"kilo": {"kilo_granularity": "full"}}),
    ("cross granularity", {"kilo": {"kilo_granularity": "cross"}}),
    (
        "two locations behind NAT, relayed through the third",
        dict(BEHIND_NAT, kilo={"kilo_relays": ["aws"]}),
    ),
    ("a first run of two locations behind NAT", dict(BEHIND_NAT, fresh={})),
    (
        "leader flags, false meaning false",
        {"aws-2": {"kilo_leader": True}, "gcp-1": {"kilo_leader": False}},
    ),
    (
        "a location's allowed IPs holding its own LAN",
        {"home-1": {"kilo_allowed_location_ips": ["10.3.0.0/16", "192.168.3.0/24"]}},
    ),
    (
        "peers of both stores, a service CIDR",
        {
            "kilo": {"kilo_service_cidrs": ["10.96.0.0/12"]},
            "registry": {
                "peers": {"phone": {"public_key": OTHER_KEY, "allowed_ips": ["10.5.0.2/32"]}}
            },
        },
    ),
    (
        "a peer inside the subnet where no segment has its WireGuard IP",
        peers(allowed_ips=["10.4.0.200/32"]),
    ),
    ("one location of every host, no location group", {"flat": {}}),
    (
        "a host's own kilo_location outside the location groups",
        {"direct": {"stray": {"kilo_location": "gcp"}}},
    ),
    (
        "mesh group named with -e kilo_group",
        {"rename": {"group": "mesh", "kilo_group": "mesh"}, "extra": {"kilo_group": "mesh"}},
    ),
    (
        "variables the playbooks and the lab read",
        {
            "extra": {"kilo_rotate_hosts": "aws-1"},
            "kilo": {"kilo_lab_prefix": "x", "kilo_kube": {"kubeconfig": "/nowhere"}},
        },
    ),
    ("connect: one machine at the default address", {"connect": {"laptop1": {}}}, CONNECT),
    (
        "connect: two machines at their own addresses",
        {
            "connect": {
                "laptop1": {"kilo_connect_allowed_ip": "10.5.0.11/32"},
                "laptop2": {"kilo_connect_allowed_ip": "10.5.0.12/32"},
            }
        },
        CONNECT,
    ),
]


def _hosts(data):
    return [
        (location, host, hvars)
        for location, group in data["kilo"]["children"].items()
        for host, hvars in group.get("hosts", {}).items()
    ]


def _dual(data):
    """Every host of both families: an IPv6 internal IP (fd00:<location>::<host>) and pod range."""
    data["kilo"]["vars"]["kilo_subnet"] = ["10.4.0.0/16", "fd04::/64"]
    data["kilo"]["vars"]["kilo_peers"][0]["allowed_ips"] = ["10.5.0.1/32", "fd05::1/128"]
    for index, (dummy, host, hvars) in enumerate(_hosts(data)):
        v4 = hvars["kilo_force_internal_ip"]
        suffix = v4.split("/")[0].split(".")
        hvars["kilo_force_internal_ip"] = [v4, "fd00:%s::%s/64" % (suffix[1], suffix[3])]
        hvars["kilo_pod_cidr"] = [hvars["kilo_pod_cidr"], "fd10:244:%d::/64" % (index + 1)]


def inventory_with(directory, edits):
    """inventory/example.yml in ``directory`` with ``edits``: {"kilo": group vars, HOST: its vars
    (a value None removes one), "fresh": no key or endpoint pinned, "dual": both IP families,
    "two-groups": gcp-1 under aws too, "direct": {host: vars} directly under the group,
    "add": {location: {host: vars}}, "flat": every host directly under the group, "rename":
    {"group": the mesh group's name, "kilo_group": its group variable}, "registry": the registry's
    content, "connect": {machine: vars} of group connect, "extra": -e variables}.
    Returns (inventory path, extra arguments)."""
    with open(EXAMPLE) as f:
        data = yaml.safe_load(f)
    if "fresh" in edits:
        for dummy, dummy, hvars in _hosts(data):
            hvars.pop("kilo_public_key", None)
            hvars.pop("kilo_force_endpoint", None)
    if "dual" in edits:
        _dual(data)
    for target, values in edits.items():
        if target in ("fresh", "dual", "registry", "extra", "rename", "flat"):
            continue
        if target == "kilo":
            data["kilo"]["vars"].update(copy.deepcopy(values))
        elif target == "two-groups":
            data["kilo"]["children"]["aws"]["hosts"]["gcp-1"] = {}
        elif target == "direct":
            data["kilo"].setdefault("hosts", {}).update(copy.deepcopy(values))
        elif target == "add":
            for location, hosts in values.items():
                data["kilo"]["children"][location]["hosts"].update(copy.deepcopy(hosts))
        elif target == "connect":
            data["connect"] = {"hosts": copy.deepcopy(values)}
        else:
            for dummy, host, hvars in _hosts(data):
                if host == target:
                    for key, value in values.items():
                        if value is None:
                            hvars.pop(key, None)
                        else:
                            hvars[key] = copy.deepcopy(value)
    if "flat" in edits:
        hosts = {}
        for location, host, hvars in _hosts(data):
            hosts[host] = dict(data["kilo"]["children"][location].get("vars") or {}, **hvars)
        data["kilo"]["hosts"] = hosts
        del data["kilo"]["children"]
    if "rename" in edits:
        mesh = data.pop("kilo")
        if edits["rename"].get("kilo_group"):
            mesh["vars"]["kilo_group"] = edits["rename"]["kilo_group"]
        data = dict({edits["rename"]["group"]: mesh}, **data)
    path = os.path.join(directory, "inventory.yml")
    with open(path, "w") as f:
        yaml.safe_dump(data, f)
    if "registry" in edits:
        registry = {"hosts": {}, "peers": {}}
        registry.update(edits["registry"])
        with open(os.path.join(directory, "kilo-registry.json"), "w") as f:
            json.dump(registry, f)
    extra = ["-e", json.dumps(edits["extra"])] if "extra" in edits else []
    return path, extra


def flat(text):
    """Ansible's output with its line wrapping undone and YAML's doubled quotes single."""
    return re.sub(r"\s*\n\s*", " ", text).replace("''", "'")


def run(edits, playbook):
    """(rc, output, files written) of ``playbook`` over the example inventory with ``edits``."""
    directory = tempfile.mkdtemp(prefix="kilo-bad-inputs-")
    inventory, extra = inventory_with(directory, edits)
    before = set(os.listdir(directory))
    argv = [
        os.path.join(ANSIBLE_BIN, "ansible-playbook"),
        "-i",
        inventory,
        os.path.join(REPO, "playbooks", playbook),
        "--check",
    ] + extra
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
        ANSIBLE_NOCOLOR="1",
    )
    proc = subprocess.run(
        argv,
        cwd=directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
        timeout=300,
    )
    written = sorted(set(os.listdir(directory)) - before)
    return proc.returncode, proc.stdout, written


class Runs(object):
    """The runs of the selected tests, started together on first use, several at a time
    (KILO_TEST_JOBS, default 3); each test waits for its own."""

    def __init__(self, wanted):
        self._wanted = wanted  # [(what, edits, playbook)]
        self._lock = threading.Lock()
        self._futures = None
        self._pool = None

    def get(self, what, playbook):
        with self._lock:
            if self._futures is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=int(os.environ.get("KILO_TEST_JOBS", "3"))
                )
                self._futures = dict(
                    ((name, book), self._pool.submit(run, edits, book))
                    for name, edits, book in self._wanted
                )
        return self._futures[(what, playbook)].result()

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _playbooks(case, index):
    return case[index] if len(case) > index else PLAN_SITE


@pytest.fixture(scope="module")
def runs(request):
    wanted = []
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.module is sys.modules[__name__] and "case" in params:
            wanted.append((params["case"][0], params["case"][1], params["playbook"]))
    found = Runs(wanted)
    yield found
    found.close()


def _params(cases, index):
    return [
        pytest.param(case, name, id="%s [%s]" % (case[0], name))
        for case in cases
        for name in _playbooks(case, index)
    ]


@pytest.mark.parametrize("case, playbook", _params(CASES, 3))
def test_a_bad_input_is_refused_before_any_host(runs, case, playbook):
    what, edits, expected = case[:3]
    rc, out, written = runs.get(what, playbook)
    shown = flat(out)
    assert rc != 0, out[-3000:]
    assert expected in shown, out[-3000:]
    assert "UNREACHABLE" not in out and "Traceback" not in out, out[-3000:]
    assert "kilo-registry.json" not in written and "kilo-topology.dot" not in written, written


# the first task of each playbook: plan.yml's reading, site.yml's and connect.yml's kilo.mesh.validate
FIRST_TASK = {
    "site.yml": "Check the whole mesh on the controller",
    "connect.yml": "Check the whole mesh and these machines' peers on the controller",
}


@pytest.mark.parametrize("case, playbook", _params(CONTROLS, 2))
def test_a_correct_mesh_passes(runs, case, playbook):
    what, edits = case[:2]
    rc, out, dummy = runs.get(what, playbook)
    if playbook == "plan.yml":
        assert rc == 0, out[-3000:]
        return
    # the hosts do not exist: the run fails once it reaches them, after the check passed
    found = re.search(r"TASK \[%s\][^\n]*\n\s*(\w+):" % re.escape(FIRST_TASK[playbook]), out)
    assert found and found.group(1) == "ok", out[-3000:]
    assert "Traceback" not in out
