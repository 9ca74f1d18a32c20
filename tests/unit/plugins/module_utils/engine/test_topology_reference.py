# -*- coding: utf-8 -*-
"""The engine against a second, deliberately literal reading of Kilo's Go code, on random meshes.

The reference below follows Kilo's NewTopology / Routes / Rules / Conf and the IPIP part of
applyTopology statement by statement (written here in Python, not copied), without the engine's
caches, indexes or "beyond Kilo" features. Random meshes mix locations, nodes with and without
internal IPs, leader hints, public/private/DNS/IPv6 endpoints, IPv6 internal networks, peers with
overlapping allowed IPs, allowed-location IPs, discovered endpoints with and without keepalive,
granularity location/full, encapsulate always/crosssubnet/never, local, cni and forward rules.
Input parsing (normalisation) is shared with the engine; lists are compared sorted (order carries
no meaning) but with their multiplicity.
"""

import base64
import ipaddress
import random

import pytest

from flat_plans import build_plans
from ansible_collections.kilo.mesh.plugins.module_utils.engine.parse import parse_inputs
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import NO_ENDPOINT


def one(ip):
    return ipaddress.ip_network("%s/%d" % (ip, ip.max_prefixlen))


def contains(net, ip):
    return ip is not None and net.version == ip.version and ip in net


def is_public(ip):
    if ip is None:
        return False
    if ip.version == 4:
        p = ip.packed
        return not (
            p[0] == 10 or (p[0] == 172 and p[1] & 0xF0 == 0x10) or (p[0] == 192 and p[1] == 168)
        )
    p = ip.packed
    return not (p[0] == 0xFD and p[1] == 0)


def find_leader(ns):
    leaders, public = [], []
    for i, n in enumerate(ns):
        ip = n.endpoint.ip if n.endpoint else None
        if n.leader_hint:
            if is_public(ip):
                return i
            leaders.append(i)
        if ip is not None and is_public(ip):
            public.append(i)
    if leaders:
        return leaders[0]
    if public:
        return public[0]
    return 0


class Seg(object):
    pass


def topology(nodes, peers, opts, host):
    gran = opts["granularity"]
    byname = dict((n.name, n) for n in nodes)
    topo = {}
    for n in nodes:
        if gran == "location":
            loc = "location:" + n.location if n.internal is not None else "node:" + n.name
        else:
            loc = "node:" + n.name
        topo.setdefault(loc, []).append(n)
    me = byname[host]
    if gran == "location":
        localloc = "location:" + me.location if me.internal is not None else "node:" + me.name
    else:
        localloc = "node:" + me.name
    t = Seg()
    t.leader = False
    t.location = localloc
    t.keepalive = me.persistent_keepalive
    t.private = me.internal
    t.subnet = me.pod
    segs = []
    for loc in topo:
        topo[loc].sort(key=lambda n: n.name)
        ns = topo[loc]
        li = find_leader(ns)
        if loc == localloc and ns[li].name == host:
            t.leader = True
        s = Seg()
        s.allowed = []
        amap = {}
        alips = []
        s.cidrs, s.privs = [], []
        for n in ns:
            s.allowed.append(n.pod)
            for ip in n.alips:
                if str(ip) not in amap:
                    amap[str(ip)] = 1
                    alips.append(ip)
            if n.internal is not None:
                s.allowed.append(one(n.internal.ip))
                s.privs.append(n.internal.ip)
            s.cidrs.append(n.pod)
        alips.sort(key=str)
        s.alips = alips
        s.ldr = ns[li]
        s.leader_idx = li
        s.location = loc
        s.nodes = ns
        segs.append(s)
    segs.sort(key=lambda s: s.location)
    t.segs = segs
    # peers: sorted, dedup
    seen = set()
    t.peers = []
    for p in sorted(peers, key=lambda p: p.name):
        al = []
        for ip, dummy in p.allowed:
            if str(ip) in seen:
                continue
            seen.add(str(ip))
            al.append(ip)
        t.peers.append((p, al))
    disc = dict(me.discovered)
    sub = opts["subnet"]
    cur = sub.network_address
    for s in segs:
        cur = cur + 1
        s.wg = cur
        s.allowed.append(one(cur))
        if t.leader and s.location == t.location:
            t.wgcidr = "%s/%d" % (cur, sub.prefixlen)
        for n in topo[s.location]:
            for k, v in n.discovered.items():
                disc.setdefault(k, v)
        s.alips = filter_alips(t, s.alips, s.location)
    t.disc = disc
    return t


def intersect(a, b):
    return a.version == b.version and (b.network_address in a or a.network_address in b)


def filter_alips(t, ips, location):
    ret = []
    for ip in ips:
        bad = False
        for s in t.segs:
            if location != s.location:
                if any(intersect(ip, i) for i in s.alips):
                    bad = True
                    break
            if any(i.version == ip.version and ip.network_address in i for i in s.allowed):
                bad = True
                break
        if not bad:
            for p, al in t.peers:
                if any(intersect(ip, i) for i in al):
                    bad = True
        if not bad:
            ret.append(ip)
    return ret


def update_endpoint(t, endpoint, key, ka):
    """-> the Endpoint (NO_ENDPOINT: none)"""
    if ka and key in t.disc:
        return t.disc[key]
    return endpoint or NO_ENDPOINT


def encap_route(r, strat, subnet):
    # r: dict dst gw dev src
    if strat == "always" or (
        strat == "crosssubnet" and subnet is not None and not contains(subnet.network, r["gw"])
    ):
        r["dev"] = "tunl0"
        if subnet is not None and r["src"] is None:
            r["src"] = subnet.ip
    return r


def R(dst, gw, dev, src=None, table=254, onlink=True):
    return {"dst": dst, "gw": gw, "dev": dev, "src": src, "table": table, "onlink": onlink}


def routes(t, local, strat, iface="kilo0"):
    rs, rules = [], []
    if not t.leader:
        gw = None
        for s in t.segs:
            if s.location == t.location:
                gw = s.privs[s.leader_idx]
                break
        for s in t.segs:
            rs.append(encap_route(R(one(s.wg), gw, "private"), strat, t.private))
            if s.location == t.location:
                if local:
                    for i in range(len(s.cidrs)):
                        if s.privs[i] == t.private.ip:
                            continue
                        ngw = s.privs[i]
                        rs.append(encap_route(R(s.cidrs[i], ngw, "private"), strat, t.private))
                        off_subnet = not contains(t.private.network, s.privs[i])
                        if strat == "always" or (strat == "crosssubnet" and off_subnet):
                            rs.append(R(one(s.privs[i]), ngw, "tunl0", t.private.ip, 1107))
                            rules.append((t.subnet, one(s.privs[i]), None))
                continue
            for c in s.cidrs:
                rs.append(encap_route(R(c, gw, "private"), strat, t.private))
            for p in s.privs:
                rs.append(encap_route(R(one(p), gw, "private"), strat, t.private))
            for a in s.alips:
                rs.append(encap_route(R(a, gw, "private"), strat, t.private))
        for p, al in t.peers:
            for a in al:
                rs.append(encap_route(R(a, gw, "private"), strat, t.private))
        return rs, rules
    src = t.private.ip if t.private is not None else None
    for s in t.segs:
        if s.location == t.location:
            if local and t.private is not None:
                for i in range(len(s.cidrs)):
                    if s.privs[i] == t.private.ip:
                        continue
                    ngw = s.privs[i]
                    rs.append(encap_route(R(s.cidrs[i], ngw, "private"), strat, t.private))
                    if strat == "always" or (
                        strat == "crosssubnet" and not contains(t.private.network, s.privs[i])
                    ):
                        rs.append(R(one(s.privs[i]), ngw, "tunl0", t.private.ip, 1107))
                        rules.append((t.subnet, one(s.privs[i]), None))
                        rules.append((None, one(s.privs[i]), iface))
            continue
        for i in range(len(s.cidrs)):
            rs.append(R(s.cidrs[i], s.wg, iface, src))
            if not s.privs:
                continue
            ep = update_endpoint(t, s.ldr.endpoint, s.ldr.key, s.ldr.persistent_keepalive)
            if s.privs[i] == ep.ip:
                continue
            rs.append(R(one(s.privs[i]), s.wg, iface, src))
        for a in s.alips:
            rs.append(R(a, s.wg, iface, src))
    for p, al in t.peers:
        for a in al:
            rs.append(R(a, None, iface, src, onlink=False))
    return rs, rules


def conf(t):
    out = []
    for s in t.segs:
        if s.location == t.location:
            continue
        out.append(
            (
                s.ldr.key,
                update_endpoint(t, s.ldr.endpoint, s.ldr.key, s.ldr.persistent_keepalive).text,
                tuple(sorted(map(str, s.allowed + s.alips))),
                t.keepalive,
            )
        )
    for p, al in t.peers:
        out.append(
            (
                p.key,
                update_endpoint(t, p.endpoint, p.key, p.persistent_keepalive).text,
                tuple(sorted(map(str, al))),
                t.keepalive,
            )
        )
    return sorted(out, key=str)


def firewall(t, me, opts, nodes):
    nat_src, fwd = set(), set()
    if opts["cni"]:
        nat_src.add(str(t.subnet))
        if opts["forward_rules"] and t.leader:
            for s in t.segs:
                if s.location == t.location:
                    fwd |= (
                        set(map(str, s.cidrs))
                        | set(map(str, s.alips))
                        | set(str(one(p)) for p in s.privs)
                    )
        elif opts["forward_rules"]:
            fwd.add(str(t.subnet))
    exempt, nat_dst = set(), set()
    for s in t.segs:
        exempt.add(str(one(s.wg)))
        exempt |= set(map(str, s.allowed))
        if t.location == s.location:
            nat_dst |= set(map(str, s.alips))
    for p, al in t.peers:
        nat_src |= set(map(str, al))
        exempt |= set(map(str, al))
    exempt |= set(map(str, opts["service_cidrs"]))
    ipip = opts["encapsulate"] != "never" and opts["local"]
    srcs = set()
    tun = None
    if ipip:
        for s in t.segs:
            if s.location == "location:" + me.location:
                srcs = set(str(one(p)) for p in s.privs)
                break
        if me.pod.num_addresses > 1:
            tun = "%s/%d" % (me.pod.network_address + 1, me.pod.max_prefixlen)
    return {
        "nat_src": nat_src,
        "fwd": fwd,
        "exempt": exempt,
        "nat_dst": nat_dst,
        "ipip": ipip,
        "ipip_src": srcs,
        "tun": tun,
    }


def norm_routes(rs):
    out = []
    for r in rs:
        out.append(
            (
                str(r["dst"]),
                str(r["gw"]) if r["gw"] is not None else None,
                r["dev"],
                str(r["src"]) if r["src"] is not None else None,
                r["table"],
                r["onlink"],
            )
        )
    return sorted(out, key=str)


def norm_rules(rules):
    return sorted([(str(a) if a is not None else None, str(b), c) for a, b, c in rules], key=str)


def compare(nodes_in, peers_in, options):
    opts, nodes, peers = parse_inputs(nodes_in, peers_in, options)
    result = build_plans(nodes_in, peers_in, options)
    problems = []
    for me in nodes:
        t = topology(nodes, peers, opts, me.name)
        plan = result["plans"][me.name]
        rs, rules = routes(t, opts["local"], opts["encapsulate"], opts["interface"])
        want = norm_routes(rs)
        got = sorted(
            [
                (r["dst"], r["gateway"], r["device"], r["source"], r["table"], r["onlink"])
                for r in plan["routes"]
            ],
            key=str,
        )
        if want != got:
            problems.append((me.name, "routes", want, got))
        wr = norm_rules(rules)
        gr = sorted([(r["src"], r["dst"], r["iif"]) for r in plan["rules"]], key=str)
        if wr != gr:
            problems.append((me.name, "rules", wr, gr))
        if plan["leader"] != t.leader:
            problems.append((me.name, "leader", t.leader, plan["leader"]))
        if t.leader:
            wc = conf(t)
            gc = sorted(
                [
                    (
                        p["public_key"],
                        p["endpoint"],
                        tuple(sorted(p["allowed_ips"])),
                        p["persistent_keepalive"],
                    )
                    for p in plan["peers"]
                ],
                key=str,
            )
            if wc != gc:
                problems.append((me.name, "conf", wc, gc))
            if plan["address"] != t.wgcidr:
                problems.append((me.name, "address", t.wgcidr, plan["address"]))
        fw = firewall(t, me, opts, nodes)
        pf = plan["firewall"]
        g = {
            "nat_src": set(pf["nat_sources"]),
            "fwd": set(pf["forward_accept"]),
            "exempt": set(pf["nat_exempt_destinations"]),
            "nat_dst": set(pf["nat_destinations"]),
            "ipip": pf["ipip_filter"],
            "ipip_src": set(pf["ipip_accept_sources"]),
            "tun": plan["tunnel_address"],
        }
        if g != fw:
            problems.append((me.name, "firewall", fw, g))
    return problems


def key(i):
    return base64.b64encode(i.to_bytes(4, "big") * 8).decode()


def random_mesh(rnd):
    v6 = rnd.random() < 0.2
    nloc = rnd.randint(1, 4)
    n = rnd.randint(1, 9)
    nodes = []
    for i in range(n):
        loc = "l%d" % rnd.randrange(nloc)
        li = int(loc[1:])
        has_int = rnd.random() < 0.8
        if v6 and rnd.random() < 0.7:
            internal = "fd00:%x::%x/64" % (li + rnd.choice([0, 0, 8]), i + 1)
            int_ip = internal.split("/")[0]
            pod = "fd10:0:%x::/64" % i
        else:
            sub = rnd.choice([0, 0, 1])
            internal = "10.%d.%d.%d/24" % (li, sub, i + 1)
            int_ip = internal.split("/")[0]
            pod = "10.100.%d.0/24" % i
        kind = rnd.choice(["pub", "priv", "int", "dns", "pub6", "priv6"])
        endpoint = {
            "pub": "203.0.113.%d:51820" % (i + 1),
            "priv": "172.16.0.%d:51820" % (i + 1),
            "int": int_ip + ":51820" if ":" not in int_ip else "[%s]:51820" % int_ip,
            "dns": "n%d.example.org:51820" % i,
            "pub6": "[2001:db8::%x]:51820" % (i + 1),
            "priv6": "[fd00::%x]:51820" % (i + 1),
        }[kind]
        alips = []
        if rnd.random() < 0.3:
            own = int_ip + ("/128" if ":" in int_ip else "/32")
            alips = rnd.sample(
                [
                    "192.168.50.0/24",
                    "192.168.50.128/25",
                    "10.100.1.0/24",
                    "10.100.0.0/16",
                    "10.9.0.0/24",
                    "192.168.60.1/32",
                    "10.4.0.2/32",
                    "10.4.0.3/32",
                    own,
                ],
                rnd.randint(1, 3),
            )
        disc = {}
        if rnd.random() < 0.3:
            for j in range(rnd.randint(1, 3)):
                target = rnd.randrange(n + 3)
                disc[key(target + 1)] = rnd.choice(
                    [
                        "198.51.100.%d:4%d" % (target, j),
                        "10.%d.0.%d:51820" % (target % 4, target + 1),
                    ]
                )
        nodes.append(
            {
                "name": "n%d" % i,
                "location": loc,
                "endpoint": endpoint,
                "internal_ip": internal if has_int else None,
                "pod_cidr": pod,
                "public_key": key(i + 1),
                "leader": rnd.random() < 0.25,
                "persistent_keepalive": rnd.choice([0, 0, 25]),
                "allowed_location_ips": alips,
                "discovered_endpoints": disc,
            }
        )
    peers = []
    for j in range(rnd.randint(0, 3)):
        allowed = rnd.sample(
            [
                "10.9.0.0/24",
                "10.9.0.1/32",
                "10.9.1.0/24",
                "10.100.1.0/24",
                "192.168.50.0/24",
                "fd99::/64",
                "10.0.0.%d/32" % j,
            ],
            rnd.randint(1, 3),
        )
        peers.append(
            {
                "name": "p%d" % j,
                "public_key": key(1000 + j),
                "allowed_ips": allowed,
                "endpoint": rnd.choice(
                    [None, "198.51.100.%d:51820" % j, "peer%d.example.org:51820" % j]
                ),
                "persistent_keepalive": rnd.choice([0, 10]),
            }
        )
        if rnd.random() < 0.3:
            # a discovered endpoint for this peer on some node
            nodes[rnd.randrange(n)]["discovered_endpoints"][key(1000 + j)] = (
                "198.51.100.%d:5555" % (100 + j)
            )
    options = {
        "granularity": rnd.choice(["location", "full"]),
        "encapsulate": rnd.choice(["always", "crosssubnet", "never"]),
        "local": rnd.random() < 0.7,
        "cni": rnd.random() < 0.8,
        "forward_rules": rnd.random() < 0.5,
        "service_cidrs": rnd.choice([[], ["10.96.0.0/12"]]),
    }
    return nodes, peers, options


@pytest.mark.parametrize("chunk", range(8))
def test_engine_matches_literal_reading_of_kilo(chunk):
    for seed in range(chunk * 50, chunk * 50 + 50):
        nodes, peers, options = random_mesh(random.Random(seed))
        problems = compare(nodes, peers, options)
        assert not problems, "seed %d %r: %r" % (seed, options, problems[0])
