"""The Kubernetes client options (doc fragment kilo.mesh.kubernetes, kube_client) are a subset of
kubernetes.core's k8s_auth_options: same names, aliases and environment variables, so a play's
K8S_AUTH_* settings and option names reach both collections alike (docs/DESIGN.md says why the
fragment is ours). kubernetes.core is the copy `make setup` puts in .collections."""

import yaml

from ansible_collections.kilo.mesh.plugins.doc_fragments.kubernetes import ModuleDocFragment as Ours
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client
from ansible_collections.kubernetes.core.plugins.doc_fragments.k8s_auth_options import (
    ModuleDocFragment as Core,
)
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import (
    AUTH_ARG_MAP,
    AUTH_ARG_SPEC,
)

OURS = yaml.safe_load(Ours.DOCUMENTATION)["options"]
CORE = yaml.safe_load(Core.DOCUMENTATION)["options"]
# kubernetes.core also takes a kubeconfig as a dict (type raw); ours is a file only.
TYPES_DIFFER = {"kubeconfig": ("path", "raw")}


def test_each_option_is_kubernetes_cores_with_the_same_aliases():
    assert set(OURS) < set(CORE)
    for name, doc in OURS.items():
        assert (doc["type"], CORE[name]["type"]) == TYPES_DIFFER.get(
            name, (CORE[name]["type"],) * 2
        ), name
        assert sorted(doc.get("aliases", [])) == sorted(CORE[name].get("aliases", [])), name
        assert sorted(doc.get("aliases", [])) == sorted(AUTH_ARG_SPEC[name].get("aliases", [])), (
            name
        )


def test_the_fragment_names_every_kubernetes_core_option_it_lacks():
    notes = " ".join(yaml.safe_load(Ours.DOCUMENTATION)["notes"])
    for name in set(CORE) - set(OURS):
        assert "C(%s)" % name in notes, name


def test_environment_variables_are_ones_kubernetes_core_reads():
    # kubernetes.core reads K8S_AUTH_<option> or K8S_AUTH_<client attribute> (AUTH_ARG_MAP)
    attribute = dict((option, attr) for attr, option in AUTH_ARG_MAP.items())
    assert set(kube_client.ENV) == set(OURS)
    for name, var in kube_client.ENV.items():
        assert var in (
            "K8S_AUTH_" + name.upper(),
            "K8S_AUTH_" + attribute.get(name, name).upper(),
        ), name
        assert var in " ".join(OURS[name]["description"]), name
        assert var in " ".join(CORE[name]["description"]), name


def test_argument_spec_is_the_fragment():
    spec = kube_client.argument_spec()
    assert set(spec) == set(OURS)
    for name, doc in OURS.items():
        assert spec[name]["type"] == doc["type"], name
        assert sorted(spec[name].get("aliases", [])) == sorted(doc.get("aliases", [])), name
    assert spec["api_key"]["no_log"] is True


# --- one way to give them: kilo_kube (KiloAction.client_options) -----------------------------------

import pytest  # noqa: E402

from ansible_collections.kilo.mesh.plugins.action import annotate  # noqa: E402
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError  # noqa: E402
from ansible_collections.kilo.mesh.plugins.module_utils.options import DEPRECATED_VARS, OPTIONS  # noqa: E402
from test_mesh_reading import make_action, task_vars_of  # noqa: E402  pylint: disable=wrong-import-position


def client_of(hostvars, host, args=None, groups=None):
    action = make_action(annotate)
    return action.client_options(
        dict(args or {}), task_vars_of(hostvars, host, groups=groups)
    ), action


def test_kilo_kube_gives_each_option_the_task_does_not():
    hostvars = {
        "a": {
            "kilo_kube": {"kubeconfig": "/srv/other.kubeconfig", "context": "c", "verify_ssl": "no"}
        }
    }
    options, action = client_of(hostvars, "a", {"context": "mine"})
    assert options == {
        "kubeconfig": "/srv/other.kubeconfig",
        "context": "mine",
        "host": None,
        "api_key": None,
        "validate_certs": False,
        "ca_cert": None,
        "client_cert": None,
        "client_key": None,
        "proxy": None,
        "no_proxy": None,
        "impersonate_user": None,
        "impersonate_groups": None,
    }
    assert not action.__dict__.get("_deprecations")


def test_the_old_variables_still_work_and_say_they_are_deprecated():
    # the six options there were before kilo_kube (the client options added since have no old name)
    assert sorted(DEPRECATED_VARS) == sorted("kilo_kube_" + n for n in list(kube_client.ENV)[:6])
    hostvars = {"a": {"kilo_kube_kubeconfig": "/old", "kilo_kube": {"context": "c"}}}
    options, action = client_of(hostvars, "a")
    assert options["kubeconfig"] == "/old" and options["context"] == "c"
    assert [d["msg"].split(" ")[0] for d in action._deprecations] == ["kilo_kube_kubeconfig"]
    assert action.with_deprecations({})["deprecations"][0]["collection_name"] == "kilo.mesh"
    # kilo_kube wins over an old name
    options, action = client_of(
        {"a": {"kilo_kube_kubeconfig": "/old", "kilo_kube": {"kubeconfig": "/new"}}}, "a"
    )
    assert options["kubeconfig"] == "/new" and not action.__dict__.get("_deprecations")


def test_a_host_outside_the_mesh_takes_the_meshs():
    """kilo.mesh.peer delegated from a connecting machine, playbooks/kubernetes.yml on localhost."""
    hostvars = {"a": {"kilo_kube": {"kubeconfig": "/mesh"}}, "laptop": {}}
    options = client_of(hostvars, "laptop", groups={"kilo": ["a"], "connect": ["laptop"]})[0]
    assert options["kubeconfig"] == "/mesh"


@pytest.mark.parametrize(
    "value, said",
    [
        ("/a/kubeconfig", "a mapping of Kubernetes client options"),
        ({"kubconfig": "/a"}, "unknown client option 'kubconfig' - did you mean 'kubeconfig'?"),
        ({"validate_certs": "maybe"}, "validate_certs"),
    ],
)
def test_a_bad_kilo_kube_is_named_with_its_host(value, said):
    with pytest.raises(KiloError) as e:
        client_of({"a": {"kilo_kube": value}}, "a")
    assert str(e.value).startswith("host 'a': kilo_kube: ") and said in str(e.value)


def test_kilo_kube_is_an_option_of_the_table_and_of_the_roles_that_reach_the_api():
    assert OPTIONS["kube"]["var"] == "kilo_kube" and OPTIONS["kube"]["scopes"] == ("kube",)
    from ansible_collections.kilo.mesh.plugins.module_utils.options import role_argument_specs

    for role in ("node", "agent", "connect", "mesh"):
        assert "kilo_kube" in role_argument_specs(role)["argument_specs"]["main"]["options"], role


def test_awx_kubernetes_credential_environment_fills_the_client_options():
    # What AWX's "OpenShift or Kubernetes API Bearer Token" credential injects into a job's
    # environment (kubernetes.core's variables; the CA certificate as a file, the flag as True/False).
    environ = {
        "K8S_AUTH_HOST": "https://203.0.113.10:6443",
        "K8S_AUTH_API_KEY": "token123",
        "K8S_AUTH_VERIFY_SSL": "True",
        "K8S_AUTH_SSL_CA_CERT": "/runner/env/tmpca",
    }
    auth = kube_client.auth_options({}, environ)
    assert auth == {
        "kubeconfig": None,
        "context": None,
        "host": "https://203.0.113.10:6443",
        "api_key": "token123",
        "validate_certs": True,
        "ca_cert": "/runner/env/tmpca",
        "client_cert": None,
        "client_key": None,
        "proxy": None,
        "no_proxy": None,
        "impersonate_user": None,
        "impersonate_groups": None,
    }
    assert (
        kube_client.auth_options({}, dict(environ, K8S_AUTH_VERIFY_SSL="False"))["validate_certs"]
        is False
    )
    # a task's or kilo_kube's own value wins over the credential's
    assert (
        kube_client.auth_options({"host": "https://198.51.100.7:6443"}, environ)["host"]
        == "https://198.51.100.7:6443"
    )
