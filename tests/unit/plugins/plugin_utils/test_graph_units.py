# -*- coding: utf-8 -*-
"""kilo.mesh.graph's DOT (module_utils/engine/graph.py) and kilo.mesh.status's pure parts
(module_utils/host/status.py, plugin_utils/status_summary.py): the picture's shape at 3 and 30 locations, Graphviz (dot, circo)
taking it, and the status, textfile and table from a WireGuard state worked out by hand."""

import base64
import re
import shutil
import subprocess

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils import atomic_file
from ansible_collections.kilo.mesh.plugins.module_utils.host import status as st
from ansible_collections.kilo.mesh.plugins.plugin_utils.status_summary import summary
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans
from ansible_collections.kilo.mesh.plugins.module_utils.engine.graph import (
    GraphError,
    HUB_ID,
    format_of,
    layout_for,
    render,
    to_dot,
    uses_hub,
)


def key(i):
    return base64.b64encode(i.to_bytes(2, "big") * 16).decode()


def mesh(locations, per=3, peers=2, **options):
    """``locations`` locations of ``per`` nodes (the first public), ``peers`` outside peers."""
    nodes, n = [], 0
    for loc in range(1, locations + 1):
        for k in range(1, per + 1):
            n += 1
            nodes.append(
                {
                    "name": "l%d-%d" % (loc, k),
                    "location": "l%d" % loc,
                    "internal_ip": "172.16.%d.%d/24" % (loc, k),
                    "pod_cidr": "10.%d.%d.0/24" % (100 + loc, k),
                    "endpoint": ("203.0.113.%d:51820" % loc)
                    if k == 1
                    else ("172.16.%d.%d:51820" % (loc, k)),
                    "public_key": key(n),
                }
            )
    outside = [
        {
            "name": "p%d" % i,
            "public_key": key(5000 + i),
            "allowed_ips": ["10.5.0.%d/32" % i],
            "endpoint": "198.51.100.%d:51820" % i,
        }
        for i in range(1, peers + 1)
    ]
    return build_plans(nodes, outside, options)


def clusters(text):
    return re.findall(r'subgraph "(cluster_[^"]+)"', text)


def edges(text):
    return re.findall(r'^\t"([^"]+)" -> "([^"]+)" \[([^\]]*)\];$', text, re.M)


@pytest.mark.parametrize("locations", [3, 30])
def test_one_cluster_per_location_leaders_marked_peers_present(locations):
    result = mesh(locations)
    text = to_dot(result)
    assert sorted(clusters(text)) == sorted(
        ["cluster_location_location:l%d" % i for i in range(1, locations + 1)] + ["cluster_peers"]
    )
    leaders = re.findall(
        r'"node/([^"]+)" \[label="[^"]*", rank=1, shape=ellipse, peripheries=2, style=bold\]', text
    )
    assert sorted(leaders) == sorted("l%d-1" % i for i in range(1, locations + 1))
    # a leader's label carries its WireGuard IP and endpoint; a member's neither
    assert re.search(
        r'"node/l1-1" \[label="location:l1\\nl1-1\\n10.101.1.0/24\\n172.16.1.1\\n10.4.0.\d+\\n203.0.113.1:51820"',
        text,
    )
    assert re.search(
        r'"node/l1-2" \[label="location:l1\\nl1-2\\n10.101.2.0/24\\n172.16.1.2", shape=ellipse\]',
        text,
    )
    assert '"peer/p1" [label="p1\\n198.51.100.1:51820", shape=ellipse];' in text
    found = edges(text)
    members = [
        (a, b)
        for a, b, attrs in found
        if b.startswith("node/") and a.split("-")[0] == b.split("-")[0]
    ]
    assert len(members) == locations * 2  # every member to its leader
    if locations == 3:
        assert not uses_hub(result) and "layout=" not in text
        assert (
            sum(1 for a, b, dummy in found if a.endswith("-1") and b.endswith("-1")) == 3
        )  # every leader pair
        assert (
            sum(1 for a, b, attrs in found if b.startswith("peer/") and "dashed" in attrs) == 2 * 3
        )
    else:
        # 435 leader pairs would be unreadable: one hub node, fdp layout
        assert uses_hub(result) and "\tlayout=fdp;" in text
        assert sum(1 for a, b, dummy in found if b == HUB_ID) == locations
        assert sum(1 for a, b, dummy in found if a == HUB_ID and b.startswith("peer/")) == 2
        assert not any(a.endswith("-1") and b.endswith("-1") for a, b, dummy in found)


def test_mesh_edges_all_keeps_kgctls_every_pair_and_hub_can_be_forced():
    result = mesh(8, per=1, peers=1)
    every = to_dot(result, "all")
    assert (
        sum(1 for a, b, dummy in edges(every) if a.startswith("node/") and b.startswith("node/"))
        == 8 * 7 // 2
    )
    assert HUB_ID not in every
    small = to_dot(mesh(2, per=1, peers=0), "hub")
    assert '"%s"' % HUB_ID in small and "between all 2 leaders" in small
    with pytest.raises(ValueError):
        to_dot(result, "some")


def test_cross_granularity_hub_says_different_locations():
    text = to_dot(mesh(7, per=2, peers=0, granularity="cross"))
    assert "between leaders of different locations" in text
    assert len(clusters(text)) == 14  # one segment per node under cross


def test_formats_and_layouts():
    assert (
        format_of("/x/a.svg") == "svg"
        and format_of("a.PNG") == "png"
        and format_of("a.gv") == "dot"
    )
    assert (
        format_of(None) == "dot"
        and format_of(None, "svg") == "svg"
        and format_of("a.svg", "svg") == "svg"
    )
    with pytest.raises(GraphError):
        format_of("a", "gif")
    assert layout_for(to_dot(mesh(3))) == "dot" and layout_for(to_dot(mesh(30))) == "fdp"
    assert layout_for(to_dot(mesh(3)), "circo") == "circo"
    assert render("digraph a {}\n", "dot") == (b"digraph a {}\n", None)


@pytest.mark.parametrize(
    "path, fmt, said",
    [
        (
            "m.jpg",
            None,
            "'.jpg' names no format",
        ),  # DOT text (or an SVG) under a .jpg name: refused
        ("m.jpg", "png", "'.jpg' names no format"),  # even when the format is given
        ("m", None, "(none) names no format"),
        ("m.txt", "dot", "'.txt' names no format"),
        ("m.svg", "pdf", "format pdf, but the extension says svg"),
        ("m.gv", "svg", "format svg, but the extension says dot"),
    ],
)
def test_the_format_follows_the_extension_or_is_refused(path, fmt, said):
    with pytest.raises(GraphError) as e:
        format_of(path, fmt)
    assert said in str(e.value) and str(e.value).startswith(path + ":")


def test_render_without_graphviz_says_how_to_install(tmp_path):
    with pytest.raises(GraphError) as e:
        render(to_dot(mesh(2)), "svg", dot_command=str(tmp_path / "no-dot"))
    assert "no-dot" in str(e.value)
    import ansible_collections.kilo.mesh.plugins.module_utils.engine.graph as tg

    which = tg.shutil.which
    tg.shutil.which = lambda name: None
    try:
        with pytest.raises(GraphError) as e:
            render(to_dot(mesh(2)), "png")
    finally:
        tg.shutil.which = which
    assert "apt install graphviz" in str(e.value) and "dnf install graphviz" in str(e.value)
    assert "pacman -S graphviz" in str(e.value)


@pytest.mark.skipif(not shutil.which("dot") or not shutil.which("circo"), reason="needs Graphviz")
@pytest.mark.parametrize("locations", [3, 30])
def test_graphviz_dot_and_circo_take_it(locations):
    text = to_dot(mesh(locations))
    for program in ("dot", "circo"):
        done = subprocess.run(
            [program, "-Tcanon"], input=text.encode(), capture_output=True, timeout=300, check=False
        )
        assert done.returncode == 0, (program, done.stderr.decode())
    svg, argv = render(text, "svg")
    assert svg.lstrip().startswith(b"<?xml") and b"<svg" in svg
    assert argv[1] == ("-Kdot" if locations == 3 else "-Kfdp")
    png, dummy = render(to_dot(mesh(3)), "png")
    assert png.startswith(b"\x89PNG")


# --- status ---------------------------------------------------------------------------------

NOW = 1_700_000_000


def state(up=True, peers=None):
    return {
        "interface": "kilo0",
        "backend": "userspace",
        "present": True,
        "up": up,
        "mtu": 1420,
        "listen_port": 51820,
        "fwmark": None,
        "public_key": key(1),
        "peers": peers or [],
    }


def live(i, handshake, rx=100, tx=200):
    return {
        "public_key": key(i),
        "endpoint": "203.0.113.%d:51820" % i,
        "allowed_ips": ["10.4.0.%d/32" % i],
        "persistent_keepalive": 0,
        "preshared_key": True,
        "preshared_key_digest": "abcd",
        "latest_handshake": handshake,
        "rx_bytes": rx,
        "tx_bytes": tx,
    }


def test_host_status_stale_and_fresh_no_secret_fields():
    s = st.host_status(
        state(peers=[live(2, NOW - 30), live(3, NOW - 500), live(4, 0)]), NOW, 180, ["10.4.0.1/16"]
    )
    assert s["leader"] and s["in_mesh"] and s["addresses"] == ["10.4.0.1/16"]
    ages = [(p["handshake_age"], p["stale"]) for p in s["peers"]]
    assert ages == [(30, False), (500, True), (None, True)]
    assert s["stale"] == [key(3), key(4)]
    assert all("preshared" not in k for p in s["peers"] for k in p)
    member = st.host_status(state(up=False), NOW)
    assert not member["leader"] and member["in_mesh"] and member["stale_after"] == 180
    gone = st.host_status({"interface": "kilo0", "present": False, "up": False, "peers": []}, NOW)
    assert not gone["leader"] and not gone["in_mesh"]


def test_metrics_are_prometheus_text_with_kilos_names():
    s = st.host_status(state(peers=[live(2, NOW - 30), live(4, 0)]), NOW, 5)
    text = st.metrics(s, nodes=4, peers=1)
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert all(st.SAMPLE_RE.match(line) for line in samples), samples
    assert "kilo_leader 1" in samples and "kilo_nodes 4" in samples and "kilo_peers 1" in samples
    assert 'kilo_peer_handshake_age_seconds{interface="kilo0",peer="%s"} 30' % key(2) in samples
    assert 'kilo_peer_handshake_age_seconds{interface="kilo0",peer="%s"} +Inf' % key(4) in samples
    assert 'kilo_peer_stale{interface="kilo0",peer="%s"} 1' % key(4) in samples
    assert "# TYPE kilo_peer_receive_bytes_total counter" in text
    assert "kilo_nodes" not in st.metrics(s)
    types = re.findall(r"^# TYPE (\S+) ", text, re.M)
    assert len(types) == len(set(types))


def test_update_file(tmp_path):
    path = tmp_path / "kilo.prom"
    assert (
        atomic_file.update_file(str(path), "a 1\n", check_mode=True) is True and not path.exists()
    )
    assert atomic_file.update_file(str(path), "a 1\n") is True
    assert atomic_file.update_file(str(path), "a 1\n") is False
    assert path.read_text() == "a 1\n" and oct(path.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir()] == ["kilo.prom"]


def test_summary_table_names_peers_and_counts_stale():
    a = dict(
        st.host_status(state(peers=[live(2, NOW - 10, rx=5000, tx=3 * 1024 * 1024)]), NOW, 180),
        location="x",
        segment="location:x",
    )
    b = dict(
        st.host_status(
            dict(state(peers=[live(1, NOW - 900), live(9, 0)]), public_key=key(2)), NOW, 180
        ),
        location="y",
        segment="location:y",
    )
    out = summary({"a": a, "b": b, "c": None}, {key(9): "laptop"})
    text = "\n".join(out["lines"])
    assert out["leaders"] == ["a", "b"] and out["unreported"] == ["c"]
    assert out["stale"] == ["b -> a", "b -> laptop"]
    assert re.search(r"^a\s+b\s+203.0.113.2:51820\s+10s\s+4.9 KiB\s+3.0 MiB\s+ok$", text, re.M), (
        text
    )
    assert re.search(r"^b\s+laptop\s+\S+\s+never\s+.*stale$", text, re.M), text
    assert re.search(r"^b\s+a\s+\S+\s+15m00s\s", text, re.M), text
    assert out["lines"][-1] == "3 hosts, 2 leaders, 3 tunnels, 2 stale, no result from: c"


def relayed_result(**options):
    """r and s public (relays), u and v behind NAT (test_topology_relays' timed mesh): the pair
    u-v goes through one of them."""
    from test_topology_relays import timed_mesh

    return build_plans(timed_mesh()[0], [], options)


@pytest.mark.parametrize("mesh_edges", ["all", "hub"])
def test_relayed_pairs_dashed_via_the_relay_relays_labelled(mesh_edges):
    result = relayed_result()
    (pair,) = [p for p in result["paths"] if p["path"] == "relayed"]
    via = pair["via"].split(":")[1]
    text = to_dot(result, mesh_edges)
    found = dict(((a, b), attrs) for a, b, attrs in edges(text))
    assert found[("node/u", "node/v")] == 'dir=both, style=dashed, label="via %s"' % via
    dashed = [k for k, attrs in found.items() if "label=" in attrs]
    assert dashed == [("node/u", "node/v")]  # only the relayed pair
    for name in ("r", "s"):
        assert re.search(r'"node/%s" \[label="[^"]*\\nrelay", rank=1' % name, text)
    for name in ("u", "v"):
        assert re.search(r'"node/%s" \[label="[^"]*\\nbehind NAT", rank=1' % name, text)
    if mesh_edges == "all":
        # a NAT'd leader and a public one: direct, a plain edge
        assert found[("node/r", "node/u")] == "dir=both"
        assert len([k for k in found if k[0].startswith("node/") and k[1].startswith("node/")]) == 6
    else:
        assert ("node/r", "node/u") not in found and ("node/u", "%s" % HUB_ID) in found


def test_probing_pair_drawn_as_relayed_direct_pair_plain():
    result = relayed_result()
    (pair,) = [p for p in result["paths"] if p["path"] == "relayed"]
    pair["path"] = (
        "probing"  # the relayed path carries the traffic meanwhile; the probe is not drawn
    )
    assert 'style=dashed, label="via' in to_dot(result, "all")
    pair.update(path="direct", via=None)
    text = to_dot(result, "all")
    assert (
        "via" not in text
        and dict(((a, b), attrs) for a, b, attrs in edges(text))[("node/u", "node/v")] == "dir=both"
    )


def test_kilo_meshes_draw_as_before():
    # no paths in the result: no relay labels, no dashed leader pairs
    text = to_dot(mesh(3, peers=0), "all")
    assert "relay" not in text and "via" not in text


def live_of(plan, ages):
    """A leader's live WireGuard state as its plan makes it: handshake ages by entry name (None: never)."""
    peers = [
        {
            "public_key": e["public_key"],
            "endpoint": e.get("endpoint"),
            "allowed_ips": e["allowed_ips"],
            "persistent_keepalive": e.get("persistent_keepalive") or 0,
            "latest_handshake": 0 if ages.get(e["name"]) is None else NOW - ages[e["name"]],
            "rx_bytes": 1,
            "tx_bytes": 1,
        }
        for e in plan["peers"]
    ]
    return dict(state(peers=peers), public_key=plan.get("public_key") or key(99))


def test_status_paths_from_the_stored_plans(tmp_path):
    import json

    result = relayed_result()
    (pair,) = [p for p in result["paths"] if p["path"] == "relayed"]
    relay = pair["via"]
    stored = tmp_path / "mesh-plan.json"
    stored.write_text(
        json.dumps(
            {"format": 1, "plan": result["plans"]["u"], "settings": {"firewall": "nftables"}}
        )
    )
    agent = tmp_path / "agent-plan.json"  # older than the stored plan: not read
    agent.write_text(json.dumps(result["plans"]["r"]))
    import os

    os.utime(str(agent), (NOW - 100, NOW - 100))
    plan, settings = st.stored_plan([str(tmp_path / "missing.json"), str(agent), str(stored)])
    assert plan["segment"] == "location:u" and settings == {"firewall": "nftables"}
    u = st.label_peers(
        st.host_status(live_of(plan, {relay: 4, "location:r": 4, "location:s": 4}), NOW), plan
    )
    assert [p.get("relayed") for p in u["peers"] if p["name"] == relay] == [["location:v"]]
    assert st.path_rows(u) == [
        dict(
            a="location:u",
            b="location:v",
            path="relayed",
            via=relay,
            handshake_age=4,
            probing=False,
            probe_handshake_age=None,
        )
    ]
    assert u["own_paths"] == st.path_rows(u)
    text = st.metrics(u, relay_forwarded=None)
    assert (
        'kilo_path{segment="location:v",path="relayed",via="%s",probing="false"} 1' % relay
        in text.splitlines()
    )
    assert "kilo_relay_forwarded_bytes_total" not in text
    assert all(st.SAMPLE_RE.match(line) for line in text.splitlines() if not line.startswith("#"))
    r = st.label_peers(
        st.host_status(live_of(result["plans"]["r"], {"location:u": 3, "location:v": 300}), NOW),
        result["plans"]["r"],
    )
    assert 'kilo_relay_forwarded_bytes_total{interface="kilo0"} 8044' in st.metrics(
        r, relay_forwarded=8044
    )
    assert "kilo_path" not in st.metrics(r)
    out = summary(
        {"u": dict(u, segment="location:u"), "r": dict(r, segment="location:r")},
        {},
        result["paths"],
    )
    rows = dict(((a, b), (path, via, age, probe)) for a, b, path, via, age, probe in out["paths"])
    assert rows[("location:u", "location:v")] == ("relayed", relay, "4s", "-")
    # the first end's: r's entry of u
    assert rows[("location:r", "location:u")] == ("direct", "-", "3s", "-")
    # r's entry of v: no v leader reported
    assert rows[("location:r", "location:v")] == ("direct", "-", "5m00s", "-")
    assert ("location:s", "location:v") in rows and rows[("location:s", "location:v")][2] == "-"
    text = "\n".join(out["lines"])
    assert re.search(r"^A\s+B\s+PATH\s+VIA\s+HANDSHAKE\s+PROBE$", text, re.M)
    assert re.search(r"^location:u\s+location:v\s+relayed\s+%s\s+4s\s+-$" % relay, text, re.M)
    # without the engine's pairs: those the hosts' stored plans show
    assert summary({"u": u}, {})["paths"] == [
        ["location:u", "location:v", "relayed", relay, "4s", "-"]
    ]
    # a probe beside the relay (symmetric NATs: for good): the pair is relayed, the relay's
    # handshake shown, the probe's in PROBE and a label; a probe is never stale
    probe = {
        "name": "location:v",
        "public_key": key(4),
        "probe": True,
        "allowed_ips": [],
        "endpoint": "198.51.100.4:40004",
    }
    plan = dict(plan, peers=plan["peers"] + [probe])
    p = st.label_peers(st.host_status(live_of(plan, {relay: 4}), NOW), plan)
    (row,) = st.path_rows(p)
    assert (row["path"], row["via"], row["handshake_age"]) == ("relayed", relay, 4)
    assert (row["probing"], row["probe_handshake_age"]) == (True, None)
    assert key(4) not in p["stale"]
    assert (
        'kilo_path{segment="location:v",path="relayed",via="%s",probing="true"} 1' % relay
        in st.metrics(p).splitlines()
    )
    out = summary({"u": dict(p, segment="location:u")}, {}, result["paths"])
    assert [r for r in out["paths"] if r[:2] == ["location:u", "location:v"]] == [
        ["location:u", "location:v", "relayed", relay, "4s", "never"]
    ]
    # the engine's probing pair, no end reported: relayed, PROBE yes
    engine = [dict(p, path="probing") if p["path"] == "relayed" else p for p in result["paths"]]
    out = summary({}, {}, engine)
    assert [r for r in out["paths"] if r[2] != "direct"] == [
        ["location:u", "location:v", "relayed", relay, "-", "yes"]
    ]
    # a Kilo mesh: no PATHS
    assert "paths" not in mesh(3) and summary({"u": st.host_status(state(), NOW)})["paths"] == []
