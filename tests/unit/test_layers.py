"""The layers as DESIGN.md draws them, checked on the imports themselves; no allow-list.

module_utils runs on hosts (in Ansible's module payload, and whole in the agent's zip
application): it must never reach into the controller's plugin_utils or Ansible itself. The
shared helpers import nothing of the collection above them; the contracts (options, nodes,
plan) only the helpers; the engine is fed plain data and imports no host, Kubernetes or agent
code; the controller (actions, plugin_utils, filters, the inventory plugin) never imports the
host layer or a module. A name with a leading underscore stays in its module.
"""

import ast
import os
from checkout import ROOT


PLUGINS = os.path.join(ROOT, "plugins")
PREFIX = "ansible_collections.kilo.mesh.plugins."
MU = PREFIX + "module_utils."

HELPERS = ("common", "atomic_file")
CONTRACTS = ("options", "nodes", "plan")


def imports(path):
    """(module, name) of every import of ``path``: ``from M import n`` gives (M, n), ``import M`` (M, None)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                yield node.module, alias.name


def files(*parts):
    top = os.path.join(PLUGINS, *parts)
    if top.endswith(".py"):
        yield top
        return
    for directory, _dirs, names in os.walk(top):
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.join(directory, name)


def ours(path):
    """The collection's modules ``path`` imports (dotted, below ``plugins.``), each with the imported name."""
    for module, name in imports(path):
        if module.startswith(PREFIX):
            yield module[len(PREFIX) :], name
        elif module == PREFIX.rstrip(".") and name:
            yield name, None


def offending(paths, allowed):
    """(file, imported module) of the collection's imports of ``paths`` that ``allowed`` refuses."""
    bad = []
    for path in paths:
        for module, name in ours(path):
            full = module + "." + name if name else module
            if not allowed(module, full):
                bad.append((os.path.relpath(path, ROOT), full))
    return bad


def under(name, *layers):
    return any(name == layer or name.startswith(layer + ".") for layer in layers)


def test_module_utils_never_imports_the_controller_or_ansible():
    bad = []
    for path in files("module_utils"):
        for name, _imported in imports(path):
            if (
                name.startswith(PREFIX + "plugin_utils")
                or name == "ansible"
                or name.startswith("ansible.")
            ):
                bad.append((os.path.relpath(path, ROOT), name))
    assert bad == []


def test_the_shared_helpers_import_only_each_other():
    paths = [p for h in HELPERS for p in files("module_utils", h + ".py")]
    assert offending(paths, lambda m, full: under(m, *("module_utils." + h for h in HELPERS))) == []


def test_the_contracts_import_only_the_helpers_and_each_other():
    paths = [p for c in CONTRACTS for p in files("module_utils", c + ".py")]
    layers = ["module_utils." + n for n in HELPERS + CONTRACTS]
    assert offending(paths, lambda m, full: under(m, *layers)) == []


def test_the_engine_imports_no_host_kube_or_agent_code():
    layers = ["module_utils." + n for n in HELPERS + CONTRACTS] + ["module_utils.engine"]
    assert offending(files("module_utils", "engine"), lambda m, full: under(m, *layers)) == []


def test_kube_and_host_import_neither_each_other_nor_the_agent():
    low = ["module_utils." + n for n in HELPERS + CONTRACTS]
    assert (
        offending(
            files("module_utils", "kube"), lambda m, full: under(m, *low + ["module_utils.kube"])
        )
        == []
    )
    assert (
        offending(
            files("module_utils", "host"), lambda m, full: under(m, *low + ["module_utils.host"])
        )
        == []
    )


def test_the_controller_never_imports_the_host_layer_or_a_module():
    paths = [p for part in ("action", "plugin_utils", "filter", "inventory") for p in files(part)]
    bad = offending(
        paths, lambda m, full: not under(m, "module_utils.host", "module_utils.agent", "modules")
    )
    assert bad == []


def test_no_private_name_crosses_modules():
    """``from M import _x`` and ``m._x`` of a module of the collection ``m``: what a module keeps
    to itself stays there; a name others need is public in its home."""
    bad = []
    for path in files():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        modules = set()  # local names bound to the collection's modules
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith(PREFIX.rstrip("."))
            ):
                for alias in node.names:
                    if alias.name.startswith("_"):
                        bad.append((os.path.relpath(path, ROOT), node.module + "." + alias.name))
                    elif node.module == PREFIX.rstrip(".") or alias.name[:1].islower():
                        modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PREFIX) and alias.asname:
                        modules.add(alias.asname)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                bad.append((os.path.relpath(path, ROOT), node.value.id + "." + node.attr))
    assert bad == []
