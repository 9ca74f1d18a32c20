"""A cluster moves from Kilo to kilo.mesh and back, with Kilo's own agent `kg` on the lab hosts.

Needs Kilo's kg binary in $KILO_KG (skipped otherwise). Each lab host is a Node and runs kg as
Kilo's userspace DaemonSet runs it (`--create-interface=false` next to a wireguard-go `kilo0`,
`--encapsulate=never`, `--cni=false`, location granularity), reaching the test API server through
an SSH remote forward. Tests run in file order on one lab:

  a. Kilo's agents alone mesh the two locations;
  b. agents stopped as a DaemonSet is deleted (SIGTERM): site.yml through the inventory plugin
     takes over with the same keys, and a second run is changed=0;
  c. back: kg started again reads our annotations, and is in charge (a new Peer reaches the leaders);
  d. agents killed (SIGKILL, a crash): Kilo's routes stay behind; site.yml names them, takes them
     over with kilo_route_conflict=replace, and is changed=0 afterwards without it.

What Kilo leaves behind at each stop is printed (pytest -s) and the parts that matter asserted.
"""

import os
import signal
import time

import pytest
from kubernetes import client

# tests/kube is on sys.path (conftest.py).
from test_apiserver import GROUP, PLURAL, VERSION, admin, eventually  # noqa: F401 pylint: disable=import-error,unused-import
from test_site_kubernetes import annotations, pings, sitetools, wg_peers  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

import kubelab  # pylint: disable=import-error
import labcluster  # pylint: disable=import-error

KG = kubelab.binary("KILO_KG", "build Kilo's cmd/kg (github.com/squat/kilo), set KILO_KG")
KEY_FILE = "/var/lib/kilo/key"  # Kilo's, and kilo_key_path's default
PREFIX = "kgm"  # this machine's labs are global: this prefix is this file's only
PEER = "kgm-phone"
PEER_KEY = "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw="
FOREIGN_ROUTE = "a foreign route"


class Cluster:
    """The lab, its inventory, and the kg agents running now (host -> PID in the host)."""

    def __init__(self, lab, inventory):
        self.lab, self.inventory, self.agents, self.kilo_keys = lab, inventory, {}, {}


def _assert_equal(got, want):
    assert got == want, (got, want)


@pytest.fixture(scope="module")
def cluster(kube, admin):
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces)")
    with labcluster.nodes_of(kube, admin, PREFIX, PEER, create_peer=False) as (lab, inventory):
        state = Cluster(lab, inventory)
        with kubelab.ApiTunnels(lab, kube):
            for name in lab.hosts:
                kubelab.install_kubeconfig(lab, name, kube)
                kubelab.prepare_node(lab, name)
            try:
                yield state
            finally:
                stop_agents(state, signal.SIGKILL)


def start_agents(cluster, phase):
    for name in sorted(cluster.lab.hosts):
        cluster.agents[name] = kubelab.start(
            cluster.lab, name, kubelab.kg_argv(KG, name), "/var/log/kg-%s.log" % phase
        )


def stop_agents(cluster, sig):
    for name, pid in sorted(cluster.agents.items()):
        kubelab.stop(cluster.lab, name, pid, sig)
    cluster.agents.clear()


def kilo_key(lab, name):
    """The public key of the private key in Kilo's key file on the host."""
    return lab.run(name, ["sh", "-c", "wg pubkey < %s" % KEY_FILE]).stdout.strip()


def kilo_routes(lab, name):
    """Routes Kilo's agent made (it tags them `proto static`; ours carry protocol 107)."""
    return lab.run(
        name, ["ip", "-4", "route", "show", "table", "all", "proto", "static"]
    ).stdout.strip()


def kilo_chains(lab, name):
    return [
        line
        for line in lab.run(name, ["iptables-save"]).stdout.splitlines()
        if line.startswith(":KILO")
    ]


def leftovers(lab, name):
    """What a stopped agent left on the host, for the record: routes, rules, iptables, kilo0."""

    def sh(cmd):
        return lab.run(name, ["sh", "-c", cmd]).stdout.strip()

    return {
        "routes": sh(
            "ip -4 route show table all | grep -v -e 'proto kernel' -e '^local ' -e '^broadcast '"
            " -e '^default '"
        ),
        "rules": sh("ip -4 rule show"),
        "iptables": sh("iptables-save | grep -e KILO -e '^\\*'"),
        "kilo0": sh("ip -br addr show dev kilo0; wg show kilo0 allowed-ips"),
    }


def record(cluster, what):
    for name in sorted(cluster.lab.hosts):
        print("\n== %s on %s" % (what, name))
        for part, text in leftovers(cluster.lab, name).items():
            print("-- %s\n%s" % (part, text))


def assert_kilo_checked_in(cluster, admin, since):
    """Every Node carries its own Kilo key and a last-seen of this agent."""
    for name in cluster.lab.hosts:
        got = annotations(admin, name)
        assert got.get(kn.KEY) and got[kn.KEY] == kilo_key(cluster.lab, name), (name, got)
        assert int(got.get(kn.LAST_SEEN, 0)) >= since, (name, got)


def pings_after(cluster, what, timeout=60):
    """Wait until every host pings across locations; print how long the handover took.

    When an agent (Kilo's stopping or starting one) resets a peer on one side only, the other side
    keeps sending on its old session until WireGuard, 15 s without an answer (keepalive + rekey
    timeouts), starts a new handshake: seen here 2 to 20 s.
    """
    started = time.monotonic()
    eventually(lambda: pings(cluster.lab), timeout)
    print("\npings across locations %.1f s after %s" % (time.monotonic() - started, what))


def converge(cluster, *extra, expect_rc=0):
    out = sitetools.site(
        cluster.inventory, "-e", "kilo_task_timeout=120", *extra, expect_rc=expect_rc
    )
    return out, sitetools.recap(out)


# -- the tests ---------------------------------------------------------------------------------


def test_a_kilos_agents_alone_mesh_the_locations(cluster, admin):
    since = int(time.time())
    start_agents(cluster, "a")
    eventually(lambda: assert_kilo_checked_in(cluster, admin, since), 60)
    eventually(lambda: pings(cluster.lab), 90)
    for name in cluster.lab.hosts:
        assert kilo_routes(cluster.lab, name), name  # the paths are Kilo's own routes
        assert ":KILO-NAT - [0:0]" in kilo_chains(cluster.lab, name), name
        cluster.kilo_keys[name] = kilo_key(cluster.lab, name)
    # public hosts lead; an agent that started before the others saw itself leading for a while
    eventually(
        lambda: _assert_equal(kubelab.leaders(admin, cluster.lab.hosts), ["aws-1", "gcp-1"]), 90
    )
    record(cluster, "under Kilo's agents")


def test_b_site_yml_takes_over_from_stopped_agents_with_the_same_keys(cluster, admin):
    stop_agents(cluster, signal.SIGTERM)  # a deleted DaemonSet: kg cleans up (--clean-up=true)
    record(cluster, "after kg's SIGTERM")
    for name in cluster.lab.hosts:
        assert not kilo_routes(cluster.lab, name) and not kilo_chains(cluster.lab, name), name
        assert kn.KEY not in annotations(admin, name), name  # Kilo's CleanUp drops its annotations
    _, counts = converge(cluster)
    assert set(counts) == set(cluster.lab.hosts) and all(
        c["failed"] == 0 for c in counts.values()
    ), counts
    for name in cluster.lab.hosts:
        key = cluster.lab.run(name, ["wg", "show", "kilo0", "public-key"]).stdout.strip()
        assert key == annotations(admin, name)[kn.KEY] == cluster.kilo_keys[name], name
    for name in ("aws-2", "gcp-2"):  # whatever a non-leader's kilo0 held at the stop is gone
        assert wg_peers(cluster.lab, name) == {}, (name, wg_peers(cluster.lab, name))
        assert (
            "inet "
            not in cluster.lab.run(name, ["ip", "-4", "addr", "show", "dev", "kilo0"]).stdout
        ), name
    pings_after(cluster, "site.yml took over")
    _, counts = converge(cluster)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts
    assert kubelab.leaders(admin, cluster.lab.hosts) == ["aws-1", "gcp-1"]


def test_c_kilo_again_reads_our_annotations_and_is_in_charge(cluster, admin):
    ours = dict((name, wg_peers(cluster.lab, name)) for name in cluster.lab.hosts)
    start_agents(cluster, "c")
    eventually(lambda: [_assert_chain(cluster.lab, n) for n in cluster.lab.hosts], 60)
    for name in cluster.lab.hosts:
        assert annotations(admin, name)[kn.KEY] == cluster.kilo_keys[name], name
    pings_after(cluster, "kg's start")  # each agent rewrites the whole interface once
    record(cluster, "kg over site.yml's state")
    # Only a running agent can put a new Peer on the leaders now: site.yml is not run again.
    client.CustomObjectsApi(admin).create_cluster_custom_object(
        GROUP,
        VERSION,
        PLURAL,
        {
            "apiVersion": "%s/%s" % (GROUP, VERSION),
            "kind": "Peer",
            "metadata": {"name": PEER},
            "spec": {
                "allowedIPs": ["10.5.0.9/32"],
                "publicKey": PEER_KEY,
                "persistentKeepalive": 0,
            },
        },
    )
    for leader in ("aws-1", "gcp-1"):
        eventually(lambda leader=leader: _assert_peer(cluster.lab, leader), 60)
        # the rest of the leader's peers is what site.yml had set: Kilo computed the same mesh
        assert (
            dict((k, v) for k, v in wg_peers(cluster.lab, leader).items() if k != PEER_KEY)
            == ours[leader]
        )
    eventually(
        lambda: _assert_equal(kubelab.leaders(admin, cluster.lab.hosts), ["aws-1", "gcp-1"]), 90
    )
    pings(cluster.lab)


def _assert_chain(lab, name):
    assert ":KILO-NAT - [0:0]" in kilo_chains(lab, name), name


def _assert_peer(lab, leader):
    assert wg_peers(lab, leader).get(PEER_KEY) == ["10.5.0.9/32"], (leader, wg_peers(lab, leader))


def test_d_after_a_crash_site_yml_names_kilos_routes_and_takes_them_over_when_told(cluster, admin):
    stop_agents(cluster, signal.SIGKILL)  # no clean-up at all
    record(cluster, "after kg's SIGKILL")
    for name in cluster.lab.hosts:
        assert "10.5.0.9" in kilo_routes(cluster.lab, name), (
            name
        )  # the new Peer's routes are Kilo's
        assert kilo_chains(cluster.lab, name), name
        assert annotations(admin, name)[kn.KEY] == cluster.kilo_keys[name], name
    out, counts = converge(cluster, expect_rc=2)
    assert FOREIGN_ROUTE in out and "10.5.0.9/32" in out and "route_conflict: replace" in out, out[
        -3000:
    ]
    assert all(c["failed"] == 1 for c in counts.values()), counts
    _, counts = converge(cluster, "-e", "kilo_route_conflict=replace")
    assert all(c["failed"] == 0 for c in counts.values()), counts
    record(cluster, "after site.yml with kilo_route_conflict=replace")
    for name in cluster.lab.hosts:
        assert not kilo_routes(cluster.lab, name), name
        assert not kilo_chains(cluster.lab, name), name  # our converge owns the KILO-* chain names
    for leader in ("aws-1", "gcp-1"):
        _assert_peer(cluster.lab, leader)
    pings_after(cluster, "site.yml took over from the killed agents")
    _, counts = converge(cluster)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts
