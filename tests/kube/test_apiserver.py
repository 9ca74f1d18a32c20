"""The Kubernetes path against a real kube-apiserver (etcd, TLS, tokens, RBAC), never a fake.

Nodes with Kilo's annotations, the three patch kinds, selectors, the Peer CRD of
manifests/crds.yaml and its validation, authentication and the RBAC of manifests/rbac.yaml.
Every test removes what it creates.
"""

import base64
import os
import secrets
import time

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFESTS = os.path.join(ROOT, "manifests")
GROUP, VERSION, PLURAL = "kilo.squat.ai", "v1alpha1", "peers"
KEY = "kilo.squat.ai/"
PUBLIC_KEY = "HrvQbzPuMwVlzdGx6qtlRwjONFThcrY/AMyM4UbNuCc="
PRESHARED = "aTd/2RqWV9Xu1hXgGAbMNp2Qn8Ag6yYxwrBLbMmV4ms="
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def unique(prefix):
    return f"{prefix}-{secrets.token_hex(3)}"


def status_of(call, *args, **kwargs):
    """The HTTP status of an API call that is expected to fail."""
    with pytest.raises(ApiException) as caught:
        call(*args, **kwargs)
    return caught.value.status


def eventually(check, timeout=15.0):
    """Retry check() until it returns without raising (RBAC and discovery settle async)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except (ApiException, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def node(name, pod_cidr, labels=None, annotations=None):
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels=labels, annotations=annotations),
        spec=client.V1NodeSpec(pod_cidr=pod_cidr),
    )


def peer(name, **spec):
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Peer",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def admin(kube):
    with kube.client() as api:
        yield api


@pytest.fixture
def nodes(admin):
    """Create nodes through the returned function; all are deleted afterwards."""
    core, made = client.CoreV1Api(admin), []

    def create(*args, **kwargs):
        made.append(core.create_node(node(*args, **kwargs)).metadata.name)
        return made[-1]

    yield create
    for name in made:
        try:
            core.delete_node(name)
        except ApiException as e:
            if e.status != 404:
                raise


@pytest.fixture(scope="module")
def peer_crd(kube, admin):
    """manifests/crds.yaml applied with kubectl and Established; removed afterwards if new."""
    ext = client.ApiextensionsV1Api(admin)
    with open(os.path.join(MANIFESTS, "crds.yaml")) as f:
        name = yaml.safe_load(f)["metadata"]["name"]
    try:
        ext.read_custom_resource_definition(name)
        existed = True
    except ApiException as e:
        assert e.status == 404
        existed = False
    kube.kubectl("apply", "-f", os.path.join(MANIFESTS, "crds.yaml"))

    def established():
        crd = ext.read_custom_resource_definition(name)
        assert any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )
        client.CustomObjectsApi(admin).list_cluster_custom_object(GROUP, VERSION, PLURAL)

    eventually(established)
    yield name
    if not existed:
        kube.kubectl("delete", "-f", os.path.join(MANIFESTS, "crds.yaml"), "--wait=true")


@pytest.fixture
def peers(admin, peer_crd):
    custom, made = client.CustomObjectsApi(admin), []

    def create(body, api=None):
        obj = (api or custom).create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        made.append(obj["metadata"]["name"])
        return obj

    yield create
    for name in made:
        try:
            custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except ApiException as e:
            if e.status != 404:
                raise


def test_node_annotations_patches_and_selectors(admin, nodes):
    core = client.CoreV1Api(admin)
    run = unique("run")
    a = nodes(
        unique("kilo-a"),
        "10.244.1.0/24",
        labels={"kilo-test": run},
        annotations={KEY + "location": "aws", KEY + "leader": "true"},
    )
    b = nodes(unique("kilo-b"), "10.244.2.0/24", labels={"kilo-test": "other-" + run})
    got = core.read_node(a)
    assert got.spec.pod_cidr == "10.244.1.0/24"
    assert got.metadata.annotations[KEY + "location"] == "aws"
    version = got.metadata.resource_version

    # strategic merge: add the key and the endpoint, drop the leader annotation with null
    core.patch_node(
        a,
        {
            "metadata": {
                "annotations": {
                    KEY + "key": PUBLIC_KEY,
                    KEY + "endpoint": "192.0.2.1:51820",
                    KEY + "leader": None,
                }
            }
        },
        _content_type=STRATEGIC,
    )
    got = core.read_node(a).metadata
    assert got.annotations == {
        KEY + "location": "aws",
        KEY + "key": PUBLIC_KEY,
        KEY + "endpoint": "192.0.2.1:51820",
    }
    assert int(got.resource_version) > int(version)

    # JSON merge patch: the same with null for removal
    core.patch_node(
        a,
        {"metadata": {"annotations": {KEY + "endpoint": None, KEY + "last-seen": "1700000000"}}},
        _content_type=MERGE,
    )
    assert core.read_node(a).metadata.annotations == {
        KEY + "location": "aws",
        KEY + "key": PUBLIC_KEY,
        KEY + "last-seen": "1700000000",
    }

    # JSON patch ("~1" escapes the slash) with a test that fails: 422, nothing changes
    status = status_of(
        core.patch_node,
        a,
        [
            {"op": "test", "path": "/metadata/annotations/kilo.squat.ai~1location", "value": "gcp"},
            {"op": "remove", "path": "/metadata/annotations/kilo.squat.ai~1key"},
        ],
    )
    assert status == 422
    assert KEY + "key" in core.read_node(a).metadata.annotations

    # label and field selectors see exactly the right node
    listed = core.list_node(label_selector=f"kilo-test={run}").items
    assert [n.metadata.name for n in listed] == [a]
    listed = core.list_node(field_selector=f"metadata.name={b}").items
    assert [n.metadata.name for n in listed] == [b]
    assert status_of(core.read_node, unique("kilo-none")) == 404
    assert status_of(core.create_node, node(a, "10.244.9.0/24")) == 409


def test_peer_crd_accepts_good_peers(admin, peers):
    good = peer(
        unique("laptop"),
        allowedIPs=["10.5.0.1/32", "fd00:5::1/128"],
        publicKey=PUBLIC_KEY,
        presharedKey=PRESHARED,
        persistentKeepalive=25,
        endpoint={"dnsOrIP": {"ip": "192.0.2.7"}, "port": 51820},
    )
    good["spec"]["notAField"] = "pruned"
    made = peers(good)
    assert made["spec"]["endpoint"] == {"dnsOrIP": {"ip": "192.0.2.7"}, "port": 51820}
    assert "notAField" not in made["spec"]  # a structural schema prunes unknown fields
    minimal = peers(peer(unique("phone"), allowedIPs=["10.5.0.2/32"], publicKey=PUBLIC_KEY))
    assert minimal["spec"] == {"allowedIPs": ["10.5.0.2/32"], "publicKey": PUBLIC_KEY}
    named = peers(
        peer(
            unique("office"),
            allowedIPs=[],
            publicKey=PUBLIC_KEY,
            endpoint={"dnsOrIP": {"dns": "vpn.example.com"}, "port": 1},
        )
    )
    assert named["spec"]["endpoint"]["dnsOrIP"] == {"dns": "vpn.example.com"}
    listed = client.CustomObjectsApi(admin).list_cluster_custom_object(GROUP, VERSION, PLURAL)
    names = {p["metadata"]["name"] for p in listed["items"]}
    assert {made["metadata"]["name"], minimal["metadata"]["name"]} <= names


BAD_SPECS = {
    "no allowedIPs": {"publicKey": PUBLIC_KEY},
    "no publicKey": {"allowedIPs": ["10.5.0.1/32"]},
    "allowedIPs not a list": {"allowedIPs": "10.5.0.1/32", "publicKey": PUBLIC_KEY},
    "allowedIP not a CIDR": {"allowedIPs": ["10.5.0.300/32"], "publicKey": PUBLIC_KEY},
    "allowedIP without a prefix": {"allowedIPs": ["10.5.0.1"], "publicKey": PUBLIC_KEY},
    "public key not base64": {"allowedIPs": ["10.5.0.1/32"], "publicKey": "not a key"},
    "public key of 31 bytes": {
        "allowedIPs": ["10.5.0.1/32"],
        "publicKey": base64.b64encode(bytes(range(31))).decode(),
    },
    "public key of 33 bytes": {
        "allowedIPs": ["10.5.0.1/32"],
        "publicKey": base64.b64encode(bytes(range(33))).decode(),
    },
    "preshared key wrong": {
        "allowedIPs": ["10.5.0.1/32"],
        "publicKey": PUBLIC_KEY,
        "presharedKey": "short",
    },
    "negative keepalive": {
        "allowedIPs": ["10.5.0.1/32"],
        "publicKey": PUBLIC_KEY,
        "persistentKeepalive": -1,
    },
    "port 70000": {
        "allowedIPs": ["10.5.0.1/32"],
        "publicKey": PUBLIC_KEY,
        "endpoint": {"dnsOrIP": {"ip": "192.0.2.7"}, "port": 70000},
    },
    "port 0": {
        "allowedIPs": ["10.5.0.1/32"],
        "publicKey": PUBLIC_KEY,
        "endpoint": {"dnsOrIP": {"ip": "192.0.2.7"}, "port": 0},
    },
    "endpoint without port": {
        "allowedIPs": ["10.5.0.1/32"],
        "publicKey": PUBLIC_KEY,
        "endpoint": {"dnsOrIP": {"ip": "192.0.2.7"}},
    },
    "endpoint without host": {
        "allowedIPs": ["10.5.0.1/32"],
        "publicKey": PUBLIC_KEY,
        "endpoint": {"dnsOrIP": {}, "port": 51820},
    },
    "endpoint IP invalid": {
        "allowedIPs": ["10.5.0.1/32"],
        "publicKey": PUBLIC_KEY,
        "endpoint": {"dnsOrIP": {"ip": "192.0.2.999"}, "port": 51820},
    },
    "endpoint DNS invalid": {
        "allowedIPs": ["10.5.0.1/32"],
        "publicKey": PUBLIC_KEY,
        "endpoint": {"dnsOrIP": {"dns": "Bad_Name.example"}, "port": 51820},
    },
}


@pytest.mark.parametrize("why", sorted(BAD_SPECS))
def test_peer_crd_rejects_bad_peers(admin, peers, why):
    custom = client.CustomObjectsApi(admin)
    name = unique("bad")
    with pytest.raises(ApiException) as caught:
        peers(peer(name, **BAD_SPECS[why]))
    assert caught.value.status == 422, caught.value.body
    assert status_of(custom.get_cluster_custom_object, GROUP, VERSION, PLURAL, name) == 404


def test_bad_token_is_401(kube):
    with kube.client(token="not-a-token") as api:
        assert status_of(client.CoreV1Api(api).list_node) == 401


def test_rbac_manifest_grants_what_kilo_mesh_needs(kube, admin, nodes, peers):
    if kube.user_token is None:
        pytest.skip("an external cluster ($KILO_TEST_KUBECONFIG) has no unprivileged test user")
    name = nodes(unique("kilo-rbac"), "10.244.3.0/24")
    rbac = client.RbacAuthorizationV1Api(admin)
    with kube.client(token=kube.user_token) as user_api:
        core = client.CoreV1Api(user_api)
        assert status_of(core.list_node) == 403
        assert (
            status_of(
                core.patch_node,
                name,
                {"metadata": {"annotations": {KEY + "x": "1"}}},
                _content_type=MERGE,
            )
            == 403
        )

        kube.kubectl("apply", "-f", os.path.join(MANIFESTS, "rbac.yaml"))
        binding = client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=unique("kilo-test-user")),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="kilo-mesh"
            ),
            subjects=[
                client.RbacV1Subject(
                    api_group="rbac.authorization.k8s.io", kind="User", name=kube.user_name
                )
            ],
        )
        rbac.create_cluster_role_binding(binding)
        try:
            listed = eventually(core.list_node)
            assert name in {n.metadata.name for n in listed.items}
            core.patch_node(
                name,
                {"metadata": {"annotations": {KEY + "key": PUBLIC_KEY}}},
                _content_type=STRATEGIC,
            )
            assert client.CoreV1Api(admin).read_node(name).metadata.annotations == {
                KEY + "key": PUBLIC_KEY
            }
            made = peers(
                peer(unique("rbac-peer"), allowedIPs=["10.5.0.9/32"], publicKey=PUBLIC_KEY),
                api=client.CustomObjectsApi(user_api),
            )
            assert made["spec"]["allowedIPs"] == ["10.5.0.9/32"]
            # the manifest's own subject, the ServiceAccount, has the same rights
            review = client.AuthorizationV1Api(admin).create_subject_access_review(
                client.V1SubjectAccessReview(
                    spec=client.V1SubjectAccessReviewSpec(
                        user="system:serviceaccount:kube-system:kilo-mesh",
                        resource_attributes=client.V1ResourceAttributes(
                            verb="patch", resource="nodes"
                        ),
                    )
                )
            )
            assert review.status.allowed
            # and no more than that
            assert status_of(core.delete_node, name) == 403
            assert status_of(core.list_namespaced_secret, "kube-system") == 403
        finally:
            rbac.delete_cluster_role_binding(binding.metadata.name)
            kube.kubectl("delete", "-f", os.path.join(MANIFESTS, "rbac.yaml"), "--wait=true")
