"""Bad inventory input stops site.yml before any host is touched, with the host and the variable
named. The example inventory's hosts do not exist, so reaching any of them would show as
UNREACHABLE: every case below must fail in kilo.mesh.validate, the play's first task.
docs/docsite/rst/guide_bad_inputs.rst lists these cases (tests/unit/test_docs.py keeps the two equal)."""
import os
import subprocess

import pytest
import yaml

from sitetools import REPO

EXAMPLE = os.path.join(REPO, "inventory", "example.yml")
GOOD_KEY = "aNdi7F94dUaB6O9ScwgibmXpFk7PcQSX2C5Hzcc0b2M="  # aws-1's

# (what, {host or "kilo" (the group): {variable: value}}, expected message)
CASES = [
    ("port not a number", {"kilo": {"kilo_port": "many"}}, "host 'aws-1': kilo_port:"),
    ("port out of range", {"kilo": {"kilo_port": 70000}}, "host 'aws-1': kilo_port: 70000 out of range 1-65535"),
    ("subnet not a CIDR", {"kilo": {"kilo_subnet": "10.4.0.0/33"}}, "host 'aws-1': kilo_subnet: '10.4.0.0/33' is not a CIDR"),
    ("subnet too small for the segments", {"kilo": {"kilo_subnet": "10.4.0.0/31"}}, "host 'aws-1': kilo_subnet: 10.4.0.0/31 holds"),
    ("unknown granularity", {"kilo": {"kilo_granularity": "galaxy"}}, "host 'aws-1': kilo_granularity: value of granularity must be one of"),
    ("unknown encapsulation", {"kilo": {"kilo_encapsulate": "sometimes"}}, "host 'aws-1': kilo_encapsulate: value of encapsulate must be one of"),
    ("interface name the kernel refuses", {"kilo": {"kilo_interface": "kilo%0"}}, "host 'aws-1': kilo_interface: 'kilo%0' is not a valid Linux interface name"),
    ("interface name too long", {"kilo": {"kilo_interface": "a-very-long-name0"}}, "host 'aws-1': kilo_interface: 'a-very-long-name0' is not a valid"),
    ("boolean that is not one", {"kilo": {"kilo_local": "maybe"}}, "host 'aws-1': kilo_local:"),
    ("service CIDR that is not one", {"kilo": {"kilo_service_cidrs": ["10.96.0.0/99"]}}, "host 'aws-1': kilo_service_cidrs: '10.96.0.0/99' is not a CIDR"),
    ("peer without a key", {"kilo": {"kilo_peers": [{"name": "p", "allowed_ips": ["10.5.0.1/32"]}]}}, "peer 'p': public_key: missing"),
    ("peer without allowed IPs", {"kilo": {"kilo_peers": [{"name": "p", "public_key": "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw="}]}},
     "peer 'p': allowed_ips: a peer needs at least one allowed IP"),
    ("peer with a node's key", {"kilo": {"kilo_peers": [{"name": "p", "public_key": GOOD_KEY, "allowed_ips": ["10.5.0.1/32"]}]}},
     "peer 'p': public_key: same key as node 'aws-1'"),
    ("unknown WireGuard backend", {"kilo": {"kilo_backend": "magic"}}, "host 'aws-1': kilo_backend: value of backend must be one of"),
    ("unknown firewall", {"gcp-1": {"kilo_firewall": "pf"}}, "host 'gcp-1': kilo_firewall: value of firewall must be one of"),
    ("MTU not a number", {"home-2": {"kilo_mtu": "big"}}, "host 'home-2': kilo_mtu:"),
    ("unknown route conflict policy", {"aws-2": {"kilo_route_conflict": "maybe"}}, "host 'aws-2': kilo_route_conflict: value of route_conflict must be"),
    ("unknown state", {"aws-3": {"kilo_state": "gone"}}, "host 'aws-3': kilo_state: value of state must be one of"),
    ("mesh-wide setting that differs on one host", {"home-1": {"kilo_subnet": "10.9.0.0/16"}},
     "host 'home-1': kilo_subnet: '10.9.0.0/16' here, '10.4.0.0/16' on host 'aws-1'"),
    ("endpoint port out of range", {"gcp-2": {"kilo_force_endpoint": "203.0.113.7:99999"}},
     "host 'gcp-2': kilo_force_endpoint: port 99999 out of range 1-65535"),
    ("endpoint without a port", {"gcp-2": {"kilo_force_endpoint": "203.0.113.7"}}, "host 'gcp-2': kilo_force_endpoint: '203.0.113.7' is not host:port"),
    ("IPv6 endpoint without brackets", {"gcp-2": {"kilo_force_endpoint": "2001:db8::7:51820"}}, "host 'gcp-2': kilo_force_endpoint: '2001:db8::7:51820' is not host:port"),
    ("internal IP that is not one", {"aws-2": {"kilo_force_internal_ip": "bogus"}}, "host 'aws-2': kilo_force_internal_ip: 'bogus' is not an IP address"),
    ("pod CIDR that is not one", {"aws-2": {"kilo_pod_cidr": "10.244.2.0/33"}}, "host 'aws-2': kilo_pod_cidr: '10.244.2.0/33' is not a CIDR"),
    ("public key that is not one", {"aws-3": {"kilo_public_key": "short"}}, "host 'aws-3': kilo_public_key: not valid base64"),
    ("two hosts with one key", {"aws-3": {"kilo_public_key": GOOD_KEY}}, "host 'aws-3': kilo_public_key: same key as node 'aws-1'"),
    ("leader flag that is not a boolean", {"home-2": {"kilo_leader": "maybe"}}, "host 'home-2': kilo_leader: 'maybe' is not a boolean"),
    ("keepalive that is not a number", {"home-2": {"kilo_persistent_keepalive": "soon"}}, "host 'home-2': kilo_persistent_keepalive: 'soon' is not an integer"),
    ("allowed location IP that is not a CIDR", {"home-2": {"kilo_allowed_location_ips": ["nope"]}},
     "host 'home-2': kilo_allowed_location_ips: 'nope' is not a CIDR"),
    ("host in two location groups", {"two-groups": {}}, "host 'gcp-1': location: in location groups aws, gcp"),
    ("task timeout below one second", {"kilo": {"kilo_task_timeout": 0}}, "host 'aws-1': kilo_task_timeout: 0 out of range"),
    ("handshake bound shorter than WireGuard's rekey", {"kilo": {"kilo_leader_handshake_timeout": 60}},
     "host 'aws-1': kilo_leader_handshake_timeout: 60 s is below WireGuard's rekey interval"),
    ("MTU below zero", {"home-2": {"kilo_mtu": -5}}, "host 'home-2': kilo_mtu: -5 out of range 0-65535"),
    # "fresh": no host pins a key or an endpoint, as a first run: the engine leaves every host out
    # (none has reported), so only validate's check of each host's node variables can refuse these
    ("fresh mesh: keepalive that is not a number", {"fresh": {}, "home-2": {"kilo_persistent_keepalive": "abc"}},
     "host 'home-2': kilo_persistent_keepalive: 'abc' is not an integer"),
    ("fresh mesh: keepalive below zero", {"fresh": {}, "home-2": {"kilo_persistent_keepalive": -5}},
     "host 'home-2': kilo_persistent_keepalive: -5 out of range 0-65535"),
    ("fresh mesh: endpoint IPv4 out of range", {"fresh": {}, "gcp-2": {"kilo_force_endpoint": "300.1.1.1:51820"}},
     "host 'gcp-2': kilo_force_endpoint: '300.1.1.1:51820': '300.1.1.1' is not a valid IPv4 address"),
    ("fresh mesh: MTU below zero", {"fresh": {}, "home-2": {"kilo_mtu": -5}}, "host 'home-2': kilo_mtu: -5 out of range 0-65535"),
    ("fresh mesh: endpoint port zero", {"fresh": {}, "gcp-2": {"kilo_force_endpoint": "203.0.113.41:0"}},
     "host 'gcp-2': kilo_force_endpoint: port 0 out of range 1-65535"),
]


def inventory_with(tmp_path, edits):
    with open(EXAMPLE) as f:
        data = yaml.safe_load(f)
    if "fresh" in edits:
        for location in data["kilo"]["children"].values():
            for host in location.get("hosts", {}).values():
                host.pop("kilo_public_key", None)
                host.pop("kilo_force_endpoint", None)
    for target, values in edits.items():
        if target == "fresh":
            continue
        if target == "kilo":
            data["kilo"]["vars"].update(values)
        elif target == "two-groups":
            data["kilo"]["children"]["aws"]["hosts"]["gcp-1"] = {}
        else:
            for location in data["kilo"]["children"].values():
                if target in location.get("hosts", {}):
                    location["hosts"][target].update(values)
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("what, edits, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_stops_the_run_before_any_host(tmp_path, what, edits, expected):
    inventory = inventory_with(tmp_path, edits)
    argv = [os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "-i", str(inventory),
            os.path.join(REPO, "playbooks", "site.yml"), "--check"]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    proc = subprocess.run(argv, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False)
    out = proc.stdout.replace("''", "'")
    assert proc.returncode != 0, out
    assert expected in out, out
    assert "UNREACHABLE" not in out and "Traceback" not in out
    assert not (tmp_path / "kilo-registry.json").exists()
