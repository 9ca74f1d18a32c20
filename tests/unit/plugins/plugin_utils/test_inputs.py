"""Controller-side inputs: inventory host variables and the registry become topology nodes."""

import json
import os
import threading

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.plugin_utils import inputs

KEY = "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="
FACTS = {
    "public_key": KEY,
    "internal_ip": "172.16.1.2/24",
    "external_ip": None,
    "discovered_endpoints": {},
    "mtu": 1500,
}


def test_endpoint_from_discovery_prefers_the_external_ip():
    node = inputs.node_from_host("a", {}, dict(FACTS, external_ip="203.0.113.5"), "aws", 51820)
    assert node["endpoint"] == "203.0.113.5:51820"
    assert node["internal_ip"] == "172.16.1.2/24"
    assert node["location"] == "aws"


def test_endpoint_falls_back_to_the_internal_ip_and_formats_ipv6():
    assert inputs.node_from_host("a", {}, FACTS, "", 51820)["endpoint"] == "172.16.1.2:51820"
    v6 = dict(FACTS, external_ip="2001:db8::5")
    assert inputs.node_from_host("a", {}, v6, "", 51821)["endpoint"] == "[2001:db8::5]:51821"


def test_pinned_endpoint_beats_a_management_address_discovery_would_pick():
    # Kilo's discovery counts 198.18.0.0/15 as public: a lab host's management NIC would win.
    facts = dict(FACTS, external_ip="198.18.1.1")
    hvars = {"kilo_force_endpoint": "203.0.113.9:51820"}
    assert inputs.node_from_host("a", hvars, facts, "", 51820)["endpoint"] == "203.0.113.9:51820"


def test_annotation_variables():
    hvars = {
        "kilo_location": "",
        "kilo_leader": "",
        "kilo_force_internal_ip": "-",
        "kilo_persistent_keepalive": "25",
        "kilo_allowed_location_ips": "10.9.0.0/24, 10.8.0.0/24",
        "kilo_pod_cidr": "10.244.1.0/24",
    }
    node = inputs.node_from_host("a", hvars, FACTS, "aws", 51820)
    assert node["location"] == ""  # the key is present, even empty: it wins (as Kilo)
    assert node["leader"] is True  # presence alone counts (as Kilo's annotation)
    assert node["internal_ip"] is None  # "-" means no internal IP
    assert node["persistent_keepalive"] == "25"  # as given: the engine parses it
    assert node["allowed_location_ips"] == "10.9.0.0/24, 10.8.0.0/24"  # as given: the engine's
    assert node["pod_cidr"] == "10.244.1.0/24"
    assert inputs.node_from_host("a", {"kilo_leader": False}, FACTS, "", 51820)["leader"] is False


@pytest.mark.parametrize(
    "field,value",
    [
        ("kilo_leader", "maybe"),
        ("kilo_force_internal_ip", "bogus"),
    ],
)
def test_bad_variables_name_the_host_and_the_variable(field, value):
    # (a row without a check, a bad keepalive or allowed location IPs, is the engine's to refuse:
    # test_nodes.test_validate_checks_every_host_whether_it_reported_or_not)
    # bug 5: a bad kilo_force_internal_ip was a bare ValueError the actions did not catch
    with pytest.raises(KiloError) as e:
        inputs.node_from_host("db-1", {field: value}, dict(FACTS, external_ip=None), "", 51820)
    assert (e.value.subject, e.value.field) == ("host 'db-1'", field)


def test_facts_from_result_ignores_failed_and_skipped_hosts():
    assert inputs.facts_from_result({"failed": True, "public_key": KEY}) is None
    assert inputs.facts_from_result({"skipped": True}) is None
    assert inputs.facts_from_result(None) is None
    assert inputs.facts_from_result(dict(FACTS, changed=False))["public_key"] == KEY


class FakeHostvars(dict):
    """Ansible's HostVars without an inventory object: locations then come from kilo_location."""


def test_gather_nodes_takes_this_run_then_the_registry_and_lists_the_unknown():
    hostvars = FakeHostvars(
        {
            "a": {"kilo_location": "x", "kilo_host": dict(FACTS)},  # reported now
            "b": {"kilo_location": "y", "kilo_host": {"unreachable": True}},  # from registry
            "c": {"kilo_location": "y"},  # never seen
        }
    )
    registry = {"hosts": {"b": dict(FACTS, public_key="b" * 43 + "=")}}
    nodes, missing, fresh, _rotating = inputs.gather_nodes(
        {"hostvars": hostvars, "groups": {"kilo": ["a", "b", "c"]}},
        "kilo",
        51820,
        "kilo_host",
        registry,
        None,
    )
    assert [n["name"] for n in nodes] == ["a", "b"]
    assert nodes[1]["public_key"] == "b" * 43 + "="
    assert missing == ["c"]
    assert list(fresh) == ["a"]


def test_a_rotating_host_is_planned_with_its_new_key_and_registered_with_the_key_it_runs():
    """The mesh's plans carry the new key (its peers switch to it in this run); the registry keeps
    the one the interface runs until kilo.mesh.join saw the switch (a cut-short run or a later
    --limit run without the host must not hand its peers a key it does not run yet)."""
    new, old = "n" * 43 + "=", "o" * 43 + "="
    hostvars = FakeHostvars(
        {
            "a": {
                "kilo_location": "x",
                "kilo_host": dict(FACTS, public_key=new, rotating=True, previous_public_key=old),
            },
            "b": {"kilo_location": "y", "kilo_host": dict(FACTS, public_key="b" * 43 + "=")},
        }
    )
    nodes, _missing, fresh, rotating = inputs.gather_nodes(
        {"hostvars": hostvars, "groups": {"kilo": ["a", "b"]}},
        "kilo",
        51820,
        "kilo_host",
        {"hosts": {}},
        None,
    )
    assert rotating == {"a"}
    assert nodes[0]["public_key"] == new
    assert fresh["a"]["public_key"] == old and fresh["b"]["public_key"] == "b" * 43 + "="
    # a host whose interface ran no key yet (none to keep) is registered with the new one
    first = dict(FACTS, public_key=new, rotating=True, previous_public_key=None)
    assert inputs.registry_facts(inputs.facts_from_result(first), first)["public_key"] == new


def test_registry_merges_parallel_writers_and_keeps_other_hosts(tmp_path):
    path = str(tmp_path / "kilo-registry.json")
    inputs.update_registry(path, {"old": dict(FACTS)})
    # Every host's worker writes its own entry at the same time.
    threads = [
        threading.Thread(target=inputs.update_registry, args=(path, {"h%d" % i: dict(FACTS)}))
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data = inputs.read_registry(path)
    assert sorted(data["hosts"]) == ["h%d" % i for i in range(8)] + ["old"]
    assert all("private" not in json.dumps(v) for v in data["hosts"].values())
    # Unchanged facts do not rewrite the file.
    before = os.stat(path).st_mtime_ns
    assert inputs.update_registry(path, {"old": dict(FACTS)}) is False
    assert os.stat(path).st_mtime_ns == before


def test_a_broken_registry_is_a_clear_error(tmp_path):
    path = tmp_path / "kilo-registry.json"
    path.write_text("{not json")
    with pytest.raises(inputs.InputError) as e:
        inputs.read_registry(str(path))
    assert str(path) in str(e.value)


def test_a_registry_that_cannot_be_written_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = str(blocker / "kilo-registry.json")  # its directory is a file
    with pytest.raises(inputs.InputError) as e:
        inputs.update_registry(path, {"a": {"public_key": "k"}})
    assert str(e.value).startswith("registry %s: cannot write it:" % path), str(e.value)


def test_locations_never_collapse_silently_without_the_inventory():
    hostvars = FakeHostvars(
        {"a": {"kilo_host": dict(FACTS)}, "b": {"kilo_location": "y", "kilo_host": dict(FACTS)}}
    )
    with pytest.raises(inputs.InputError) as e:
        inputs.gather_nodes(
            {"hostvars": hostvars, "groups": {"kilo": ["a", "b"]}},
            "kilo",
            51820,
            "kilo_host",
            {"hosts": {}},
            None,
        )
    assert "'a'" in str(e.value) and "kilo_location" in str(e.value)


def test_disagreeing_peers_never_show_their_keys():
    from ansible_collections.kilo.mesh.plugins.plugin_utils.validate import agree

    secret = "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="
    peers = [
        {"name": "p", "public_key": KEY, "allowed_ips": ["10.5.0.1/32"], "preshared_key": secret}
    ]
    with pytest.raises(KiloError) as e:
        agree({"h1": {"peers": peers}, "h2": {"peers": []}})
    assert (e.value.subject, e.value.field) == ("host 'h2'", "kilo_peers")
    assert secret not in str(e.value)
    with pytest.raises(KiloError, match="'10.9.0.0/16' here, '10.4.0.0/16' on host 'h1'"):
        agree({"h1": {"subnet": "10.4.0.0/16"}, "h2": {"subnet": "10.9.0.0/16"}})


def test_stale_leaders_are_those_with_only_old_or_no_handshakes_with_nodes():
    keys = {"A", "B", "C"}
    reported = {
        "fresh": {"A": 30, "B": 900},  # one live tunnel to another node is enough
        "stale": {"A": 900, "B": None},  # every node tunnel old or never
        "peer-only": {"laptop": 5},  # outside peers do not count; no node peers: not judged
        "follower": {},  # a non-leader has no peers
        "unreported": None,
    }
    assert inputs.stale_leaders(reported, keys, 300) == {"stale"}
    assert inputs.stale_leaders(reported, keys, 1000) == set()
    # both ends of the only tunnel look stale: which one is broken cannot be told
    assert inputs.stale_leaders({"x": {"B": 900}, "y": {"A": 900}}, keys, 300) == set()


# --- Kubernetes: the agent annotations of a host's Node (host variable kilo_kubernetes_node) ---


def _written(key, **extra):
    """kilo_kubernetes_node as the inventory plugin sets it from annotations Kilo's agent wrote."""
    out = dict(
        public_key=key,
        endpoint="203.0.113.7:51821",
        internal_ip="172.16.9.7/24",
        wireguard_ip=None,
        discovered_endpoints={},
        last_seen=None,
        granularity="location",
        ready=None,
    )
    out.update(extra)
    return out


def test_gather_nodes_falls_back_to_the_node_annotations_after_the_registry():
    k_reg, k_ann = "r" * 43 + "=", "n" * 43 + "="
    hostvars = FakeHostvars(
        {
            "now": {
                "kilo_location": "x",
                "kilo_host": dict(FACTS),
                "kilo_kubernetes_node": _written(k_ann),
            },
            "reg": {"kilo_location": "x", "kilo_kubernetes_node": _written(k_ann)},
            "ann": {"kilo_location": "y", "kilo_kubernetes_node": _written(k_ann)},
            "nokey": {"kilo_location": "y", "kilo_kubernetes_node": _written(None)},
            "noendpoint": {
                "kilo_location": "y",
                "kilo_kubernetes_node": _written(k_ann, endpoint=None),
            },
        }
    )
    registry = {"hosts": {"reg": dict(FACTS, public_key=k_reg)}}
    nodes, missing, fresh, _rotating = inputs.gather_nodes(
        {"hostvars": hostvars, "groups": {"kilo": list(hostvars)}},
        "kilo",
        51820,
        "kilo_host",
        registry,
        None,
    )
    by = dict((n["name"], n) for n in nodes)
    assert by["now"]["public_key"] == KEY and list(fresh) == ["now"]  # this run first
    assert by["reg"]["public_key"] == k_reg  # then the registry
    # then the annotations: the endpoint as written (its port kept), the internal IP
    assert by["ann"]["public_key"] == k_ann
    assert (
        by["ann"]["endpoint"] == "203.0.113.7:51821" and by["ann"]["internal_ip"] == "172.16.9.7/24"
    )
    assert missing == ["nokey", "noendpoint"]


def test_annotations_keep_a_node_whatever_its_last_seen_and_ready_condition():
    # Push mode has no agent checking in every 30 s: Kilo's "last-seen within 60 s" rule would drop
    # every host outside --limit. A Node's age and Ready condition never take it out of the mesh.
    ancient = _written(
        "n" * 43 + "=", last_seen=1, ready=False, discovered_endpoints={KEY: "198.51.100.9:4000"}
    )
    hostvars = FakeHostvars({"old": {"kilo_location": "y", "kilo_kubernetes_node": ancient}})
    nodes, missing, _fresh, _rotating = inputs.gather_nodes(
        {"hostvars": hostvars, "groups": {"kilo": ["old"]}},
        "kilo",
        51820,
        "kilo_host",
        {"hosts": {}},
        None,
    )
    assert [n["name"] for n in nodes] == ["old"] and missing == []
    assert nodes[0]["discovered_endpoints"] == {KEY: "198.51.100.9:4000"}


def test_a_forced_endpoint_beats_the_annotated_one():
    hvars = {
        "kilo_force_endpoint": "example.com:51820",
        "kilo_kubernetes_node": _written("n" * 43 + "="),
    }
    facts, fresh = inputs.host_facts(hvars, "kilo_host", None)
    assert not fresh
    assert inputs.node_from_host("h", hvars, facts, "x", 51820)["endpoint"] == "example.com:51820"


def test_registry_peers_are_stored_checked_out_and_lose_to_kilo_peers(tmp_path):
    path = str(tmp_path / "kilo-registry.json")
    inputs.update_registry(path, {"h": dict(FACTS)})
    laptop = {
        "public_key": "HrvQbzPuMwVlzdGx6qtlRwjONFThcrY/AMyM4UbNuCc=",
        "allowed_ips": ["10.5.0.1/32"],
        "endpoint": None,
        "persistent_keepalive": 25,
    }
    assert inputs.set_registry_peer(path, "laptop", laptop, check_mode=True) is None
    assert inputs.read_registry(path)["peers"] == {}  # check mode writes nothing
    assert (
        inputs.set_registry_peer(
            str(tmp_path / "new" / "r.json"), "laptop", laptop, check_mode=True
        )
        is None
    )
    assert not (tmp_path / "new").exists()  # not even a lock file
    assert inputs.set_registry_peer(path, "laptop", laptop) is None
    assert inputs.set_registry_peer(path, "laptop", laptop) == laptop  # the second time: no change
    inputs.set_registry_peer(path, "office", dict(laptop, allowed_ips=["10.20.0.0/16"]))
    data = inputs.read_registry(path)
    assert sorted(data["peers"]) == ["laptop", "office"] and "h" in data["hosts"]  # hosts kept
    # the inventory's own kilo_peers win by name
    office = {"name": "office", "public_key": laptop["public_key"], "allowed_ips": ["10.9.0.0/16"]}
    assert inputs.mesh_peers([office], data) == [office, dict(laptop, name="laptop")]
    assert inputs.set_registry_peer(path, "laptop", None) == laptop
    assert list(inputs.read_registry(path)["peers"]) == ["office"]
    assert inputs.set_registry_peer(path, "nobody", None) is None


def test_a_registry_whose_peers_are_not_a_mapping_is_a_clear_error(tmp_path):
    path = tmp_path / "kilo-registry.json"
    path.write_text(json.dumps({"hosts": {}, "peers": ["laptop"]}))
    with pytest.raises(KiloError) as e:
        inputs.read_registry(str(path))
    assert "'peers'" in str(e.value) and str(path) in str(e.value)


class CountingHostvars(FakeHostvars):
    """Hostvars that count look-ups: a host's variables are what a run-once step pays for."""

    def __init__(self, *args):
        super().__init__(*args)
        self.looked_up = []

    def __getitem__(self, host):
        self.looked_up.append(host)
        return super().__getitem__(host)


def test_gather_nodes_takes_hosts_outside_the_play_from_an_earlier_reading():
    pinned = {
        "kilo_location": "y",
        "kilo_public_key": KEY,
        "kilo_force_endpoint": "203.0.113.7:51820",
    }
    hostvars = CountingHostvars(
        {"a": {"kilo_location": "x", "kilo_host": dict(FACTS)}, "b": dict(pinned)}
    )
    task_vars = {"hostvars": hostvars, "groups": {"kilo": ["a", "b"]}}
    read = {"b": inputs.host_inputs(hostvars["b"])}
    hostvars.looked_up.clear()
    nodes, missing, fresh, rotating = inputs.gather_nodes(
        task_vars, "kilo", 51820, "kilo_host", {"hosts": {}}, None, read
    )
    assert hostvars.looked_up == ["a", "a"]  # b's variables never computed again
    again = inputs.gather_nodes(task_vars, "kilo", 51820, "kilo_host", {"hosts": {}}, None)
    assert (nodes, missing, fresh, rotating) == again
    assert [n["endpoint"] for n in nodes] == ["172.16.1.2:51820", "203.0.113.7:51820"]


def test_host_inputs_are_the_variables_the_mesh_reads_and_nothing_else():
    hvars = {
        "kilo_pod_cidr": "10.244.1.0/24",
        "kilo_kubernetes_node": {"public_key": KEY},
        "kilo_host": dict(FACTS),
        "ansible_host": "198.18.0.5",
        "kilo_peers": [],
    }
    assert inputs.host_inputs(hvars) == {
        "kilo_pod_cidr": "10.244.1.0/24",
        "kilo_kubernetes_node": {"public_key": KEY},
    }


def test_a_reading_is_kept_for_the_run_under_its_key(tmp_path, monkeypatch):
    from ansible import constants as C
    from ansible_collections.kilo.mesh.plugins.plugin_utils import plan_store

    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path))
    plan_store.save_reading("play-1 kilo", {"b": {"kilo_location": "y"}})
    assert plan_store.load_reading("play-1 kilo") == {"b": {"kilo_location": "y"}}
    assert plan_store.load_reading("play-2 kilo") == {}
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].stat().st_mode & 0o777 == 0o600
    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path / "gone"))
    plan_store.save_reading("play-1 kilo", {"b": {}})  # no run directory: nothing kept, no error
    assert plan_store.load_reading("play-1 kilo") == {}


def test_the_registry_hides_inside_an_inventory_directory(tmp_path):
    """Ansible reads every file of a directory given as inventory source, the registry too:
    there it is the hidden .kilo-registry.json; beside an inventory file, the visible name."""
    source = tmp_path / "inventory"
    (source / "prod").mkdir(parents=True)
    hidden, visible = str(source / ".kilo-registry.json"), str(source / "kilo-registry.json")

    def path(inventory_dir, sources):
        return inputs.registry_path(
            {"inventory_dir": str(inventory_dir), "ansible_inventory_sources": sources}
        )

    assert path(source, [str(source)]) == hidden
    assert path(source / "prod", [str(source)]) == str(source / "prod" / ".kilo-registry.json")
    assert path(source, [str(source / "hosts.yml")]) == visible  # a file source: as before
    assert path(tmp_path / "inventory2", [str(source)]) == str(
        tmp_path / "inventory2" / "kilo-registry.json"
    )
    open(visible, "w").close()  # a registry made before: kept where it is
    assert path(source, [str(source)]) == visible
    open(hidden, "w").close()
    assert path(source, [str(source)]) == hidden
    assert inputs.registry_path({}, path="/srv/reg.json") == "/srv/reg.json"


def test_the_hosts_whose_key_step_reported_a_switch_are_read_with_the_rest():
    """kilo.mesh.topology's rotation schedule takes them from this reading: no second look-up of
    every play host's variables on a plain run."""
    hostvars = CountingHostvars(
        {
            "a": {"kilo_location": "x", "kilo_host": dict(FACTS, rotating=True)},
            "b": {"kilo_location": "x", "kilo_host": dict(FACTS, rotating=False)},
        }
    )
    hostvars.looked_up.clear()
    _nodes, _missing, _fresh, rotating = inputs.gather_nodes(
        {"hostvars": hostvars, "groups": {"kilo": ["a", "b"]}},
        "kilo",
        51820,
        "kilo_host",
        {"hosts": {}},
        None,
    )
    assert rotating == {"a"}
    assert sorted(hostvars.looked_up) == [
        "a",
        "a",
        "b",
        "b",
    ]  # as many look-ups as before: placed, then the node


def test_stale_relays_are_judged_by_the_leaders_behind_nat_alone():
    nodes = [
        {"name": "r", "endpoint": "203.0.113.1:51820", "public_key": "R"},
        {"name": "s", "endpoint": "203.0.113.2:51820", "public_key": "S"},
        {"name": "u", "behind_nat": True, "endpoint": "10.0.0.1:51820", "public_key": "U"},
        {"name": "v", "public_key": "V"},
    ]
    # both NAT'd leaders: r silent (old, never), s fresh; a relay's own view does not count
    reported = {
        "u": {"R": 900, "S": 10},
        "v": {"R": None, "S": 20},
        "s": {"R": 1, "U": 900, "V": 900},
    }
    assert inputs.stale_relays(reported, nodes, 180) == {"r"}
    assert inputs.stale_relays(reported, nodes, 1000) == set()
    # one NAT'd end still handshakes with r: r is alive
    assert inputs.stale_relays({"u": {"R": 900}, "v": {"R": 5}}, nodes, 180) == set()
    # nobody behind NAT reported (first run, no interface yet): nobody judged
    assert inputs.stale_relays({"u": {}, "v": None, "r": {"S": 900}}, nodes, 180) == set()


def test_direct_path_states_of_a_push_run():
    """``direct_paths: always``: path states from the NAT'd leaders' reports; probing, then direct
    once both ends report a fresh probe handshake, back when stale; an end out of the run keeps
    what the in-run end's interface runs, with a warning."""
    from flat_plans import build_plans
    from test_topology_relays import key, timed_mesh

    nodes, by = timed_mesh()
    base = build_plans(nodes, [], {}, only=[])
    now = 5000.0

    def run(reports, bound=180):
        fresh = [dict(n) for n in nodes]
        states, live, warnings = inputs.direct_path_states(reports, fresh, base, now, bound)
        for node in fresh:
            if node["name"] in states:
                node["path_state"] = states[node["name"]]
        computed = build_plans(fresh, [], {}, now=now)
        leaders = {"location:u": "u", "location:v": "v"}
        return (
            computed["paths"][-1]["path"],
            inputs.direct_switchers(live, computed, leaders),
            warnings,
        )

    relay = {"R": None}
    # run 2: the relay's mappings known, no entry between u and v yet: probing, nobody moves
    reported = {
        "u": {"handshakes": {key(1): 3, key(2): 4}, "probes": []},
        "v": {"handshakes": {key(1): 3, key(2): 4}, "probes": []},
        "r": {"handshakes": relay},
    }
    assert run(reported) == ("probing", [], [])
    # run 3: both probes handshook: direct, both ends switch at one instant
    for me, far in (("u", 4), ("v", 3)):
        reported[me]["handshakes"][key(far)] = 1
        reported[me]["probes"] = [key(far)]
    assert run(reported) == ("direct", ["u", "v"], [])
    # one end's probe never answered (symmetric NAT): probing still, nothing moves
    reported["v"]["handshakes"][key(3)] = None
    assert run(reported) == ("probing", [], [])
    # direct at both ends and fresh: stays, nothing moves (a re-run changes nothing)
    for me, far in (("u", 4), ("v", 3)):
        reported[me]["handshakes"][key(far)] = 100
        reported[me]["probes"] = []
    assert run(reported) == ("direct", [], [])
    # stale: back to the relay at both ends
    reported["u"]["handshakes"][key(4)] = 400
    assert run(reported) == ("probing", ["u", "v"], [])
    # v out of the run (--limit): u's interface runs a direct entry for v: kept, with a warning
    reported["u"]["handshakes"][key(4)] = 400
    path, moving, warnings = run({"u": reported["u"], "r": reported["r"]})
    assert (path, moving) == ("direct", [])
    assert len(warnings) == 1 and "v (leader of location:v) is not in this run" in warnings[0]
    # ... a probe: probing; no entry: relayed
    reported["u"]["probes"] = [key(4)]
    assert run({"u": reported["u"]})[:2] == ("probing", [])
    del reported["u"]["handshakes"][key(4)]
    assert run({"u": reported["u"]})[:2] == ("relayed", [])
