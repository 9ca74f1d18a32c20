"""The controller side on the ansible-core under test (scripts/test.sh, stages ansible-core-*):
every action plugin and the inventory plugin, run through the ansible-playbook installed beside
the Python running pytest, against a real lab and a real kube-apiserver.

Lab kcr (KILO_TEST_PREFIX_CORE), 3 locations x 1 host: aws-1 and gcp-1 are Nodes of the API
server (the inventory plugin makes the mesh of them), azure-1 is a machine outside the mesh that
connects to it (playbooks/connect.yml, its Peer a Kubernetes resource). Tests run in file order
and share the lab; each covers what Ansible's own machinery decides (check mode, diff, --limit,
facts as variables, refresh_inventory, roles, delegation, run_once), not the mesh's details, which
the hosts and kubernetes stages test on .venv's ansible-core.
"""

import json
import os
import shutil
import subprocess
import tempfile

import pytest
import yaml
from kubernetes import client
from test_apiserver import admin, eventually  # noqa: F401 pylint: disable=import-error,unused-import
from test_inventory_plugin import _trusted, delete_all  # pylint: disable=import-error
import labcluster  # pylint: disable=import-error
import sitetools  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn
from lab.lab import Lab

PREFIX = os.environ.get("KILO_TEST_PREFIX_CORE", "kcr")
MESH, LAPTOP = ("aws-1", "gcp-1"), "azure-1"
LAPTOP_PEER, LAPTOP_IP = PREFIX + "-laptop", "10.5.0.2"
PEERS = (kn.PEER_GROUP, kn.PEER_VERSION, kn.PEER_PLURAL)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces)")


class Mesh(object):
    """The lab, the API server, the inventory plugin's config (``inventory``) and a static
    inventory of the connecting machine beside it (``connect``)."""

    def __init__(self, lab, kube, directory):
        self.lab, self.kube, self.dir = lab, kube, directory
        self.inventory = labcluster.write_inventory(
            lab,
            kube.kubeconfig,
            os.path.join(directory, "inventory"),
            os.path.join(directory, "kilo-registry.json"),
        )
        with open(lab.inventory) as f:
            kilo = yaml.safe_load(f)["all"]["children"]["kilo"]
        laptop = dict(kilo["vars"], **kilo["children"]["azure"]["vars"])
        laptop.update(
            kilo["children"]["azure"]["hosts"][LAPTOP],
            kilo_connect_name=LAPTOP_PEER,
            kilo_connect_allowed_ip=LAPTOP_IP + "/32",
        )
        self.connect = os.path.join(os.path.dirname(self.inventory), "connect.yml")
        with open(self.connect, "w") as f:
            yaml.safe_dump({"all": {"children": {"connect": {"hosts": {LAPTOP: laptop}}}}}, f)

    def run(self, name, *extra, **kw):
        """playbooks/NAME (or a path) over the plugin's inventory, through sitetools; returns
        (output, recap)."""
        inventory = kw.pop("inventory", self.inventory)
        out = sitetools.playbook(inventory, name, *extra, timeout=600, **kw)
        return out, sitetools.recap(out)

    def sh(self, host, cmd):
        return self.lab.run(host, ["sh", "-c", cmd], timeout=60)

    def wg_peers(self, host):
        """public key -> allowed IPs of the host's WireGuard interface; {} without one."""
        out = self.sh(host, "wg show kilo0 dump 2>/dev/null").stdout.splitlines()
        return dict((f[0], f[3]) for f in (line.split("\t") for line in out[1:]))

    def public_key(self, host):
        return self.sh(host, "wg show kilo0 public-key").stdout.strip()


@pytest.fixture(scope="module")
def mesh(kube, admin):  # pylint: disable=redefined-outer-name
    core, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    lab = Lab(PREFIX)
    lab.down()
    directory = tempfile.mkdtemp(prefix="kilo-%s-" % PREFIX)
    made = []
    try:
        lab.up(3, 1, 1)
        kube.kubectl("apply", "-f", labcluster.CRDS)
        eventually(lambda: custom.list_cluster_custom_object(*PEERS), 60)
        labcluster.register_nodes(lab, core, made, skip={LAPTOP})
        yield Mesh(lab, kube, directory)
    finally:
        lab.down()
        delete_all(core.delete_node, made)
        delete_all(lambda n: custom.delete_cluster_custom_object(*PEERS, n), [LAPTOP_PEER])
        shutil.rmtree(directory, ignore_errors=True)


def annotations(admin, name):  # pylint: disable=redefined-outer-name
    return client.CoreV1Api(admin).read_node(name).metadata.annotations or {}


def test_the_inventory_plugin_makes_the_mesh_of_the_nodes(mesh):
    done = subprocess.run(
        [os.path.join(sitetools.ANSIBLE_BIN, "ansible-inventory"), "-i", mesh.inventory, "--list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(
            os.environ,
            ANSIBLE_CONFIG=os.path.join(sitetools.REPO, "ansible.cfg"),
            ANSIBLE_COLLECTIONS_PATH=os.path.join(sitetools.REPO, ".collections"),
            ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="true",
        ),
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout, object_hook=_trusted)
    assert sorted(data["kilo"]["children"]) == ["aws", "gcp"]
    assert data["aws"]["hosts"] == ["aws-1"] and data["gcp"]["hosts"] == ["gcp-1"]
    hostvars = data["_meta"]["hostvars"]
    assert hostvars["aws-1"]["ansible_host"] == mesh.lab.hosts["aws-1"]["mgmt_ip"]
    assert hostvars["gcp-1"]["kilo_leader"] is True


def test_check_mode_reports_and_changes_nothing(mesh, admin):  # pylint: disable=redefined-outer-name
    dummy, counts = mesh.run("site.yml", "--check")
    assert set(counts) == set(MESH) and all(
        c["changed"] > 0 and c["failed"] == 0 for c in counts.values()
    ), counts
    for host in MESH:
        assert mesh.sh(host, "test -e /var/lib/kilo/key").returncode != 0, host
        assert mesh.sh(host, "ip link show kilo0").returncode != 0, host
        assert kn.KEY not in annotations(admin, host)


def test_site_converges_writes_the_nodes_and_a_rerun_changes_nothing(mesh, admin):  # pylint: disable=redefined-outer-name
    dummy, counts = mesh.run("site.yml")
    assert set(counts) == set(MESH) and all(
        c["changed"] > 0 and c["failed"] == 0 for c in counts.values()
    ), counts
    keys = dict((host, mesh.public_key(host)) for host in MESH)
    for host, other in (MESH, MESH[::-1]):
        assert annotations(admin, host)[kn.KEY] == keys[host]
        assert keys[other] in mesh.wg_peers(host), host
    out, counts = mesh.run("site.yml", "--diff")
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), out[-6000:]


def test_limit_with_facts_injected_as_variables(mesh, monkeypatch):
    """Ansible's default (ansible.cfg here turns it off): the hosts outside --limit are read
    again only when this run set variables on them, which asks the variable manager's fact
    cache (ansible_internals.set_in_run)."""
    before = dict((host, mesh.wg_peers(host)) for host in MESH)
    monkeypatch.setenv("ANSIBLE_INJECT_FACT_VARS", "true")
    out, counts = mesh.run("site.yml", "--limit", "aws-1")
    assert set(counts) == {"aws-1"} and counts["aws-1"]["changed"] == 0, out[-6000:]
    assert dict((host, mesh.wg_peers(host)) for host in MESH) == before


def test_every_other_action_as_tasks_of_a_users_play(mesh):
    """What site.yml does not call, in one run (each ansible-playbook start costs seconds): the
    role kilo.mesh.wireguard (kilo.mesh.prepare), the modules' own example (plans from
    kilo.mesh.topology, each converged by kilo.mesh.converge), status, the agent made absent
    (kilo_agent unset), showconf and graph. The mesh is converged: no host changes."""
    conf, picture = os.path.join(mesh.dir, "gcp-1.conf"), os.path.join(mesh.dir, "mesh.dot")
    play = os.path.join(mesh.dir, "play.yml")
    with open(play, "w") as f:
        yaml.safe_dump(
            [
                {
                    "name": "A user's play",
                    "hosts": "kilo",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Prepare",
                            "ansible.builtin.import_role": {"name": "kilo.mesh.wireguard"},
                        },
                        {
                            "name": "Plans",
                            "kilo.mesh.topology": {},
                            "run_once": True,
                            "register": "mesh",
                        },
                        {
                            "name": "Converge",
                            "kilo.mesh.converge": {"plan": "{{ mesh.plans[inventory_hostname] }}"},
                        },
                        {"name": "Status", "kilo.mesh.status": {}, "register": "status"},
                        {
                            "name": "Table",
                            "kilo.mesh.status": {"summary": True, "status_var": "status"},
                            "run_once": True,
                        },
                        {"name": "No agent", "kilo.mesh.agent": {"state": "absent"}},
                    ],
                },
                {
                    "name": "Reading the mesh",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Showconf",
                            "kilo.mesh.showconf": {"node": "gcp-1"},
                            "register": "conf",
                        },
                        {
                            "name": "Write it",
                            "ansible.builtin.copy": {
                                "content": "{{ conf.config }}",
                                "dest": conf,
                                "mode": "0644",
                            },
                        },
                        {"name": "Graph", "kilo.mesh.graph": {"dest": picture, "format": "dot"}},
                    ],
                },
            ],
            f,
            sort_keys=False,
        )
    out, counts = mesh.run(play)
    assert all(counts[host]["changed"] == 0 and counts[host]["ok"] >= 4 for host in MESH), out[
        -6000:
    ]
    assert all(c["failed"] == 0 for c in counts.values()), out[-6000:]
    with open(conf) as f:
        text = f.read()
    assert "[Interface]" in text and "PublicKey = %s" % mesh.public_key("aws-1") in text, text
    with open(picture) as f:
        text = f.read()
    assert "aws-1" in text and "gcp-1" in text, text


def test_a_machine_connects_as_a_peer_resource(mesh, admin):  # pylint: disable=redefined-outer-name
    """playbooks/connect.yml: the Peer made on the controller (delegation), the inventory read
    again (meta refresh_inventory through the plugin), the mesh takes it, the machine converges."""
    out, counts = mesh.run(
        "connect.yml",
        "-e",
        "kubeconfig=" + mesh.kube.kubeconfig,
        "-e",
        "connect_hosts=connect",
        inventory=os.path.dirname(mesh.inventory),
    )
    assert counts[LAPTOP]["changed"] > 0 and all(c["failed"] == 0 for c in counts.values()), out[
        -6000:
    ]
    key = mesh.sh(LAPTOP, "wg show kilo0 public-key").stdout.strip()
    peer = client.CustomObjectsApi(admin).get_cluster_custom_object(*PEERS, LAPTOP_PEER)
    assert peer["spec"]["publicKey"] == key and peer["spec"]["allowedIPs"] == [LAPTOP_IP + "/32"]
    for host in MESH:
        assert mesh.wg_peers(host).get(key) == LAPTOP_IP + "/32", host
    # through the tunnel: the first echo may wait for WireGuard's handshake
    done = mesh.sh(LAPTOP, "ping -c 5 -i 0.3 -W 2 -q %s" % mesh.lab.hosts["aws-1"]["lan_ip"])
    assert done.returncode == 0, done.stdout + done.stderr
