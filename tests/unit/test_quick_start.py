# -*- coding: utf-8 -*-
"""README.md's Quick start as a new user runs it: the collection built with ansible-galaxy,
installed from its tarball (with kubernetes.core, the copy `make setup` keeps in .collections)
into an empty collections path, the first command run from a fresh directory with Ansible's
defaults: no ansible.cfg there, ANSIBLE_CONFIG unset, no ANSIBLE_* setting but the collections
path, a HOME of its own (no ~/.ansible.cfg). What is checked is what the user reads and what is
left behind: the plan's lines (locations, leaders, the hosts that still need a run) printed one per
line, no JSON string of escaped line breaks, and no file in the inventory's directory or the
installed collection.

Runs on the ansible-core of the Python running pytest (tests/unit runs on 2.17, 2.20 and 2.21)."""

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from checkout import ROOT


BIN = os.path.dirname(sys.executable)
KUBERNETES_CORE = os.path.join(ROOT, ".collections", "ansible_collections", "kubernetes", "core")


def readme_quick_start():
    """(inventory text, [commands]) of README.md's Quick start."""
    with open(os.path.join(ROOT, "README.md")) as f:
        section = f.read().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    inventory = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    commands = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return inventory, [line.split("#")[0].strip() for line in commands.splitlines() if line.strip()]


def snapshot(directory):
    """path -> (size, mtime) of every file under ``directory``."""
    out = {}
    for top, _dirs, files in os.walk(directory):
        for name in files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            out[os.path.relpath(path, directory)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(environment, collections path): the tarball installed as a user installs it."""
    base = tmp_path_factory.mktemp("quick-start")
    home = base / "home"
    home.mkdir()
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "K8S_AUTH_")))
    env.update(
        HOME=str(home),
        PATH=BIN + os.pathsep + env.get("PATH", ""),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_COLLECTIONS_PATH=str(base / "collections"),
    )
    build = subprocess.run(
        [
            os.path.join(BIN, "ansible-galaxy"),
            "collection",
            "build",
            "--output-path",
            str(base / "build"),
            ROOT,
        ],
        cwd=str(base),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    tarball = [str(p) for p in (base / "build").iterdir() if p.name.endswith(".tar.gz")]
    install = subprocess.run(
        [os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline"]
        + tarball
        + [KUBERNETES_CORE],
        cwd=str(base),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    collection = base / "collections" / "ansible_collections" / "kilo" / "mesh"
    assert (collection / "MANIFEST.json").is_file() and not collection.is_symlink()
    return env, str(base / "collections")


def playbook(env, cwd, *args):
    done = subprocess.run(
        [os.path.join(BIN, "ansible-playbook")] + list(args),
        cwd=str(cwd),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def msg_lines(stdout, task):
    """The lines of the debug message of TASK [``task``] as the default callback prints them: a
    list of strings, one per line (None when the message is not a list)."""
    block = stdout.split("TASK [%s]" % task, 1)[1].split("TASK [", 1)[0].split("PLAY RECAP", 1)[0]
    body = block[block.index("=> ") :] if "=> " in block else ""
    data = yaml.safe_load(body[3:]) if body else None  # the callback's JSON is YAML too
    return data.get("msg") if isinstance(data, dict) and isinstance(data.get("msg"), list) else None


def test_the_quick_starts_first_command_shows_the_mesh(installed, tmp_path):
    env, collections = installed
    inventory, commands = readme_quick_start()
    assert commands[0] == "ansible-playbook -i inventory.yml kilo.mesh.plan", commands
    work = tmp_path / "work"
    work.mkdir()
    (work / "inventory.yml").write_text(inventory)
    assert not (work / "ansible.cfg").exists() and "ANSIBLE_CONFIG" not in env
    before = snapshot(collections)

    rc, out, err = playbook(env, work, *commands[0].split()[1:])
    assert rc == 0, out + err
    # one line per line, never one JSON string of escaped line breaks
    assert "\\n" not in out, out
    lines = msg_lines(out, "Print the plans")
    assert lines, out
    print("\n".join(lines))
    assert lines[0] == "4 nodes in 2 locations, 2 segments; leaders: aws-1 (aws), pi (home)", lines
    rows = dict((line.split()[0], line.split()) for line in lines[3:7])
    assert sorted(rows) == ["aws-1", "aws-2", "nas", "pi"], lines
    assert [rows[h][1:4] for h in ("aws-1", "pi")] == [
        ["*", "aws", "location:aws"],
        ["*", "home", "location:home"],
    ]
    assert rows["aws-1"][4] == rows["pi"][4] == "yes" and "yes" not in rows["aws-2"] + rows["nas"]
    assert any("aws-1, aws-2, nas, pi still need their first run" in line for line in lines), lines
    assert "left out of the mesh" not in out + err  # the old warning: every host left out
    said = msg_lines(out, "Say where it is")
    assert said and said[0] == "written: %s (dot)" % (work / "kilo-topology.dot"), out

    # what is left behind: the documented picture in the current directory, nothing in the collection
    assert sorted(os.listdir(str(work))) == ["inventory.yml", "kilo-topology.dot"]
    assert "(no key yet" in (work / "kilo-topology.dot").read_text()
    assert snapshot(collections) == before


def test_a_directory_inventory_gets_no_file_and_relative_paths_are_the_current_directorys(
    installed, tmp_path
):
    env, collections = installed
    inventory, _commands = readme_quick_start()
    work = tmp_path / "work"
    (work / "mesh" / "group_vars").mkdir(parents=True)
    (work / "mesh" / "hosts.yml").write_text(inventory)
    (work / "mesh" / "group_vars" / "kilo.yml").write_text("kilo_port: 51821\n")
    inside = snapshot(str(work / "mesh"))
    before = snapshot(collections)

    rc, out, err = playbook(
        env, work, "-i", "mesh", "kilo.mesh.plan", "-e", "plan_dot=pictures/rel.dot"
    )
    assert rc == 2 and "cannot write" in out, (
        out + err
    )  # its directory does not exist: said, not made
    (work / "pictures").mkdir()
    rc, out, err = playbook(
        env, work, "-i", "mesh", "kilo.mesh.plan", "-e", "plan_dot=pictures/rel.dot"
    )
    assert rc == 0, out + err
    assert os.listdir(str(work / "pictures")) == ["rel.dot"]
    rc, out, err = playbook(env, work, "-i", "mesh", "kilo.mesh.graph", "-e", "dest=mesh.dot")
    assert rc == 0 and (work / "mesh.dot").is_file(), out + err
    assert msg_lines(out, "Say where it is")[1] == "written: %s (dot)" % (work / "mesh.dot")

    # graph's format follows the extension or is refused, before anything is written
    rc, out, err = playbook(env, work, "-i", "mesh", "kilo.mesh.graph", "-e", "dest=m.jpg")
    assert rc == 2 and "'.jpg' names no format" in out and not (work / "m.jpg").exists(), out + err

    # from inside the inventory directory the default file would be read as inventory: refused
    rc, out, err = playbook(env, work / "mesh", "-i", ".", "kilo.mesh.plan")
    assert rc == 2 and "inside a directory given as inventory source" in out, out + err

    assert snapshot(str(work / "mesh")) == inside and snapshot(collections) == before
    # and so a later run has nothing in it that Ansible cannot read
    rc, out, err = playbook(
        env, work, "-i", "mesh", "kilo.mesh.plan", "-e", "plan_write_graph=false"
    )
    assert rc == 0 and "Unable to parse" not in out + err and "Skipping" not in out + err, out + err


def test_graph_writes_beside_where_it_runs_not_inside_the_collection(installed, tmp_path):
    env, collections = installed
    inventory, _commands = readme_quick_start()
    (tmp_path / "inventory.yml").write_text(inventory)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    before = snapshot(collections)
    rc, out, err = playbook(
        dict(env),
        tmp_path,
        "-i",
        "inventory.yml",
        "kilo.mesh.graph",
        "-e",
        "dest=rel.dot",
        "-e",
        "kilo_output_dir=out",
    )
    assert rc == 0 and os.listdir(str(out_dir)) == ["rel.dot"], out + err
    assert snapshot(collections) == before
    shutil.rmtree(str(out_dir))
