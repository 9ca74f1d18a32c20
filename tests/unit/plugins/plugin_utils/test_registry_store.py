"""The registry's stores (plugin_utils/registry_store.py): the file beside the inventory and Redis.

Many writers at once, as the slices of an AWX job are: separate processes (not threads), each
writing its own hosts and peers several times while the others do, some rewriting one shared
host; afterwards every host's last entry and every peer is there. No update is lost. Redis is a
real redis-server started here (127.0.0.1, a free port) and stopped by its PID.
"""

import json
import multiprocessing
import time

import pytest

from ansible_collections.kilo.mesh.plugins.plugin_utils import inputs, registry_store
from redis_server import free_port, redis_server  # pylint: disable=wrong-import-order
from checkout import ROOT

WRITERS = 12
ROUNDS = 15
FACTS = {"public_key": "k", "external_ip": "203.0.113.1", "internal_ip": "10.0.0.1/24", "mtu": 1420}


@pytest.fixture(scope="module")
def redis_url():
    with redis_server() as url:
        yield url


def writer(location, index, start):
    """Writer ``index``: ROUNDS rounds of its own host (a new MTU each round), a peer of its
    own, and the host ``shared`` (everyone's)."""
    while time.time() < start:
        time.sleep(0.001)
    for r in range(ROUNDS):
        facts = dict(FACTS, external_ip="203.0.113.%d" % (index + 1), mtu=1300 + r)
        inputs.update_registry(
            location,
            {
                "w%d" % index: facts,
                "shared": dict(FACTS, external_ip="198.51.100.%d" % (index + 1)),
            },
        )
        inputs.set_registry_peer(
            location,
            "p%d" % index,
            {"public_key": "pk%d" % index, "allowed_ips": ["10.5.0.%d/32" % r]},
        )


def run_writers(location):
    start = time.time() + 0.5  # every process ready before the first write
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=writer, args=(location, i, start)) for i in range(WRITERS)]
    began = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    took = time.monotonic() - began
    print(
        "%d writers x %d rounds on %s: %.2f s"
        % (WRITERS, ROUNDS, registry_store.shown(location), took)
    )
    return inputs.read_registry(location)


def check_nothing_lost(data):
    for i in range(WRITERS):
        assert data["hosts"]["w%d" % i]["mtu"] == 1300 + ROUNDS - 1, i
        assert data["hosts"]["w%d" % i]["external_ip"] == "203.0.113.%d" % (i + 1), i
        assert data["peers"]["p%d" % i] == {
            "public_key": "pk%d" % i,
            "allowed_ips": ["10.5.0.%d/32" % (ROUNDS - 1)],
        }
    assert set(data["hosts"]) == set(["w%d" % i for i in range(WRITERS)] + ["shared"])
    assert data["hosts"]["shared"]["external_ip"] in [
        "198.51.100.%d" % (i + 1) for i in range(WRITERS)
    ]


def test_concurrent_writers_lose_no_update_in_the_file(tmp_path):
    check_nothing_lost(run_writers(str(tmp_path / "kilo-registry.json")))


def test_concurrent_writers_lose_no_update_in_redis(redis_url):
    url = redis_url + "?key=many"
    check_nothing_lost(run_writers(url))


def test_redis_store_reads_writes_and_forgets_as_the_file_does(redis_url, tmp_path):
    for location in (redis_url + "?key=same", str(tmp_path / "kilo-registry.json")):
        assert inputs.update_registry(location, {"a": dict(FACTS), "b": dict(FACTS)}) is True
        assert inputs.update_registry(location, {"a": dict(FACTS)}) is False  # unchanged: no write
        data = inputs.read_registry(location)
        assert sorted(data["hosts"]) == ["a", "b"] and data["hosts"]["a"]["public_key"] == "k"
        assert (
            inputs.set_registry_peer(location, "laptop", {"public_key": "x", "allowed_ips": []})
            is None
        )
        assert inputs.forget_registry_hosts(location, ["a", "zz"], check_mode=True) == ["a"]
        assert sorted(inputs.read_registry(location)["hosts"]) == ["a", "b"], "check mode wrote"
        assert inputs.forget_registry_hosts(location, ["a"]) == ["a"]
        assert list(inputs.read_registry(location)["hosts"]) == ["b"]
        assert inputs.set_registry_peer(location, "laptop", None) == {
            "public_key": "x",
            "allowed_ips": [],
        }
        assert inputs.forget_registry_hosts(location, ["b"]) == ["b"]
        assert inputs.read_registry(location) == {"hosts": {}, "peers": {}}
        assert not registry_store.open_store(location).exists()  # a mesh taken away leaves nothing


def test_two_meshes_share_a_database_under_their_own_key(redis_url):
    inputs.update_registry(redis_url + "?key=one", {"a": dict(FACTS)})
    inputs.update_registry(redis_url + "?key=two", {"b": dict(FACTS)})
    assert list(inputs.read_registry(redis_url + "?key=one")["hosts"]) == ["a"]
    assert list(inputs.read_registry(redis_url + "?key=two")["hosts"]) == ["b"]


def test_redis_errors_name_the_registry_without_its_password(redis_url):
    # a server that refuses: a port nobody listens on
    url = "redis://:s3cret@127.0.0.1:%d/0" % free_port()
    with pytest.raises(inputs.InputError) as e:
        inputs.read_registry(url)
    assert "s3cret" not in str(e.value) and "registry redis://:***@127.0.0.1:" in str(e.value), str(
        e.value
    )
    assert registry_store.shown(url).startswith("redis://:***@127.0.0.1:")
    # a broken entry is a clear error naming the field
    import redis  # pylint: disable=import-outside-toplevel

    redis.Redis.from_url(redis_url).hset("broken:hosts", "x", "{not json")
    with pytest.raises(inputs.InputError) as e:
        inputs.read_registry(redis_url + "?key=broken")
    assert "hosts.x" in str(e.value) and "not valid JSON" in str(e.value), str(e.value)
    assert json.dumps(registry_store.empty()) == '{"hosts": {}, "peers": {}}'


def test_playbooks_keep_peers_and_read_the_mesh_from_redis(redis_url, tmp_path):
    """kilo.mesh.peer (store registry) and kilo.mesh.topology with kilo_registry a Redis URL, as a
    user's inventory sets it: the peer lands in Redis, the mesh reads it back."""
    import os  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    import yaml  # pylint: disable=import-outside-toplevel

    root = ROOT
    url = redis_url + "?key=play"
    key = "%s=" % ("D" * 43)
    (tmp_path / "inventory.yml").write_text(
        yaml.safe_dump(
            {
                "kilo": {
                    "vars": {"kilo_registry": url},
                    "children": {
                        "east": {
                            "hosts": {
                                "e1": {
                                    "kilo_public_key": key,
                                    "kilo_force_endpoint": "203.0.113.1:51820",
                                }
                            }
                        }
                    },
                }
            }
        )
    )
    (tmp_path / "play.yml").write_text(
        """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - kilo.mesh.peer:
        name: laptop
        store: registry
        public_key: "%s"
        allowed_ips: [10.5.0.9/32]
      register: stored
    - kilo.mesh.topology:
      register: mesh
    - ansible.builtin.assert:
        that:
          - stored is changed
          - stored.registry == "%s"
          - mesh.registry == "%s"
          - mesh.plans.e1.peers | map(attribute='name') | list == ['laptop']
"""
        % ("E" * 43 + "=", url, url)
    )
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_"))
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.join(root, ".collections"), ANSIBLE_NOCOLOR="1")
    done = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
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
    assert inputs.read_registry(url)["peers"]["laptop"]["allowed_ips"] == ["10.5.0.9/32"]
    assert not (tmp_path / "kilo-registry.json").exists()


def run_play(tmp_path, inventory, play):
    import os  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    import yaml  # pylint: disable=import-outside-toplevel

    root = ROOT
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(play)
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_"))
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.join(root, ".collections"), ANSIBLE_NOCOLOR="1")
    return subprocess.Popen(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i",
            str(tmp_path / "inventory.yml"),
            str(tmp_path / "play.yml"),
        ],
        cwd=str(tmp_path),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


WAIT_PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - kilo.mesh.topology:
        save_plans: true
        registry_wait: %d
      register: mesh
    - ansible.builtin.debug:
        msg: "waited={{ mesh.registry_waited }} nodes={{ mesh.nodes }} missing={{ mesh.missing | default([]) | join(',') }}"
"""


def wait_inventory(registry):
    key = "%s=" % ("F" * 43)
    return {
        "kilo": {
            "vars": {"kilo_registry": registry},
            "children": {
                "east": {
                    "hosts": {
                        "e1": {"kilo_public_key": key, "kilo_force_endpoint": "203.0.113.1:51820"},
                        "e2": {},
                    }
                }
            },
        }
    }


def test_registry_wait_ends_when_the_missing_host_arrives(tmp_path):
    """registry_wait: the plan step reads the registry again until every mesh host is there; a host
    another slice writes meanwhile ends the wait at once, with that host in the mesh."""
    import re  # pylint: disable=import-outside-toplevel

    registry = str(tmp_path / "kilo-registry.json")
    proc = run_play(tmp_path, wait_inventory(registry), WAIT_PLAY % 60)
    time.sleep(4)  # the play is waiting by now (ansible-playbook starts in about 2 s)
    inputs.update_registry(
        registry,
        {
            "e2": {
                "public_key": "%s=" % ("G" * 43),
                "external_ip": "203.0.113.2",
                "internal_ip": "172.16.0.2/24",
                "mtu": 1420,
            }
        },
    )
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, out
    waited, nodes, missing = re.search(r"waited=([\d.]+) nodes=(\d+) missing=(\S*)\"", out).groups()
    print("registry_wait 60: the host arrived after about 4 s; waited %s s" % waited)
    assert int(nodes) == 2 and missing == "", out  # read again: the host another writer added is in


def test_registry_wait_is_bounded_and_names_the_hosts_left_out(tmp_path):
    import re  # pylint: disable=import-outside-toplevel

    proc = run_play(tmp_path, wait_inventory(str(tmp_path / "kilo-registry.json")), WAIT_PLAY % 2)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, out
    waited, nodes, missing = re.search(r"waited=([\d.]+) nodes=(\d+) missing=(\S*)\"", out).groups()
    print("registry_wait 2: waited %s s" % waited)
    assert int(nodes) == 1 and missing == "e2", out
    assert "hosts without a key or endpoint are left out of the mesh: e2" in out, out
