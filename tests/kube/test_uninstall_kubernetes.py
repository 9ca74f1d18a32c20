"""A mesh in agent mode taken out of a real kube-apiserver: playbooks/uninstall.yml, then
playbooks/kubernetes.yml -e state=absent, leave no object the collection made and no annotation it
wrote, and every foreign object and annotation where it was.

Lab kuk (KILO_TEST_PREFIX_UNINSTALL_KUBERNETES), 2 locations x 1 host, both Nodes of an API server
of the test's own on the lab's bridge (agentlab.agent_cluster). Before anything of the collection:
foreign objects (a CRD, a ServiceAccount, a ClusterRole and its binding, a Role and its binding)
and a foreign annotation on each Node. Then kubernetes.yml (the Peer CRD and the RBAC by
server-side apply), site.yml in agent mode (each agent with its own ServiceAccount and roles,
its annotations on its Node). Tests run in file order and share the cluster.
"""

import json
import os
import sys
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

import agentlab  # pylint: disable=import-error
import labcluster  # pylint: disable=import-error
from ansible_run import CRD_NAME, environment, playbook, recap  # pylint: disable=import-error

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn
from ansible_collections.kilo.mesh.plugins.plugin_utils import agent_identity

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "host"))
import sitetools  # noqa: E402 pylint: disable=import-error,wrong-import-position

PREFIX = os.environ.get("KILO_TEST_PREFIX_UNINSTALL_KUBERNETES", "kuk")
KUBERNETES_YML = os.path.join(ROOT, "playbooks", "kubernetes.yml")
FOREIGN_CRDS = os.path.join(ROOT, "tests", "kube", "ipam_crds.yaml")
FOREIGN = "foreign-keep"
FOREIGN_ANNOTATION = "example.com/keep"
NS = "kube-system"
RBAC_V1 = "rbac.authorization.k8s.io"
GROUP = (kn.PEER_GROUP, kn.PEER_VERSION, kn.PEER_PLURAL)
# How the collection names and labels what it makes (manifests/*.yaml, agent_identity.LABELS)
# The inventory's value of kilo_agent_app in this lab (agentlab gives it as an extra variable)
APP = [a for a in agentlab.AGENT_ARGS if a.startswith("kilo_agent_app=")]
APP = ("-e", APP[0]) if APP else ()
OURS_LABELS = ("app.kubernetes.io/name=kilo-mesh", "app.kubernetes.io/managed-by=kilo-mesh")


@pytest.fixture(scope="module")
def cluster():
    agentlab.require_lab_and_kube()
    with agentlab.agent_cluster(PREFIX, 2, 1) as made:
        yield made


@pytest.fixture(scope="module")
def api(cluster):
    _lab, server, _inventory = cluster
    with server.client() as api_client:
        yield api_client


def kubernetes_yml(server, *args, expect_rc=0):
    start = time.monotonic()
    rc, out = playbook(
        KUBERNETES_YML,
        "-e",
        json.dumps({"kilo_kube": {"kubeconfig": server.kubeconfig}}),
        *args,
        env=environment(),
    )
    print("kubernetes.yml %s: %.1f s, rc %d" % (" ".join(args), time.monotonic() - start, rc))
    assert rc == expect_rc, out[-6000:]
    return recap(out)["changed"], out


def run(inventory, name, *args):
    start = time.monotonic()
    out = sitetools.playbook(inventory, name, *args, timeout=900)
    counts = sitetools.recap(out)
    print(
        "%s %s: %.1f s, changed %s"
        % (
            name,
            " ".join(args),
            time.monotonic() - start,
            dict((h, c["changed"]) for h, c in sorted(counts.items())),
        )
    )
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), out[-6000:]
    return counts


def foreign_objects(api):
    """The foreign objects, each a (kind, name) that exists now."""
    rbac, core, ext = (
        client.RbacAuthorizationV1Api(api),
        client.CoreV1Api(api),
        client.ApiextensionsV1Api(api),
    )
    found = []
    for kind, read in (
        ("ServiceAccount", lambda: core.read_namespaced_service_account(FOREIGN, NS)),
        ("ClusterRole", lambda: rbac.read_cluster_role(FOREIGN)),
        ("ClusterRoleBinding", lambda: rbac.read_cluster_role_binding(FOREIGN)),
        ("Role", lambda: rbac.read_namespaced_role(FOREIGN, NS)),
        ("RoleBinding", lambda: rbac.read_namespaced_role_binding(FOREIGN, NS)),
        (
            "CustomResourceDefinition",
            lambda: ext.read_custom_resource_definition("blockaffinities.crd.projectcalico.org"),
        ),
    ):
        try:
            read()
            found.append(
                (kind, FOREIGN if kind != "CustomResourceDefinition" else "blockaffinities")
            )
        except ApiException as e:
            if e.status != 404:
                raise
    return found


def make_foreign(api, server, nodes):
    server.kubectl("apply", "-f", FOREIGN_CRDS)
    rbac, core = client.RbacAuthorizationV1Api(api), client.CoreV1Api(api)
    meta = client.V1ObjectMeta(name=FOREIGN, namespace=NS)
    core.create_namespaced_service_account(NS, client.V1ServiceAccount(metadata=meta))
    rule = client.V1PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get"])
    subject = client.RbacV1Subject(kind="ServiceAccount", name=FOREIGN, namespace=NS)
    rbac.create_cluster_role(
        client.V1ClusterRole(metadata=client.V1ObjectMeta(name=FOREIGN), rules=[rule])
    )
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=FOREIGN),
            subjects=[subject],
            role_ref=client.V1RoleRef(api_group=RBAC_V1, kind="ClusterRole", name=FOREIGN),
        )
    )
    rbac.create_namespaced_role(
        NS,
        client.V1Role(
            metadata=meta,
            rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        NS,
        client.V1RoleBinding(
            metadata=meta,
            subjects=[subject],
            role_ref=client.V1RoleRef(api_group=RBAC_V1, kind="Role", name=FOREIGN),
        ),
    )
    for node in nodes:
        core.patch_node(node, {"metadata": {"annotations": {FOREIGN_ANNOTATION: "yes"}}})


def ours(api):
    """Every object the collection made that the cluster holds: by its labels, and by its names
    (kilo-mesh*, the Peer CRD), in every namespace; [(kind, name)]."""
    rbac, core, ext = (
        client.RbacAuthorizationV1Api(api),
        client.CoreV1Api(api),
        client.ApiextensionsV1Api(api),
    )
    listers = (
        ("CustomResourceDefinition", ext.list_custom_resource_definition),
        ("ClusterRole", rbac.list_cluster_role),
        ("ClusterRoleBinding", rbac.list_cluster_role_binding),
        ("ServiceAccount", core.list_service_account_for_all_namespaces),
        ("Role", rbac.list_role_for_all_namespaces),
        ("RoleBinding", rbac.list_role_binding_for_all_namespaces),
    )
    found = set()
    for kind, lister in listers:
        for selector in OURS_LABELS:
            found.update((kind, o.metadata.name) for o in lister(label_selector=selector).items)
        found.update(
            (kind, o.metadata.name)
            for o in lister().items
            if o.metadata.name.startswith("kilo-mesh") or o.metadata.name == CRD_NAME
        )
    return sorted(found)


def annotations(api, node):
    return agentlab.node_annotations(api, node)


def written(api, node):
    """The annotations on ``node`` that the collection writes (Kilo's agent annotations and ours)."""
    names = set(kn.AGENT_ANNOTATIONS + kn.DUAL_ANNOTATIONS + kn.OWN_AGENT_ANNOTATIONS)
    return sorted(k for k in annotations(api, node) if k in names)


def test_kubernetes_yml_and_agents_make_their_objects(cluster, api):
    lab, server, inventory = cluster
    nodes = sorted(n.metadata.name for n in client.CoreV1Api(api).list_node().items)
    assert nodes == sorted(lab.hosts)
    make_foreign(api, server, nodes)
    cluster_state = {
        "foreign": foreign_objects(api),
        "operator": dict(
            (
                n,
                dict(
                    (k, v)
                    for k, v in annotations(api, n).items()
                    if k in (kn.LOCATION, kn.LEADER, FOREIGN_ANNOTATION)
                ),
            )
            for n in nodes
        ),
    }
    assert len(cluster_state["foreign"]) == 6
    kubernetes_yml(server)
    run(inventory, "site.yml", "-e", "kilo_task_timeout=120", *agentlab.AGENT_ARGS)
    agentlab.wait_for(lambda: all("watching" in agentlab.read_log(lab, h) for h in nodes), 30)
    assert agentlab.wait_for(lambda: agentlab.all_pairs_ping(lab, nodes), 30)
    made = ours(api)
    for node in nodes:
        account = agent_identity.account_name(node)
        assert ("ServiceAccount", account) in made and (
            "ClusterRoleBinding",
            account + "-read",
        ) in made, made
        assert kn.KEY in written(api, node) and kn.LAST_SEEN in written(api, node), annotations(
            api, node
        )
    assert ("CustomResourceDefinition", CRD_NAME) in made and (
        "ClusterRole",
        "kilo-mesh-agent",
    ) in made, made
    assert ("ServiceAccount", "kilo-mesh") in made and (
        "ClusterRoleBinding",
        "kilo-mesh",
    ) in made, made
    lab.cluster_state = cluster_state
    lab.nodes = nodes


def test_uninstall_removes_the_agents_their_identities_and_the_written_annotations(cluster, api):
    lab, _server, inventory = cluster
    counts = run(inventory, "uninstall.yml", "--check", "--diff", *APP)
    assert all(c["changed"] > 0 for c in counts.values()), counts
    assert all(agentlab.agent_pid(lab, h) for h in lab.nodes), "check mode stopped an agent"
    assert all(written(api, n) for n in lab.nodes), "check mode removed annotations"

    run(inventory, "uninstall.yml", *APP)
    made = ours(api)
    for node in lab.nodes:
        assert written(api, node) == [], annotations(api, node)
        kept = dict(
            (k, v)
            for k, v in annotations(api, node).items()
            if k in lab.cluster_state["operator"][node]
        )
        assert kept == lab.cluster_state["operator"][node], annotations(api, node)
        assert not any(
            name.startswith(agent_identity.account_name(node)) for _kind, name in made
        ), made
        gone = (
            "/etc/kilo-mesh",
            "/var/lib/kilo-mesh",
            "/usr/lib/kilo-mesh",
            "/var/lib/kilo/mesh-plan.json",
            "/etc/cni/net.d/10-kilo.conflist",
            "/etc/sysctl.d/90-kilo-mesh.conf",
            "/run/kilo/kilo-mesh-agent.pid",
        )
        done = lab.run(
            node,
            [
                "sh",
                "-c",
                "ls -d %s 2>&1; ip link show kilo0 2>&1; pgrep -f 'kilo-mesh-agent[.]pyz'"
                % " ".join(gone),
            ],
        )
        assert "does not exist" in done.stdout, (node, done.stdout)
        assert done.stdout.count("No such file") == len(gone), (node, done.stdout)
        assert done.returncode == 1, (node, done.stdout)  # pgrep found no agent
    # left for kubernetes.yml -e state=absent: its own objects and the agents' shared ClusterRole
    assert set(made) == {
        ("CustomResourceDefinition", CRD_NAME),
        ("ClusterRole", "kilo-mesh-agent"),
        ("ServiceAccount", "kilo-mesh"),
        ("ClusterRole", "kilo-mesh"),
        ("ClusterRoleBinding", "kilo-mesh"),
    }, made
    counts = run(inventory, "uninstall.yml", *APP)
    assert all(c["changed"] == 0 for c in counts.values()), counts


def test_kubernetes_yml_absent_refuses_while_peers_exist_and_keeps_the_crd_when_asked(cluster, api):
    _lab, server, _inventory = cluster
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(*GROUP, labcluster.peer_resource("kuk-phone"))
    before = ours(api)
    _changed, out = kubernetes_yml(server, "-e", "state=absent", expect_rc=2)
    assert "kuk-phone" in out and "keep_crd=true" in out, out[-3000:]
    assert ours(api) == before, "a refused run removed something"

    changed, out = kubernetes_yml(server, "-e", "state=absent", "-e", "keep_crd=true")
    assert changed > 0, out[-3000:]
    assert ours(api) == [("CustomResourceDefinition", CRD_NAME)]
    assert (
        custom.get_cluster_custom_object(*GROUP, "kuk-phone")["spec"]["publicKey"]
        == labcluster.PEER_KEY
    )
    custom.delete_cluster_custom_object(*GROUP, "kuk-phone")


def test_kubernetes_yml_absent_leaves_nothing_of_ours_and_every_foreign_object(cluster, api):
    lab, server, _inventory = cluster
    kubernetes_yml(server)  # the RBAC back, so the removal has all of it to do
    before = ours(api)
    changed, out = kubernetes_yml(server, "-e", "state=absent", "--check", "--diff")
    assert changed > 0, out[-3000:]
    assert ours(api) == before, "check mode removed something"

    changed, out = kubernetes_yml(server, "-e", "state=absent")
    assert changed > 0, out[-3000:]
    assert ours(api) == [], ours(api)
    assert foreign_objects(api) == lab.cluster_state["foreign"]
    for node in lab.nodes:
        kept = dict(
            (k, v)
            for k, v in annotations(api, node).items()
            if k in lab.cluster_state["operator"][node]
        )
        assert kept == lab.cluster_state["operator"][node], annotations(api, node)
    changed, out = kubernetes_yml(server, "-e", "state=absent")
    assert changed == 0, out[-3000:]
