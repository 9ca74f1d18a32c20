"""ansible-doc as kubernetes.core's users expect it: every returned value with a sample, the
attributes described once (the doc fragment kilo.mesh.attributes; a module says its support and
details), versioned requirements for the Kubernetes client."""

import glob
import os
import re

import yaml
from checkout import ROOT


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
    missing = [
        "%s: %s" % (os.path.basename(p), k)
        for p in MODULES
        for k in without_sample(block(p, "RETURN"))
    ]
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


# --- each module lists the options it reads ---------------------------------------------------------


def documented(module):
    import json  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel

    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"))
    out = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-doc"),
            "-j",
            "-t",
            "module",
            "kilo.mesh." + module,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(json.loads(out)["kilo.mesh." + module]["doc"]["options"])


def test_graph_and_showconf_list_no_option_only_plans_read():
    from ansible_collections.kilo.mesh.plugins.module_utils.options import names  # pylint: disable=import-outside-toplevel

    plans_only = set(names("plans"))
    assert {"cni", "forward_rules"} <= plans_only
    for module in ("graph", "showconf"):
        assert not plans_only & documented(module), module
    for module in ("topology", "join", "agent", "validate"):
        assert plans_only <= documented(module), module
    # the run-once plan step's wait: topology alone reads it (validate documents every option)
    assert names("slicing") == ["registry_wait"]
    for module in ("graph", "showconf", "join", "agent", "annotate"):
        assert "registry_wait" not in documented(module), module
    assert "registry_wait" in documented("topology")


def test_what_graph_and_showconf_show_does_not_depend_on_the_plans_options():
    # so leaving those options to their defaults there (mesh.engine_options) changes nothing shown
    from ansible_collections.kilo.mesh.plugins.plugin_utils.showconf import showconf  # pylint: disable=import-outside-toplevel
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans  # pylint: disable=import-outside-toplevel
    from ansible_collections.kilo.mesh.plugins.module_utils.engine.graph import to_dot  # pylint: disable=import-outside-toplevel
    import base64  # pylint: disable=import-outside-toplevel

    nodes = []
    for n, (loc, k) in enumerate([(1, 1), (1, 2), (2, 1), (3, 1)]):
        nodes.append(
            {
                "name": "l%d-%d" % (loc, k),
                "location": "l%d" % loc,
                "internal_ip": "172.16.%d.%d/24" % (loc, k),
                "pod_cidr": "10.%d.%d.0/24" % (100 + loc, k),
                "endpoint": "203.0.113.%d:51820" % (10 * loc + k),
                "public_key": base64.b64encode(bytes([n + 1]) * 32).decode(),
            }
        )
    peers = [
        {
            "name": "p1",
            "public_key": base64.b64encode(b"\x7f" * 32).decode(),
            "allowed_ips": ["10.5.0.1/32"],
        }
    ]
    shown = set()
    for cni in (True, False):
        for forward_rules in (True, False):
            options = {"cni": cni, "forward_rules": forward_rules}
            shown.add(
                (
                    to_dot(build_plans(nodes, peers, options)),
                    repr(showconf(nodes, peers, options, node="l1-1")),
                    repr(showconf(nodes, peers, options, peer="p1")),
                )
            )
    assert len(shown) == 1
