"""meta/runtime.yml's action groups: ``module_defaults: group/kilo.mesh.mesh`` gives the mesh's
options to every module that reads the whole mesh, as a user's play writes it; the groups hold
exactly the modules whose options take those defaults. Runs ansible-playbook on localhost."""

import json
import os
import subprocess
import sys

import yaml

from ansible_collections.kilo.mesh.plugins.module_utils import options
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client
from checkout import ROOT


BIN = os.path.dirname(sys.executable)
KEY = "%s=" % ("A" * 43)


def runtime_groups():
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as f:
        return yaml.safe_load(f)["action_groups"]


def documented_options(module):
    """The options ansible-doc shows for kilo.mesh.MODULE."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"))
    out = subprocess.run(
        [os.path.join(BIN, "ansible-doc"), "-j", "-t", "module", "kilo.mesh." + module],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(json.loads(out)["kilo.mesh." + module]["doc"]["options"])


def test_every_module_of_a_group_takes_the_groups_options():
    groups = runtime_groups()
    mesh_options = set(options.names("mesh", "inputs"))
    for module in groups["mesh"]:
        assert mesh_options <= documented_options(module), module
    kube_options = set(kube_client.argument_spec())
    for module in groups["kubernetes"]:
        assert kube_options <= documented_options(module), module


def test_module_defaults_of_the_mesh_group_reach_the_modules(tmp_path):
    # a mesh in group "edge" (not the default "kilo"), full granularity, port 51999: given once
    (tmp_path / "inventory.yml").write_text(
        yaml.safe_dump(
            {
                "edge": {
                    "children": {
                        "east": {
                            "hosts": {
                                "e1": {
                                    "kilo_public_key": KEY,
                                    "kilo_force_endpoint": "203.0.113.1:51999",
                                }
                            }
                        },
                        "west": {
                            "hosts": {
                                "w1": {
                                    "kilo_public_key": KEY.replace("A", "B"),
                                    "kilo_force_endpoint": "203.0.113.2:51999",
                                },
                                "w2": {
                                    "kilo_public_key": KEY.replace("A", "C"),
                                    "kilo_force_endpoint": "203.0.113.3:51999",
                                },
                            }
                        },
                    }
                }
            }
        )
    )
    (tmp_path / "play.yml").write_text(
        """
- hosts: localhost
  connection: local
  gather_facts: false
  module_defaults:
    group/kilo.mesh.mesh:
      group: edge
      granularity: full
      port: 51999
      registry: %s/registry.json
  tasks:
    - kilo.mesh.validate:
      register: checked
    - kilo.mesh.topology:
      register: mesh
    - ansible.builtin.assert:
        that:
          - checked.hosts == 3
          - mesh.segments | length == 3
          - mesh.plans['w1'].listen_port == 51999
"""
        % tmp_path
    )
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_"))
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"), ANSIBLE_NOCOLOR="1")
    done = subprocess.run(
        [
            os.path.join(BIN, "ansible-playbook"),
            "-i",
            str(tmp_path / "inventory.yml"),
            str(tmp_path / "play.yml"),
        ],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "failed=0" in done.stdout
