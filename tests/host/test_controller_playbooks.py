"""Controller-only playbooks on the example inventory (no host is touched): the plans table,
the topology picture, an outside peer's configuration, and a validation error."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

from sitetools import REPO

EXAMPLE = os.path.join(REPO, "inventory", "example.yml")


def playbook(name, *extra):
    argv = [
        os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
        "-i",
        EXAMPLE,
        os.path.join(REPO, "playbooks", name),
    ] + list(extra)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    return subprocess.run(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )


def test_plans_table_and_picture(tmp_path):
    dot = tmp_path / "topology.dot"
    proc = playbook("plan.yml", "-e", "plan_dot=%s" % dot)
    assert proc.returncode == 0, proc.stdout
    # one table row per line (a list: "- aws-1  aws ..." with the checkout's YAML output)
    leaders = re.findall(
        r"^\s+(?:- )?(\S+)\s+\S+\s+location:\S+\s+yes\s+(10\.4\.0\.\d+/16)", proc.stdout, re.M
    )
    # Three locations, three leaders, WireGuard IPs in segment order.
    assert leaders == [
        ("aws-1", "10.4.0.1/16"),
        ("gcp-1", "10.4.0.2/16"),
        ("home-1", "10.4.0.3/16"),
    ], proc.stdout
    svg = subprocess.run(
        ["dot", "-Tsvg", str(dot)], stdout=subprocess.PIPE, text=True, check=True
    ).stdout
    assert "aws&#45;1" in svg and "laptop" in svg  # graphviz escapes "-"


def test_peer_configuration_like_kgctl_showconf():
    proc = playbook("peer.yml", "-e", "peer=laptop")
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.count("[Peer]") == 3  # one per location leader, no other peers
    assert "Endpoint = 203.0.113.11:51820" in proc.stdout


def test_unknown_peer_names_the_peer():
    proc = playbook("peer.yml", "-e", "peer=nobody")
    assert proc.returncode != 0
    assert "peer 'nobody'" in proc.stdout.replace("''", "'")


def copied_inventory(tmp_path, **extra_vars):
    """The example inventory in a fresh directory (as on a clone: no demo/ beside it)."""
    import yaml

    with open(EXAMPLE) as f:
        data = yaml.safe_load(f)
    data["kilo"]["vars"].update(extra_vars)
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def run(inventory, name, *extra):
    argv = [
        os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
        "-i",
        str(inventory),
        os.path.join(REPO, "playbooks", name),
    ] + list(extra)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    return subprocess.run(
        argv,
        cwd=str(inventory.parent),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )


def test_plan_playbook_writes_the_picture_in_the_current_directory(tmp_path):
    # bug 2: plan.yml wrote to playbook_dir/../demo/, absent on a fresh clone; then beside the
    # inventory (inside a directory inventory, read as inventory by every later run)
    inventory = copied_inventory(tmp_path)
    proc = run(inventory, "plan.yml")
    assert proc.returncode == 0, proc.stdout
    assert "digraph" in (tmp_path / "kilo-topology.dot").read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    argv = [
        os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
        "-i",
        str(inventory),
        os.path.join(REPO, "playbooks", "plan.yml"),
        "-e",
        "plan_dot=rel.dot",
    ]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), PWD="/nonexistent")
    proc = subprocess.run(
        argv,
        cwd=str(elsewhere),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and os.listdir(str(elsewhere)) == ["rel.dot"], proc.stdout


def test_plan_and_peer_playbooks_read_the_registry_variable(tmp_path):
    # bug 3: plan.yml and peer.yml ignored kilo_registry; a host known only from the registry
    # (no pinned key or endpoint in the inventory) must appear.
    import json
    import yaml

    registry = tmp_path / "elsewhere" / "reg.json"
    registry.parent.mkdir()
    registry.write_text(
        json.dumps(
            {
                "hosts": {
                    "aws-3": {
                        "public_key": "B3dm3+3Afj5Ze4IIcyzxlaxlxLrALlC0Y/zZUgFRSCU=",
                        "internal_ip": "10.1.0.13/16",
                        "external_ip": None,
                        "discovered_endpoints": {},
                        "mtu": 1500,
                    }
                }
            }
        )
    )
    inventory = copied_inventory(tmp_path, kilo_registry=str(registry))
    data = yaml.safe_load(inventory.read_text())
    for var in ("kilo_public_key", "kilo_force_endpoint"):
        del data["kilo"]["children"]["aws"]["hosts"]["aws-3"][var]
    inventory.write_text(yaml.safe_dump(data))
    proc = run(inventory, "plan.yml", "-e", "plan_write_graph=false")
    assert proc.returncode == 0, proc.stdout
    assert re.search(r"^\s+(?:- )?aws-3\s+aws\s", proc.stdout, re.M), proc.stdout
    assert "left out of the mesh" not in proc.stdout and "first run" not in proc.stdout
    registry.unlink()
    # known nowhere: plan.yml shows it with a stand-in key, marked, as a host that still needs a run
    proc = run(inventory, "plan.yml", "-e", "plan_write_graph=false")
    assert re.search(r"^\s+(?:- )?aws-3 \*\s+aws\s", proc.stdout, re.M), proc.stdout
    assert "no key yet: aws-3 still need their first run" in proc.stdout, proc.stdout


def test_a_nameless_node_is_named_not_a_traceback(tmp_path):
    # bug 4: the join action read n["name"] before validation
    book = tmp_path / "join.yml"
    book.write_text("""
- hosts: localhost
  gather_facts: false
  tasks:
    - kilo.mesh.join:
        nodes: [{location: x, public_key: "B3dm3+3Afj5Ze4IIcyzxlaxlxLrALlC0Y/zZUgFRSCU=", endpoint: "203.0.113.1:51820"}]
""")
    argv = [
        os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
        "-i",
        "localhost,",
        "-c",
        "local",
        str(book),
    ]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    proc = subprocess.run(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
    )
    assert proc.returncode != 0
    assert "node #1: name: missing" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stdout and "KeyError" not in proc.stdout


def test_a_bad_variable_names_the_host_and_the_variable(tmp_path):
    # the option table's rule: task argument, else the kilo_* variable, else the default
    inventory = copied_inventory(tmp_path, kilo_port="many")
    proc = run(inventory, "plan.yml", "-e", "plan_write_graph=false")
    assert proc.returncode != 0
    assert "host 'aws-1': kilo_port:" in proc.stdout.replace("''", "'"), proc.stdout


def host_var(inventory, host, **values):
    import yaml

    data = yaml.safe_load(inventory.read_text())
    for location in data["kilo"]["children"].values():
        if host in location.get("hosts", {}):
            location["hosts"][host].update(values)
    inventory.write_text(yaml.safe_dump(data))


def test_site_stops_before_any_host_on_bad_input(tmp_path):
    # The example's hosts do not exist: reaching any of them would show as UNREACHABLE.
    inventory = copied_inventory(tmp_path)
    host_var(inventory, "gcp-2", kilo_force_endpoint="203.0.113.7:99999")
    proc = run(inventory, "site.yml", "--check")
    assert proc.returncode != 0
    assert (
        "host 'gcp-2': kilo_force_endpoint: port 99999 out of range 1-65535"
        in proc.stdout.replace("''", "'")
    ), proc.stdout
    assert "UNREACHABLE" not in proc.stdout and "unreachable=1" not in proc.stdout


def test_validate_names_disagreeing_mesh_settings_and_passes_a_good_mesh(tmp_path):
    inventory = copied_inventory(tmp_path)
    book = tmp_path / "validate.yml"
    book.write_text(
        "- hosts: kilo\n  gather_facts: false\n  tasks:\n    - kilo.mesh.validate:\n      run_once: true\n"
    )
    proc = run(inventory, str(book))
    assert proc.returncode == 0 and "valid" in proc.stdout, proc.stdout
    host_var(inventory, "home-1", kilo_subnet="10.9.0.0/16")
    proc = run(inventory, str(book))
    assert proc.returncode != 0
    assert (
        "host 'home-1': kilo_subnet: '10.9.0.0/16' here, '10.4.0.0/16' on host 'aws-1'"
        in proc.stdout.replace("''", "'")
    ), proc.stdout


def test_the_old_module_name_still_works_and_warns(tmp_path):
    book = tmp_path / "old.yml"
    book.write_text("""
- hosts: localhost
  gather_facts: false
  tasks:
    - kilo.mesh.mesh:
        nodes: [{location: x}]
""")
    argv = [
        os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
        "-i",
        "localhost,",
        "-c",
        "local",
        str(book),
    ]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    proc = subprocess.run(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
    )
    assert "node #1: name: missing" in proc.stdout, proc.stdout  # it ran kilo.mesh.join
    assert "kilo.mesh.mesh is now kilo.mesh.join" in proc.stdout.replace("\n", " "), proc.stdout


STORE_PLAY = """
- hosts: kilo
  gather_facts: false
  connection: local
  serial: "{{ store_serial | default(0) }}"
  tasks:
    - kilo.mesh.topology:
        save_plans: true
      run_once: true
      register: mesh
    - name: each host finds its own plan, and only the play's hosts have one
      vars:
        own: "{{ mesh.plan_store ~ '/' ~ (inventory_hostname | hash('sha256')) ~ '.json' }}"
      ansible.builtin.stat:
        path: "{{ own }}"
      register: own_plan
    - ansible.builtin.assert:
        that:
          - own_plan.stat.exists and own_plan.stat.mode == '0600'
          - (lookup('file', own_plan.stat.path) | from_json).name == inventory_hostname
          - mesh.plans == ansible_play_batch | length
          - mesh.plans < mesh.nodes
          - mesh.leaders | length == mesh.segments
          - "'graph' not in mesh and mesh.segments is number"
    - ansible.builtin.stat:
        path: "{{ mesh.plan_store }}"
      register: store
      run_once: true
    - ansible.builtin.assert:
        that: store.stat.mode == '0700'
      run_once: true
"""


@pytest.mark.parametrize("serial", [0, 2])
def test_mesh_computed_once_for_the_play_and_each_plan_kept_apart(tmp_path, serial):
    """kilo.mesh.topology save_plans (the role's run-once step): the registered result holds
    no plans, each host of the batch has its plan in its own 0600 file, hosts out of --limit
    (or of the serial batch) get none."""
    play = tmp_path / "store.yml"
    play.write_text(STORE_PLAY)
    argv = [
        os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
        "-i",
        EXAMPLE,
        str(play),
        "--limit",
        "aws",
        "-e",
        "store_serial=%d" % serial,
    ]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    proc = subprocess.run(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
    assert re.search(r"aws-1\s+: ok=\d+ .*failed=0", proc.stdout), proc.stdout
    assert "gcp-1" not in proc.stdout


READING_PLAY = """
- hosts: gcp-2
  gather_facts: false
  tasks:
    - name: an earlier play registers the key call of a host the next play leaves out (as it would)
      ansible.builtin.set_fact:
        kilo_host:
          public_key: 3qy2nPuX4zk8aA7bH1ZVqzZLRk2Zp0W6c7o5cO1yV0Y=
          internal_ip: 10.2.0.22/16
          external_ip: 198.51.100.22
          discovered_endpoints: {}
          mtu: 1420

- hosts: aws
  gather_facts: false
  connection: local
  tasks:
    - kilo.mesh.validate:
      run_once: true
      when: with_validate | bool
    - name: a host of the play changes after the check; the topology step must see it
      ansible.builtin.set_fact:
        kilo_leader: true
      when: inventory_hostname == 'aws-2'
    - kilo.mesh.topology:
        save_plans: true
      run_once: true
      register: mesh
    - ansible.builtin.copy:
        src: "{{ mesh.plan_store ~ '/' ~ (inventory_hostname | hash('sha256')) ~ '.json' }}"
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        mode: "0600"
"""


def test_topology_after_validate_reuses_its_reading_of_the_hosts_outside_the_play(tmp_path):
    """validate keeps what it read of the hosts outside the play for the topology step of the
    same play; the plans are the same as when topology reads every host itself. A play host
    changed after validate is read again, and so is a host outside the play whose key call an
    earlier play registered (gcp-2, gcp's leader, known only from that result)."""
    play = tmp_path / "reading.yml"
    play.write_text(READING_PLAY)
    # gcp-2 pins nothing but its lead: its key and endpoint come from its key call
    with open(EXAMPLE) as f:
        inventory = yaml.safe_load(f)
    gcp2 = inventory["kilo"]["children"]["gcp"]["hosts"]["gcp-2"]
    for var in ("kilo_public_key", "kilo_force_endpoint", "kilo_force_internal_ip"):
        gcp2.pop(var, None)
    gcp2["kilo_leader"] = True
    example = tmp_path / "inventory.yml"
    example.write_text(yaml.safe_dump(inventory))
    plans = {}
    for with_validate in (True, False):
        out = tmp_path / ("with" if with_validate else "without")
        out.mkdir()
        argv = [
            os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
            "-i",
            str(example),
            str(play),
            "-e",
            "with_validate=%s out=%s" % (with_validate, out),
        ]
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
        proc = subprocess.run(
            argv,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout
        plans[with_validate] = dict(
            (p.name, json.loads(p.read_text())) for p in sorted(out.iterdir())
        )
    assert sorted(plans[True]) == ["aws-1.json", "aws-2.json", "aws-3.json"]
    assert plans[True] == plans[False]
    # the hosts outside the play are in the plan (from validate's reading), and aws-2 leads
    aws1 = plans[True]["aws-1.json"]
    text = json.dumps(aws1)
    assert (
        "JGgekz5BTYW+R50UbOcovQBS5ekhEwMb/nSmLV5BiX8=" not in text
    )  # gcp-1 is no peer of a non-leader
    aws2 = json.dumps(plans[True]["aws-2.json"])
    assert "3qy2nPuX4zk8aA7bH1ZVqzZLRk2Zp0W6c7o5cO1yV0Y=" in aws2, aws2  # gcp-2, gcp's leader
    assert "JGgekz5BTYW+R50UbOcovQBS5ekhEwMb/nSmLV5BiX8=" not in aws2, aws2  # gcp-1 behind it


REGISTRY_PEER_PLAY = """
- hosts: aws-1
  gather_facts: false
  tasks:
    - kilo.mesh.peer:
        name: laptop2
        public_key: zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw=
        allowed_ips: [10.5.0.2/32]
        store: registry
      register: added
    - ansible.builtin.assert:
        that: added.registry == inventory_dir ~ '/.kilo-registry.json'
"""


def test_a_registry_in_an_inventory_directory_is_not_read_as_inventory(tmp_path):
    """An inventory directory: the registry written there is hidden, so the next run's
    inventory has no stray groups from it and no warning."""
    source = tmp_path / "inventory"
    source.mkdir()
    shutil.copy(EXAMPLE, str(source / "hosts.yml"))
    play = tmp_path / "peer.yml"
    play.write_text(REGISTRY_PEER_PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    venv = os.path.join(REPO, ".venv", "bin")
    proc = subprocess.run(
        [os.path.join(venv, "ansible-playbook"), "-i", str(source), str(play)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
    assert "laptop2" in (source / ".kilo-registry.json").read_text()
    assert not (source / "kilo-registry.json").exists()
    graph = subprocess.run(
        [os.path.join(venv, "ansible-inventory"), "-i", str(source), "--graph"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert (
        graph.returncode == 0 and "WARNING" not in graph.stdout and "peers" not in graph.stdout
    ), graph.stdout


NOBODY = 65534


def _blocked(paths):
    """{directory: first names below it on the way to ``paths``} for the directories on those ways
    that others cannot search (this machine's controller Python lives under root's 0700 home)."""
    out = {}
    for path in paths:
        parts = os.path.realpath(path).split(os.sep)[1:]
        for depth in range(len(parts)):
            directory = os.sep + os.path.join(*parts[:depth]) if depth else os.sep
            if not os.stat(directory).st_mode & 0o001:
                out.setdefault(directory, set()).add(parts[depth])
    return out


def as_invoking_user(argv, paths):
    """(argv, (uid, gid)): argv run by a user who is not root. The test's own user when it is not
    root; as root, the user nobody (no group, no sudo rights) in a mount namespace of its own where
    every directory on the way to ``paths`` that nobody could not search is a searchable tmpfs with
    the entries on the way bound back (their own modes and owners unchanged)."""
    if os.geteuid() != 0:
        return argv, (os.geteuid(), os.getegid())
    script = ["set -e", "hold=$(mktemp -d)"]
    for directory, names in sorted(_blocked(paths).items(), key=lambda item: item[0].count(os.sep)):
        d = shlex.quote(directory)
        script += ['mount --bind %s "$hold"' % d, "mount -t tmpfs -o mode=0755 tmpfs %s" % d]
        for name in sorted(names):
            below = shlex.quote(os.path.join(directory, name))
            script += [
                'if [ -d "$hold"/%s ]; then mkdir %s; else touch %s; fi'
                % (shlex.quote(name), below, below),
                'mount --bind "$hold"/%s %s' % (shlex.quote(name), below),
            ]
        script.append('umount "$hold"')
    script += [
        'rmdir "$hold"',
        'exec setpriv --reuid=%d --regid=%d --clear-groups -- "$@"' % (NOBODY, NOBODY),
    ]
    return (
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            "\n".join(script),
            "sh",
        ]
        + argv,
        (NOBODY, NOBODY),
    )


def test_with_become_the_controller_plays_write_as_the_invoking_user(tmp_path):
    """-b is for the hosts: the controller plays (hosts: localhost) set become: false, so the files
    they write (plans' picture, graph, showconf) are the invoking user's and no sudo runs on the
    controller (here it would fail: the user has no sudo rights)."""
    tmp_path.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    inventory = copied_inventory(work)
    home = tmp_path / "home"
    home.mkdir()
    ansible = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
    paths = [sys.executable, os.path.realpath(ansible), REPO, str(tmp_path)]
    _argv, (uid, gid) = as_invoking_user([], paths)
    for path in (work, inventory, home):
        os.chown(path, uid, gid)
    # (nobody's home in the passwd file does not exist: Ansible's temporary files go to this one)
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        HOME=str(home),
        ANSIBLE_LOCAL_TEMP=str(home / "tmp"),
        ANSIBLE_REMOTE_TMP=str(home / "tmp"),
    )
    runs = [
        ("plan.yml",),
        ("graph.yml", "-e", "dest=mesh.svg"),
        ("showconf.yml", "-e", "peer=laptop", "-e", "dest=laptop.conf"),
    ]
    for name, *extra in runs:
        argv, _ = as_invoking_user(
            [ansible, "-b", "-i", str(inventory), os.path.join(REPO, "playbooks", name)] + extra,
            paths,
        )
        proc = subprocess.run(
            argv,
            cwd=str(work),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, "%s:\n%s" % (name, proc.stdout[-3000:])
    written = dict((p.name, (p.stat().st_uid, p.stat().st_gid)) for p in work.iterdir())
    assert {"kilo-topology.dot", "mesh.svg", "laptop.conf"} <= set(written), written
    assert all(owner == (uid, gid) for owner in written.values()), written
