"""Each agent's own identity on a real API server: it reads Nodes and Peers, patches its own Node,
and gets 403 for any other Node; applying it again changes nothing; removing it revokes the token."""

import base64
import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ansible_collections.kilo.mesh.plugins.module_utils.agent import service
from ansible_collections.kilo.mesh.plugins.plugin_utils import agent_identity

NS = "kube-system"


def ensure_node(api, name):
    try:
        client.CoreV1Api(api).create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name)))
    except ApiException as e:
        if e.status != 409:
            raise


def patch(api, name):
    return client.CoreV1Api(api).patch_node(
        name, {"metadata": {"annotations": {"kilo.squat.ai/last-seen": "1"}}}
    )


def allowed(api, verb, resource, group=""):
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, group=group
            )
        )
    )
    return client.AuthorizationV1Api(api).create_self_subject_access_review(review).status.allowed


@pytest.fixture
def nodes(kube):
    """Nodes agent-a and agent-b for this test only: the API server is the session's, and other
    tests count its Nodes (the inventory plugin makes every Node a host)."""
    admin = kube.client()
    for name in ("agent-a", "agent-b"):
        ensure_node(admin, name)
    yield admin
    for name in ("agent-a", "agent-b"):
        try:
            client.CoreV1Api(admin).delete_node(name)
        except ApiException as e:
            if e.status != 404:
                raise
    agent_identity.ensure({"kubeconfig": kube.kubeconfig}, "agent-a", NS, state="absent")


def test_agent_identity_patches_only_its_own_node(kube, nodes):
    admin = nodes
    options = {"kubeconfig": kube.kubeconfig}

    planned, uid = agent_identity.ensure(options, "agent-a", NS, check_mode=True)
    assert len(planned) == 5 and uid is None
    with pytest.raises(ApiException) as e:
        client.CoreV1Api(admin).read_namespaced_service_account(
            agent_identity.account_name("agent-a"), NS
        )
    assert e.value.status == 404  # check mode created nothing

    changes, uid = agent_identity.ensure(options, "agent-a", NS)
    assert len(changes) == 5 and uid
    again, uid2 = agent_identity.ensure(options, "agent-a", NS)
    assert again == [] and uid2 == uid

    token = agent_identity.token(options, "agent-a", NS, 3600)
    claims = service.jwt_claims(token)
    assert service.token_identity(claims) == (agent_identity.subject("agent-a", NS), uid)
    assert 3000 < claims["exp"] - claims["iat"] <= 3600 and service.token_fresh(claims)
    server, ca_data, insecure = agent_identity.cluster_of(options)
    assert server == kube.host and not insecure
    assert base64.b64decode(ca_data) == open(kube.ca_cert, "rb").read()

    agent = kube.client(token)
    assert len(client.CoreV1Api(agent).list_node().items) >= 2
    assert allowed(agent, "watch", "nodes") and allowed(agent, "list", "peers", "kilo.squat.ai")
    assert not allowed(agent, "patch", "nodes") and not allowed(agent, "update", "nodes")
    patch(agent, "agent-a")
    with pytest.raises(ApiException) as e:
        patch(agent, "agent-b")
    assert e.value.status == 403
    with pytest.raises(ApiException) as e:
        client.CoreV1Api(agent).delete_node("agent-a")
    assert e.value.status == 403

    removed, _ = agent_identity.ensure(options, "agent-a", NS, state="absent")
    assert len(removed) == 4  # the shared read role stays for the other agents
    with pytest.raises(ApiException) as e:
        client.CoreV1Api(agent).list_node()
    assert e.value.status in (401, 403)  # the token died with its ServiceAccount
    assert json.dumps(removed).find(token) < 0
