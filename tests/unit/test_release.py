"""What ships: the built tarball holds what an installed collection uses and nothing a checkout
makes (ansible.cfg, generated DOT or registry files, the lab's Molecule scenarios), and an
execution environment built for it (ansible-builder v3) gets the collection's controller-side
dependencies from meta/execution-environment.yml: the Kubernetes client and Graphviz."""

import os
import subprocess
import re
import sys
import tarfile

import pytest
from checkout import ROOT as REPO


BIN = os.path.dirname(os.path.abspath(sys.executable))


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    subprocess.run(
        [
            os.path.join(BIN, "ansible-galaxy"),
            "collection",
            "build",
            "--output-path",
            str(out),
            REPO,
        ],
        check=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    (path,) = list(out.glob("kilo-mesh-*.tar.gz"))
    return path


def test_the_tarball_ships_no_checkout_files(tarball):
    with tarfile.open(str(tarball)) as tar:
        names = tar.getnames()
    for unwanted in (
        "ansible.cfg",
        ".gitignore",
        "inventory/kilo-topology.dot",
        "inventory/kilo-registry.json",
        "kilo-topology.dot",
        "kilo-topology.svg",
        "kilo-registry.json",
        "lab",
        "extensions",
        "Makefile",
        "tests/host",
        "requirements.txt",
        ".hypothesis",
        ".pytest_cache",
        ".ansible-lint",
        "changelogs/.plugin-cache.yaml",
        "changelogs/fragments",
    ):
        assert not any(n == unwanted or n.startswith(unwanted + "/") for n in names), unwanted
    for wanted in (
        "plugins/modules/converge.py",
        "playbooks/site.yml",
        "roles/node/tasks/main.yml",
        "meta/runtime.yml",
        "meta/execution-environment.yml",
        "bindep.txt",
        "requirements-ee.txt",
        "docs/docsite/rst/guide_day_two.rst",
        "CHANGELOG.rst",
        "changelogs/changelog.yaml",
    ):
        assert wanted in names, wanted
    # nothing at the top but the collection's own directories and files
    top = set(n.split("/")[0] for n in names)
    assert top <= {
        "CHANGELOG.rst",
        "FILES.json",
        "LICENSE",
        "MANIFEST.json",
        "README.md",
        "bindep.txt",
        "requirements-ee.txt",
        "changelogs",
        "docs",
        "inventory",
        "manifests",
        "meta",
        "playbooks",
        "plugins",
        "roles",
        "tests",
    }, sorted(top)
    # no shipped file imports the parts the build leaves out (the lab driver, the scripts)
    with tarfile.open(str(tarball)) as tar:
        for member in tar.getmembers():
            if member.name.endswith(".py"):
                text = tar.extractfile(member).read().decode()
                assert not re.search(r"^\s*(from|import) (lab|scripts)[. ]", text, re.M), (
                    member.name
                )


def test_the_release_is_0_2_0_with_its_changelog(tarball):
    import json  # pylint: disable=import-outside-toplevel
    import yaml  # pylint: disable=import-outside-toplevel

    with tarfile.open(str(tarball)) as tar:
        manifest = json.load(tar.extractfile("MANIFEST.json"))
        changelog = yaml.safe_load(tar.extractfile("changelogs/changelog.yaml"))
        notes = tar.extractfile("CHANGELOG.rst").read().decode()
    info = manifest["collection_info"]
    assert info["version"] == "0.2.0" and os.path.basename(str(tarball)) == "kilo-mesh-0.2.0.tar.gz"
    assert (
        "0.2.0" in changelog["releases"]
        and changelog["releases"]["0.2.0"]["changes"]["release_summary"]
    )
    assert "v0.2.0" in notes
    # no placeholder addresses: the fields are either real or absent
    for field in ("repository", "documentation", "issues", "homepage"):
        assert not info.get(field) or "example" not in info[field], (field, info[field])


@pytest.mark.skipif(
    not os.path.exists(os.path.join(BIN, "ansible-builder")),
    reason="ansible-builder is in .venv only (the ansible-core-2.17/2.21 venvs run without it)",
)
def test_an_execution_environment_gets_the_collections_dependencies(tarball, tmp_path):
    collections = tmp_path / "collections"
    subprocess.run(
        [
            os.path.join(BIN, "ansible-galaxy"),
            "collection",
            "install",
            "--no-deps",
            "--force",
            "-p",
            str(collections),
            str(tarball),
        ],
        check=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    found = subprocess.run(
        [os.path.join(BIN, "ansible-builder"), "introspect", "--sanitize", str(collections)],
        check=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ).stdout
    assert "kubernetes>=24.2.0  # from collection kilo.mesh" in found, found
    assert "graphviz [platform:dpkg platform:rpm]  # from collection kilo.mesh" in found, found
    # a user's EE file naming the tarball: ansible-builder writes the build context (the image
    # itself needs a container engine and a registry, which these machines do not have)
    (tmp_path / "requirements.yml").write_text(
        "collections:\n  - name: %s\n    type: file\n" % tarball
    )
    (tmp_path / "execution-environment.yml").write_text(
        "version: 3\nimages:\n  base_image:\n    name: quay.io/ansible/awx-ee:latest\n"
        "dependencies:\n  galaxy: requirements.yml\n"
    )
    subprocess.run(
        [
            os.path.join(BIN, "ansible-builder"),
            "create",
            "-f",
            str(tmp_path / "execution-environment.yml"),
            "-c",
            str(tmp_path / "context"),
        ],
        check=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=str(tmp_path),
    )
    (name,) = [n for n in ("Containerfile", "Dockerfile") if (tmp_path / "context" / n).exists()]
    containerfile = (tmp_path / "context" / name).read_text()
    assert "ansible-galaxy collection install" in containerfile and "introspect" in containerfile, (
        containerfile
    )


def test_sanity_ignores_cover_every_supported_ansible_core():
    """ansible-test reads tests/sanity/ignore-X.Y.txt of the ansible-core it runs under: one file
    per version from meta/runtime.yml's floor to the newest tested (requirements-core-2.21.txt),
    all the same text (the collection's license, nothing version-specific)."""
    import yaml

    floor = yaml.safe_load(open(os.path.join(REPO, "meta", "runtime.yml")))["requires_ansible"]
    low = int(re.search(r">=\s*2\.(\d+)", floor).group(1))
    tested = [
        int(m.group(1))
        for f in os.listdir(REPO)
        for m in [re.match(r"requirements-core-2\.(\d+)\.txt$", f)]
        if m
    ]
    high = max(
        tested
        + [
            int(
                re.search(
                    r"ansible-core==2\.(\d+)", open(os.path.join(REPO, "requirements.txt")).read()
                ).group(1)
            )
        ]
    )
    sanity = os.path.join(REPO, "tests", "sanity")
    texts = dict(
        (minor, open(os.path.join(sanity, "ignore-2.%d.txt" % minor)).read())
        for minor in range(low, high + 1)
    )
    assert len(set(texts.values())) == 1, "the ignore files differ"
    extra = set(os.listdir(sanity)) - set("ignore-2.%d.txt" % m for m in texts)
    assert not extra, extra
