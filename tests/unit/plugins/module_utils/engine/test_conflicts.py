"""What two parties of one mesh claim at once (engine/conflicts.py): refused naming both, the one
at fault as the subject; stand-ins for what hosts have not reported take no part. The engine
itself still computes Kilo's output for such a mesh (Kilo takes it); validate refuses it."""

import time

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.engine.conflicts import check_conflicts
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import Topology, build_plans

KEYS = [
    "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls=",
    "aNdi7F94dUaB6O9ScwgibmXpFk7PcQSX2C5Hzcc0b2M=",
    "egZbwjoiH99h6UF784NJ+Gwb26F9qk+xjdi578EalB8=",
    "B3dm3+3Afj5Ze4IIcyzxlaxlxLrALlC0Y/zZUgFRSCU=",
]
PEER_KEY = "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw="


def mesh():
    """a and b in location x, c in y; each its internal IP, pod range and endpoint."""
    return [
        dict(
            name="a",
            location="x",
            public_key=KEYS[0],
            endpoint="203.0.113.1:51820",
            internal_ip="10.1.0.1/24",
            pod_cidr="10.244.1.0/24",
        ),
        dict(
            name="b",
            location="x",
            public_key=KEYS[1],
            endpoint="10.1.0.2:51820",
            internal_ip="10.1.0.2/24",
            pod_cidr="10.244.2.0/24",
        ),
        dict(
            name="c",
            location="y",
            public_key=KEYS[2],
            endpoint="203.0.113.3:51820",
            internal_ip="10.2.0.3/24",
            pod_cidr="10.244.3.0/24",
        ),
    ]


def check(nodes, peers=(), options=None, standins=None):
    topology = Topology(nodes, list(peers), options or {})
    check_conflicts(topology, list(peers), standins)


def refused(nodes, peers=(), options=None, standins=None):
    with pytest.raises(KiloError) as e:
        check(nodes, peers, options, standins)
    return str(e.value)


def edit(**fields):
    """mesh() with fields of nodes changed: name -> {field: value}."""
    nodes = mesh()
    for node in nodes:
        node.update(fields.get(node["name"], {}))
    return nodes


def test_a_correct_mesh_passes():
    check(
        mesh(),
        [dict(name="p", public_key=PEER_KEY, allowed_ips=["10.5.0.1/32"])],
        {"service_cidrs": ["10.96.0.0/12"]},
    )


@pytest.mark.parametrize(
    "nodes, peers, options, message",
    [
        (
            edit(b={"pod_cidr": "10.244.1.0/24"}),
            [],
            {},
            "node 'b': pod_cidr: 10.244.1.0/24 is also the pod range 10.244.1.0/24 of node 'a'",
        ),
        (
            edit(c={"pod_cidr": "10.244.0.0/16"}),
            [],
            {},
            "node 'c': pod_cidr: 10.244.0.0/16 holds the pod range 10.244.1.0/24 of node 'a'",
        ),
        (
            edit(c={"internal_ip": "10.1.0.2/16"}),
            [],
            {},
            "node 'c': internal_ip: 10.1.0.2 is also the internal IP 10.1.0.2 of node 'b'",
        ),
        (
            edit(c={"endpoint": "203.0.113.1:51820"}),
            [],
            {},
            "node 'c': endpoint: 203.0.113.1:51820 is also the endpoint of node 'a'",
        ),
        (
            edit(c={"endpoint": "10.1.0.1:51821"}),
            [],
            {},
            "node 'c': endpoint: 10.1.0.1:51821 is at the internal IP 10.1.0.1 of node 'a'",
        ),
        (
            mesh(),
            [],
            {"subnet": "10.1.0.0/16"},
            "node 'a': internal_ip: 10.1.0.1 lies inside the mesh's subnet 10.1.0.0/16",
        ),
        (
            mesh(),
            [],
            {"service_cidrs": ["10.244.0.0/16"]},
            "node 'a': pod_cidr: 10.244.1.0/24 lies inside the service CIDR 10.244.0.0/16",
        ),
        (
            mesh(),
            [],
            {"service_cidrs": ["10.4.0.0/16"]},
            "options: service_cidrs: 10.4.0.0/16 is also the mesh's subnet 10.4.0.0/16",
        ),
        (
            edit(c={"allowed_location_ips": ["10.1.0.0/24"]}),
            [],
            {},
            "node 'c': allowed_location_ips: 10.1.0.0/24 holds the internal IP 10.1.0.1 of node 'a'",
        ),
        (
            edit(
                a={"allowed_location_ips": ["192.168.1.0/24"]},
                c={"allowed_location_ips": ["192.168.0.0/16"]},
            ),
            [],
            {},
            "node 'c': allowed_location_ips: 192.168.0.0/16 holds the allowed location IP 192.168.1.0/24 of node 'a' (location 'x')",
        ),
        (
            mesh(),
            [dict(name="p", public_key=PEER_KEY, allowed_ips=["10.244.0.0/16"])],
            {},
            "peer 'p': allowed_ips: 10.244.0.0/16 holds the pod range 10.244.1.0/24 of node 'a'",
        ),
        (
            mesh(),
            [dict(name="p", public_key=PEER_KEY, allowed_ips=["10.4.0.2/32"])],
            {},
            "peer 'p': allowed_ips: 10.4.0.2/32 is also the WireGuard IP 10.4.0.2 of segment location:y (led by node 'c')",
        ),
        (
            mesh(),
            [
                dict(name="p", public_key=PEER_KEY, allowed_ips=["10.5.0.1/32"]),
                dict(name="q", public_key=KEYS[3], allowed_ips=["10.5.0.0/24"]),
            ],
            {},
            "peer 'q': allowed_ips: 10.5.0.0/24 holds the allowed IP 10.5.0.1/32 of peer 'p'",
        ),
        (
            mesh(),
            [
                dict(
                    name="p",
                    public_key=PEER_KEY,
                    allowed_ips=["10.5.0.1/32"],
                    endpoint="203.0.113.3:51820",
                )
            ],
            {},
            "peer 'p': endpoint: 203.0.113.3:51820 is the endpoint of node 'c'",
        ),
        (
            edit(
                a={"cni_compatibility_ip": "10.244.1.9/32"},
                b={"cni_compatibility_ip": "10.244.1.9/32"},
            ),
            [],
            {},
            "node 'b': cni_compatibility_ip: 10.244.1.9 is also the CNI compatibility IP 10.244.1.9 of node 'a'",
        ),
    ],
)
def test_a_conflict_names_both_parties(nodes, peers, options, message):
    assert refused(nodes, peers, options).startswith(message)


def test_a_locations_allowed_ips_may_hold_its_own_lan():
    check(
        edit(
            a={"allowed_location_ips": ["10.1.0.0/24"]}, b={"allowed_location_ips": ["10.1.0.0/24"]}
        )
    )


def test_stand_ins_take_no_part():
    """Two hosts that have not reported share the stand-in endpoint and internal IP nobody has."""
    nodes = edit(b={"endpoint": "203.0.113.1:51820", "internal_ip": "10.1.0.1/24"})
    assert "endpoint" in refused(nodes) or "internal_ip" in refused(nodes)
    check(nodes, standins={"b": {"endpoint", "internal_ip", "public_key"}})


def test_the_engine_still_computes_what_kilo_takes():
    """Kilo's output is matched on every input Kilo accepts: two nodes of one pod range are
    computed (validate, not the engine, refuses them)."""
    plans = build_plans(edit(b={"pod_cidr": "10.244.1.0/24"}), [], {})["plans"]
    assert set(plans) == {"a", "b", "c"}


def test_the_check_follows_the_distinct_data():
    """3,000 nodes in 30 locations: one sweep per family (printed, not asserted on time)."""
    nodes = []
    for i in range(3000):
        nodes.append(
            dict(
                name="n%04d" % i,
                location="l%02d" % (i % 30),
                public_key=None,
                endpoint="198.51.%d.%d:51820" % (i // 250, i % 250 + 1),
                internal_ip="10.%d.%d.%d/16" % (100 + i % 30, i // 250, i % 250 + 1),
                pod_cidr="10.%d.%d.0/24" % (200 + i // 250, i % 250),
            )
        )
    import base64
    import hashlib

    for node in nodes:
        node["public_key"] = base64.b64encode(
            hashlib.sha256(node["name"].encode()).digest()
        ).decode()
    topology = Topology(nodes, [], {})
    start = time.time()
    check_conflicts(topology, [], {})
    print("conflicts of 3,000 nodes: %.2f s" % (time.time() - start))


def test_what_hosts_report_is_checked_before_any_host_converges(tmp_path):
    """Two locations' LANs of one range: both hosts discover 192.168.1.10. Validate could not know
    (no host had reported); the run's topology step refuses it, before any converge, naming the
    host and what reported it."""
    from ansible_collections.kilo.mesh.plugins.action import topology as module
    from test_mesh_reading import FakeHostvars, make_action

    def reported(key, public):
        return {
            "public_key": key,
            "internal_ip": "192.168.1.10/24",
            "external_ip": public,
            "discovered_endpoints": {},
            "mtu": 1500,
            "changed": False,
        }

    hostvars = {
        "a": {"kilo_location": "x", "kilo_host": reported(KEYS[0], "203.0.113.1")},
        "b": {"kilo_location": "y", "kilo_host": reported(KEYS[1], "203.0.113.2")},
    }
    for h in hostvars.values():
        h["kilo_registry"] = str(tmp_path / "registry.json")
    task_vars = dict(
        hostvars["a"],
        inventory_hostname="a",
        hostvars=FakeHostvars(hostvars),
        groups={"kilo": ["a", "b"], "all": ["a", "b"]},
        ansible_play_hosts=["a", "b"],
    )
    action = make_action(module, {"save_plans": True})
    with pytest.raises(KiloError) as e:
        action.run_kilo(action.options_of(task_vars), task_vars)
    assert str(e.value) == (
        "host 'b': internal_ip (reported by kilo.mesh.key): 192.168.1.10 is also the internal IP"
        " 192.168.1.10 of node 'a'"
    )
    assert not (tmp_path / "registry.json").exists()


def test_an_endpoint_inside_the_subnet_is_refused():
    assert refused(edit(c={"endpoint": "10.4.0.7:51820"})).startswith(
        "node 'c': endpoint: 10.4.0.7:51820 lies inside the mesh's subnet 10.4.0.0/16"
    )
    assert refused(
        mesh(),
        [
            dict(
                name="p",
                public_key=PEER_KEY,
                allowed_ips=["10.5.0.1/32"],
                endpoint="[fd04::9]:51820",
            )
        ],
        {"subnet": ["10.4.0.0/16", "fd04::/64"]},
    ).startswith("peer 'p': endpoint: [fd04::9]:51820 lies inside the mesh's subnet fd04::/64")
