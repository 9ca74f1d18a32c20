"""What ships: the built tarball holds what an installed collection uses and nothing a checkout
makes (ansible.cfg, generated DOT or registry files, the lab's Molecule scenarios), and an
execution environment built for it (ansible-builder v3) gets the collection's controller-side
dependencies from meta/execution-environment.yml: the Kubernetes client and Graphviz."""
import os
import subprocess
import sys
import tarfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(os.path.abspath(sys.executable))


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(out), REPO],
                   check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    (path,) = list(out.glob("kilo-mesh-*.tar.gz"))
    return path


def test_the_tarball_ships_no_checkout_files(tarball):
    with tarfile.open(str(tarball)) as tar:
        names = tar.getnames()
    for unwanted in ("ansible.cfg", ".gitignore", "inventory/kilo-topology.dot", "inventory/kilo-registry.json",
                     "kilo-topology.dot", "kilo-topology.svg",
                     "lab", "extensions", "Makefile", "tests/host", "requirements.txt"):
        assert not any(n == unwanted or n.startswith(unwanted + "/") for n in names), unwanted
    for wanted in ("plugins/modules/converge.py", "playbooks/site.yml", "roles/node/tasks/main.yml",
                   "meta/runtime.yml", "meta/execution-environment.yml", "bindep.txt", "requirements-ee.txt",
                   "docs/docsite/rst/guide_day_two.rst"):
        assert wanted in names, wanted


@pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-builder")),
                    reason="ansible-builder is in .venv only (the ansible-core-2.17/2.21 venvs run without it)")
def test_an_execution_environment_gets_the_collections_dependencies(tarball, tmp_path):
    collections = tmp_path / "collections"
    subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--no-deps", "--force", "-p", str(collections),
                    str(tarball)], check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    found = subprocess.run([os.path.join(BIN, "ansible-builder"), "introspect", "--sanitize", str(collections)],
                           check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    assert "kubernetes>=24.2.0  # from collection kilo.mesh" in found, found
    assert "graphviz [platform:dpkg platform:rpm]  # from collection kilo.mesh" in found, found
    # a user's EE file naming the tarball: ansible-builder writes the build context (the image
    # itself needs a container engine and a registry, which these machines do not have)
    (tmp_path / "requirements.yml").write_text("collections:\n  - name: %s\n    type: file\n" % tarball)
    (tmp_path / "execution-environment.yml").write_text(
        "version: 3\nimages:\n  base_image:\n    name: quay.io/ansible/awx-ee:latest\n"
        "dependencies:\n  galaxy: requirements.yml\n")
    subprocess.run([os.path.join(BIN, "ansible-builder"), "create", "-f", str(tmp_path / "execution-environment.yml"),
                    "-c", str(tmp_path / "context")], check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                   cwd=str(tmp_path))
    (name,) = [n for n in ("Containerfile", "Dockerfile") if (tmp_path / "context" / n).exists()]
    containerfile = (tmp_path / "context" / name).read_text()
    assert "ansible-galaxy collection install" in containerfile and "introspect" in containerfile, containerfile
