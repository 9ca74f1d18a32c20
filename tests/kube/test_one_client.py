"""The Kubernetes client options given once: in the inventory plugin's file, a non-default
kubeconfig, while ~/.kube/config names another cluster (an address where nothing listens). The
write-back (kilo.mesh.annotate, as site.yml's role runs it), playbooks/kubernetes.yml and
kilo.mesh.peer from a host outside the mesh reach the cluster the inventory was read from, with
no kilo_kube_* variable, no -e kubeconfig and no K8S_AUTH_* in the environment.

Before, the write-back read only kilo_kube_* and otherwise ~/.kube/config: it talked to the other
cluster. The test's control shows that cluster is really unusable (the same task pointed at it fails)."""

import os
import shutil
import subprocess

import pytest
import yaml
from kubernetes import client

# The helpers of the control-plane tests (tests/kube is on sys.path, see conftest.py).
from test_apiserver import admin, unique  # noqa: F401 pylint: disable=import-error,unused-import
from test_inventory_plugin import delete_all  # pylint: disable=import-error
from ansible_run import crd, delete_crd, environment  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, ".venv", "bin")
KEYS = [
    "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls=",
    "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw=",
]
PEER_KEY = "aNdi7F94dUaB6O9ScwgibmXpFk7PcQSX2C5Hzcc0b2M="
# nothing listens on port 9 (discard) of the loopback: the default kubeconfig's cluster is unreachable
ELSEWHERE = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "elsewhere",
    "clusters": [{"name": "elsewhere", "cluster": {"server": "https://127.0.0.1:9"}}],
    "users": [{"name": "nobody", "user": {"token": "not-a-token"}}],
    "contexts": [{"name": "elsewhere", "context": {"cluster": "elsewhere", "user": "nobody"}}],
}

WRITE_BACK = """
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
        kubeconfig: "{{ point_at | default(omit) }}"
"""

PEER = (
    """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: An outside peer as a Peer resource, from a host outside the mesh
      kilo.mesh.peer:
        name: "{{ peer_name }}"
        state: "{{ peer_state | default('present') }}"
        public_key: %s
        allowed_ips: [10.5.0.9/32]
        store: kubernetes
"""
    % PEER_KEY
)


@pytest.fixture
def cluster(kube, admin, tmp_path):  # pylint: disable=redefined-outer-name
    """Two Nodes, the inventory plugin's file naming a copy of the cluster's kubeconfig (not the
    default one) in an inventory directory with group_vars and host_vars, and a HOME whose
    ~/.kube/config names a cluster where nothing listens. Yields (names, inventory dir, env)."""
    core = client.CoreV1Api(admin)
    names = [unique("one") for _ in range(2)]
    for i, name in enumerate(names):
        core.create_node(
            client.V1Node(
                metadata=client.V1ObjectMeta(name=name, labels={kn.REGION_LABEL: "r%d" % i}),
                spec=client.V1NodeSpec(pod_cidr="10.244.%d.0/24" % (40 + i)),
            )
        )
    kubeconfig = tmp_path / "clusters" / "this-one.kubeconfig"
    kubeconfig.parent.mkdir()
    shutil.copy(kube.kubeconfig, kubeconfig)
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(yaml.safe_dump(ELSEWHERE))
    inv = tmp_path / "inventory"
    for sub in ("group_vars", "host_vars"):
        (inv / sub).mkdir(parents=True)
    (inv / "cluster.kubernetes.yml").write_text(
        yaml.safe_dump({"plugin": "kilo.mesh.kubernetes", "kubeconfig": str(kubeconfig)})
    )
    # a kilo_kube of the group's own cannot send the write-back to another cluster than the inventory's
    (inv / "group_vars" / "kilo.yml").write_text(
        yaml.safe_dump(
            {
                "kilo_encapsulate": "never",
                "kilo_registry": str(tmp_path / "registry.json"),
                "kilo_kube": {"kubeconfig": str(home / ".kube" / "config")},
            }
        )
    )
    for i, name in enumerate(names):
        (inv / "host_vars" / (name + ".yml")).write_text(
            yaml.safe_dump(
                {
                    "ansible_connection": "local",
                    "kilo_pod_cidr": "10.244.%d.0/24" % (40 + i),
                    "fake_key": {
                        "public_key": KEYS[i],
                        "internal_ip": "172.16.%d.1/24" % i,
                        "external_ip": "203.0.113.%d" % (40 + i),
                        "mtu": 1500,
                        "discovered_endpoints": {},
                    },
                }
            )
        )
    env = environment(HOME=str(home), ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="true")
    env.pop("KUBECONFIG", None)
    yield names, inv, env
    delete_all(core.delete_node, names)


def run(argv, env, cwd, rc=0):
    done = subprocess.run(
        argv, cwd=str(cwd), env=env, capture_output=True, text=True, timeout=300, check=False
    )
    out = done.stdout + done.stderr
    assert done.returncode == rc, out[-5000:]
    return out


def playbook(inv, path, env, *extra, rc=0):
    return run(
        [os.path.join(BIN, "ansible-playbook"), "-i", str(inv), str(path)] + list(extra),
        env,
        inv.parent,
        rc,
    )


def test_the_inventory_plugins_kubeconfig_is_the_write_backs(admin, cluster, tmp_path):  # pylint: disable=redefined-outer-name
    names, inv, env = cluster
    play = tmp_path / "write-back.yml"
    play.write_text(WRITE_BACK)
    # what every host carries: the plugin file's client options
    out = run(
        [os.path.join(BIN, "ansible-inventory"), "-i", str(inv), "--host", names[0]], env, tmp_path
    )
    assert yaml.safe_load(out.split("\n", 1)[1] if out.startswith("[WARNING]") else out)[
        "kilo_kube"
    ] == {"kubeconfig": str(tmp_path / "clusters" / "this-one.kubeconfig")}

    out = playbook(inv, play, env)
    assert "deprecat" not in out.lower(), out[-3000:]
    core = client.CoreV1Api(admin)
    for i, name in enumerate(names):
        assert core.read_node(name).metadata.annotations[kn.KEY] == KEYS[i], name

    # the control: the same task pointed at ~/.kube/config's cluster cannot reach it
    out = playbook(
        inv, play, env, "-e", "point_at=" + str(tmp_path / "home" / ".kube" / "config"), rc=2
    )
    assert "cannot reach the API server" in out and "port=9" in out, out[-3000:]


def test_kubernetes_yml_and_a_peer_from_outside_the_mesh_reach_the_same_cluster(
    admin, cluster, tmp_path
):  # pylint: disable=redefined-outer-name
    _names, inv, env = cluster
    had_crd = crd(admin) is not None
    peer_name = unique("one-peer")
    play = tmp_path / "peer.yml"
    play.write_text(PEER)
    try:
        out = playbook(inv, os.path.join(ROOT, "playbooks", "kubernetes.yml"), env)
        assert "DEPRECATED" not in out and crd(admin) is not None, out[-3000:]
        playbook(inv, play, env, "-e", "peer_name=" + peer_name)
        got = client.CustomObjectsApi(admin).get_cluster_custom_object(
            kn.PEER_GROUP, kn.PEER_VERSION, kn.PEER_PLURAL, peer_name
        )
        assert got["spec"]["publicKey"] == PEER_KEY
        playbook(inv, play, env, "-e", "peer_name=" + peer_name, "-e", "peer_state=absent")
    finally:
        if not had_crd:
            delete_crd(admin)
