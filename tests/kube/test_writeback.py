"""kilo.mesh.annotate against a real kube-apiserver: what Kilo's agent writes, written back once.

The hosts are controller-only (the action never connects): each gets a stand-in kilo.mesh.key
result by set_fact, the run-once kilo.mesh.topology stores the plans, then kilo.mesh.annotate
patches the Nodes. Every test removes the Nodes it made.
"""

import json
import os
import subprocess
import time

import pytest
import yaml
from kubernetes import client

# The helpers of the control-plane tests (tests/kube is on sys.path, see conftest.py).
from test_apiserver import admin, unique  # noqa: F401 pylint: disable=import-error,unused-import
from test_inventory_plugin import delete_all  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(ROOT, ".venv", "bin", "ansible-playbook")
KEYS = [
    "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls=",
    "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw=",
    "aNdi7F94dUaB6O9ScwgibmXpFk7PcQSX2C5Hzcc0b2M=",
]
FOREIGN = "example.com/owner"

PLAY = """
- hosts: kilo
  gather_facts: false
  tasks:
    - name: A stand-in kilo.mesh.key result
      ansible.builtin.set_fact:
        node_host: "{{ fake_key }}"
    - name: The mesh once
      kilo.mesh.topology:
        facts_var: node_host
        save_plans: true
      run_once: true
      register: node_mesh
    - name: Write back
      kilo.mesh.annotate:
        facts_var: node_host
        topology_var: node_mesh
        state: "{{ want | default('present') }}"
      register: wrote
    - name: Show
      ansible.builtin.debug:
        msg: "RESULT {{ wrote | to_json }}"
"""


@pytest.fixture
def mesh(kube, admin, tmp_path):
    """Three Nodes (two in location a, one in b) and an inventory naming them; the Nodes are deleted after."""
    core = client.CoreV1Api(admin)
    names = [unique("wb") for _ in range(3)]
    hosts = {}
    for i, name in enumerate(names):
        core.create_node(
            client.V1Node(
                metadata=client.V1ObjectMeta(
                    name=name,
                    labels={kn.REGION_LABEL: "a" if i < 2 else "b"},
                    annotations={FOREIGN: "someone", kn.PERSISTENT_KEEPALIVE: "0"},
                ),
                spec=client.V1NodeSpec(pod_cidr="10.244.%d.0/24" % i),
            )
        )
        hosts[name] = {
            "kilo_pod_cidr": "10.244.%d.0/24" % i,
            "ansible_connection": "local",
            "kilo_leader": i == 0,
            "fake_key": {
                "public_key": KEYS[i],
                "internal_ip": "172.16.%d.%d/24" % (1 + i // 2, i + 1),
                "external_ip": "203.0.113.%d" % (i + 1),
                "mtu": 1500,
                "discovered_endpoints": {KEYS[(i + 1) % 3]: "198.51.100.%d:51820" % i},
            },
        }
    inventory = {
        "kilo": {
            "vars": {"kilo_kube": {"kubeconfig": kube.kubeconfig}, "kilo_encapsulate": "never"},
            "children": {
                "a": {
                    "hosts": dict((n, hosts[n]) for n in names[:2]),
                    "vars": {"kilo_persistent_keepalive": 25},
                },
                "b": {"hosts": {names[2]: hosts[names[2]]}},
            },
        }
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(PLAY)
    yield names
    delete_all(core.delete_node, names)


def run(tmp_path, *extra, rc=0):
    env = {k: v for k, v in os.environ.items() if not k.startswith("K8S_AUTH_")}
    env.update(
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
    )
    done = subprocess.run(
        [PLAYBOOK, "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml")] + list(extra),
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=300,
        check=False,
    )
    assert done.returncode == rc, done.stdout[-4000:] + done.stderr[-2000:]
    results = [
        json.loads(json.loads("{%s}" % line.strip().rstrip(","))["msg"][len("RESULT ") :])
        for line in done.stdout.splitlines()
        if '"msg": "RESULT ' in line
    ]
    return done.stdout + done.stderr, results


def annotations(admin, name):
    return client.CoreV1Api(admin).read_node(name).metadata.annotations or {}


def test_writes_kilos_annotations_once_then_only_refreshes_last_seen(kube, admin, mesh, tmp_path):
    before = int(time.time())
    out, results = run(tmp_path, "--diff")
    assert out.count("changed: [") >= 3 and len(results) == 3
    leaders = set()
    for i, name in enumerate(mesh):
        got = annotations(admin, name)
        assert got[kn.KEY] == KEYS[i]
        assert got[kn.ENDPOINT] == "203.0.113.%d:51820" % (i + 1)
        assert got[kn.INTERNAL_IP] == "172.16.%d.%d/24" % (1 + i // 2, i + 1)
        assert got[kn.GRANULARITY] == "location"
        # as Kilo's agent: only endpoints learned from peers that send keepalives (location a's leader,
        # a peer of b's only node); every host reported one, the others are not written
        assert json.loads(got[kn.DISCOVERED_ENDPOINTS]) == (
            {KEYS[0]: {"IP": "198.51.100.2", "Port": 51820, "Zone": ""}} if i == 2 else {}
        )
        assert before <= int(got[kn.LAST_SEEN]) <= int(time.time())
        if got[kn.WIREGUARD_IP]:
            leaders.add(name)
            assert got[kn.WIREGUARD_IP].startswith("10.4.0.") and got[kn.WIREGUARD_IP].endswith(
                "/16"
            )
        # operator and foreign annotations are never touched
        assert got[FOREIGN] == "someone" and got[kn.PERSISTENT_KEEPALIVE] == "0"
        # and the inventory plugin reads back what was written
        facts = kn.host_vars(
            client.CoreV1Api(admin).api_client.sanitize_for_serialization(
                client.CoreV1Api(admin).read_node(name)
            )
        )["kilo_kubernetes_node"]
        assert facts["public_key"] == KEYS[i]
    # one leader per location: the forced one of a, the only node of b
    assert leaders == {mesh[0], mesh[2]}
    # the diff shows our annotations, never last-seen
    assert (
        kn.KEY in out
        and kn.LAST_SEEN not in out.split("TASK [Write back]")[1].split("TASK [Show]")[0]
    )

    seen = dict((n, annotations(admin, n)[kn.LAST_SEEN]) for n in mesh)
    time.sleep(1.1)
    out, results = run(tmp_path)
    assert "changed=0" in out and "changed: [" not in out, out
    for name in mesh:
        assert int(annotations(admin, name)[kn.LAST_SEEN]) > int(
            seen[name]
        )  # refreshed, not a change
    assert all(r["changed"] is False and r["last_seen"] > 0 for r in results)


def test_check_mode_reports_and_sends_nothing(admin, mesh, tmp_path):
    run(tmp_path)
    written = dict((n, annotations(admin, n)) for n in mesh)
    # Another external IP: every endpoint would change.
    out, results = run(
        tmp_path,
        "--check",
        "--diff",
        "-e",
        '{"fake_key": {"public_key": "%s",'
        ' "external_ip": "192.0.2.9", "internal_ip": null}}' % KEYS[0],
        "--limit",
        mesh[0],
    )
    assert results[0]["changed"] is True
    assert results[0]["annotations"][kn.ENDPOINT] == "192.0.2.9:51820"
    assert (
        "-kilo.squat.ai/endpoint: 203.0.113.1:51820" in out
        and "+kilo.squat.ai/endpoint: 192.0.2.9:51820" in out
    )
    assert annotations(admin, mesh[0]) == written[mesh[0]]


def test_state_absent_removes_the_agent_annotations_only(admin, mesh, tmp_path):
    run(tmp_path)
    out, results = run(tmp_path, "-e", "want=absent")
    assert all(r["changed"] is True for r in results), results
    for name in mesh:
        got = annotations(admin, name)
        assert not set(kn.AGENT_ANNOTATIONS) & set(got), got
        assert got[FOREIGN] == "someone" and got[kn.PERSISTENT_KEEPALIVE] == "0"
    out, results = run(tmp_path, "-e", "want=absent")
    assert all(r["changed"] is False for r in results) and "changed=0" in out


def test_a_missing_node_and_missing_rights_are_named(kube, admin, mesh, tmp_path):
    client.CoreV1Api(admin).delete_node(mesh[1])
    out, _results = run(tmp_path, rc=2)
    assert "node '%s': no such Node in the cluster" % mesh[1] in out, out
    # removing: a Node that is gone has no annotation left to remove (uninstall.yml goes on)
    out, _results = run(tmp_path, "-e", "want=absent")
    assert "no such Node" not in out, out
    client.CoreV1Api(admin).create_node(client.V1Node(metadata=client.V1ObjectMeta(name=mesh[1])))
    if kube.user_token is None:
        return
    inventory = yaml.safe_load((tmp_path / "inventory.yml").read_text())
    # the old variables (deprecated) still work, and say so
    inventory["kilo"]["vars"] = {
        "kilo_kube_host": kube.host,
        "kilo_kube_api_key": kube.user_token,
        "kilo_kube_ca_cert": kube.ca_cert,
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    out, _results = run(tmp_path, rc=2)
    assert "403" in out and "lack" in out and kube.user_token not in out
    assert "kilo_kube_host is deprecated" in out and "kilo_kube_api_key is deprecated" in out


def test_kubernetes_core_alias_names_of_the_client_options_work(kube, admin, mesh, tmp_path):
    """validate_certs and ca_cert also answer to kubernetes.core's verify_ssl and ssl_ca_cert."""
    if kube.ca_cert is None:
        pytest.skip("the cluster's kubeconfig names no CA file")
    inventory = yaml.safe_load((tmp_path / "inventory.yml").read_text())
    del inventory["kilo"]["vars"]["kilo_kube"]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = PLAY.replace(
        "        facts_var: node_host\n        topology_var: node_mesh\n",
        "        facts_var: node_host\n        topology_var: node_mesh\n"
        "        host: %s\n        api_key: %s\n        ssl_ca_cert: %s\n        verify_ssl: true\n"
        % (kube.host, kube.token, kube.ca_cert),
    )
    assert play != PLAY
    (tmp_path / "play.yml").write_text(play)
    _out, results = run(tmp_path)
    assert len(results) == 3 and all(r["changed"] for r in results), results
    assert annotations(admin, mesh[0])[kn.KEY] == KEYS[0]


def test_a_dual_stack_mesh_writes_kilos_annotations_and_both_families_in_ours(
    admin, mesh, tmp_path
):
    """Kilo's wireguard-ip and internal-ip keep the primary family's address; kilo.mesh/wireguard-ips
    and internal-ips hold both, are read back as both, and go when the mesh is single-stack again
    or the node leaves (issue 23)."""
    single = (tmp_path / "inventory.yml").read_text()
    inventory = yaml.safe_load(single)
    inventory["kilo"]["vars"]["kilo_subnet"] = ["10.4.0.0/16", "fd04::/64"]
    for group in inventory["kilo"]["children"].values():
        for i, hvars in enumerate(group["hosts"].values()):
            hvars["fake_key"]["internal_ip"] = [
                hvars["fake_key"]["internal_ip"],
                "fd00:%d::%d/64" % (len(group["hosts"]), i + 1),
            ]
            hvars["kilo_pod_cidr"] = [
                hvars["kilo_pod_cidr"],
                "fd10:%s::/64" % hvars["kilo_pod_cidr"].split(".")[2],
            ]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    out, results = run(tmp_path)
    assert all(r["changed"] for r in results), out
    for i, name in enumerate(mesh):
        got = annotations(admin, name)
        assert got[kn.INTERNAL_IP] == "172.16.%d.%d/24" % (1 + i // 2, i + 1)
        assert got[kn.INTERNAL_IPS].split(",")[0] == got[kn.INTERNAL_IP]
        assert got[kn.INTERNAL_IPS].split(",")[1].startswith("fd00:")
        if i != 1:  # the leaders
            assert got[kn.WIREGUARD_IP].startswith("10.4.0.") and got[kn.WIREGUARD_IP].endswith(
                "/16"
            )
            first, second = got[kn.WIREGUARD_IPS].split(",")
            assert (
                first == got[kn.WIREGUARD_IP]
                and second.startswith("fd04::")
                and second.endswith("/64")
            )
        else:
            assert got[kn.WIREGUARD_IP] == "" and kn.WIREGUARD_IPS not in got
        facts = kn.host_vars(
            client.CoreV1Api(admin).api_client.sanitize_for_serialization(
                client.CoreV1Api(admin).read_node(name)
            )
        )["kilo_kubernetes_node"]
        assert facts["internal_ip"] == got[kn.INTERNAL_IPS].split(",")
    out, results = run(tmp_path)
    assert "changed=0" in out and "changed: [" not in out, out
    # single-stack again: ours go, Kilo's stay as Kilo writes them
    (tmp_path / "inventory.yml").write_text(single)
    out, results = run(tmp_path)
    for name in mesh:
        got = annotations(admin, name)
        assert not set(kn.DUAL_ANNOTATIONS) & set(got), got
        assert "," not in got[kn.INTERNAL_IP]
    # and a node leaving removes ours with Kilo's
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    run(tmp_path)
    run(tmp_path, "-e", "want=absent")
    for name in mesh:
        assert not (set(kn.AGENT_ANNOTATIONS) | set(kn.DUAL_ANNOTATIONS)) & set(
            annotations(admin, name)
        )
