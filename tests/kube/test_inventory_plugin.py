"""The inventory plugin kilo.mesh.kubernetes against a real kube-apiserver, through ansible-inventory.

Nodes and Peers are made with the official client; every test removes what it made.
"""

import json
import os
import secrets
import subprocess
import time

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

# The helpers of the control-plane tests (tests/kube is on sys.path, see conftest.py).
from test_apiserver import GROUP, PLURAL, VERSION, admin, eventually, unique  # noqa: F401 pylint: disable=import-error,unused-import

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CRDS = os.path.join(ROOT, "manifests", "crds.yaml")
INVENTORY = os.path.join(ROOT, ".venv", "bin", "ansible-inventory")
KEY = "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="
KEY2 = "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw="
PSK = "aNdi7F94dUaB6O9ScwgibmXpFk7PcQSX2C5Hzcc0b2M="


def delete_all(delete, names):
    for name in names:
        try:
            delete(name)
        except ApiException as e:
            if e.status != 404:
                raise


def _trusted(obj):
    """Values from the API are untrusted (never templated); ansible-inventory marks them so."""
    return obj["__ansible_unsafe"] if set(obj) == {"__ansible_unsafe"} else obj


def inventory(tmp_path, config, env=None):
    """ansible-inventory --list --export of a kilo.mesh.kubernetes source: (rc, data, stderr)."""
    path = tmp_path / "mesh.kubernetes.yml"
    path.write_text(yaml.safe_dump(dict({"plugin": "kilo.mesh.kubernetes"}, **config)))
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("K8S_AUTH_")}
    run_env.update(
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"),
        ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="true",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_DEPRECATION_WARNINGS="false",
    )
    run_env.update(env or {})
    done = subprocess.run(
        [INVENTORY, "-i", str(path), "--list", "--export"],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=str(tmp_path),
        timeout=120,
        check=False,
    )
    data = json.loads(done.stdout, object_hook=_trusted) if done.returncode == 0 else None
    return done.returncode, data, done.stderr


def ok(tmp_path, config, env=None):
    rc, data, err = inventory(tmp_path, config, env)
    assert rc == 0, err
    return data, err


def members(data, group, kind="hosts"):
    return set(data.get(group, {}).get(kind, []))


@pytest.fixture
def nodes(admin):
    """make(name, pod_cidr=None, labels=None, annotations=None, addresses=None, ready=None) -> name."""
    core, made = client.CoreV1Api(admin), []

    def make(name, pod_cidr=None, labels=None, annotations=None, addresses=None, ready=None):
        body = client.V1Node(
            metadata=client.V1ObjectMeta(name=name, labels=labels, annotations=annotations),
            spec=client.V1NodeSpec(pod_cidr=pod_cidr),
        )
        made.append(core.create_node(body).metadata.name)
        status = {}
        if addresses:
            status["addresses"] = [{"type": t, "address": a} for t, a in addresses]
        if ready is not None:
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            status["conditions"] = [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "Test",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ]
        if status:
            core.patch_node_status(name, {"status": status})
        return name

    yield make
    delete_all(core.delete_node, made)


def _peers_listable(admin):
    client.CustomObjectsApi(admin).list_cluster_custom_object(GROUP, VERSION, PLURAL)


@pytest.fixture(scope="module")
def crd_state(kube, admin):
    """Whether the Peer CRD existed before this module; restored afterwards."""
    ext = client.ApiextensionsV1Api(admin)
    try:
        ext.read_custom_resource_definition("%s.%s" % (PLURAL, GROUP))
        existed = True
    except ApiException as e:
        assert e.status == 404
        existed = False
    yield existed
    present = True
    try:
        ext.read_custom_resource_definition("%s.%s" % (PLURAL, GROUP))
    except ApiException:
        present = False
    if existed and not present:
        kube.kubectl("apply", "-f", CRDS)
    elif present and not existed:
        kube.kubectl("delete", "-f", CRDS, "--wait=true")


@pytest.fixture
def no_crd(kube, admin, crd_state):
    if kube.external:
        pytest.skip("would delete the Peer CRD, and every Peer with it, of an external cluster")
    kube.kubectl("delete", "-f", CRDS, "--ignore-not-found", "--wait=true")

    def gone():
        with pytest.raises(ApiException) as info:
            _peers_listable(admin)
        assert info.value.status == 404

    eventually(gone, 60)


@pytest.fixture
def peers(kube, admin, crd_state):
    """make(name, **spec) -> name, with the CRD of manifests/crds.yaml; all removed afterwards."""
    kube.kubectl("apply", "-f", CRDS)
    eventually(lambda: _peers_listable(admin), 60)
    custom, made = client.CustomObjectsApi(admin), []

    def make(name, **spec):
        body = {
            "apiVersion": "%s/%s" % (GROUP, VERSION),
            "kind": "Peer",
            "metadata": {"name": name},
            "spec": spec,
        }
        made.append(
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)["metadata"]["name"]
        )
        return name

    yield make
    delete_all(lambda name: custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name), made)


def test_without_the_peer_crd_nodes_only_and_no_kilo_peers(kube, tmp_path, nodes, no_crd):
    name = nodes(unique("solo"), "10.244.9.0/24", labels={kn.REGION_LABEL: "lab"})
    data, _err = ok(tmp_path, {"kubeconfig": kube.kubeconfig})
    assert name in members(data, "lab") and "lab" in members(data, "kilo", "children")
    assert "kilo_peers" not in data["kilo"].get("vars", {})
    # peers: false does not even ask.
    data, _err = ok(tmp_path, {"kubeconfig": kube.kubeconfig, "peers": False})
    assert "kilo_peers" not in data["kilo"].get("vars", {})


def test_nodes_become_hosts_in_location_groups_with_kilos_annotations(kube, tmp_path, nodes):
    suffix = secrets.token_hex(3)
    engine_node = {
        "name": "a",
        "public_key": KEY,
        "endpoint": "203.0.113.5:51820",
        "internal_ip": "10.1.0.5/24",
        "discovered_endpoints": {KEY2: "198.51.100.7:40112"},
    }
    written = kn.write_back(engine_node, {"address": "10.4.0.1/16"}, "location", 1700000000)
    a = nodes(
        "a-" + suffix,
        "10.244.1.0/24",
        labels={kn.REGION_LABEL: "ignored"},
        annotations=dict(
            written,
            **{
                kn.LOCATION: "eu-west.1",
                kn.LEADER: "false",
                kn.FORCE_ENDPOINT: "vpn.example.com:51821",
                kn.FORCE_INTERNAL_IP: "-",
                kn.PERSISTENT_KEEPALIVE: "25",
                kn.ALLOWED_LOCATION_IPS: "192.168.7.0/24,192.168.8.0/24",
            },
        ),
        addresses=[("InternalIP", "10.1.0.5"), ("ExternalIP", "203.0.113.5")],
        ready=True,
    )
    b = nodes(
        "b-" + suffix,
        "10.244.2.0/24",
        labels={kn.REGION_LABEL: "home"},
        addresses=[("InternalIP", "172.16.2.2")],
        ready=False,
    )
    c = nodes("c-" + suffix, annotations={kn.LOCATION: ""}, labels={kn.REGION_LABEL: "home"})

    data, _err = ok(tmp_path, {"kubeconfig": kube.kubeconfig, "peers": False})
    hv = data["_meta"]["hostvars"]
    assert {a, b, c} <= members(data, "kilo")
    assert {"eu_west_1", "home"} <= members(data, "kilo", "children")
    assert (
        members(data, "eu_west_1") == {a}
        and b in members(data, "home")
        and c not in members(data, "home")
    )

    assert hv[a]["kilo_location"] == "eu-west.1" and hv[a]["kilo_leader"] is True
    assert hv[a]["kilo_force_endpoint"] == "vpn.example.com:51821"
    assert hv[a]["kilo_force_internal_ip"] == "-"
    assert hv[a]["kilo_persistent_keepalive"] == 25
    assert hv[a]["kilo_allowed_location_ips"] == ["192.168.7.0/24", "192.168.8.0/24"]
    # not forced: the pod ranges of each source (issue 23), the Node's own here
    assert "kilo_pod_cidr" not in hv[a]
    assert hv[a]["kilo_kubernetes_node"].pop("pod_cidrs")["node"] == ["10.244.1.0/24"]
    assert hv[a]["ansible_host"] == "10.1.0.5"
    assert hv[a]["kilo_kubernetes_node"] == {
        "public_key": KEY,
        "endpoint": "203.0.113.5:51820",
        "internal_ip": "10.1.0.5/24",
        "wireguard_ip": "10.4.0.1/16",
        "last_seen": 1700000000,
        "granularity": "location",
        "discovered_endpoints": {KEY2: "198.51.100.7:40112"},
        "ready": True,
        # no relay mark of our agents on it: a Node of Kilo's own agent, to our agents' engine
        "kg": True,
        "path_state": None,
        "relay_since": None,
    }
    assert hv[a]["kubernetes_labels"] == {kn.REGION_LABEL: "ignored"}

    assert hv[b]["kilo_location"] == "home" and "kilo_leader" not in hv[b]
    assert hv[b]["ansible_host"] == "172.16.2.2" and hv[b]["kilo_kubernetes_node"]["ready"] is False
    assert hv[b]["kilo_kubernetes_node"]["public_key"] is None
    assert (
        hv[c]["kilo_location"] == ""
        and "ansible_host" not in hv[c]
        and "kilo_pod_cidr" not in hv[c]
    )
    assert hv[c]["kilo_kubernetes_node"]["pod_cidrs"]["node"] == []
    assert hv[c]["kilo_kubernetes_node"]["ready"] is None

    # Other group, other label, other address.
    data, _err = ok(
        tmp_path,
        {
            "kubeconfig": kube.kubeconfig,
            "peers": False,
            "group": "mesh",
            "topology_label": "example.com/site",
            "address": "ExternalIP",
        },
    )
    assert {a, b, c} <= members(data, "mesh") and "kilo" not in data
    assert members(data, "eu_west_1") == {a} and "home" not in members(data, "mesh", "children")
    assert data["_meta"]["hostvars"][a]["ansible_host"] == "203.0.113.5"
    assert "ansible_host" not in data["_meta"]["hostvars"][b]
    data, _err = ok(
        tmp_path, {"kubeconfig": kube.kubeconfig, "peers": False, "address": kn.FORCE_ENDPOINT}
    )
    assert data["_meta"]["hostvars"][a]["ansible_host"] == "vpn.example.com"


def test_constructed_compose_groups_and_keyed_groups(kube, tmp_path, nodes):
    a = nodes(
        unique("k"),
        "10.244.3.0/24",
        labels={kn.REGION_LABEL: "aws", "tier": "edge"},
        addresses=[("InternalIP", "10.1.0.9"), ("ExternalIP", "203.0.113.9")],
    )
    data, _err = ok(
        tmp_path,
        {
            "kubeconfig": kube.kubeconfig,
            "peers": False,
            "strict": True,
            "compose": {"ansible_host": "'override.example'", "kilo_port": "51999"},
            "groups": {"edge": "kubernetes_labels.tier | default('') == 'edge'"},
            "keyed_groups": [
                {"prefix": "loc", "key": "kilo_location"},
                {"prefix": "tier", "key": "kubernetes_labels.tier"},
            ],
        },
    )
    hv = data["_meta"]["hostvars"][a]
    assert hv["ansible_host"] == "override.example" and hv["kilo_port"] == 51999
    assert (
        a in members(data, "edge")
        and a in members(data, "loc_aws")
        and a in members(data, "tier_edge")
    )


def test_peers_become_kilo_peers_and_invalid_ones_fail_or_are_skipped(kube, tmp_path, nodes, peers):
    nodes(unique("n"), "10.244.4.0/24")
    good = peers(
        unique("laptop"),
        allowedIPs=["10.5.0.1/32"],
        publicKey=KEY2,
        persistentKeepalive=25,
        presharedKey=PSK,
        endpoint={"dnsOrIP": {"dns": "laptop.example.com"}, "port": 51820},
    )
    plain = peers(
        unique("phone"),
        allowedIPs=["10.5.0.2/32", "fd00:5::2/128"],
        publicKey=KEY,
        endpoint={"dnsOrIP": {"ip": "2001:db8::7"}, "port": 4000},
    )
    data, _err = ok(tmp_path, {"kubeconfig": kube.kubeconfig})
    by_name = dict((p["name"], p) for p in data["kilo"]["vars"]["kilo_peers"])
    assert by_name[good] == {
        "name": good,
        "public_key": KEY2,
        "allowed_ips": ["10.5.0.1/32"],
        "endpoint": "laptop.example.com:51820",
        "persistent_keepalive": 25,
        "preshared_key": PSK,
    }
    assert by_name[plain]["endpoint"] == "[2001:db8::7]:4000"
    assert by_name[plain]["allowed_ips"] == ["10.5.0.2/32", "fd00:5::2/128"]
    assert by_name[plain]["preshared_key"] is None and by_name[plain]["persistent_keepalive"] == 0

    # Accepted by the CRD, refused here: no allowed IP (Kilo leaves it out), keepalive beyond WireGuard's.
    empty = peers(
        unique("empty"), allowedIPs=[], publicKey="B3dm3+3Afj5Ze4IIcyzxlaxlxLrALlC0Y/zZUgFRSCU="
    )
    rc, _data, err = inventory(tmp_path, {"kubeconfig": kube.kubeconfig})
    assert rc != 0 and "peer '%s'" % empty in err and "spec.allowedIPs" in err
    long_keepalive = peers(
        unique("slow"),
        allowedIPs=["10.5.0.9/32"],
        persistentKeepalive=70000,
        publicKey="egZbwjoiH99h6UF784NJ+Gwb26F9qk+xjdi578EalB8=",
    )
    data, err = ok(tmp_path, {"kubeconfig": kube.kubeconfig, "invalid_peers": "skip"})
    names = [p["name"] for p in data["kilo"]["vars"]["kilo_peers"]]
    assert good in names and plain in names and empty not in names and long_keepalive not in names
    flat = " ".join(err.split())
    assert "peer '%s'" % empty in flat and "peer '%s'" % long_keepalive in flat


def test_bad_node_annotation_fails_naming_node_and_annotation(kube, tmp_path, nodes):
    name = nodes(unique("bad"), annotations={kn.PERSISTENT_KEEPALIVE: "soon"})
    rc, _data, err = inventory(tmp_path, {"kubeconfig": kube.kubeconfig, "peers": False})
    flat = " ".join(err.split())
    assert rc != 0 and "node '%s'" % name in flat and kn.PERSISTENT_KEEPALIVE in flat


def test_host_api_key_and_ca_cert_instead_of_a_kubeconfig(kube, tmp_path, nodes):
    name = nodes(unique("tok"), "10.244.5.0/24", labels={kn.REGION_LABEL: "dc"})
    data, _err = ok(
        tmp_path,
        {"host": kube.host, "api_key": kube.token, "ca_cert": kube.ca_cert, "peers": False},
    )
    assert name in members(data, "dc")
    # The same from the K8S_AUTH_* environment variables.
    data, _err = ok(
        tmp_path,
        {"peers": False},
        env={
            "K8S_AUTH_HOST": kube.host,
            "K8S_AUTH_API_KEY": kube.token,
            "K8S_AUTH_SSL_CA_CERT": kube.ca_cert,
        },
    )
    assert name in members(data, "dc")
    # Without the CA the server's certificate is not trusted, unless told not to check.
    rc, _data, err = inventory(tmp_path, {"host": kube.host, "api_key": kube.token, "peers": False})
    assert rc != 0 and "cannot reach the API server" in " ".join(err.split())
    data, _err = ok(
        tmp_path,
        {"host": kube.host, "api_key": kube.token, "validate_certs": False, "peers": False},
    )
    assert name in members(data, "dc")


def test_wrong_token_is_a_clear_401(kube, tmp_path):
    rc, _data, err = inventory(
        tmp_path, {"host": kube.host, "api_key": "not-a-token", "ca_cert": kube.ca_cert}
    )
    flat = " ".join(err.split())
    assert rc != 0 and "401" in flat and "did not accept the credentials" in flat, err


def test_unprivileged_user_is_a_clear_403(kube, tmp_path):
    if kube.user_token is None:
        pytest.skip("an external cluster ($KILO_TEST_KUBECONFIG) has no unprivileged test user")
    rc, _data, err = inventory(
        tmp_path, {"host": kube.host, "api_key": kube.user_token, "ca_cert": kube.ca_cert}
    )
    flat = " ".join(err.split())
    assert rc != 0 and "403" in flat and "/api/v1/nodes" in flat, err
