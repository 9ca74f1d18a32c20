"""Every kilo_* name the collection reads is known through one list (options.known_variables:
the option table, the node table, options.OTHER_VARIABLES), and validate refuses any other one
of a host, a peer field it does not know, and a Node annotation of Kilo's prefix or ours it does
not know, naming the host (or peer), the name and the closest known one."""

import os
import re

import pytest

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

from ansible_collections.kilo.mesh.plugins.module_utils import options
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, did_you_mean
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client, kube_node
from ansible_collections.kilo.mesh.plugins.plugin_utils import ansible_internals as internals
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import HostVarsOnce
from ansible_collections.kilo.mesh.plugins.plugin_utils.validate import check_names
from checkout import ROOT

KEY = "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="

# kilo_* words in the collection that are no host variable, with what they are
NOT_VARIABLES = {
    "kilo_mesh": "the nftables table; a result registered in the modules' examples",
    "kilo_host": "kilo.mesh.key's result as the modules' examples register it (facts_var's default)",
    "kilo_key": "a result registered in the modules' examples",
    "kilo_graph": "idem",
    "kilo_status": "status.yml's registered result",
    "kilo_summary": "idem",
    "kilo_conflist": "a function of host/cni.py",
    "kilo_nodes": "a metric (Kilo's name)",
    "kilo_errors_total": "a metric",
    "kilo_reconciles_total": "a metric",
    "kilo_interface_up": "a metric",
    "kilo_last_reconcile_timestamp_seconds": "a metric",
    "kilo_peer_handshake_age_seconds": "a metric",
    "kilo_peer_receive_bytes_total": "a metric",
    "kilo_peer_transmit_bytes_total": "a metric",
    "kilo_peer_stale": "a metric",
    "kilo_peer_receive_bytes": "a metric's stem",
    "kilo_peer_transmit_bytes": "idem",
    "kilo_errors": "idem",
    "kilo_reconciles": "idem",
    "kilo_path": "a metric (relayed meshes)",
    "kilo_relay_forwarded_bytes_total": "a metric",
    "kilo_relay_forwarded_bytes": "a metric's stem",
    "kilo_kubernetes_state": "playbooks/kubernetes.yml's own play variables and registered results (localhost)",
    "kilo_rbac": "idem",
    "kilo_agent_selector": "idem",
    "kilo_peers_found": "idem",
    "kilo_identities": "idem",
}


def _words():
    """Every kilo_* word of the playbooks, the roles' tasks and the plugins (not the generated
    files, which the tables write)."""
    found = {}
    generated = ("plugins/doc_fragments/options.py",)
    for base in ("playbooks", "roles", "plugins"):
        for dirpath, dummy, filenames in os.walk(os.path.join(ROOT, base)):
            for name in filenames:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT)
                if (
                    not name.endswith((".py", ".yml"))
                    or rel in generated
                    or rel.endswith("argument_specs.yml")
                ):
                    continue
                with open(path) as f:
                    for word in re.findall(r"\bkilo_[a-z0-9_]+", f.read()):
                        found.setdefault(word, rel)
    return found


def test_every_kilo_name_the_collection_reads_is_known():
    known = options.known_variables()
    # prefixes texts spell families by: kilo_kube_<option> (deprecated), kilo_connect_*
    prefixes = tuple(options.OTHER_PREFIXES) + ("kilo_kube_", "kilo_connect_")
    unknown = sorted(
        "%s (%s)" % (word, where)
        for word, where in _words().items()
        if word not in known and word not in NOT_VARIABLES and not word.startswith(prefixes)
    )
    assert unknown == [], (
        "add them to options.OTHER_VARIABLES (or an option), or to NOT_VARIABLES here"
    )


def test_known_words_are_read_somewhere():
    """A name of the list that nothing reads any more leaves it."""
    words = _words()
    for name in options.OTHER_VARIABLES:
        assert name in words, name


def test_the_deprecated_client_variables_are_known_while_read():
    from ansible_collections.kilo.mesh.plugins.plugin_utils import action

    known = options.known_variables()
    old = set(
        action.CLIENT_VAR + name for name in list(kube_client.ENV)[:6]
    )  # the client options before kilo_kube
    assert old <= set(known) and old == set(options.DEPRECATED_VARS)


def test_the_closest_name_ignores_the_shared_prefix():
    known = options.known_variables()
    assert did_you_mean("kilo_granulartiy", known, ("kilo_",)) == "; did you mean kilo_granularity?"
    assert did_you_mean("kilo_leadr", known, ("kilo_",)) == "; did you mean kilo_leader?"
    assert did_you_mean("kilo_colour", known, ("kilo_",)) == ""  # "kilo_" alone makes no match
    assert (
        did_you_mean(
            "kilo.squat.ai/leadr", kube_node.KNOWN_ANNOTATIONS, ("kilo.squat.ai/", "kilo.mesh/")
        )
        == "; did you mean kilo.squat.ai/leader?"
    )


@pytest.mark.parametrize(
    "hvars, field, closest",
    [
        ({"kilo_granulartiy": "full"}, "kilo_granulartiy", "kilo_granularity"),
        (
            {"kilo_force_endpiont": "203.0.113.1:51820"},
            "kilo_force_endpiont",
            "kilo_force_endpoint",
        ),
        ({"kilo_leadr": True}, "kilo_leadr", "kilo_leader"),
        ({"kilo_kube_kubconfig": "/x"}, "kilo_kube_kubconfig", "kilo_kube_kubeconfig"),
        ({"kilo_kub": {"kubeconfig": "/x"}}, "kilo_kub", "kilo_kube"),
        (
            {"kubernetes_annotations": {"kilo.squat.ai/leadr": ""}},
            "kilo.squat.ai/leadr",
            "kilo.squat.ai/leader",
        ),
        (
            {"kubernetes_annotations": {"kilo.mesh/pod-cidr": "10.244.1.0/24"}},
            "kilo.mesh/pod-cidr",
            "kilo.mesh/pod-cidrs",
        ),
    ],
)
def test_an_unknown_name_is_refused_naming_host_name_and_closest(hvars, field, closest):
    with pytest.raises(KiloError) as e:
        check_names(["a", "b"], {"a": {"kilo_location": "x"}, "b": hvars})
    assert (e.value.subject, e.value.field) == ("host 'b'", field)
    assert "did you mean %s?" % closest in e.value.message


def test_known_names_and_other_domains_pass():
    hvars = dict((name, None) for name in options.known_variables())
    hvars.update(
        kilo_lab_lan_ip="172.16.1.1",
        wireguard_open_port=True,
        my_kilo_thing=1,
        kubernetes_annotations=dict(
            [(a, "") for a in kube_node.KNOWN_ANNOTATIONS],
            **{"example.com/kilo": "x", "kilo.squat.ai.example/x": "y"},
        ),
    )
    check_names(["a"], {"a": hvars})


@pytest.fixture
def ansible_hostvars(tmp_path):
    path = tmp_path / "inventory.yml"
    path.write_text("kilo:\n  children:\n    aws: {hosts: {a1: {kilo_leader: true}, a2: {}}}\n")
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(path)])
    manager = VariableManager(loader=loader, inventory=inventory)
    return HostVars(inventory=inventory, variable_manager=manager, loader=loader), manager


def test_a_name_a_task_of_the_run_set_is_the_plays_own(ansible_hostvars):
    """Registered results and set_fact (kilo.mesh.key's examples register kilo_key) pass; the same
    name from the inventory or -e is refused."""
    hostvars, manager = ansible_hostvars
    once = HostVarsOnce(hostvars)
    check_names(["a1", "a2"], once)
    manager.set_nonpersistent_facts("a1", {"kilo_key": {"public_key": KEY}})  # register: kilo_key
    manager.set_host_variable("a2", "kilo_colour", "blue")  # include_vars
    assert internals.names_set_in_run(hostvars)("a1") == {"kilo_key"}
    check_names(["a1", "a2"], HostVarsOnce(hostvars))
    manager._extra_vars = {"kilo_granulrity": "full"}  # pylint: disable=protected-access
    assert internals.extra_vars(hostvars) == {"kilo_granulrity": "full"}
    with pytest.raises(KiloError) as e:
        check_names(["a1", "a2"], HostVarsOnce(hostvars))
    assert (e.value.subject, e.value.field) == ("host 'a1'", "kilo_granulrity")


def test_without_the_variable_manager_every_name_is_checked():
    assert internals.names_set_in_run({}) is None and internals.extra_vars({}) is None
    with pytest.raises(KiloError):
        check_names(["a"], HostVarsOnce({"a": {"kilo_key": {"public_key": KEY}}}))


@pytest.mark.parametrize(
    "peer, field, closest",
    [
        ({"allowed_ip": ["10.5.0.1/32"]}, "allowed_ip", "allowed_ips"),
        ({"publickey": KEY}, "publickey", "public_key"),
        ({"keepalive": 25}, "keepalive", "persistent_keepalive"),
        ({"presharedkey": KEY}, "presharedkey", "preshared_key"),
    ],
)
def test_a_peer_with_an_unknown_field_is_refused(peer, field, closest):
    item = dict({"name": "p", "public_key": KEY, "allowed_ips": ["10.5.0.1/32"]}, **peer)
    with pytest.raises(KiloError) as e:
        build_plans([], [item], {})
    assert (e.value.subject, e.value.field) == ("peer 'p'", field)
    assert e.value.message.endswith("did you mean %s?" % closest)


def test_a_node_with_an_unknown_field_is_refused():
    node = {
        "name": "n",
        "public_key": KEY,
        "endpoint": "203.0.113.1:51820",
        "pod_cidrs": "10.244.1.0/24",
    }
    with pytest.raises(KiloError) as e:
        build_plans([node], [], {})
    assert (e.value.subject, e.value.field) == ("node 'n'", "pod_cidrs")
    assert "did you mean pod_cidr?" in e.value.message


def test_every_annotation_the_collection_writes_or_reads_is_known():
    from ansible_collections.kilo.mesh.plugins.module_utils.agent import health, rotation

    for name in (
        rotation.NEXT_KEY,
        health.UNREACHABLE,
        health.DEPOSED,
        kube_node.WIREGUARD_IPS,
        kube_node.INTERNAL_IPS,
        kube_node.LAST_SEEN,
        kube_node.GRANULARITY,
        kube_node.POD_SOURCE_ANNOTATION,
    ):
        assert name in kube_node.KNOWN_ANNOTATIONS
    for field in kube_node.FIELDS.values():
        for name in (field.annotation, field.written):
            assert name is None or name in kube_node.KNOWN_ANNOTATIONS
