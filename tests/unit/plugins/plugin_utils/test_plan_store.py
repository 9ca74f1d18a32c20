"""plan_store: the run's plans, one file per host, written as the engine renders them."""

from ansible import constants as C

from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans
from ansible_collections.kilo.mesh.plugins.plugin_utils import plan_store

NODES = [
    {
        "name": name,
        "location": "l",
        "public_key": key,
        "endpoint": "203.0.113.%d:51820" % i,
        "internal_ip": "10.0.0.%d/24" % i,
        "pod_cidr": "10.244.%d.0/24" % i,
    }
    for i, (name, key) in enumerate(
        (("a", "A" * 43 + "="), ("b", "B" * 43 + "="), ("c", "C" * 43 + "=")), 1
    )
]


def test_plans_are_written_one_at_a_time_and_read_back_per_host(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path))
    plans = build_plans(NODES, [])["plans"]
    taken = []

    def one_by_one():
        for host in plans:
            taken.append(host)
            yield host, plans[host]

    directory = plan_store.save(one_by_one())
    assert taken == ["a", "b", "c"]
    for host in taken:
        assert plan_store.load(directory, host) == plans[host]
    assert plan_store.load(directory, "d") is None
    files = list((tmp_path / directory.rsplit("/", 1)[1]).iterdir())
    assert len(files) == 3 and all(f.stat().st_mode & 0o777 == 0o600 for f in files)
