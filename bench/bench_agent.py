#!/usr/bin/env python3
"""kilo-mesh-agent: how fast a change reaches the mesh, and what an agent costs among 1,000 Nodes.

One lab of 2 locations x 2 hosts (prefix kbn), a kube-apiserver of its own on the lab's bridge
(tests/kube/agentlab.agent_cluster), site.yml with agentlab.AGENT_ARGS: every host runs the agent.

1. Stopwatches, REPS times each (p50/p95; polled every 0.2 s, so about 0.3 s of resolution):
   a Peer created -> its key on every leader's WireGuard interface (and deleted -> off it); a
   Node created as a joined node's agent leaves it (key, endpoint, internal-ip, last-seen,
   granularity, a location of its own, spec.podCIDR) -> its pod CIDR in WireGuard's allowed IPs
   and routed on every leader (and deleted -> gone). Their endpoints are 198.51.100.x.

2. 996 more Nodes (1,000 with the lab's), in FAKE_LOCATIONS locations (half by Kilo's location
   annotation, half by the topology label), annotated as Kilo's agent annotates them, endpoints
   in 203.0.113.0/24 (no route leads there), pod CIDRs in 10.160.0.0/14. A lab leader's
   interface then gets a peer per location and ~1,000 pod CIDRs. Then, for
   each lab agent (/proc/PID/stat read from the machine's side, the agent's own
   kilo_reconciles_total over its :1107 listener on the lab bridge):
   * idle: a quiet minute in which no other Node changes (the fake Nodes' last-seen is written
     an hour ahead for this, so nobody has to check in): CPU, reconciles, RSS, and the API
     server's own count of requests on nodes and peers (apiserver_request_total, scraped with the
     admin token before and after) per agent;
   * per reconcile: TICKS patches of one fake Node's unrelated annotation, TICK_GAP s apart: each
     is one watch event and one reconcile whose plan does not change (no converge); the idle
     minute's rate (resyncs, own check-ins) is taken off the window's CPU and reconciles;
   * check-ins: every fake Node's last-seen written once per CHECKIN s, spread evenly (what 996
     Kilo agents do: ~33 PATCHes a second), for a minute: CPU, reconciles; the difference to the
     idle minute is what other nodes' check-ins cost.

A benchmark: it prints figures and never fails on time. `bench agent <what> key=value ...`.
"""

import base64
import concurrent.futures
import hashlib
import os
import re
import ssl
import statistics
import sys
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [
    os.path.join(REPO, "tests", "kube"),
    os.path.join(REPO, "tests", "host"),
    REPO,
    os.path.join(REPO, ".collections"),
]
import agentlab  # noqa: E402  pylint: disable=import-error,wrong-import-position
import labcluster  # noqa: E402  pylint: disable=import-error,wrong-import-position
import sitetools  # noqa: E402  pylint: disable=import-error,wrong-import-position

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn  # noqa: E402

PREFIX = "kbn"
REPS = int(os.environ.get("BENCH_AGENT_REPS", "5"))
TOTAL = 1000
FAKE_LOCATIONS = 40
QUIET = 60.0
TICKS, TICK_GAP = 10, 3.0
CHECKIN = 30.0
GROUP = (kn.PEER_GROUP, kn.PEER_VERSION, kn.PEER_PLURAL)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def key(tag):
    """A valid WireGuard public key (base64 of 32 bytes), distinct per tag."""
    return base64.b64encode(hashlib.sha256(("kbn-%s" % tag).encode()).digest()).decode()


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def line(what, **figures):
    print(
        "bench agent %s %s" % (what, " ".join("%s=%s" % kv for kv in figures.items())), flush=True
    )


# -- the agent's process, seen from the machine --------------------------------------------------


def machine_pid(lab, host, pid):
    """The PID on this machine of the process ``pid`` of a lab host's PID namespace."""
    ns = os.readlink("/proc/%d/ns/pid" % lab.hosts[host]["pid"])
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/ns/pid" % entry) != ns:
                continue
            with open("/proc/%s/status" % entry) as f:
                nspid = [x for x in f.read().splitlines() if x.startswith("NSpid:")][0].split()[1:]
        except (OSError, IndexError):
            continue
        if int(nspid[-1]) == pid:
            return int(entry)
    raise RuntimeError("%s: no process %d" % (host, pid))


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(CLK_TCK)


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        status = dict(x.split(":", 1) for x in f.read().splitlines() if ":" in x)
    return int(status["VmRSS"].split()[0]) / 1024.0, int(status["VmHWM"].split()[0]) / 1024.0


def agent_metrics(lab, host):
    """{name: value} of the agent's unlabelled metrics, over its listener on the lab bridge."""
    with urllib.request.urlopen(
        "http://%s:1107/metrics" % lab.hosts[host]["mgmt_ip"], timeout=10
    ) as r:
        text = r.read().decode()
    return dict(
        (k, float(v))
        for k, v in (
            x.rsplit(" ", 1)
            for x in text.splitlines()
            if x and not x.startswith("#") and "{" not in x
        )
    )


class Agents(object):
    """CPU, reconciles and RSS of the lab's agents, read together."""

    def __init__(self, lab, hosts):
        self.lab, self.hosts = lab, hosts
        self.pids = dict((h, machine_pid(lab, h, agentlab.agent_pid(lab, h))) for h in hosts)

    def read(self):
        out = {}
        for h in self.hosts:
            m = agent_metrics(self.lab, h)
            out[h] = {
                "cpu": cpu_seconds(self.pids[h]),
                "reconciles": m["kilo_reconciles_total"],
                "errors": m["kilo_errors_total"],
                "nodes": m["kilo_nodes"],
                "leader": m["kilo_leader"],
            }
        return out

    def rss(self):
        return dict((h, rss_mb(p)) for h, p in self.pids.items())


def delta(after, before):
    return dict(
        (h, dict((k, after[h][k] - before[h][k]) for k in ("cpu", "reconciles", "errors")))
        for h in after
    )


# -- the API server's side -----------------------------------------------------------------------


def api_requests(server):
    """{(verb, resource): count} of apiserver_request_total for nodes and peers, and
    {kind: watchers} of apiserver_registered_watchers."""
    req = urllib.request.Request(
        server.host + "/metrics", headers={"Authorization": "Bearer " + server.token}
    )
    with urllib.request.urlopen(
        req, timeout=30, context=ssl.create_default_context(cafile=server.ca_cert)
    ) as r:
        text = r.read().decode()
    counts, watchers = {}, {}
    for x in text.splitlines():
        name = x.split("{", 1)[0]
        if name not in ("apiserver_request_total", "apiserver_registered_watchers"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', x.rsplit("}", 1)[0]))
        value = float(x.rsplit(" ", 1)[1])
        if name == "apiserver_registered_watchers":
            watchers[labels.get("kind")] = value
        elif labels.get("resource") in ("nodes", "peers"):
            sub = "/" + labels["subresource"] if labels.get("subresource") else ""
            k = (labels["verb"], labels["resource"] + sub)
            counts[k] = counts.get(k, 0) + value
    return counts, watchers


# -- cluster objects -------------------------------------------------------------------------------


def fake_node(i, last_seen):
    """The i-th of the 996 Nodes, as Kilo's agent leaves it (the first of each location leads)."""
    loc = i % FAKE_LOCATIONS
    labels, annotations = {}, dict(labcluster.KUBELET_ANNOTATIONS)
    if loc % 2:
        annotations[kn.LOCATION] = "bn%02d" % loc
    else:
        labels[kn.REGION_LABEL] = "bn%02d" % loc
    annotations.update(
        {
            kn.KEY: key(i),
            kn.ENDPOINT: "203.0.113.%d:%d" % (1 + i % 250, 51820 + i // 250),
            kn.INTERNAL_IP: "10.200.%d.%d/16" % (i // 250, 1 + i % 250),
            kn.WIREGUARD_IP: "10.4.%d.1/16" % loc if i < FAKE_LOCATIONS else "",
            kn.LAST_SEEN: str(int(last_seen)),
            kn.GRANULARITY: "location",
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "kbn-fake-%04d" % i, "labels": labels, "annotations": annotations},
        "spec": {"podCIDR": "10.%d.%d.0/24" % (160 + (i >> 8), i & 255)},
    }


def joined_node(name, rep, cidr):
    """A Node as a freshly joined node's agent leaves it, in a location of its own (it leads it)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": dict(
                labcluster.KUBELET_ANNOTATIONS,
                **{
                    kn.LOCATION: "kbn-join",
                    kn.KEY: key("join-%d" % rep),
                    kn.ENDPOINT: "198.51.100.%d:51820" % (10 + rep),
                    kn.INTERNAL_IP: "10.201.0.%d/16" % (10 + rep),
                    kn.WIREGUARD_IP: "",
                    kn.LAST_SEEN: str(int(time.time())),
                    kn.GRANULARITY: "location",
                },
            ),
        },
        "spec": {"podCIDR": cidr},
    }


def in_parallel(fn, items, workers=8):
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(fn, items):
            pass


# -- 1. stopwatches --------------------------------------------------------------------------------


def routed(lab, host, cidr):
    """The CIDR is in the allowed IPs of a WireGuard peer of kilo0 and has a route."""
    return (
        lab.run(
            host,
            [
                "sh",
                "-c",
                "wg show kilo0 allowed-ips | grep -qF ' %s' && ip route show %s | grep -q ."
                % (cidr, cidr),
            ],
        ).returncode
        == 0
    )


def stopwatches(lab, api, leaders):
    from kubernetes import client  # pylint: disable=import-outside-toplevel

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    timing = dict((k, []) for k in ("peer_on", "peer_off", "node_on", "node_off"))
    for rep in range(REPS):
        name = "kbn-peer-%d" % rep
        custom.create_cluster_custom_object(*GROUP, labcluster.peer_resource(name))
        timing["peer_on"].append(
            agentlab.stopwatch(
                lambda: all(labcluster.PEER_KEY in agentlab.wg_dump(lab, h) for h in leaders), 60
            )
        )
        custom.delete_cluster_custom_object(*GROUP, name)
        timing["peer_off"].append(
            agentlab.stopwatch(
                lambda: not any(labcluster.PEER_KEY in agentlab.wg_dump(lab, h) for h in leaders),
                60,
            )
        )
    for rep in range(REPS):
        name, cidr = "kbn-join-%d" % rep, "10.60.%d.0/24" % rep
        core.create_node(joined_node(name, rep, cidr))
        timing["node_on"].append(
            agentlab.stopwatch(lambda: all(routed(lab, h, cidr) for h in leaders), 60)
        )
        core.delete_node(name)
        timing["node_off"].append(
            agentlab.stopwatch(lambda: not any(routed(lab, h, cidr) for h in leaders), 60)
        )
    for what, values in timing.items():
        line(
            "stopwatch-" + what.replace("_", "-"),
            reps=len(values),
            p50="%.2f" % statistics.median(values),
            p95="%.2f" % pct(values, 95),
            max="%.2f" % max(values),
            all=",".join("%.2f" % v for v in values),
        )
    return timing


# -- 2. 1,000 Nodes ----------------------------------------------------------------------------------


class CheckIns(threading.Thread):
    """Every fake Node's last-seen written once per CHECKIN seconds, evenly spread, as its agent would."""

    def __init__(self, core, count):
        super().__init__(daemon=True)
        self.core, self.count = core, count
        self.stop_event = threading.Event()
        self.patches = self.late = 0

    def run(self):
        gap = CHECKIN / self.count
        start = time.monotonic()
        pool = concurrent.futures.ThreadPoolExecutor(4)
        n = 0
        while not self.stop_event.is_set():
            due = start + n * gap
            wait = due - time.monotonic()
            if wait > 0:
                self.stop_event.wait(wait)
            elif wait < -1:
                self.late += 1
            i = n % self.count
            pool.submit(
                self.core.patch_node,
                "kbn-fake-%04d" % i,
                {"metadata": {"annotations": {kn.LAST_SEEN: str(int(time.time()))}}},
            )
            self.patches += 1
            n += 1
        pool.shutdown(wait=True)


def thousand(lab, server, api, hosts, leaders):
    from kubernetes import client  # pylint: disable=import-outside-toplevel

    core = client.CoreV1Api(api)
    fakes = TOTAL - len(hosts)
    agents = Agents(lab, hosts)
    rss0 = agents.rss()
    # An hour ahead: no other Node needs to check in during the quiet minute (liveness 60 s).
    ahead = time.time() + 3600
    start = time.monotonic()
    in_parallel(lambda i: core.create_node(fake_node(i, ahead)), range(fakes))
    made = time.monotonic() - start
    took = agentlab.stopwatch(
        lambda: all(v["nodes"] == TOTAL for v in agents.read().values()), 300, interval=1
    )
    leader = leaders[0]
    peers = len(agentlab.wg_dump(lab, leader))
    routes = len(lab.run(leader, ["ip", "-o", "route", "show", "dev", "kilo0"]).stdout.splitlines())
    line(
        "1000-nodes",
        created=fakes,
        create_seconds="%.1f" % made,
        all_agents_see_1000_after="%.1f" % took,
        leader_wg_peers=peers,
        leader_kilo0_routes=routes,
    )
    time.sleep(35)  # past a resync: the creation burst is over

    # idle: a quiet minute
    load0 = os.getloadavg()
    api0, a0 = api_requests(server), agents.read()
    time.sleep(QUIET)
    api1, a1 = api_requests(server), agents.read()
    idle = delta(a1, a0)
    rss1 = agents.rss()
    per_min = 60.0 / QUIET
    reqs = dict(
        (k, (api1[0].get(k, 0) - api0[0].get(k, 0)) * per_min) for k in set(api1[0]) | set(api0[0])
    )
    reqs = dict((k, v) for k, v in reqs.items() if v)
    n = len(hosts)
    line(
        "idle-api",
        agents=n,
        requests_per_min_all_agents=int(sum(reqs.values())),
        per_agent="%.1f" % (sum(reqs.values()) / n),
        by_verb=",".join("%s:%s=%g" % (v, r, c) for (v, r), c in sorted(reqs.items())),
        watchers_node=api1[1].get("Node"),
        watchers_peer=api1[1].get("Peer"),
    )
    for h in hosts:
        line(
            "idle-agent",
            host=h,
            leader=int(a1[h]["leader"]),
            nodes=int(a1[h]["nodes"]),
            cpu_s_per_min="%.2f" % (idle[h]["cpu"] * per_min),
            reconciles_per_min="%g" % (idle[h]["reconciles"] * per_min),
            cpu_s_per_reconcile="%.3f" % (idle[h]["cpu"] / max(1, idle[h]["reconciles"])),
            errors=int(idle[h]["errors"]),
            rss_mb="%.1f" % rss1[h][0],
            peak_rss_mb="%.1f" % rss1[h][1],
            rss_before_1000_mb="%.1f" % rss0[h][0],
        )
    line("idle-load", loadavg_1m="%.2f" % load0[0], after="%.2f" % os.getloadavg()[0])

    # per reconcile: one unrelated annotation of one Node, TICKS times
    t0, start = agents.read(), time.monotonic()
    for tick in range(TICKS):
        core.patch_node(
            "kbn-fake-0000", {"metadata": {"annotations": {"bench.kilo.mesh/tick": str(tick)}}}
        )
        time.sleep(TICK_GAP)
    window = time.monotonic() - start
    ticks = delta(agents.read(), t0)
    for h in hosts:
        base = window / QUIET
        extra_cpu = ticks[h]["cpu"] - idle[h]["cpu"] * base
        extra = ticks[h]["reconciles"] - idle[h]["reconciles"] * base
        line(
            "reconcile",
            host=h,
            events=TICKS,
            reconciles=int(ticks[h]["reconciles"]),
            cpu_s_per_reconcile="%.3f" % (extra_cpu / max(1.0, extra)),
            window_cpu_s_per_reconcile="%.3f" % (ticks[h]["cpu"] / max(1, ticks[h]["reconciles"])),
        )

    # check-ins of the 996 others, evenly spread, for a minute
    writer = CheckIns(core, fakes)
    writer.start()
    time.sleep(CHECKIN)  # every Node written once: their last-seen is "now" from here on
    c0, load0 = agents.read(), os.getloadavg()
    time.sleep(QUIET)
    c1 = agents.read()
    writer.stop_event.set()
    writer.join()
    busy = delta(c1, c0)
    rss2 = agents.rss()
    for h in hosts:
        line(
            "checkins-agent",
            host=h,
            node_patches_per_s="%.0f" % (fakes / CHECKIN),
            cpu_s_per_min="%.2f" % (busy[h]["cpu"] * per_min),
            of_which_checkins_cpu_s_per_min="%.2f" % ((busy[h]["cpu"] - idle[h]["cpu"]) * per_min),
            reconciles_per_min="%g" % (busy[h]["reconciles"] * per_min),
            cpu_s_per_reconcile="%.3f" % (busy[h]["cpu"] / max(1, busy[h]["reconciles"])),
            errors=int(busy[h]["errors"]),
            rss_mb="%.1f" % rss2[h][0],
            peak_rss_mb="%.1f" % rss2[h][1],
        )
    line(
        "checkins-load",
        loadavg_1m="%.2f" % load0[0],
        after="%.2f" % os.getloadavg()[0],
        writer_patches=writer.patches,
        writer_late=writer.late,
    )
    return idle, ticks, busy, (rss1, rss2), reqs


def table(timing, figures, hosts, ticks_window):
    """The figures against issue 22's goals, one row each (worst agent where there are several)."""
    idle, ticks, busy, rss, reqs = figures
    rows = [
        (
            "%s (p50 / p95 of %d)" % (what, len(timing[k])),
            "%.2f / %.2f s" % (statistics.median(timing[k]), pct(timing[k], 95)),
            "",
        )
        for k, what in (
            ("peer_on", "Peer applied -> on every leader"),
            ("node_on", "Node joins -> pod CIDR routed on every leader"),
        )
    ]
    rows.append(
        (
            "RSS among 1,000 Nodes, at rest / under check-ins",
            "%.1f / %.1f MB"
            % (max(r[0] for r in rss[0].values()), max(r[0] for r in rss[1].values())),
            "<= 80 MB",
        )
    )
    per = [
        (ticks[h]["cpu"] - idle[h]["cpu"] * ticks_window / QUIET)
        / max(1.0, ticks[h]["reconciles"] - idle[h]["reconciles"] * ticks_window / QUIET)
        for h in hosts
    ]
    rows.append(
        (
            "CPU per reconcile, plan unchanged / idle minute's mean (resyncs)",
            "%.3f / %.3f s"
            % (max(per), max(idle[h]["cpu"] / max(1, idle[h]["reconciles"]) for h in hosts)),
            "<= 0.5 s",
        )
    )
    rows.append(
        (
            "CPU a minute at rest / with 996 check-ins every 30 s",
            "%.2f / %.2f s"
            % (
                max(idle[h]["cpu"] for h in hosts) * 60 / QUIET,
                max(busy[h]["cpu"] for h in hosts) * 60 / QUIET,
            ),
            "",
        )
    )
    rows.append(
        (
            "API requests a minute per agent at rest (server's count)",
            "%.1f (all %d agents: %s)"
            % (
                sum(reqs.values()) / len(hosts),
                len(hosts),
                ", ".join("%s %s %g" % (v, r, c) for (v, r), c in sorted(reqs.items())) or "none",
            ),
            "watches + last-seen PATCHes",
        )
    )
    width = max(len(r[0]) for r in rows)
    print("\n%-*s  %-34s  %s" % (width, "agent", "figure", "goal"))
    for what, figure, goal in rows:
        print("%-*s  %-34s  %s" % (width, what, figure, goal))
    sys.stdout.flush()


def main():
    line("machine", cpus=os.cpu_count(), loadavg="%.2f/%.2f/%.2f" % os.getloadavg())
    with agentlab.agent_cluster(PREFIX, 2, 2) as (lab, server, inventory):
        out = sitetools.site(inventory, "-e", "kilo_task_timeout=120", *agentlab.AGENT_ARGS)
        hosts = sorted(lab.hosts)
        agentlab.wait_for(lambda: all("watching" in agentlab.read_log(lab, h) for h in hosts), 60)
        with server.client() as api:
            agentlab.wait_for(
                lambda: all(kn.LAST_SEEN in agentlab.node_annotations(api, h) for h in hosts), 60
            )
            leaders = agentlab.leaders(lab, hosts)
            line(
                "lab",
                hosts=len(hosts),
                leaders=",".join(leaders),
                site_recap_failed=sum(c["failed"] for c in sitetools.recap(out).values()),
            )
            timing = stopwatches(lab, api, leaders)
            figures = thousand(lab, server, api, hosts, leaders)
    table(timing, figures, hosts, TICKS * TICK_GAP)


if __name__ == "__main__":
    main()
