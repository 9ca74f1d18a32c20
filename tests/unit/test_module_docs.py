"""ansible-doc as kubernetes.core's users expect it: every returned value with a sample, the
attributes described once (the doc fragment kilo.mesh.attributes; a module says its support and
details), versioned requirements for the Kubernetes client."""
import glob
import os
import re

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES = sorted(glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))


def block(path, name):
    with open(path) as f:
        return yaml.safe_load(re.search(r'%s = r"""(.*?)"""' % name, f.read(), re.S).group(1)) or {}


def without_sample(entries, prefix=""):
    for key, entry in entries.items():
        if "contains" in entry:
            yield from without_sample(entry["contains"], prefix + key + ".")
        elif "sample" not in entry:
            yield prefix + key


def test_every_returned_value_has_a_sample():
    missing = ["%s: %s" % (os.path.basename(p), k) for p in MODULES for k in without_sample(block(p, "RETURN"))]
    assert not missing, missing


def test_attributes_are_described_once_in_the_fragment():
    for path in MODULES:
        doc = block(path, "DOCUMENTATION")
        assert "kilo.mesh.attributes" in doc["extends_documentation_fragment"], path
        for name, attribute in doc["attributes"].items():
            assert "description" not in attribute and attribute.get("support"), (path, name)


def test_the_kubernetes_client_requirement_has_a_version():
    from ansible_collections.kilo.mesh.plugins.doc_fragments.kubernetes import ModuleDocFragment  # pylint: disable=import-outside-toplevel
    requirements = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["requirements"]
    assert any(re.match(r"kubernetes >= \d+\.\d+", r) for r in requirements), requirements
