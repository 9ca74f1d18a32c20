"""site.yml with the inventory plugin on dual-stack Nodes (issue 23): a real kube-apiserver, a real
lab with both families on every link, every Node's spec.podCIDRs of both families (as a
dual-stack kube-controller-manager allocates them) and kilo_subnet of two in the inventory's
group vars.

Lab kkd (KILO_TEST_PREFIX_SITE_KUBERNETES_DUAL_STACK), 2 locations x 2 hosts, the Nodes of
labcluster.nodes_of (aws-1 and the forced gcp-1 lead). Each host carries the first address of
each of its pod ranges on lo (the lab has no pods), which discovery is told to ignore, so the
internal IPs it finds are the LAN's of both families. Tests run in file order and share the lab.
"""

import os
import sys

import pytest
from test_apiserver import admin  # noqa: F401 pylint: disable=import-error,unused-import
from test_inventory_plugin import ok  # pylint: disable=import-error
from test_site_kubernetes import annotations, set_group_var, sitetools  # pylint: disable=import-error
import labcluster  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

sys.path.insert(0, os.path.dirname(sitetools.__file__))  # test_site_kubernetes put tests/host there
from test_dual_stack import OPTIONS, sh, unreached  # noqa: E402 pylint: disable=import-error,wrong-import-position

PREFIX = os.environ.get("KILO_TEST_PREFIX_SITE_KUBERNETES_DUAL_STACK", "kkd")
PEER = PREFIX + "-laptop"


@pytest.fixture(scope="module")
def cluster(kube, admin):  # noqa: F811 pylint: disable=redefined-outer-name
    """(lab, inventory path): the dual-stack lab and Nodes, pod addresses on lo, the mesh's inputs."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces)")
    with labcluster.nodes_of(kube, admin, PREFIX, PEER, ipv6=True) as (lab, inventory):
        for host in lab.hosts:
            for _range, address in labcluster.pods(lab, host):
                sh(lab, host, "ip addr add %s/%d dev lo" % (address, 128 if ":" in address else 32))
        set_group_var(inventory, "kilo_subnet", OPTIONS["subnet"])
        set_group_var(inventory, "kilo_discovery_ignore_interfaces", ["mgmt0", "lo"])
        yield lab, inventory


def kilo0_addresses(lab, host):
    """The global addresses of the host's kilo0, IPv4 first ([] on a member)."""
    out = sh(
        lab,
        host,
        "ip -o -4 addr show dev kilo0 2>/dev/null; ip -o -6 addr show dev kilo0 scope global"
        " 2>/dev/null",
    ).stdout
    return [line.split()[3] for line in out.splitlines()]


def test_the_inventory_plugin_reads_both_pod_ranges(cluster, kube, tmp_path):
    lab, _inventory = cluster
    data, _err = ok(tmp_path, {"kubeconfig": kube.kubeconfig})
    hostvars = data["_meta"]["hostvars"]
    for host in lab.hosts:
        h = lab.hosts[host]
        got = hostvars[host]["kilo_kubernetes_node"]["pod_cidrs"]["node"]
        assert got == [labcluster.pod_cidr(h), labcluster.pod_cidr6(h)], (host, got)


def test_site_converges_and_every_pod_reaches_every_other_in_both_families(cluster, admin):  # noqa: F811
    lab, inventory = cluster
    counts = sitetools.recap(sitetools.site(inventory, "-e", "kilo_task_timeout=120"))
    assert set(counts) == set(lab.hosts), counts
    assert all(c["failed"] == 0 and c["changed"] > 0 for c in counts.values()), counts
    assert unreached(lab, sorted(lab.hosts), pods_of=labcluster.pods) == []
    # the pings took the mesh: every host routes the other location's pod ranges of both families
    for host in lab.hosts:
        routes = sh(lab, host, "ip -o route show proto 107; ip -o -6 route show proto 107").stdout
        for other in lab.hosts:
            if lab.hosts[other]["location"] != lab.hosts[host]["location"]:
                for pod_range, _address in labcluster.pods(lab, other):
                    assert pod_range in routes, (host, pod_range, routes)


def test_kilos_annotations_hold_the_first_family_and_ours_both(cluster, admin):  # noqa: F811
    lab, _inventory = cluster
    leaders = set()
    for host, h in lab.hosts.items():
        got = annotations(admin, host)
        wg = kilo0_addresses(lab, host)
        # Kilo's own annotations: one address each, IPv4 (the first subnet's family)
        assert got[kn.INTERNAL_IP] == h["lan_ip"] + "/24", (host, got)
        assert got[kn.WIREGUARD_IP] == (wg[0] if wg else ""), (host, got, wg)
        # ours: both families, the primary first
        assert got[kn.INTERNAL_IPS] == "%s/24,%s/64" % (h["lan_ip"], h["lan_ip6"]), (host, got)
        if wg:
            leaders.add(host)
            assert len(wg) == 2 and wg[0].startswith("10.4.") and wg[1].startswith("fd04::"), (
                host,
                wg,
            )
            assert got[kn.WIREGUARD_IPS] == ",".join(wg), (host, got, wg)
        else:
            assert kn.WIREGUARD_IPS not in got, (host, got)
    assert leaders == {"aws-1", "gcp-1"}


def test_second_run_changes_nothing(cluster):
    lab, inventory = cluster
    counts = sitetools.recap(sitetools.site(inventory))
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts
    assert unreached(lab, sorted(lab.hosts), pods_of=labcluster.pods) == []
