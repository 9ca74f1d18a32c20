"""playbooks/kubernetes.yml against the real kube-apiserver: check mode stores nothing, the first run
installs the Peer CRD (Established) and the RBAC objects, a second run changes nothing."""
import os

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ansible_run import CRD_NAME, ROOT, crd, delete_crd, environment, module, playbook, recap

PLAYBOOK = os.path.join(ROOT, "playbooks", "kubernetes.yml")
RBAC = os.path.join(ROOT, "manifests", "rbac.yaml")


@pytest.fixture(scope="module")
def admin(kube):
    with kube.client() as api:
        yield api


def cluster_role(admin):
    try:
        return client.RbacAuthorizationV1Api(admin).read_cluster_role("kilo-mesh")
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def test_install_twice(kube, admin):
    had_crd, had_rbac = crd(admin) is not None, cluster_role(admin) is not None
    try:
        if not had_crd:
            status, result, _ = module("peer", {"name": "before-install", "state": "absent",
                                                "kubeconfig": kube.kubeconfig})
            assert status == "FAILED"
            assert "Peer CRD is not installed" in result["msg"]
            assert "playbooks/kubernetes.yml" in result["msg"]

        rc, out = playbook(PLAYBOOK, "-e", f"kubeconfig={kube.kubeconfig}", "--check", "--diff")
        assert rc == 0, out
        assert recap(out)["changed"] == (0 if had_crd and had_rbac else 2) or had_crd != had_rbac, out
        assert (crd(admin) is not None) == had_crd, "check mode stored the CRD"
        assert (cluster_role(admin) is not None) == had_rbac, "check mode stored the ClusterRole"

        rc, out = playbook(PLAYBOOK, "-e", f"kubeconfig={kube.kubeconfig}")
        assert rc == 0, out
        if not (had_crd or had_rbac):
            assert recap(out)["changed"] == 2, out
        got = crd(admin)
        assert any(c.type == "Established" and c.status == "True" for c in got.status.conditions)
        assert cluster_role(admin) is not None
        client.CustomObjectsApi(admin).list_cluster_custom_object("kilo.squat.ai", "v1alpha1", "peers")

        # again, the cluster named by the environment variable this time: nothing to do
        env = environment(K8S_AUTH_KUBECONFIG=kube.kubeconfig)
        rc, out = playbook(PLAYBOOK, env=env)
        assert rc == 0, out
        assert recap(out)["changed"] == 0, out
        rc, out = playbook(PLAYBOOK, "--check", "--diff", env=env)
        assert rc == 0, out
        assert recap(out)["changed"] == 0, out
    finally:
        if not had_rbac:
            kube.kubectl("delete", "-f", RBAC, "--ignore-not-found")
        if not had_crd:
            delete_crd(admin)
            assert crd(admin) is None, CRD_NAME
