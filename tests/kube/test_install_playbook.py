"""playbooks/kubernetes.yml (kubernetes.core.k8s) against the real kube-apiserver: check mode stores
nothing, the first run installs the Peer CRD (Established) and the RBAC objects by server-side apply,
a second run changes nothing; an object changed behind its back is reported by --check and put back
by the next run."""

import json
import os

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ansible_run import CRD_NAME, ROOT, crd, delete_crd, environment, module, playbook, recap

PLAYBOOK = os.path.join(ROOT, "playbooks", "kubernetes.yml")
RBAC = os.path.join(ROOT, "manifests", "rbac.yaml")


@pytest.fixture(scope="module")
def admin(kube):
    with kube.client() as api:
        yield api


@pytest.fixture
def had(kube, admin):
    """(CRD there before, ClusterRole there before); what the test installed is removed after it."""
    had_crd, had_rbac = crd(admin) is not None, cluster_role(admin) is not None
    yield had_crd, had_rbac
    if not had_rbac:
        kube.kubectl("delete", "-f", RBAC, "--ignore-not-found")
    if not had_crd:
        delete_crd(admin)
        assert crd(admin) is None, CRD_NAME


def cluster_role(admin):
    try:
        return client.RbacAuthorizationV1Api(admin).read_cluster_role("kilo-mesh")
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def applied_by_us(obj):
    """Whether the field manager kilo-mesh owns fields of ``obj`` by server-side apply."""
    return any(
        m.manager == "kilo-mesh" and m.operation == "Apply"
        for m in obj.metadata.managed_fields or []
    )


def run(kube, *args, env=None):
    """The playbook against ``kube`` (its kubeconfig in kilo_kube, the collection's one variable of the
    client options, unless ``env`` names the cluster): (changed count, output)."""
    if env is None:
        args = ("-e", json.dumps({"kilo_kube": {"kubeconfig": kube.kubeconfig}})) + args
    rc, out = playbook(PLAYBOOK, *args, env=env)
    assert rc == 0, out
    return recap(out)["changed"], out


def test_install_twice(kube, admin, had):
    had_crd, had_rbac = had
    if not had_crd:
        status, result, _ = module(
            "peer", {"name": "before-install", "state": "absent", "kubeconfig": kube.kubeconfig}
        )
        assert status == "FAILED"
        assert "Peer CRD is not installed" in result["msg"]
        assert "playbooks/kubernetes.yml" in result["msg"]

    changed, out = run(kube, "--check", "--diff")
    assert changed == (0 if had_crd and had_rbac else 2) or had_crd != had_rbac, out
    assert (crd(admin) is not None) == had_crd, "check mode stored the CRD"
    assert (cluster_role(admin) is not None) == had_rbac, "check mode stored the ClusterRole"

    changed, out = run(kube)
    if not (had_crd or had_rbac):
        assert changed == 2, out
    got = crd(admin)
    assert any(c.type == "Established" and c.status == "True" for c in got.status.conditions)
    assert applied_by_us(got), got.metadata.managed_fields
    assert applied_by_us(cluster_role(admin))
    client.CustomObjectsApi(admin).list_cluster_custom_object("kilo.squat.ai", "v1alpha1", "peers")

    # again, the cluster named by the environment variable this time: nothing to do
    env = environment(K8S_AUTH_KUBECONFIG=kube.kubeconfig)
    changed, out = run(kube, env=env)
    assert changed == 0, out
    changed, out = run(kube, "--check", "--diff", env=env)
    assert changed == 0, out
    # the playbook's old variables still work, and say they are deprecated
    changed, out = run(kube, "-e", f"kubeconfig={kube.kubeconfig}", env=environment())
    assert changed == 0 and "DEPRECATED: -e kubeconfig" in out, out


def test_drift_is_reported_in_check_mode_and_repaired(kube, admin, had):
    run(kube)
    # someone else cuts the ClusterRole down to its first rule
    with open(RBAC) as f:
        rules = [i for i in yaml.safe_load(f)["items"] if i["kind"] == "ClusterRole"][0]["rules"]
    assert len(rules) > 1
    client.RbacAuthorizationV1Api(admin).patch_cluster_role("kilo-mesh", {"rules": rules[:1]})
    assert len(cluster_role(admin).rules) == 1

    changed, out = run(kube, "--check", "--diff")
    assert changed == 1, out
    assert "customresourcedefinitions" in out, "the diff does not show the missing rule"
    assert len(cluster_role(admin).rules) == 1, "check mode changed the ClusterRole"

    changed, out = run(kube)
    assert changed == 1, out
    got = admin.sanitize_for_serialization(cluster_role(admin).rules)
    assert [{k: sorted(v) for k, v in r.items()} for r in got] == [
        {k: sorted(v) for k, v in r.items()} for r in rules
    ]

    changed, out = run(kube)
    assert changed == 0, out
