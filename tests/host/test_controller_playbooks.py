"""Controller-only playbooks on the example inventory (no host is touched): the plans table,
the topology picture, an outside peer's configuration, and a validation error."""
import os
import re
import subprocess

from sitetools import REPO

EXAMPLE = os.path.join(REPO, "inventory", "example.yml")


def playbook(name, *extra):
    argv = [os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "-i", EXAMPLE,
            os.path.join(REPO, "playbooks", name)] + list(extra)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    return subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False)


def test_plans_table_and_picture(tmp_path):
    dot = tmp_path / "topology.dot"
    proc = playbook("plan.yml", "-e", "plan_dot=%s" % dot)
    assert proc.returncode == 0, proc.stdout
    leaders = re.findall(r"^\s+(\S+)\s+\S+\s+location:\S+\s+yes\s+(10\.4\.0\.\d+/16)", proc.stdout, re.M)
    # Three locations, three leaders, WireGuard IPs in segment order.
    assert leaders == [("aws-1", "10.4.0.1/16"), ("gcp-1", "10.4.0.2/16"), ("home-1", "10.4.0.3/16")], proc.stdout
    svg = subprocess.run(["dot", "-Tsvg", str(dot)], stdout=subprocess.PIPE, text=True, check=True).stdout
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
