# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Each node's agent gets its own identity, with only what it needs (beyond Kilo, whose one
ServiceAccount may patch every Node):

* a ServiceAccount ``kilo-mesh-agent-<node>`` in the agents' namespace;
* the shared ClusterRole ``kilo-mesh-agent`` (get, list, watch Nodes and Kilo's Peers; list and
  watch the objects of the mesh's IPAM source of pod ranges, when ``pod_cidr_source`` names one), bound to
  it by the ClusterRoleBinding ``kilo-mesh-agent-<node>-read``;
* the ClusterRole ``kilo-mesh-agent-<node>`` (get and patch of that one Node, ``resourceNames``)
  bound to it by the ClusterRoleBinding ``kilo-mesh-agent-<node>``.

Made with the controller's Kubernetes credentials (server-side apply, ``kube_client.apply_object``:
nothing is sent when the cluster already holds them). Its token comes from the TokenRequest API
(bound to the ServiceAccount: deleting it revokes the token). The kubeconfig's cluster (server
and CA) is the controller's unless the node reaches the API server elsewhere.
"""

from __future__ import annotations

import base64
import hashlib
import os

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client, kube_node

NAME = "kilo-mesh-agent"
LABELS = {"app.kubernetes.io/managed-by": "kilo-mesh", "app.kubernetes.io/component": "agent"}
NODE_ANNOTATION = "kilo.mesh/node"
# Object names are DNS subdomains (at most 253 characters); a suffix leaves room.
MAX_NAME = 253 - len("-read")


def account_name(node):
    """The ServiceAccount (and per-node ClusterRole) name of ``node``'s agent."""
    name = "%s-%s" % (NAME, node)
    if len(name) > MAX_NAME:
        name = name[: MAX_NAME - 17] + "-" + hashlib.sha256(node.encode()).hexdigest()[:16]
    return name


def subject(node, namespace):
    """The user name the API server gives the agent's token."""
    return "system:serviceaccount:%s:%s" % (namespace, account_name(node))


def _meta(name, node=None, namespace=None):
    meta = {"name": name, "labels": dict(LABELS)}
    if node is not None:
        meta["annotations"] = {NODE_ANNOTATION: node}
    if namespace:
        meta["namespace"] = namespace
    return meta


def shared_role(pod_source="node"):
    """The agents' shared reading rights: Nodes and Peers, and the objects of the mesh's IPAM
    source of pod ranges when it has one (``pod_cidr_source``: Calico's blockaffinities, Cilium's
    ciliumnodes), list and watch only."""
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["kilo.squat.ai"], "resources": ["peers"], "verbs": ["get", "list", "watch"]},
    ]
    if pod_source in kube_node.IPAM_KINDS:
        group, dummy, plural = kube_node.IPAM_KINDS[pod_source]
        rules.append({"apiGroups": [group], "resources": [plural], "verbs": ["list", "watch"]})
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": _meta(NAME),
        "rules": rules,
    }


def node_objects(node, namespace):
    """The objects of ``node``'s identity (the shared ClusterRole aside), in creation order."""
    name = account_name(node)
    account = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(name, node, namespace),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": _meta(name, node),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes"],
                    "resourceNames": [node],
                    "verbs": ["get", "patch"],
                }
            ],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": _meta(name, node),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [account],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": _meta(name + "-read", node),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": NAME,
            },
            "subjects": [account],
        },
    ]


def ensure(client_options, node, namespace, state="present", check_mode=False, pod_source="node"):
    """Apply (or delete) ``node``'s identity. Returns (changes, ServiceAccount UID or None)."""
    dyn = kube_client.dynamic_client(client_options)
    objects = node_objects(node, namespace)
    if state == "present":
        objects = [shared_role(pod_source)] + objects
    else:
        objects = list(reversed(objects))  # bindings before what they name
    changes, uid = [], None
    for obj in objects:
        action, _before, after = kube_client.apply_object(dyn, obj, state, check_mode)
        if action != "unchanged":
            changes.append("%s %s" % (action, kube_client.object_key(obj)))
        # a dry run's answer carries a made-up UID
        if obj["kind"] == "ServiceAccount" and after and not (check_mode and action == "created"):
            uid = (after.get("metadata") or {}).get("uid")
    return changes, uid


def token(client_options, node, namespace, lifetime):
    """A new token of ``node``'s ServiceAccount (TokenRequest API), asked to live ``lifetime`` seconds."""
    client = kube_client.api_client(client_options)
    api = kube_client.kubernetes.client.CoreV1Api(client)
    name = account_name(node)
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": int(lifetime)},
    }
    path = "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (namespace, name)
    answer = kube_client.json_call(
        api.create_namespaced_service_account_token, "POST", path, name, namespace, body
    )
    value = (answer.get("status") or {}).get("token")
    if not value:
        raise kube_client.KubeError("POST %s: no token in the answer" % path)
    return value


def cluster_of(client_options, api_server=None):
    """(server, base64 CA or None, insecure) for the agent's kubeconfig, from the controller's
    client configuration; ``api_server`` replaces the server."""
    cfg = kube_client.configuration(client_options)
    ca_data = None
    if cfg.ssl_ca_cert and os.path.isfile(cfg.ssl_ca_cert):
        with open(cfg.ssl_ca_cert, "rb") as f:
            ca_data = base64.b64encode(f.read()).decode("ascii")
    return (api_server or cfg.host).rstrip("/"), ca_data, not cfg.verify_ssl


def has_client_config(client_options):
    """Whether the controller has any Kubernetes client configuration (options, environment,
    in-cluster files or the default config file)."""
    auth = kube_client.auth_options(client_options)
    return bool(
        auth["kubeconfig"]
        or auth["context"]
        or auth["host"]
        or kube_client.in_cluster()
        or kube_client.default_kubeconfig()
    )
