"""The option table (module_utils/options.py) is the one definition of every option: the
generated files, the modules' documentation and argument specs, and the engine agree with it."""

import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils import options
from ansible_collections.kilo.mesh.plugins.module_utils.engine.parse import DEFAULT_OPTIONS
from checkout import ROOT

BIN = os.path.dirname(sys.executable)

# module -> the scopes of the table it takes (its own options come on top)
MODULES = {
    "topology": ("mesh", "inputs"),
    "join": ("mesh", "inputs", "host"),
    "converge": ("host",),
    "key": ("key",),
    "prepare": ("prepare",),
    "validate": options.SCOPES,
    "showconf": ("mesh", "inputs"),
    "annotate": ("mesh", "inputs"),
    "connect": ("host", "connect"),
}


def test_generated_files_match_the_table():
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "specs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr + " (run `make specs`)"


def _ansible_doc(name):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"))
    proc = subprocess.run(
        [os.path.join(BIN, "ansible-doc"), "--json", "kilo.mesh." + name],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(proc.stdout)["kilo.mesh." + name]["doc"]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_documentation_agrees_with_the_table(module):
    documented = _ansible_doc(module)["options"]
    for name in options.names(*MODULES[module]):
        spec = options.OPTIONS[name]
        doc = documented.get(name)
        assert doc is not None, "%s: option %s is not documented" % (module, name)
        for key in ("type", "default", "choices", "elements"):
            assert doc.get(key) == spec.get(key), "%s: %s.%s" % (module, name, key)


def test_engine_defaults_come_from_the_table():
    assert DEFAULT_OPTIONS == options.engine_defaults()


def test_every_option_has_a_variable_or_says_why_not():
    for name, spec in options.OPTIONS.items():
        assert spec["var"] is None or re.match(r"^(kilo|wireguard)_[a-z_]+$", spec["var"]), name
        assert spec["scopes"] and set(spec["scopes"]) <= set(options.SCOPES), name


def test_defaults_are_written_once():
    """The literal defaults of the key path and the interface live in the table alone."""
    found = []
    for base in ("plugins", "roles", "playbooks"):
        for dirpath, dummy, filenames in os.walk(os.path.join(ROOT, base)):
            for name in filenames:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT)
                if (
                    not name.endswith((".py", ".yml"))
                    or rel
                    in ("plugins/module_utils/options.py", "plugins/doc_fragments/options.py")
                    or rel.endswith("meta/argument_specs.yml")
                ):
                    continue
                with open(path) as f:
                    text = f.read()
                # documentation blocks may show values in examples and samples
                text = re.sub(r'(?s)(EXAMPLES|RETURN) = r""".*?"""', "", text)
                for literal in (
                    "/var/lib/kilo/key",
                    "'kilo0'",
                    '"kilo0"',
                    "default('kilo0')",
                    "default(51820)",
                ):
                    if literal in text:
                        found.append("%s: %s" % (rel, literal))
    assert found == []


def test_the_roles_task_timeout_default_is_the_table_default():
    """YAML cannot import the table: the roles spell the default out, this keeps them equal."""
    want = "kilo_task_timeout | default(%d)" % options.OPTIONS["task_timeout"]["default"]
    for role in ("node", "wireguard", "connect"):
        tasks = os.path.join(ROOT, "roles", role, "tasks")
        text = ""
        for name in sorted(os.listdir(tasks)):  # main.yml and the task files it imports
            with open(os.path.join(tasks, name)) as f:
                text += f.read()
        found = re.findall(r"kilo_task_timeout \| default\(\d+\)", text)
        assert found and set(found) == {want}, (role, found)


def test_inventory_values_are_validated_as_plain_data_when_json_carries_them_unchanged():
    from ansible_collections.kilo.mesh.plugins.plugin_utils.action import _copy, _plain

    class Tagged(str):
        """Stands for a value Ansible tagged with its origin (a str subclass)."""

    text, value = _plain({"b": [Tagged("10.0.0.1/8")], "a": 1})
    assert text == '{"a": 1, "b": ["10.0.0.1/8"]}'
    assert value["b"][0].__class__ is str  # not the subclass
    assert _plain((1, 2))[1] == (1, 2)  # JSON would make it a list: kept as it is
    assert _plain({1: "x"})[1] == {1: "x"}  # JSON would make the key a string
    marker = object()
    assert _plain(marker)[1] is marker  # not JSON at all
    listed = [1, 2]
    assert _copy(listed) == listed and _copy(listed) is not listed
    assert _copy("x") == "x"
