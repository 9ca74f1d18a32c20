"""playbooks/graph.yml and kilo.mesh.graph through ansible-playbook on the controller (no host
touched): the example inventory drawn as SVG and PNG, a second run unchanged, a 30-location
mesh (plain node dicts, option nodes) drawn with the hub and fdp, DOT text without Graphviz,
and the install hint when Graphviz is missing."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from sitetools import REPO

sys.path.insert(0, os.path.join(REPO, "tests", "unit", "plugins", "plugin_utils"))
from test_graph_units import key  # noqa: E402  (tests/unit mirrors plugins/)

INVENTORY = os.path.join(REPO, "inventory", "example.yml")
needs_dot = pytest.mark.skipif(not shutil.which("dot"), reason="needs Graphviz")


def playbook(path, *extra, **kw):
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
    )
    env.update(kw.pop("env", {}))
    argv = [
        os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
        "-i",
        kw.pop("inventory", INVENTORY),
        path,
    ] + list(extra)
    return subprocess.run(
        argv, cwd=kw.pop("cwd", REPO), env=env, capture_output=True, text=True, check=False
    )


@needs_dot
def test_example_inventory_as_svg_and_png(tmp_path):
    svg = tmp_path / "mesh.svg"
    done = playbook(os.path.join(REPO, "playbooks", "graph.yml"), "-e", "dest=%s" % svg)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "3 segments, 7 nodes, 1 peers" in done.stdout and "(svg, dot layout)" in done.stdout, (
        done.stdout
    )
    text = svg.read_text()
    assert text.startswith("<?xml") and "location:aws" in text and "laptop" in text
    again = playbook(os.path.join(REPO, "playbooks", "graph.yml"), "-e", "dest=%s" % svg)
    assert "changed=0" in again.stdout, again.stdout[-2000:]
    # relative dest: from where ansible-playbook runs, whatever $PWD says
    done = playbook(
        os.path.join(REPO, "playbooks", "graph.yml"),
        "-e",
        "dest=rel.png",
        "-e",
        "layout=circo",
        cwd=str(tmp_path),
        env={"PWD": "/nonexistent"},
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tmp_path / "rel.png").read_bytes().startswith(b"\x89PNG")


@needs_dot
def test_thirty_locations_from_plain_nodes(tmp_path):
    nodes = []
    for loc in range(1, 31):
        for k in (1, 2):
            nodes.append(
                {
                    "name": "l%d-%d" % (loc, k),
                    "location": "l%d" % loc,
                    "internal_ip": "172.16.%d.%d/24" % (loc, k),
                    "pod_cidr": "10.%d.%d.0/24" % (100 + loc, k),
                    "public_key": key(loc * 2 + k),
                    "endpoint": "203.0.113.%d:51820" % loc if k == 1 else None,
                }
            )
    play = tmp_path / "p.yml"
    play.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - kilo.mesh.graph:\n        nodes: %s\n        dest: %s\n      register: g\n"
        "    - ansible.builtin.copy:\n        content: '{{ g | to_json }}'\n        dest: %s\n        mode: '0644'\n"
        % (json.dumps(nodes), tmp_path / "m30.png", tmp_path / "r.json")
    )
    done = playbook(str(play), inventory="localhost,")
    assert done.returncode == 0, done.stdout[-3000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert (
        result["hub"]
        and result["layout"] == "fdp"
        and result["segments"] == 30
        and result["command"] == "-Kfdp -Tpng"
    )
    assert (tmp_path / "m30.png").read_bytes().startswith(b"\x89PNG")


def test_without_graphviz(tmp_path):
    bare = {"PATH": os.path.join(REPO, ".venv", "bin")}  # no dot on this PATH
    done = playbook(
        os.path.join(REPO, "playbooks", "graph.yml"),
        "-e",
        "dest=%s" % (tmp_path / "m.svg"),
        env=bare,
    )
    assert done.returncode == 2
    assert "apt install graphviz" in done.stdout and "pacman -S graphviz" in done.stdout
    assert not (tmp_path / "m.svg").exists()
    done = playbook(
        os.path.join(REPO, "playbooks", "graph.yml"),
        "-e",
        "dest=%s" % (tmp_path / "m.dot"),
        env=bare,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tmp_path / "m.dot").read_text().startswith("digraph kilo {")
