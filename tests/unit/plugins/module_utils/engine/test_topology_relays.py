# -*- coding: utf-8 -*-
"""Relayed meshes (docs/DESIGN.md, "Relays and NAT traversal: the plan", stage 1).

The proof is a packet walk over the plans the engine writes: from every node, a packet from its
pod and from its internal IP to every other node's pod and internal IP, following what a host
does with the plan: rules then routes (longest prefix), the private network for routes through
an internal IP, WireGuard for routes into the interface (the peer of the longest allowed-IP
match; the link is up only where one end has an endpoint the other can reach, or the other end
keeps alive towards it), the receiver's inbound check (the packet's source must match, longest
first, the allowed IPs of the peer it came from), and at a relay the same lookup again (out of
the interface it came in on, which the relay's firewall must accept). Every packet must arrive
in at most two WireGuard hops, on random meshes of 1-3 relay locations and 2-5 locations behind
NAT, with other reachable locations, outside peers and every granularity.
"""

import base64
import functools
import ipaddress
import random

import pytest

from flat_plans import build_plans
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import peer_config
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.engine.relays import rendezvous
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan

IFACE = "kilo0"


def key(i):
    return base64.b64encode(i.to_bytes(4, "big") * 8).decode()


def relayed_mesh(rnd):
    """(nodes, peers, options, NAT'd locations) of a random mesh with locations behind NAT."""
    granularity = rnd.choice(["location", "full", "cross"])
    kinds = (
        ["relay"] * rnd.randint(1, 3) + ["public"] * rnd.randint(0, 2) + ["nat"] * rnd.randint(2, 5)
    )
    nodes, nat_keys, number = [], [], 0
    locations = []
    for li, kind in enumerate(kinds):
        location = "%s%d" % (kind[0], li)
        locations.append((location, kind))
        for j in range(rnd.randint(1, 3)):
            number += 1
            node = {
                "name": "n%02d" % number,
                "location": location,
                "public_key": key(number),
                "internal_ip": "10.%d.0.%d/24" % (li + 20, j + 1) if rnd.random() < 0.85 else None,
                "pod_cidr": "10.100.%d.0/24" % number,
                "leader": rnd.random() < 0.25,
            }
            if kind == "nat":
                how = rnd.choice(["private", "internal", "none"])
                if how == "private":
                    node["endpoint"] = "172.16.%d.%d:51820" % (li, j + 1)
                elif how == "internal" and node["internal_ip"]:
                    node["endpoint"] = node["internal_ip"].split("/")[0] + ":51820"
                if node.get("endpoint"):
                    node["behind_nat"] = True
                node["persistent_keepalive"] = rnd.choice([0, 0, 10])
                nat_keys.append(key(number))
            elif granularity != "location" or j == 0 or rnd.random() < 0.8:
                # (under location, a follower without an endpoint: Kilo's; elsewhere it would be a segment behind NAT)
                node["endpoint"] = "203.0.113.%d:51820" % number
            nodes.append(node)
    # some relays learned a mapping of a NAT'd node (Kilo's discovered endpoints)
    for node in nodes:
        if node["location"].startswith("r") and rnd.random() < 0.4:
            node["discovered_endpoints"] = dict(
                (k, "198.51.100.%d:4%04d" % (i % 250 + 1, i))
                for i, k in enumerate(nat_keys)
                if rnd.random() < 0.5
            )
    peers = [
        {
            "name": "p%d" % j,
            "public_key": key(900 + j),
            "allowed_ips": ["10.200.%d.0/24" % j],
            "endpoint": "198.51.100.%d:51820" % (200 + j),
        }
        for j in range(rnd.randint(0, 2))
    ]
    for peer in peers[1:]:
        # a laptop: no endpoint, keeps alive towards the mesh (reached through a relay)
        del peer["endpoint"]
        peer["persistent_keepalive"] = 25
    relay_locations = [loc for loc, kind in locations if kind == "relay"]
    others = [loc for loc, kind in locations if kind == "public"]
    options = {
        "granularity": granularity,
        "encapsulate": rnd.choice(["always", "crosssubnet", "never"]),
        "cni": rnd.random() < 0.7,
        "relays": relay_locations
        if others and rnd.random() < 0.7
        else rnd.choice([[], relay_locations]),
    }
    return nodes, peers, options


@functools.lru_cache(maxsize=None)
def net(text):
    return ipaddress.ip_network(text, strict=False)


class Longest(object):
    """Longest-prefix match of an address over items, each with its networks (``nets_of(item)``);
    the first item wins among equal networks (a host's first route, WireGuard's one peer)."""

    def __init__(self, items, nets_of):
        self.by_len = {}
        for item in items:
            for text in nets_of(item):
                candidate = net(text)
                bits = candidate.max_prefixlen
                self.by_len.setdefault(
                    (candidate.version, bits, candidate.prefixlen), {}
                ).setdefault(int(candidate.network_address), item)
        self.order = sorted(self.by_len, key=lambda k: -k[2])

    def __call__(self, ip):
        value = int(ip)
        for version, bits, prefixlen in self.order:
            if version == ip.version:
                item = self.by_len[(version, bits, prefixlen)].get(
                    value >> (bits - prefixlen) << (bits - prefixlen)
                )
                if item is not None:
                    return item
        return None


class Mesh(object):
    def __init__(self, nodes, peers, options):
        self.result = build_plans(nodes, peers, options)
        self.plans = self.result["plans"]
        # each outside peer's own [Peer] sections (showconf peer, kilo.mesh.connect), its address
        self.peer_cfg = dict(
            (p["name"], peer_config(nodes, peers, p["name"], options)) for p in peers
        )
        self.peer_inputs = dict((p["name"], p) for p in peers)
        self.inputs = dict((n["name"], n) for n in nodes)
        self.by_key = {}
        self.segments = dict((s["key"], s) for s in self.result["segments"])
        for seg in self.result["segments"]:
            self.by_key[seg["public_key"]] = seg["leader"]
        self.internal = dict(
            (n["name"], n["internal_ip"].split("/")[0]) for n in nodes if n.get("internal_ip")
        )
        self.owner = dict((ip, name) for name, ip in self.internal.items())
        self._lookups = {}

    def unreachable(self, name):
        return not self.segments[self.plans[name]["segment"]].get("reachable", True)

    def reachable_at(self, sender, name, endpoint):
        """Whether a WireGuard packet from leader ``sender`` to ``endpoint`` reaches leader ``name``: its
        own endpoint when it is reachable or of the sender's location (behind_nat: no *other* location
        reaches it), a discovered mapping of a NAT'd one."""
        if endpoint is None:
            return False
        return (
            not self.unreachable(name)
            or endpoint != self.inputs[name].get("endpoint")
            or self.inputs[sender]["location"] == self.inputs[name]["location"]
        )

    def entry(self, name, public_key):
        return next((p for p in self.plans[name]["peers"] if p["public_key"] == public_key), None)

    def link_up(self, a, b):
        """A WireGuard packet from leader ``a`` gets to leader ``b``."""
        key_a, key_b = self.inputs[a]["public_key"], self.inputs[b]["public_key"]
        forward, back = self.entry(a, key_b), self.entry(b, key_a)
        if forward is None or back is None:
            return False
        if self.reachable_at(a, b, forward["endpoint"]):
            return True
        # b keeps alive towards a at an endpoint it reaches: a learns b's mapping
        return bool(back["persistent_keepalive"]) and self.reachable_at(b, a, back["endpoint"])

    def local(self, name, ip):
        plan = self.plans[name]
        own = [plan["pod_cidr"]] if plan["pod_cidr"] else []
        if name in self.internal:
            own.append(self.internal[name] + "/32")
        if plan["address"]:
            own.append(plan["address"].split("/")[0] + "/32")
        return any(ip in net(c) for c in own)

    def lan(self, a, b):
        return (
            a in self.internal
            and b in self.internal
            and self.inputs[a]["location"] == self.inputs[b]["location"]
        )

    def route(self, name, src, dst, iif):
        plan = self.plans[name]
        tables = [254]
        for rule in plan["rules"]:
            if (
                (rule["src"] is None or src in net(rule["src"]))
                and (rule["dst"] is None or dst in net(rule["dst"]))
                and (rule["iif"] is None or rule["iif"] == iif)
            ):
                tables.insert(0, rule["table"])
                break
        for table in tables:
            found = self.lookup(name, table)(dst)
            if found is not None:
                return found
        return None

    def lookup(self, name, what):
        """The longest match of plan ``name``'s routes of table ``what``, or of its peers ("peers")."""
        cached = self._lookups.get((name, what))
        if cached is None:
            plan = self.plans[name]
            if what == "peers":
                cached = Longest(
                    [p for p in plan["peers"] if not p.get("probe")], lambda p: p["allowed_ips"]
                )
            else:
                cached = Longest(
                    [r for r in plan["routes"] if r["table"] == what], lambda r: [r["dst"]]
                )
            self._lookups[(name, what)] = cached
        return cached

    def peer_reaches(self, name, leader):
        """Outside peer ``name`` sends to ``leader`` at an endpoint that gets there: a reachable
        leader's (a NAT'd leader's mapping is filtered: it never sent to an endpoint-less peer)."""
        entry = next(
            (
                e
                for e in self.peer_cfg[name]
                if e["public_key"] == self.inputs[leader]["public_key"]
            ),
            None,
        )
        return (
            entry is not None
            and entry["endpoint"] is not None
            and (not self.unreachable(leader) or self.peer_inputs[name].get("endpoint"))
        )

    def walk_from_peer(self, name, src, dst):
        """The path of a packet from outside peer ``name`` (its own config, routed into its tunnel)."""
        src, dst = ipaddress.ip_address(src), ipaddress.ip_address(dst)
        entry = Longest(self.peer_cfg[name], lambda p: p["allowed_ips"])(dst)
        assert entry is not None, "peer %s: no section for %s" % (name, dst)
        target = self.by_key.get(entry["public_key"])
        assert target is not None, "peer %s: %s goes to another peer" % (name, dst)
        assert self.peer_reaches(name, target), "peer %s -> %s: no link for %s" % (
            name,
            target,
            dst,
        )
        back = self.lookup(target, "peers")(src)
        assert back is not None and back["public_key"] == self.peer_inputs[name]["public_key"], (
            "%s drops %s from peer %s: source %s is not its" % (target, dst, name, src)
        )
        return self.walk(target, src, dst, iif=IFACE, hops=1, path=[name, (target, IFACE)])

    def walk(self, start, src, dst, iif=None, hops=0, path=None):
        """The path [(node, how)] of a packet from ``start``; raises AssertionError where it is lost."""
        src, dst = ipaddress.ip_address(src), ipaddress.ip_address(dst)
        here, path = start, path or [start]
        for dummy in range(20):
            if self.local(here, dst):
                return path, hops
            found = self.route(here, src, dst, iif)
            if found is None:
                target = self.owner.get(str(dst))
                if target and (
                    self.lan(here, target)
                    or self.inputs[target].get("endpoint", "").startswith(str(dst) + ":")
                    and self.reachable_at(here, target, self.inputs[target]["endpoint"])
                ):
                    return path + [
                        (target, "underlay")
                    ], hops  # the LAN, or Kilo's endpoint by the underlay
                raise AssertionError("%s: no route to %s (path %s)" % (here, dst, path))
            if found["device"] != IFACE:
                target = self.owner.get(found["gateway"])
                assert target and self.lan(here, target), "%s: gateway %s off the LAN" % (
                    here,
                    found["gateway"],
                )
                here, iif = target, found["device"]
                path.append((here, found["device"]))
                continue
            plan = self.plans[here]
            assert plan["leader"], "%s routes %s into WireGuard but leads nothing" % (here, dst)
            if iif == IFACE:
                assert plan["firewall"].get("relay_accept"), (
                    "%s forwards %s back into WireGuard, unaccepted" % (here, dst)
                )
            peer = self.lookup(here, "peers")(dst)
            assert peer is not None, "%s: no WireGuard peer for %s" % (here, dst)
            target = self.by_key.get(peer["public_key"])
            if target is None and peer["name"] in self.peer_cfg:
                # an outside peer: it reached us first (keepalive), or we reach its endpoint
                outside = self.peer_inputs[peer["name"]]
                assert outside.get("endpoint") or self.peer_reaches(peer["name"], here), (
                    "%s: %s goes to the endpoint-less peer %s, which never reaches it"
                    % (here, dst, peer["name"])
                )
                back = Longest(self.peer_cfg[peer["name"]], lambda p: p["allowed_ips"])(src)
                assert back is not None and back["public_key"] == self.inputs[here]["public_key"], (
                    "peer %s drops %s from %s: source %s is not %s's"
                    % (peer["name"], dst, here, src, here)
                )
                assert any(dst in net(a) for a in outside["allowed_ips"])
                return path + [(peer["name"], IFACE)], hops + 1
            assert target is not None, "%s: %s goes to the outside peer %s" % (
                here,
                dst,
                peer["name"],
            )
            assert self.link_up(here, target), "%s -> %s: no WireGuard link for %s" % (
                here,
                target,
                dst,
            )
            back = self.lookup(target, "peers")(src)
            assert back is not None and back["public_key"] == self.inputs[here]["public_key"], (
                "%s drops %s from %s: source %s is not %s's" % (target, dst, here, src, here)
            )
            hops += 1
            here, iif = target, IFACE
            path.append((here, IFACE))
        raise AssertionError("a loop: %s" % path)


def addresses(mesh, name):
    plan = mesh.plans[name]
    out = []
    if plan["pod_cidr"]:
        out.append(str(next(net(plan["pod_cidr"]).hosts())))
    if name in mesh.internal:
        out.append(mesh.internal[name])
    return out


@pytest.mark.parametrize("chunk", range(4))
def test_packet_walk_every_pair_in_two_hops(chunk):
    counts = {"meshes": 0, "packets": 0}
    for seed in range(chunk * 50, chunk * 50 + 50):
        nodes, peers, options = relayed_mesh(random.Random(seed))
        counts["meshes"] += 1
        walk_all(Mesh(nodes, peers, options), "seed %d %s" % (seed, options), counts)
    print(counts)


def walk_all(mesh, what, counts):
    """Every plan passes the host's check, and every packet between two nodes arrives in <= 2 hops."""
    for plan in mesh.plans.values():
        check_plan(plan, IFACE)
    for path in mesh.result.get("paths", ()):
        a, b = mesh.segments[path["a"]], mesh.segments[path["b"]]
        if (
            not a["reachable"]
            and not b["reachable"]
            and a["location"] == b["location"]
            and (a["endpoint"] or b["endpoint"])
        ):
            assert path["path"] == "direct", "%s: %s" % (
                what,
                path,
            )  # behind_nat: no *other* location reaches it
            counts["one location behind NAT, direct"] = (
                counts.get("one location behind NAT, direct", 0) + 1
            )
    names = sorted(mesh.plans)
    for a in names:
        for b in names:
            for src in addresses(mesh, a) if a != b else ():
                for dst in addresses(mesh, b):
                    try:
                        dummy, hops = mesh.walk(a, src, dst)
                    except AssertionError as e:
                        raise AssertionError(
                            "%s: %s -> %s (%s -> %s): %s" % (what, a, b, src, dst, e)
                        )
                    assert hops <= 2, "%s: %s -> %s took %d hops" % (what, src, dst, hops)
                    counts["packets"] += 1
                    counts["through a relay"] = counts.get("through a relay", 0) + (hops == 2)
    # endpoint-less outside peers (laptops) reach every node, and every node them, in <= 2 hops
    for name, peer in mesh.peer_inputs.items():
        if peer.get("endpoint"):
            continue  # Kilo's peers: as Kilo connects them
        mine = str(next(net(peer["allowed_ips"][0]).hosts()))
        for b in names:
            for other in addresses(mesh, b):
                for start, src, dst in ((name, mine, other), (b, other, mine)):
                    try:
                        if start == name:
                            dummy, hops = mesh.walk_from_peer(name, src, dst)
                        else:
                            dummy, hops = mesh.walk(start, src, dst)
                    except AssertionError as e:
                        raise AssertionError(
                            "%s: %s -> %s (%s -> %s): %s" % (what, start, dst, src, dst, e)
                        )
                    assert hops <= 2, "%s: %s -> %s took %d hops" % (what, src, dst, hops)
                    counts["peer packets"] = counts.get("peer packets", 0) + 1
                    counts["peer packets through a relay"] = counts.get(
                        "peer packets through a relay", 0
                    ) + (hops == 2)


def test_relay_entries_and_result():
    nodes = [
        {
            "name": "r",
            "location": "r",
            "endpoint": "203.0.113.1:51820",
            "internal_ip": "10.0.0.1/24",
            "pod_cidr": "10.100.1.0/24",
            "public_key": key(1),
        },
        {
            "name": "s",
            "location": "s",
            "endpoint": "203.0.113.2:51820",
            "internal_ip": "10.1.0.1/24",
            "pod_cidr": "10.100.2.0/24",
            "public_key": key(2),
        },
        {
            "name": "u",
            "location": "u",
            "endpoint": "10.2.0.1:51820",
            "behind_nat": True,
            "internal_ip": "10.2.0.1/24",
            "pod_cidr": "10.100.3.0/24",
            "public_key": key(3),
        },
        {
            "name": "v",
            "location": "v",
            "internal_ip": "10.3.0.1/24",
            "pod_cidr": "10.100.4.0/24",
            "public_key": key(4),
            "persistent_keepalive": 7,
        },
    ]
    result = build_plans(nodes, [], {"relays": ["r", "s"]})
    relay = rendezvous(
        "location:u",
        "location:v",
        [type("S", (), {"key": k}) for k in ("location:r", "location:s")],
    )
    relay_name = relay.key.split(":")[1]
    u = result["plans"]["u"]
    assert [p["name"] for p in u["peers"]] == ["location:r", "location:s"]
    carried = [p for p in u["peers"] if p.get("relayed")]
    assert [(p["name"], p["relayed"]) for p in carried] == [(relay.key, ["location:v"])]
    assert (
        "10.100.4.0/24" in carried[0]["allowed_ips"] and "10.3.0.1/32" in carried[0]["allowed_ips"]
    )
    assert set(p["persistent_keepalive"] for p in u["peers"]) == {25}
    assert set(p["persistent_keepalive"] for p in result["plans"]["v"]["peers"]) == {7}
    for name in ("r", "s"):
        plan = result["plans"][name]
        assert plan["firewall"]["relay_accept"] is True
        assert [
            p["endpoint"] for p in plan["peers"] if p["name"] in ("location:u", "location:v")
        ] == [None, None]
        assert not any("relayed" in p for p in plan["peers"])
    assert "relay_accept" not in u["firewall"]
    assert [(s["key"], s["reachable"], s["relay"]) for s in result["segments"]] == [
        ("location:r", True, True),
        ("location:s", True, True),
        ("location:u", False, False),
        ("location:v", False, False),
    ]
    assert {"a": "location:u", "b": "location:v", "path": "relayed", "via": relay.key} in result[
        "paths"
    ]
    assert {"a": "location:r", "b": "location:u", "path": "direct", "via": None} in result["paths"]
    assert len(result["paths"]) == 5
    # only the named relays relay; a discovered mapping is the NAT'd leader's endpoint for everyone
    other = "s" if relay_name == "r" else "r"
    result = build_plans(nodes, [], {"relays": [other]})
    assert [p["name"] for p in result["plans"]["u"]["peers"] if p.get("relayed")] == [
        "location:" + other
    ]
    assert "relay_accept" not in result["plans"][relay_name]["firewall"]
    nodes[0]["discovered_endpoints"] = {key(3): "198.51.100.9:40001"}
    plans = build_plans(nodes, [], {})["plans"]
    assert [p["endpoint"] for p in plans["s"]["peers"] if p["name"] == "location:u"] == [
        "198.51.100.9:40001"
    ]


def test_leader_is_reachable_first():
    nodes = [
        {
            "name": "a",
            "location": "x",
            "endpoint": "203.0.113.1:51820",
            "internal_ip": "10.0.0.1/24",
            "public_key": key(1),
        },
        {
            "name": "b",
            "location": "y",
            "endpoint": "198.51.100.2:51820",
            "internal_ip": "10.1.0.1/24",
            "public_key": key(2),
            "leader": True,
            "behind_nat": True,
        },
        {
            "name": "c",
            "location": "y",
            "endpoint": "10.1.0.2:51820",
            "internal_ip": "10.1.0.2/24",
            "public_key": key(3),
        },
    ]
    segments = build_plans(nodes, [])["segments"]
    assert [(s["leader"], s.get("reachable")) for s in segments] == [("a", None), ("c", None)]
    assert "paths" not in build_plans(
        nodes, []
    )  # every segment reachable: Kilo's mesh, but for the leader
    nodes[2]["behind_nat"] = True
    result = build_plans(nodes, [])
    assert [(s["leader"], s["reachable"]) for s in result["segments"]] == [
        ("a", True),
        ("b", False),
    ]


def test_refusals_name_the_segment_and_the_field():
    nodes = [
        {
            "name": "a",
            "location": "x",
            "endpoint": "203.0.113.1:51820",
            "public_key": key(1),
            "internal_ip": "10.0.0.1/24",
        },
        {
            "name": "b",
            "location": "y",
            "behind_nat": True,
            "endpoint": "10.1.0.1:51820",
            "internal_ip": "10.1.0.1/24",
            "public_key": key(2),
        },
        {"name": "c", "location": "z", "internal_ip": "10.2.0.1/24", "public_key": key(3)},
    ]
    with pytest.raises(KiloError) as info:
        build_plans(nodes, [], {"relays": ["y"]})
    assert (info.value.subject, info.value.field) == ("options", "relays")
    assert "neither location:y nor location:z can be reached" in str(info.value)
    assert str(info.value).endswith(
        "y names no location with a reachable leader to relay between them: add one (x)"
    )
    assert build_plans(nodes, [], {"relays": "x"})["paths"][-1]["via"] == "location:x"
    with pytest.raises(KiloError) as info:
        build_plans(nodes, [], {"relays": [1]})
    assert (info.value.subject, info.value.field) == ("options", "relays")
    # cross: the only reachable node shares a location (a group) with one end, so cannot relay it
    nodes[2]["location"] = "x"
    with pytest.raises(KiloError) as info:
        build_plans(nodes, [], {"granularity": "cross"})
    assert (info.value.subject, info.value.field) == ("node 'c'", "endpoint")
    assert "no other segment has a reachable leader" in str(info.value)
    assert sorted(build_plans(nodes, [], {"granularity": "location"})["plans"]) == ["a", "b", "c"]


def every_walk(mesh):
    walk_all(mesh, "", {"packets": 0})


def swap_relay(mesh):
    """On one leader behind NAT, the CIDRs one relay's entry carries moved to another relay's entry:
    its end then relays the pair through another relay than the far end."""
    segments = dict((seg["key"], seg) for seg in mesh.result["segments"])
    for plan in mesh.plans.values():
        carrying = [p for p in plan["peers"] if p.get("relayed")]
        others = [
            p
            for p in plan["peers"]
            if segments.get(p["name"], {}).get("relay") and not p.get("relayed")
        ]
        if carrying and others:
            own = segments[carrying[0]["name"]]
            own = set(own["allowed_ips"] + own["allowed_location_ips"])
            moved = [c for c in carrying[0]["allowed_ips"] if c not in own]
            plan["peers"] = [
                dict(p, allowed_ips=sorted(own))
                if p is carrying[0]
                else dict(p, allowed_ips=p["allowed_ips"] + moved)
                if p is others[0]
                else p
                for p in plan["peers"]
            ]
            return True
    return False


def test_the_walk_catches_broken_plans():
    for seed in range(100):
        nodes, peers, options = relayed_mesh(random.Random(seed))
        if swap_relay(Mesh(nodes, peers, options)):
            break
    every_walk(Mesh(nodes, peers, options))
    breakages = {
        # a relay that does not accept forwarding back into the interface
        "relay_accept": lambda mesh: [
            plan["firewall"].pop("relay_accept", None) for plan in mesh.plans.values()
        ],
        # the relayed CIDRs left where Kilo has them: no entry holds them
        "moves": lambda mesh: [
            plan.update(
                peers=[
                    dict(p, allowed_ips=p["allowed_ips"][:1]) if p.get("relayed") else p
                    for p in plan["peers"]
                ]
            )
            for plan in mesh.plans.values()
        ],
        "asymmetry": swap_relay,
    }
    for what, breaking in breakages.items():
        mesh = Mesh(nodes, peers, options)
        breaking(mesh)
        with pytest.raises(AssertionError) as info:
            every_walk(mesh)
        print("seed %d, %s: caught (%s)" % (seed, what, str(info.value).splitlines()[0]))


def test_endpoints_behind_nat_claim_nothing():
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.conflicts import check_conflicts
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import Topology

    nodes = [
        {
            "name": "a",
            "location": "x",
            "endpoint": "203.0.113.1:51820",
            "public_key": key(1),
            "internal_ip": "10.20.0.1/24",
        },
        {
            "name": "b",
            "location": "y",
            "behind_nat": True,
            "endpoint": "192.168.1.2:51820",
            "internal_ip": "10.21.0.1/24",
            "public_key": key(2),
        },
        {
            "name": "c",
            "location": "z",
            "behind_nat": True,
            "endpoint": "192.168.1.2:51820",
            "internal_ip": "10.22.0.1/24",
            "public_key": key(3),
        },
    ]
    check_conflicts(Topology(nodes, []))
    del nodes[1]["behind_nat"], nodes[2]["behind_nat"]
    with pytest.raises(KiloError, match="is also the endpoint of node 'b'"):
        check_conflicts(Topology(nodes, []))


def timed_mesh():
    """r and s relay; u and v behind NAT, their mappings seen by r."""
    nodes = [
        {
            "name": "r",
            "location": "r",
            "endpoint": "203.0.113.1:51820",
            "internal_ip": "10.20.0.1/24",
            "pod_cidr": "10.100.1.0/24",
            "public_key": key(1),
            "discovered_endpoints": {key(3): "198.51.100.3:40003", key(4): "198.51.100.4:40004"},
        },
        {
            "name": "s",
            "location": "s",
            "endpoint": "203.0.113.2:51820",
            "internal_ip": "10.21.0.1/24",
            "pod_cidr": "10.100.2.0/24",
            "public_key": key(2),
        },
        {
            "name": "u",
            "location": "u",
            "behind_nat": True,
            "endpoint": "10.22.0.1:51820",
            "internal_ip": "10.22.0.1/24",
            "pod_cidr": "10.100.3.0/24",
            "public_key": key(3),
        },
        {
            "name": "v",
            "location": "v",
            "internal_ip": "10.23.0.1/24",
            "pod_cidr": "10.100.4.0/24",
            "public_key": key(4),
        },
    ]
    return nodes, dict((n["name"], n) for n in nodes)


def entries(result, name):
    return dict((p["name"], p) for p in result["plans"][name]["peers"])


def test_timed_inputs_count_only_at_a_time():
    nodes, by = timed_mesh()
    for node in ("u", "v"):
        by[node]["path_state"] = {"direct": {}}
    result = build_plans(nodes, [], {})
    assert result["paths"][-1]["path"] == "relayed" and result["next_change"] is None
    relay = result["paths"][-1]["via"]
    other = "location:s" if relay == "location:r" else "location:r"
    # probing: a probe entry each way, with the mapping, nothing moved off the relay
    result = build_plans(nodes, [], {}, now=1000)
    probe = entries(result, "u")["location:v"]
    assert probe == {
        "name": "location:v",
        "public_key": key(4),
        "endpoint": "198.51.100.4:40004",
        "allowed_ips": [],
        "persistent_keepalive": 25,
        "probe": True,
    }
    assert entries(result, "v")["location:u"]["endpoint"] == "198.51.100.3:40003"
    assert entries(result, "u")[relay]["relayed"] == ["location:v"]
    assert result["paths"][-1] == {
        "a": "location:u",
        "b": "location:v",
        "path": "probing",
        "via": relay,
    }
    # direct 5 s after both ends saw a direct handshake
    by["u"]["path_state"] = {"direct": {"location:v": 990}}
    by["v"]["path_state"] = {"direct": {"location:u": 998}}
    result = build_plans(nodes, [], {}, now=1000)
    assert result["paths"][-1]["path"] == "probing" and result["next_change"] == 1003
    result = build_plans(nodes, [], {}, now=1003)
    assert result["paths"][-1] == {
        "a": "location:u",
        "b": "location:v",
        "path": "direct",
        "via": None,
    }
    direct = entries(result, "u")["location:v"]
    assert direct["endpoint"] == "198.51.100.4:40004" and "10.100.4.0/24" in direct["allowed_ips"]
    assert not any(p.get("relayed") or p.get("probe") for p in result["plans"]["u"]["peers"])
    assert result["next_change"] is None
    # held on the relay by either end: relayed, no probe, until the hold ends
    by["v"]["path_state"]["held"] = {"location:u": 1100}
    result = build_plans(nodes, [], {}, now=1003)
    assert result["paths"][-1]["path"] == "relayed" and "location:v" not in entries(result, "u")
    assert result["next_change"] == 1100
    del by["v"]["path_state"]["held"]
    # a relay named down by one end leaves the pair's hash until then; every relay down: all count
    by["u"]["path_state"] = {"down": {relay: 1200}}
    result = build_plans(nodes, [], {}, now=1003)
    assert result["paths"][-1]["via"] == other and result["next_change"] == 1200
    by["v"]["path_state"] = {"down": {other: 1300}}
    result = build_plans(nodes, [], {}, now=1003)
    assert result["paths"][-1]["via"] == relay and result["next_change"] == 1200
    # a relay counts 5 s after its agent started
    by["u"]["path_state"] = by["v"]["path_state"] = {}
    by[relay.split(":")[1]]["relay_since"] = 1000
    result = build_plans(nodes, [], {}, now=1003)
    assert result["paths"][-1]["via"] == other and result["next_change"] == 1005
    assert build_plans(nodes, [], {}, now=1005)["paths"][-1]["via"] == relay
    # nothing published by one end (a push run, a Kilo end): relayed
    del by["v"]["path_state"]
    assert build_plans(nodes, [], {}, now=1005)["paths"][-1]["path"] == "relayed"


@pytest.mark.parametrize(
    "value, field",
    [
        ("soon", "path_state"),
        ({"gone": {}}, "path_state.gone"),
        ({"down": []}, "path_state.down"),
        ({"direct": {"location:v": -1}}, "path_state.direct[location:v]"),
        ({"held": {"x": True}}, "path_state.held[x]"),
    ],
)
def test_bad_path_state(value, field):
    nodes, by = timed_mesh()
    by["u"]["path_state"] = value
    with pytest.raises(KiloError) as info:
        build_plans(nodes, [], {}, now=1)
    assert (info.value.subject, info.value.field) == ("node 'u'", field)


def test_packet_walk_with_probing_and_direct_pairs():
    counts = {"meshes": 0, "packets": 0, "direct": 0, "probing": 0, "relayed": 0}
    for seed in range(300, 340):
        rnd = random.Random(seed)
        nodes, peers, options = relayed_mesh(rnd)
        result = build_plans(nodes, peers, options)
        unreachable = [s for s in result["segments"] if not s["reachable"]]
        first_relay = next(n for n in nodes if n["location"].startswith("r"))
        first_relay["discovered_endpoints"] = dict(
            (s["public_key"], "198.51.100.%d:4%04d" % (i + 1, i)) for i, s in enumerate(unreachable)
        )
        by = dict((n["name"], n) for n in nodes)
        for seg in unreachable:
            by[seg["leader"]]["path_state"] = {"direct": {}, "held": {}}
        for i, a in enumerate(unreachable):
            for b in unreachable[i + 1 :]:
                pick = rnd.choice(["direct", "half", "held", "none"])
                if pick in ("direct", "half", "held"):
                    by[a["leader"]]["path_state"]["direct"][b["key"]] = 900
                if pick in ("direct", "held"):
                    by[b["leader"]]["path_state"]["direct"][a["key"]] = 950
                if pick == "held":
                    by[b["leader"]]["path_state"]["held"][a["key"]] = 2000
        mesh = Mesh(nodes, peers, options)
        mesh.result = build_plans(nodes, peers, options, now=1000)
        mesh.plans = mesh.result["plans"]
        counts["meshes"] += 1
        for path in mesh.result["paths"]:
            if path["a"] in [s["key"] for s in unreachable] and path["b"] in [
                s["key"] for s in unreachable
            ]:
                counts[path["path"]] += 1
        walk_all(mesh, "seed %d %s" % (seed, options), counts)
    print(counts)
    assert counts["direct"] and counts["probing"] and counts["relayed"]


def test_dual_stack_relayed_pair():
    nodes = []
    for i, (loc, nat) in enumerate([("r", False), ("u", True), ("v", True)]):
        node = {
            "name": loc,
            "location": loc,
            "public_key": key(i + 1),
            "internal_ip": ["10.%d.0.1/24" % (20 + i), "fd00:%d::1/64" % (20 + i)],
            "pod_cidr": ["10.100.%d.0/24" % i, "fd10:%d::/64" % i],
            "endpoint": "10.%d.0.1:51820" % (20 + i) if nat else "203.0.113.1:51820",
            "behind_nat": nat,
        }
        nodes.append(node)
    result = build_plans(nodes, [], {"subnet": ["10.4.0.0/16", "fd04::/64"]})
    u = result["plans"]["u"]
    assert [(p["name"], p["relayed"]) for p in u["peers"]] == [("location:r", ["location:v"])]
    assert {
        "10.100.2.0/24",
        "fd10:2::/64",
        "10.22.0.1/32",
        "fd00:22::1/128",
        "10.4.0.3/32",
        "fd04::3/128",
    } <= set(u["peers"][0]["allowed_ips"])
    routed = set(r["dst"] for r in u["routes"])
    assert {
        "10.22.0.1/32",
        "fd00:22::1/128",
    } <= routed  # v's leader's own addresses too: its endpoint is none
    for plan in result["plans"].values():
        check_plan(plan, IFACE)


# --- cases a review found (each failed before its fix) ----------------------------------------


def routed(plan):
    """Every destination a plan routes into the WireGuard interface."""
    return [
        d
        for r in plan["routes"]
        if r["device"] == IFACE
        for d in (r["dst"] if isinstance(r["dst"], list) else [r["dst"]])
    ]


def test_refusal_names_the_marked_host_and_its_variable():
    """The only location behind NAT: the refusal names the marked host a and its variable, not the
    hinted, unmarked, endpoint-less leader b with a field the key step never reports."""
    from ansible_collections.kilo.mesh.plugins.plugin_utils.validate import check_topology

    nodes = [
        {
            "name": "a",
            "location": "u",
            "internal_ip": "10.21.0.1/24",
            "behind_nat": True,
            "public_key": key(2),
        },
        {
            "name": "b",
            "location": "u",
            "internal_ip": "10.21.0.2/24",
            "leader": True,
            "public_key": key(3),
        },
    ]
    hostvars = {"a": {"kilo_behind_nat": True}, "b": {"kilo_leader": True}}
    with pytest.raises(KiloError) as info:
        check_topology(nodes, [], {}, hostvars, "a")
    assert (info.value.subject, info.value.field) == ("host 'a'", "kilo_behind_nat")
    assert "location:u (behind_nat: a; no endpoint: a, b)" in str(info.value)
    # nothing marked: the endpoint-less leader, as what the key step reported (nothing)
    del nodes[0]["behind_nat"], hostvars["a"]["kilo_behind_nat"]
    with pytest.raises(KiloError) as info:
        check_topology(nodes, [], {}, hostvars, "a")
    assert (info.value.subject, info.value.field) == (
        "host 'b'",
        "endpoint (reported by kilo.mesh.key)",
    )
    assert "location:u (no endpoint: a, b)" in str(info.value)


def health_mesh():
    """y: b up but marked, c reachable but down; z: behind NAT; x: a public relay."""
    return [
        {
            "name": "a",
            "location": "x",
            "endpoint": "203.0.113.1:51820",
            "internal_ip": "10.20.0.1/24",
            "public_key": key(1),
        },
        {
            "name": "b",
            "location": "y",
            "endpoint": "10.21.0.2:51820",
            "internal_ip": "10.21.0.2/24",
            "public_key": key(2),
            "behind_nat": True,
        },
        {
            "name": "c",
            "location": "y",
            "endpoint": "198.51.100.3:51820",
            "internal_ip": "10.21.0.3/24",
            "public_key": key(3),
            "healthy": False,
        },
        {
            "name": "d",
            "location": "z",
            "endpoint": "10.22.0.1:51820",
            "internal_ip": "10.22.0.1/24",
            "public_key": key(4),
            "behind_nat": True,
        },
    ]


def test_a_mark_does_not_defeat_leader_health():
    """Healthy before reachable (Kilo's failover, find_leader): the down c never leads y while b is
    up; y is then behind NAT and relayed through x."""
    result = build_plans(health_mesh(), [])
    leaders = dict((s["key"], (s["leader"], s["reachable"])) for s in result["segments"])
    assert leaders["location:y"] == ("b", False)
    assert {"a": "location:y", "b": "location:z", "path": "relayed", "via": "location:x"} in result[
        "paths"
    ]
    every_walk(Mesh(health_mesh(), [], {}))
    # c up again: reachable first, as before
    nodes = health_mesh()
    nodes[2]["healthy"] = True
    assert (
        dict((s["key"], s["leader"]) for s in build_plans(nodes, [])["segments"])["location:y"]
        == "c"
    )


def test_health_never_refuses_the_mesh():
    """Without a relay, b leading y would leave y and z with nobody to relay between them: the
    down c keeps y (reachable, a location cut off until c returns) rather than every host refused."""
    nodes = health_mesh()[1:]
    result = build_plans(nodes, [])
    assert [(s["leader"], s["reachable"]) for s in result["segments"]] == [
        ("c", True),
        ("d", False),
    ]
    assert result["paths"] == [
        {"a": "location:y", "b": "location:z", "path": "direct", "via": None}
    ]
    # a refusal that health does not cause stays one
    nodes[1]["behind_nat"] = True
    with pytest.raises(KiloError) as info:
        build_plans(nodes, [])
    assert (info.value.subject, info.value.field) == ("node 'b'", "behind_nat")


def firewalled(pod=True):
    """r relays; u has a public address behind a stateful firewall (endpoint = internal IP)."""
    return [
        {
            "name": "r",
            "location": "r",
            "endpoint": "203.0.113.1:51820",
            "internal_ip": "10.20.0.1/24",
            "public_key": key(1),
            "pod_cidr": "10.100.1.0/24",
        },
        {
            "name": "u",
            "location": "u",
            "endpoint": "198.51.100.7:51820",
            "internal_ip": "198.51.100.7/24",
            "behind_nat": True,
            "public_key": key(2),
            "pod_cidr": "10.100.2.0/24",
        },
    ]


def test_relay_does_not_route_the_address_its_peer_keeps_alive_from():
    """u keeps alive from 198.51.100.7:51820: r must not route that address into kilo0, before a
    mapping is known (WireGuard drops the handshake responses as a routing loop) nor after, so a
    re-run with the mapping changes nothing. A private endpoint (behind NAT) is routed both times."""
    nodes = firewalled()
    before = build_plans(nodes, [])["plans"]["r"]
    assert "198.51.100.7/32" not in routed(before) and "10.100.2.0/24" in routed(before)
    nodes[0]["discovered_endpoints"] = {key(2): "198.51.100.7:51820"}
    after = build_plans(nodes, [])["plans"]["r"]
    assert after["routes"] == before["routes"]
    assert [p["endpoint"] for p in after["peers"]] == ["198.51.100.7:51820"]
    nodes = firewalled()
    nodes[1].update(endpoint="10.21.0.7:51820", internal_ip="10.21.0.7/24")
    before = build_plans(nodes, [])["plans"]["r"]
    assert "10.21.0.7/32" in routed(before)
    nodes[0]["discovered_endpoints"] = {key(2): "203.0.113.20:40007"}
    assert build_plans(nodes, [])["plans"]["r"]["routes"] == before["routes"]


def test_a_probe_does_not_route_its_endpoint_into_the_tunnel():
    """u and v both firewalled, probing each other at their mappings: neither routes the other's
    address (the probe's endpoint) into kilo0; relayed (no probe), both go through the relay."""
    nodes = firewalled() + [
        {
            "name": "v",
            "location": "v",
            "endpoint": "198.51.100.8:51820",
            "internal_ip": "198.51.100.8/24",
            "behind_nat": True,
            "public_key": key(3),
            "pod_cidr": "10.100.3.0/24",
        }
    ]
    nodes[0]["discovered_endpoints"] = {key(2): "198.51.100.7:51820", key(3): "198.51.100.8:51820"}
    nodes[1]["path_state"] = nodes[2]["path_state"] = {}
    result = build_plans(nodes, [], {}, now=1000)
    assert result["paths"][-1]["path"] == "probing"
    assert entries(result, "u")["location:v"]["endpoint"] == "198.51.100.8:51820"
    assert "198.51.100.8/32" not in routed(result["plans"]["u"])
    assert "198.51.100.7/32" not in routed(result["plans"]["v"])
    del nodes[1]["path_state"]
    result = build_plans(nodes, [], {}, now=1000)
    assert result["paths"][-1]["path"] == "relayed" and "location:v" not in entries(result, "u")
    assert "198.51.100.8/32" in routed(result["plans"]["u"])


def test_one_location_behind_nat_connects_directly_under_full():
    """Under full, two nodes of one NAT'd site reach each other at their endpoints (their LAN), as
    in Kilo; behind_nat says no *other* location can. Relayed only when neither has an endpoint."""
    nodes = [
        {
            "name": "r",
            "location": "r",
            "endpoint": "203.0.113.1:51820",
            "internal_ip": "10.20.0.1/24",
            "public_key": key(1),
        },
        {
            "name": "h1",
            "location": "home",
            "endpoint": "10.3.1.2:51820",
            "internal_ip": "10.3.1.2/24",
            "behind_nat": True,
            "public_key": key(2),
        },
        {
            "name": "h2",
            "location": "home",
            "endpoint": "10.3.1.3:51820",
            "internal_ip": "10.3.1.3/24",
            "behind_nat": True,
            "public_key": key(3),
        },
        {"name": "h3", "location": "home", "internal_ip": "10.3.1.4/24", "public_key": key(4)},
    ]
    result = build_plans(nodes, [], {"granularity": "full"})
    assert [
        p for p in result["paths"] if p["a"].startswith("node:h") and p["b"].startswith("node:h")
    ] == [
        {"a": "node:h1", "b": "node:h2", "path": "direct", "via": None},
        {"a": "node:h1", "b": "node:h3", "path": "direct", "via": None},
        {"a": "node:h2", "b": "node:h3", "path": "direct", "via": None},
    ]
    h1, h3 = entries(result, "h1"), entries(result, "h3")
    assert (
        h1["node:h2"]["endpoint"] == "10.3.1.3:51820"
        and "10.3.1.3/32" in h1["node:h2"]["allowed_ips"]
    )
    assert h1["node:h3"]["endpoint"] is None and h3["node:h1"]["endpoint"] == "10.3.1.2:51820"
    assert not any(p.get("relayed") for p in result["plans"]["h1"]["peers"])
    # the LAN carries each one's own address: the endpoint's, and the endpoint-less h3's it keeps alive from
    assert "10.3.1.3/32" not in routed(result["plans"]["h1"]) and "10.3.1.4/32" not in routed(
        result["plans"]["h1"]
    )
    assert "10.3.1.2/32" not in routed(result["plans"]["h3"])
    every_walk(Mesh(nodes, [], {"granularity": "full"}))
    # two nodes without an endpoint: no way to each other but a relay
    nodes[2]["endpoint"] = None
    del nodes[1]
    paths = build_plans(nodes, [], {"granularity": "full"})["paths"]
    assert {"a": "node:h2", "b": "node:h3", "path": "relayed", "via": "node:r"} in paths


def test_kilo_agent_ends_keep_kilos_entries_and_never_relay():
    """Agent mode: a node Kilo's own agent runs (``kg``: no mark of ours on its Node) never relays
    while one of ours can, and a pair of NAT'd locations with a ``kg`` end keeps Kilo's entries."""
    nodes, by = timed_mesh()
    for node in ("u", "v"):
        by[node]["path_state"] = {}
    result = build_plans(nodes, [], {}, now=1000)
    relay = result["paths"][-1]["via"]
    other = "location:s" if relay == "location:r" else "location:r"
    by[relay.split(":")[1]]["kg"] = True
    result = build_plans(nodes, [], {}, now=1000)
    assert result["paths"][-1]["via"] == other
    assert "relay_accept" not in result["plans"][relay.split(":")[1]]["firewall"]
    assert result["plans"][other.split(":")[1]]["firewall"]["relay_accept"] is True
    # every relay kg: they count all the same (the mesh computes while our agents start)
    by[other.split(":")[1]]["kg"] = True
    assert build_plans(nodes, [], {}, now=1000)["paths"][-1]["via"] == relay
    del by["r"]["kg"], by["s"]["kg"]
    # a kg end (v): Kilo's entries both ways, the endpoint the mapping the relay saw; with or without a time
    by["v"]["kg"] = True
    for now in (None, 1000):
        result = build_plans(nodes, [], {}, now=now)
        assert result["paths"][-1] == {
            "a": "location:u",
            "b": "location:v",
            "path": "direct",
            "via": None,
        }
        assert entries(result, "u")["location:v"]["endpoint"] == "198.51.100.4:40004"
        assert "10.100.4.0/24" in entries(result, "u")["location:v"]["allowed_ips"]
        assert not any(p.get("relayed") or p.get("probe") for p in result["plans"]["u"]["peers"])


def test_a_relay_down_in_a_push_run_moves_only_its_own_pairs():
    """Push failover: ``relay_down`` (the run saw the relay down or stale) takes it out of the hash;
    the pairs of the other relay keep it; every relay down: all count again; leaders unchanged."""
    nodes = [
        {
            "name": n,
            "location": n,
            "endpoint": "203.0.113.%d:51820" % (i + 1),
            "internal_ip": "10.%d.0.1/24" % (30 + i),
            "pod_cidr": "10.101.%d.0/24" % i,
            "public_key": key(i + 1),
        }
        for i, n in enumerate(("r", "s", "t"))
    ]
    nodes += [
        {
            "name": n,
            "location": n,
            "behind_nat": True,
            "internal_ip": "10.%d.0.1/24" % (40 + i),
            "pod_cidr": "10.102.%d.0/24" % i,
            "public_key": key(10 + i),
        }
        for i, n in enumerate("uvwx")
    ]
    before = build_plans(nodes, [], {})
    via = dict(((p["a"], p["b"]), p["via"]) for p in before["paths"] if p["path"] == "relayed")
    assert len(via) == 6 and len(set(via.values())) >= 2
    dead = sorted(set(via.values()))[0]
    marked = [dict(n, relay_down=True) if "location:" + n["name"] == dead else n for n in nodes]
    after = build_plans(marked, [], {})
    moved = dict(((p["a"], p["b"]), p["via"]) for p in after["paths"] if p["path"] == "relayed")
    for pair, relay in via.items():
        assert moved[pair] == relay if relay != dead else moved[pair] != dead
    assert [s["leader"] for s in after["segments"]] == [s["leader"] for s in before["segments"]]
    every = build_plans(
        [dict(n, relay_down=True) if not n.get("behind_nat") else n for n in nodes], [], {}
    )
    assert (
        dict(((p["a"], p["b"]), p["via"]) for p in every["paths"] if p["path"] == "relayed") == via
    )
    every_walk(Mesh(marked, [], {}))  # every packet still arrives, through the other relays


def test_an_endpoint_less_peer_reaches_nat_d_segments_through_a_relay():
    """A laptop (an outside peer without endpoint): its own sections carry each NAT'd segment's
    ranges on that pair's relay's section; the NAT'd leaders carry its address on the same relay's
    entry; the relay keeps Kilo's entries; a peer with an endpoint keeps Kilo's everywhere."""
    nodes, by = timed_mesh()
    laptop = {
        "name": "laptop",
        "public_key": key(900),
        "allowed_ips": ["10.5.0.1/32"],
        "persistent_keepalive": 25,
    }
    server = {
        "name": "server",
        "public_key": key(901),
        "allowed_ips": ["10.6.0.1/32"],
        "endpoint": "198.51.100.9:51820",
    }
    peers = [laptop, server]
    result = build_plans(nodes, peers, {})
    via = dict((p["segment"], p["via"]) for p in result["peer_paths"] if p["peer"] == "laptop")
    assert sorted(via) == ["location:u", "location:v"]
    assert [p for p in result["peer_paths"] if p["peer"] == "server"] == []
    own = dict((e["name"], e) for e in peer_config(nodes, peers, "laptop", {}))
    assert "location:u" not in own and "location:v" not in own
    for seg, relay in via.items():
        assert by[seg.split(":")[1]]["pod_cidr"] in own[relay]["allowed_ips"]
        assert seg in own[relay]["relayed"]
        leader = entries(result, seg.split(":")[1])
        assert "laptop" not in leader and "10.5.0.1/32" in leader[relay]["allowed_ips"]
        assert "laptop" in leader[relay]["relayed"]
        # Kilo's entry for the server, whose endpoint the NAT'd leader reaches
        assert leader["server"]["allowed_ips"] == ["10.6.0.1/32"]
    for relay in ("r", "s"):
        assert entries(result, relay)["laptop"]["allowed_ips"] == ["10.5.0.1/32"]
    # the server's own sections are Kilo's: every segment's own
    server_own = dict((e["name"], e) for e in peer_config(nodes, peers, "server", {}))
    assert "location:u" in server_own and not any(e.get("relayed") for e in server_own.values())
    # showconf's and connect's rendering of the laptop's plan stays valid
    for plan in result["plans"].values():
        check_plan(plan, IFACE)
