"""On a fresh lab (no host has a key), a sample of the wrong inventories of
tests/core/test_bad_inputs.py stops site.yml before any host changes: the run fails, every host's
recap says changed=0, and no host has a WireGuard interface or a key afterwards. The sample is of
the checks that need the segments or two hosts at once (the key step used to be the first to
notice some of them, after it had changed every host). A last run of the unedited inventory
converges the same lab, so the refusals above are not a lab that cannot run.

Own lab (prefix kbi, KILO_TEST_PREFIX_BAD_INPUTS): 3 locations x 2 hosts, the first of each public.
The controller-level table (every case, plan.yml and site.yml, no host) is tests/core/test_bad_inputs.py.
"""

import copy
import os
import re
import tempfile

import pytest
import yaml

from sitetools import fresh_lab, playbook, recap

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for the lab")

PREFIX = os.environ.get("KILO_TEST_PREFIX_BAD_INPUTS", "kbi")
PEER_KEY = "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw="

# (what, {"kilo": group vars, HOST: its vars, "direct": a host moved directly under the group,
#  "rename": the mesh group's new name, given as its kilo_group too}, the expected message)
SAMPLE = [
    (
        "misspelt variable",
        {"kilo": {"kilo_granulartiy": "full"}},
        "host 'aws-1': kilo_granulartiy: unknown variable; did you mean kilo_granularity?",
    ),
    (
        "same pod CIDR on two nodes",
        {"aws-1": {"kilo_pod_cidr": "10.244.1.0/24"}, "gcp-2": {"kilo_pod_cidr": "10.244.1.0/24"}},
        "host 'gcp-2': kilo_pod_cidr: 10.244.1.0/24 is also the pod range 10.244.1.0/24 of node 'aws-1'",
    ),
    (
        "same internal IP twice",
        {
            "aws-1": {"kilo_force_internal_ip": "172.16.1.1/24"},
            "aws-2": {"kilo_force_internal_ip": "172.16.1.1/24"},
        },
        "host 'aws-2': kilo_force_internal_ip: 172.16.1.1 is also the internal IP 172.16.1.1 of node 'aws-1'",
    ),
    (
        "subnet holding the hosts' internal IPs",
        {
            "kilo": {"kilo_subnet": "172.16.0.0/16"},
            "gcp-1": {"kilo_force_internal_ip": "172.16.2.1/24"},
        },
        "host 'gcp-1': kilo_force_internal_ip: 172.16.2.1 lies inside the mesh's subnet 172.16.0.0/16",
    ),
    (
        "subnet too small for the segments",
        {"kilo": {"kilo_subnet": "10.4.0.0/31"}},
        "host 'aws-1': kilo_subnet: 10.4.0.0/31 holds 1 WireGuard IPs, 3 segments need one each",
    ),
    (
        "peer at a leader's WireGuard IP",
        {
            "kilo": {
                "kilo_peers": [
                    {"name": "laptop", "public_key": PEER_KEY, "allowed_ips": ["10.4.0.2/32"]}
                ]
            }
        },
        "peer 'laptop': allowed_ips: 10.4.0.2/32 is also the WireGuard IP 10.4.0.2 of segment location:azure",
    ),
    (
        "two nodes at one endpoint",
        {
            "aws-1": {"kilo_force_endpoint": "203.0.113.11:51820"},
            "gcp-1": {"kilo_force_endpoint": "203.0.113.11:51820"},
        },
        "host 'gcp-1': kilo_force_endpoint: 203.0.113.11:51820 is also the endpoint of node 'aws-1'",
    ),
    (
        "host directly under the mesh group",
        {"direct": "azure-2"},
        "host 'azure-2': location: directly in group 'kilo', in none of its location groups",
    ),
    (
        "mesh group named in the inventory only",
        {"rename": "mesh"},
        "host 'aws-1': kilo_group: 'mesh' in the inventory, but this run reads group 'kilo'",
    ),
]


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 3, 2, 1) as made:
        yield made


def inventory_with(lab, directory, edits):
    with open(lab.inventory) as f:
        data = yaml.safe_load(f)
    mesh = data["all"]["children"]["kilo"]
    for target, values in edits.items():
        if target == "kilo":
            mesh["vars"].update(copy.deepcopy(values))
        elif target == "direct":
            for group in mesh["children"].values():
                if values in group["hosts"]:
                    mesh.setdefault("hosts", {})[values] = group["hosts"].pop(values)
        elif target == "rename":
            mesh["vars"]["kilo_group"] = values
            data["all"]["children"][values] = data["all"]["children"].pop("kilo")
        else:
            for group in mesh["children"].values():
                if target in group["hosts"]:
                    group["hosts"][target].update(copy.deepcopy(values))
    path = os.path.join(directory, "inventory.yml")
    with open(path, "w") as f:
        yaml.safe_dump(data, f)
    return path


def untouched(lab):
    """{host: what it has of ours} for hosts with a WireGuard interface or a key: {} when none."""
    found = {}
    for host in sorted(lab.hosts):
        out = lab.run(
            host,
            ["sh", "-c", "ip -br link show type wireguard; ls /var/lib/kilo 2>/dev/null"],
            timeout=60,
        )
        if out.stdout.strip():
            found[host] = out.stdout.strip()
    return found


def test_the_lab_starts_without_any_key_or_interface(lab):
    assert untouched(lab) == {}


@pytest.mark.parametrize("what, edits, expected", SAMPLE, ids=[c[0] for c in SAMPLE])
def test_a_bad_input_changes_no_host_of_a_fresh_lab(lab, what, edits, expected):
    directory = tempfile.mkdtemp(prefix="kilo-%s-" % PREFIX)
    inventory = inventory_with(lab, directory, edits)
    out = playbook(inventory, "site.yml", expect_rc=2, timeout=600)
    shown = re.sub(r"\s*\n\s*", " ", out).replace("''", "'")
    assert expected in shown, out[-3000:]
    counts = recap(out)
    assert counts and all(c["changed"] == 0 and c["unreachable"] == 0 for c in counts.values()), (
        counts
    )
    assert untouched(lab) == {}, what
    assert not os.path.exists(os.path.join(directory, "kilo-registry.json"))


def test_the_unedited_inventory_converges_the_same_lab(lab):
    """The control: the lab itself runs, so the refusals above were the inputs'."""
    directory = tempfile.mkdtemp(prefix="kilo-%s-" % PREFIX)
    out = playbook(inventory_with(lab, directory, {}), "site.yml", timeout=900)
    counts = recap(out)
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), counts
    assert sorted(untouched(lab)) == sorted(lab.hosts)
