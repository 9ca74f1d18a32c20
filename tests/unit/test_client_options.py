"""The Kubernetes client options (doc fragment kilo.mesh.kubernetes, kube_client) are a subset of
kubernetes.core's k8s_auth_options: same names, aliases and environment variables, so a play's
K8S_AUTH_* settings and option names reach both collections alike (docs/DESIGN.md says why the
fragment is ours). kubernetes.core is the copy `make setup` puts in .collections."""
import yaml

from ansible_collections.kilo.mesh.plugins.doc_fragments.kubernetes import ModuleDocFragment as Ours
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client
from ansible_collections.kubernetes.core.plugins.doc_fragments.k8s_auth_options import ModuleDocFragment as Core
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_MAP, AUTH_ARG_SPEC

OURS = yaml.safe_load(Ours.DOCUMENTATION)["options"]
CORE = yaml.safe_load(Core.DOCUMENTATION)["options"]
# kubernetes.core also takes a kubeconfig as a dict (type raw); ours is a file only.
TYPES_DIFFER = {"kubeconfig": ("path", "raw")}


def test_each_option_is_kubernetes_cores_with_the_same_aliases():
    assert set(OURS) < set(CORE)
    for name, doc in OURS.items():
        assert (doc["type"], CORE[name]["type"]) == TYPES_DIFFER.get(name, (CORE[name]["type"],) * 2), name
        assert sorted(doc.get("aliases", [])) == sorted(CORE[name].get("aliases", [])), name
        assert sorted(doc.get("aliases", [])) == sorted(AUTH_ARG_SPEC[name].get("aliases", [])), name


def test_environment_variables_are_ones_kubernetes_core_reads():
    # kubernetes.core reads K8S_AUTH_<option> or K8S_AUTH_<client attribute> (AUTH_ARG_MAP)
    attribute = dict((option, attr) for attr, option in AUTH_ARG_MAP.items())
    assert set(kube_client.ENV) == set(OURS)
    for name, var in kube_client.ENV.items():
        assert var in ("K8S_AUTH_" + name.upper(), "K8S_AUTH_" + attribute[name].upper()), name
        assert var in " ".join(OURS[name]["description"]), name
        assert var in " ".join(CORE[name]["description"]), name


def test_argument_spec_is_the_fragment():
    spec = kube_client.argument_spec()
    assert set(spec) == set(OURS)
    for name, doc in OURS.items():
        assert spec[name]["type"] == doc["type"], name
        assert sorted(spec[name].get("aliases", [])) == sorted(doc.get("aliases", [])), name
    assert spec["api_key"]["no_log"] is True
