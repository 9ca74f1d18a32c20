"""The layers as DESIGN.md draws them, checked on the imports themselves.

module_utils runs on hosts (in Ansible's module payload, and whole in the agent's zip
application): it must never reach into the controller's plugin_utils or Ansible itself; the
engine is fed plain data and imports no host or Kubernetes code.
"""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
PREFIX = "ansible_collections.kilo.mesh.plugins."


def imports(path):
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def files(*parts):
    top = os.path.join(MODULE_UTILS, *parts)
    for directory, _dirs, names in os.walk(top):
        for name in names:
            if name.endswith(".py"):
                yield os.path.join(directory, name)


def test_module_utils_never_imports_the_controller_or_ansible():
    bad = []
    for path in files():
        for name in imports(path):
            if name.startswith(PREFIX + "plugin_utils") or name == "ansible" or name.startswith("ansible."):
                bad.append((os.path.relpath(path, ROOT), name))
    assert bad == []


def test_the_engine_imports_no_host_kube_or_agent_code():
    """(showconf renders a Peer as Kilo's Peer resource, so it may use the Kubernetes mapping)"""
    bad = []
    for path in files("engine"):
        for name in imports(path):
            for layer in ("host", "agent") if path.endswith("showconf.py") else ("host", "kube", "agent"):
                if name.startswith(PREFIX + "module_utils." + layer):
                    bad.append((os.path.relpath(path, ROOT), name))
    assert bad == []
