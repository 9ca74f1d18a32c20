"""The README is one page (the two commands, installation, a quick start, a map); the user guide is
the collection's extra docs under docs/docsite/. These keep both from drifting away from the
collection: the README's content table names exactly what ships, every docs page is in the
toctree and the map, every cross-reference, repository path, make target and kilo.mesh name the
docs show exists, and the bad-inputs page lists exactly the cases its test runs."""

import ast
import glob
import importlib
import os
import re

import pytest
import yaml
from checkout import ROOT


README = os.path.join(ROOT, "README.md")
DOCSITE = os.path.join(ROOT, "docs", "docsite")
LABEL = "ansible_collections.kilo.mesh.docsite."


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _pages():
    return {
        os.path.basename(p)[:-4]: _read(p)
        for p in sorted(glob.glob(os.path.join(DOCSITE, "rst", "*.rst")))
    }


def _docs():
    """README and every docs page, by path relative to the repository."""
    docs = {"README.md": _read(README)}
    docs.update({"docs/docsite/rst/%s.rst" % name: text for name, text in _pages().items()})
    return docs


def _section(text, title):
    """The lines of a README section, up to the next heading of its level."""
    body = text.split("\n## %s\n" % title, 1)[1]
    return body.split("\n## ", 1)[0]


def _shipped():
    """(name, kind) of every module, plugin, doc fragment, role and playbook of the collection."""
    found = set()

    def stems(*parts):
        return [
            os.path.basename(p)[:-3]
            for p in glob.glob(os.path.join(ROOT, *parts))
            if not p.endswith("__init__.py")
        ]

    modules = stems("plugins", "modules", "*.py")
    for stem in modules:
        found.add(("kilo.mesh." + stem, "module"))
    for stem in set(stems("plugins", "action", "*.py")) - set(modules):
        found.add(("kilo.mesh." + stem, "action plugin"))  # one without a module of its name
    for stem in stems("plugins", "inventory", "*.py"):
        found.add(("kilo.mesh." + stem, "inventory plugin"))
    for stem in stems("plugins", "doc_fragments", "*.py"):
        found.add(("kilo.mesh." + stem, "doc fragments"))
    for stem in stems("plugins", "filter", "*.py"):
        module = importlib.import_module("ansible_collections.kilo.mesh.plugins.filter." + stem)
        for name in module.FilterModule().filters():
            found.add(("kilo.mesh." + name, "filter"))
    known_dirs = {
        "modules",
        "action",
        "inventory",
        "doc_fragments",
        "filter",
        "module_utils",
        "plugin_utils",
        "__pycache__",
    }
    for path in glob.glob(os.path.join(ROOT, "plugins", "*", "*.py")):
        kind = os.path.basename(os.path.dirname(path))
        if kind not in known_dirs and not path.endswith("__init__.py"):
            found.add(
                ("kilo.mesh." + os.path.basename(path)[:-3], kind)
            )  # a new plugin type: the table names it
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "tasks")):
        found.add(("kilo.mesh." + os.path.basename(os.path.dirname(path)), "role"))
    for path in glob.glob(os.path.join(ROOT, "playbooks", "*.yml")):
        found.add(("kilo.mesh." + os.path.basename(path)[:-4], "playbook"))
    return found


def _content_table():
    rows = set()
    for line in _section(_read(README), "Content").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`kilo.mesh."):
            continue
        kind = "module" if cells[1].startswith("module") else cells[1]
        for name in re.findall(r"`(kilo\.mesh\.[a-z_]+)`", cells[0]):
            rows.add((name, kind))
    return rows


def test_the_readme_content_table_names_everything_that_ships_and_nothing_else():
    shipped, listed = _shipped(), _content_table()
    assert sorted(shipped - listed) == [], "missing from README's Content table"
    assert sorted(listed - shipped) == [], "in README's Content table but not in the collection"


def test_every_docs_page_is_in_the_toctree_and_the_readme_map_and_carries_its_label():
    sections = yaml.safe_load(_read(os.path.join(DOCSITE, "extra-docs.yml")))["sections"]
    toctree = [page for section in sections for page in section["toctree"]]
    pages = _pages()
    assert sorted(toctree) == sorted(pages) and len(set(toctree)) == len(toctree)
    linked = re.findall(
        r"\]\(docs/docsite/rst/([a-z_]+)\.rst\)", _section(_read(README), "Documentation")
    )
    assert sorted(linked) == sorted(pages)
    for name, text in pages.items():
        assert text.startswith(".. _%s%s:\n" % (LABEL, name)), name


def test_every_reference_between_docs_pages_has_its_label():
    labels = set()
    refs = []
    for name, text in _pages().items():
        labels.update(re.findall(r"^\.\. _(%s[\w.-]+):$" % re.escape(LABEL), text, re.M))
        refs += [
            (name, ref)
            for ref in re.findall(r":ref:`(?:[^`<]*<)?(%s[\w.-]+)>?`" % re.escape(LABEL), text)
        ]
    assert refs
    assert [(name, ref) for name, ref in refs if ref not in labels] == []


def test_every_repository_path_the_docs_name_exists():
    """Paths of the repository (not examples of a user's own files such as inventory/cluster.kubernetes.yml):
    files (a dot in the last part) and directories written with their slash."""
    pattern = re.compile(
        r"(?<![\w./-])((?:playbooks|plugins|roles|scripts|tests|manifests|lab|bench|extensions|docs|meta)/[\w./-]*\w)(/?)"
    )
    missing = []
    for doc, text in _docs().items():
        for path, slash in pattern.findall(text):
            if "." not in os.path.basename(path) and not slash:
                continue  # prose such as "lab/host tests"
            if not os.path.exists(os.path.join(ROOT, path)):
                missing.append("%s: %s" % (doc, path))
    assert missing == []


def test_every_make_target_the_docs_show_exists():
    targets = set(re.findall(r"^([a-z][\w-]*):", _read(os.path.join(ROOT, "Makefile")), re.M))
    shown = []
    for doc, text in _docs().items():
        shown += [(doc, t) for t in re.findall(r"`make ([a-z][\w-]*)", text)]
        shown += [(doc, t) for t in re.findall(r"^ *make ([a-z][\w-]*)", text, re.M)]
    assert shown
    assert [(doc, t) for doc, t in shown if t not in targets] == []


def test_every_kilo_mesh_name_the_docs_show_exists():
    routed = yaml.safe_load(_read(os.path.join(ROOT, "meta", "runtime.yml"))).get(
        "plugin_routing", {}
    )
    known = {name for name, dummy in _shipped()}
    known |= {"kilo.mesh." + name for kind in routed.values() for name in kind}
    unknown = []
    for doc, text in _docs().items():
        for name in re.findall(
            r"(?<!ansible_collections\.)\bkilo\.mesh\.([a-z_]+)\b(?![/-])", text
        ):
            if "kilo.mesh." + name not in known:
                unknown.append("%s: kilo.mesh.%s" % (doc, name))
    assert unknown == []


def test_the_bad_inputs_page_lists_exactly_the_cases_of_its_test():
    path = os.path.join(ROOT, "tests", "core", "test_bad_inputs.py")
    if not os.path.exists(path):
        pytest.skip("tests/host does not ship with the collection; this runs in the checkout")
    tree = ast.parse(_read(path))
    cases = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CASES"
    )
    want = [(case.elts[0].value, case.elts[2].value) for case in cases.elts]
    page = _pages()["guide_bad_inputs"]
    rows = re.findall(r"^   \* - (.*)\n     - .*\n     - ``(.*?)(?:\.\.\.)?``$", page, re.M)
    assert [name for name, dummy in rows] == [name for name, dummy in want]
    for (name, message), (dummy, shown) in zip(want, rows):
        assert message.startswith(shown) or shown.startswith(message), name
