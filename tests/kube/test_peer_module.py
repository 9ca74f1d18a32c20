"""kilo.mesh.peer through real Ansible (`ansible localhost -m kilo.mesh.peer`) against the real
kube-apiserver: create, idempotence, update, check mode, diff, absent, bad input, RBAC, no library."""

import os
import secrets
import subprocess

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ansible_run import ROOT, crd, delete_crd, environment, module

GROUP, VERSION, PLURAL = "kilo.squat.ai", "v1alpha1", "peers"
PUBLIC_KEY = "HrvQbzPuMwVlzdGx6qtlRwjONFThcrY/AMyM4UbNuCc="
PRESHARED = "aTd/2RqWV9Xu1hXgGAbMNp2Qn8Ag6yYxwrBLbMmV4ms="
UNREACHABLE = {"host": "https://127.0.0.1:1", "api_key": "never-sent"}


@pytest.fixture(scope="module")
def admin(kube):
    with kube.client() as api:
        yield api


@pytest.fixture(scope="module")
def installed(kube, admin):
    """The Peer CRD of manifests/crds.yaml, Established; removed afterwards when it was not there."""
    existed = crd(admin) is not None
    if not existed:
        kube.kubectl("apply", "-f", os.path.join(ROOT, "manifests", "crds.yaml"))
        kube.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", "crd/peers.kilo.squat.ai"
        )
    yield
    if not existed:
        delete_crd(admin)


@pytest.fixture
def name(admin, installed):
    """A fresh peer name; the peer is deleted afterwards."""
    peer = f"peer-{secrets.token_hex(3)}"
    yield peer
    try:
        client.CustomObjectsApi(admin).delete_cluster_custom_object(GROUP, VERSION, PLURAL, peer)
    except ApiException as e:
        if e.status != 404:
            raise


def stored(admin, peer):
    """The stored spec of the peer, None when there is none."""
    try:
        return client.CustomObjectsApi(admin).get_cluster_custom_object(
            GROUP, VERSION, PLURAL, peer
        )["spec"]
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def diff_of(out):
    """The unified diff Ansible printed before the result."""
    assert "--- before" in out, out
    return out[out.index("--- before") : out.index("localhost | ")]


def test_create_rerun_update_absent(kube, admin, name):
    args = {
        "name": name,
        "public_key": PUBLIC_KEY,
        "allowed_ips": ["10.5.0.1/32"],
        "endpoint": "192.0.2.7:51820",
        "persistent_keepalive": 25,
        "kubeconfig": kube.kubeconfig,
    }
    status, result, _ = module("peer", args, "--check")
    assert (status, result["changed"]) == ("CHANGED", True)
    assert result["resource"]["spec"]["allowedIPs"] == ["10.5.0.1/32"]  # the server's dry run
    assert stored(admin, name) is None

    status, result, _ = module("peer", args)
    assert status == "CHANGED", result
    spec = {
        "publicKey": PUBLIC_KEY,
        "allowedIPs": ["10.5.0.1/32"],
        "persistentKeepalive": 25,
        "endpoint": {"dnsOrIP": {"ip": "192.0.2.7"}, "port": 51820},
    }
    assert stored(admin, name) == spec
    assert result["peer"] == {
        "name": name,
        "public_key": PUBLIC_KEY,
        "allowed_ips": ["10.5.0.1/32"],
        "endpoint": "192.0.2.7:51820",
        "persistent_keepalive": 25,
        "preshared_key": None,
    }

    # the same again, the cluster from the environment this time: nothing to do
    env = environment(K8S_AUTH_KUBECONFIG=kube.kubeconfig)
    status, result, _ = module("peer", dict(args, kubeconfig=None), env=env)
    assert (status, result["changed"]) == ("SUCCESS", False), result

    update = dict(args, allowed_ips=["10.5.0.1/32", "10.6.0.0/16"])
    status, result, out = module("peer", update, "--check", "--diff")
    assert status == "CHANGED"
    assert '+        "10.6.0.0/16"' in diff_of(out)
    assert stored(admin, name) == spec
    status, result, _ = module("peer", update)
    assert status == "CHANGED"
    assert stored(admin, name)["allowedIPs"] == ["10.5.0.1/32", "10.6.0.0/16"]
    assert module("peer", update)[0] == "SUCCESS"

    # an option left out leaves the spec
    status, _result, _ = module("peer", dict(update, endpoint=None, persistent_keepalive=0))
    assert status == "CHANGED"
    assert stored(admin, name) == {
        "publicKey": PUBLIC_KEY,
        "allowedIPs": ["10.5.0.1/32", "10.6.0.0/16"],
    }

    gone = {"name": name, "state": "absent", "kubeconfig": kube.kubeconfig}
    status, result, out = module("peer", gone, "--check", "--diff")
    assert status == "CHANGED" and '-    "publicKey": "%s"' % PUBLIC_KEY in diff_of(out)
    assert stored(admin, name) is not None
    status, result, _ = module("peer", gone)
    assert status == "CHANGED" and result["peer"]["allowed_ips"] == ["10.5.0.1/32", "10.6.0.0/16"]
    assert stored(admin, name) is None
    assert module("peer", gone)[0] == "SUCCESS"


def test_endpoints_in_canonical_form(kube, admin, name):
    args = {
        "name": name,
        "public_key": PUBLIC_KEY,
        "allowed_ips": ["fd00:5::1/128"],
        "endpoint": "[FD00::0001]:51820",
        "kubeconfig": kube.kubeconfig,
    }
    assert module("peer", args)[0] == "CHANGED"
    assert stored(admin, name)["endpoint"] == {"dnsOrIP": {"ip": "fd00::1"}, "port": 51820}
    assert module("peer", dict(args, endpoint="[fd00::1]:51820"))[0] == "SUCCESS"
    assert module("peer", dict(args, endpoint="VPN.Example.com:4500"))[0] == "CHANGED"
    assert stored(admin, name)["endpoint"] == {"dnsOrIP": {"dns": "vpn.example.com"}, "port": 4500}
    assert module("peer", dict(args, endpoint="vpn.example.com:4500"))[0] == "SUCCESS"


def test_diff_masks_the_preshared_key(kube, admin, name):
    args = {
        "name": name,
        "public_key": PUBLIC_KEY,
        "allowed_ips": ["10.5.0.2/32"],
        "preshared_key": PRESHARED,
        "kubeconfig": kube.kubeconfig,
    }
    status, result, out = module("peer", args, "--diff")
    assert status == "CHANGED"
    assert '+    "presharedKey": "********",' in diff_of(out)
    assert result["resource"]["spec"]["presharedKey"] == "********"
    assert stored(admin, name)["presharedKey"] == PRESHARED
    other = "Z" * 42 + "A="
    status, result, out2 = module("peer", dict(args, preshared_key=other), "--diff", "-v")
    assert status == "CHANGED"
    assert '-    "presharedKey": "********",' in diff_of(out2)
    assert '+    "presharedKey": "******** (changed)",' in diff_of(out2)
    for text in (out, out2):
        assert PRESHARED not in text and other not in text


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("public_key", "not-a-key", "public_key: not valid base64"),
        ("public_key", "AAAA", "public_key: decodes to 3 bytes"),
        (
            "allowed_ips",
            ["10.5.0.300/32"],
            "allowed_ips: '10.5.0.300/32' is not an address in CIDR form",
        ),
        ("allowed_ips", ["10.5.0.3"], "allowed_ips: '10.5.0.3' is not an IP address in CIDR form"),
        ("endpoint", "192.0.2.7:0", "endpoint: port 0 out of range 1-65535"),
        ("endpoint", "Bad_Name:51820", "endpoint: 'Bad_Name:51820': 'Bad_Name' is neither"),
        ("persistent_keepalive", -1, "persistent_keepalive: -1 out of range"),
        ("preshared_key", "short", "preshared_key: "),
        ("name", "Laptop", "name: 'Laptop' is not a DNS-1123 subdomain"),
    ],
)
def test_bad_input_names_the_field_and_sends_nothing(option, value, message):
    # The API server is unreachable: any request would fail differently.
    args = dict(UNREACHABLE, name="laptop", public_key=PUBLIC_KEY, allowed_ips=["10.5.0.1/32"])
    args[option] = value
    status, result, _ = module("peer", args)
    assert status == "FAILED"
    assert result["msg"].startswith("peer '%s': %s" % (args["name"], message)), result["msg"]


def test_unprivileged_token_is_told_what_is_missing(kube, admin, name):
    if kube.user_token is None:
        pytest.skip("an external cluster ($KILO_TEST_KUBECONFIG) has no unprivileged test user")
    args = {
        "name": name,
        "public_key": PUBLIC_KEY,
        "allowed_ips": ["10.5.0.1/32"],
        "host": kube.host,
        "api_key": kube.user_token,
        "ca_cert": kube.ca_cert,
    }
    for flags in ((), ("--check",)):
        status, result, out = module("peer", args, *flags)
        assert status == "FAILED"
        assert f"peer '{name}': GET /apis/kilo.squat.ai/v1alpha1/peers/{name}: 403" in result["msg"]
        assert "ClusterRole kilo-mesh" in result["msg"]
        assert kube.user_token not in out
    assert stored(admin, name) is None


def test_missing_library_is_reported():
    python = "/usr/bin/python3"
    if (
        not os.access(python, os.X_OK)
        or subprocess.call([python, "-c", "import kubernetes"], stderr=subprocess.DEVNULL) == 0
    ):
        pytest.skip(f"{python} has the kubernetes library (or is missing)")
    status, result, _ = module(
        "peer",
        dict(UNREACHABLE, name="laptop", state="absent"),
        "-e",
        f"ansible_python_interpreter={python}",
    )
    assert status == "FAILED"
    assert "Failed to import the required Python library (kubernetes)" in result["msg"]
