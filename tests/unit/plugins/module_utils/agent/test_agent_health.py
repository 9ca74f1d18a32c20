"""Leader health between agents: who is deposed, from what the Nodes say; the prober's clock."""

from ansible_collections.kilo.mesh.plugins.module_utils.agent import health, mesh


def test_a_leader_every_other_leader_names_is_deposed():
    leaders = ["a1", "b1", "c1"]
    reports = {"a1": {"c1"}, "b1": {"c1"}, "c1": {"a1", "b1"}}  # c1's tunnels are dead both ways
    assert health.deposed(leaders, reports) == {"c1"}


def test_one_judge_is_not_enough():
    # two locations: each end sees the other dead; nobody can tell which end is broken
    assert health.deposed(["a1", "b1"], {"a1": {"b1"}, "b1": {"a1"}}) == set()
    assert health.deposed(["a1", "b1"], {"a1": {"b1"}}) == set()


def test_a_leader_named_by_some_judges_only_stays():
    assert health.deposed(["a1", "b1", "c1"], {"a1": {"c1"}, "b1": set()}) == set()


def test_nobody_is_deposed_when_every_leader_is_named():
    everyone = {"a1": {"b1", "c1"}, "b1": {"a1", "c1"}, "c1": {"a1", "b1"}}
    assert health.deposed(["a1", "b1", "c1"], everyone) == set()


def test_reports_of_nodes_outside_the_judges_do_not_count():
    # a non-leader (a2) naming a leader changes nothing
    assert health.deposed(["a1", "b1", "c1"], {"a2": {"c1"}, "a1": {"c1"}}) == set()


def test_annotation_text_round_trip_and_bad_values():
    assert health.parse_names(health.format_names({"b", "a"})) == {"a", "b"}
    assert health.format_names(set()) == ""
    assert health.parse_names(None) == set() and health.parse_names(42) == set()
    assert health.parse_names(" a, ,b ") == {"a", "b"}


def test_prober_names_a_silent_target_after_dead_after_and_holds_it_down():
    p = health.Prober(dead_after=20, hold_down=600)
    p.set_targets({"c1": "10.4.0.3"}, now=0)
    p.record(set(), now=10)
    assert p.dead(10) == set()  # not silent long enough
    p.record({"c1"}, now=15)
    p.record(set(), now=30)
    assert p.dead(30) == set()  # answered 15 s ago
    p.record(set(), now=36)
    assert p.dead(36) == {"c1"}
    p.set_targets(
        {"c2": "10.4.0.4"}, now=40
    )  # deposed: c1 leads nothing, its stand-in is probed instead
    assert p.dead(500) == {"c1"}  # still named: no flap back
    assert p.dead(637) == set()  # hold-down over


def test_a_new_target_gets_its_full_grace():
    p = health.Prober(dead_after=20, hold_down=600)
    p.set_targets({"c1": "10.4.0.3"}, now=100)
    p.record(set(), now=115)
    assert p.dead(115) == set()


def test_echo_request_checksum_is_valid():
    packet = health._echo(8, 0x1234, 7)  # pylint: disable=protected-access
    total = 0
    data = packet + (b"\0" if len(packet) % 2 else b"")
    for i in range(0, len(data), 2):
        total += (data[i] << 8) + data[i + 1]
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    assert total == 0xFFFF


def _node(name, location, n):
    return dict(
        name=name,
        location=location,
        public_key=chr(65 + n) * 43 + "=",
        endpoint="203.0.113.%d:51820" % (n + 1),
        internal_ip="10.%d.0.%d/24" % (n, n + 1),
        pod_cidr="10.50.%d.0/24" % n,
    )


def test_own_plan_elects_another_leader_for_a_deposed_one():
    nodes = [_node("a1", "a", 0), _node("b1", "b", 1), _node("c1", "c", 2), _node("c2", "c", 3)]
    options = {"encapsulate": "never"}
    _plan, _psk, computed, deposed = mesh.own_plan(nodes, [], "a1", options, {})
    leader_c = [s["leader"] for s in computed["segments"] if s["location"] == "c"][0]
    other = "c2" if leader_c == "c1" else "c1"
    reports = {"a1": {leader_c}, "b1": {leader_c}, leader_c: {"a1", "b1"}}
    _plan, _psk, computed, deposed = mesh.own_plan(nodes, [], "a1", options, reports)
    assert deposed == {leader_c}
    assert [s["leader"] for s in computed["segments"] if s["location"] == "c"] == [other]
    # the deposed node computes the same
    _plan, _psk, again, _deposed = mesh.own_plan(nodes, [], leader_c, options, reports)
    assert [s["leader"] for s in again["segments"]] == [s["leader"] for s in computed["segments"]]
    assert mesh.probe_targets(computed, "a1") == dict(
        (s["leader"], s["wireguard_ip"]) for s in computed["segments"] if s["leader"] != "a1"
    )
    assert mesh.probe_targets(computed, leader_c) == {}


# --- liveness (mesh.live): Kilo's 60 s rule, judged only over time the agent could watch ------


def test_live_is_kilos_rule_while_watching():
    facts = {"last_seen": 1000}
    assert mesh.live(facts, 1059, 60, watching_since=0, lost_at=0)
    assert not mesh.live(facts, 1061, 60, watching_since=0, lost_at=0)


def test_a_node_live_when_the_watch_broke_gets_the_window_again_from_its_return():
    facts = {"last_seen": 1000}
    # the watch broke at 1010 (the node was live), came back at 1100: judged from 1100
    assert mesh.live(facts, 1150, 60, watching_since=1100, lost_at=1010)
    assert not mesh.live(facts, 1161, 60, watching_since=1100, lost_at=1010)


def test_a_node_dead_before_the_agent_started_is_not_brought_back():
    facts = {"last_seen": 1000}  # dead for days when the agent starts at 500000
    assert not mesh.live(facts, 500001, 60, watching_since=500000, lost_at=500000)
    assert not mesh.live({}, 500001, 60, watching_since=500000, lost_at=500000)  # never checked in


def test_not_watching_judges_nobody_and_window_zero_is_push_modes_rule():
    assert mesh.live({"last_seen": 1}, 10**6, 60, watching_since=None, lost_at=0)
    assert mesh.live({}, 10**6, 0)


def test_handshake_watch_names_a_leader_whose_latest_handshake_is_too_old():
    times = {"KEY-B": 1000, "KEY-C": 1000}
    watch = health.HandshakeWatch(
        "kilo0", timeout=180, hold_down=600, read=lambda interface: dict(times)
    )
    watch.set_targets({"b": "KEY-B", "c": "KEY-C", "d": "KEY-D"}, now=1000)
    watch.record(watch.probe(), now=1100)
    assert watch.dead(1100) == set()  # b and c handshook 100 s ago; d is still in its grace
    times["KEY-B"] = 1250  # b keeps handshaking, c stops, d never starts
    watch.record(watch.probe(), now=1300)
    assert watch.dead(1300) == {"c", "d"}
    times["KEY-C"] = 1310  # c is back: held down all the same
    watch.record(watch.probe(), now=1320)
    assert watch.dead(1320) == {"c", "d"}
    assert watch.dead(1300 + 601) == {"d"}  # c's hold-down is over; d was last seen dead at 1320
    assert watch.dead(1320 + 601) == set()


def test_probe_targets_give_keys_for_the_handshake_judge():
    computed = {
        "segments": [
            {"leader": "a", "wireguard_ip": "10.4.0.1", "public_key": "KA"},
            {"leader": "b", "wireguard_ip": "10.4.0.2", "public_key": "KB"},
        ]
    }
    assert mesh.probe_targets(computed, "a", "public_key") == {"b": "KB"}
    assert mesh.probe_targets(computed, "a") == {"b": "10.4.0.2"}
    assert mesh.probe_targets(computed, "x", "public_key") == {}


def test_a_deposition_applies_once_it_has_held_the_settle_time():
    settle = health.Settle(after=10)
    assert settle({"gcp-1"}, now=100) == set()
    assert settle.due(100) == 110.1  # the agent wakes then to apply it
    assert settle({"gcp-1"}, now=105) == set()
    assert settle({"gcp-1"}, now=110) == {"gcp-1"}
    assert settle.due(110) is None  # nothing pending: no wake-up (no busy loop)


def test_a_moment_of_one_sided_reports_deposes_nobody():
    # every tunnel dies at once: two judges publish before the third, whose report names them all
    settle = health.Settle(after=10)
    judges = ["a", "b", "c"]
    first = health.deposed(judges, {"a": {"b", "c"}, "b": {"a", "c"}, "c": set()})
    assert first == {"c"}  # the rule alone would depose c for that moment
    assert settle(first, now=0) == set()
    then = health.deposed(judges, {"a": {"b", "c"}, "b": {"a", "c"}, "c": {"a", "b"}})
    assert then == set()
    assert settle(then, now=1) == set() and settle.due(1) is None
    assert settle(set(), now=20) == set()


def test_a_second_broken_leader_is_deposed_by_the_leaders_that_replaced_the_first():
    nodes = [
        _node("a1", "a", 0),
        _node("a2", "a", 4),
        _node("b1", "b", 1),
        _node("b2", "b", 5),
        _node("c1", "c", 2),
        _node("c2", "c", 3),
    ]
    options = {"encapsulate": "never"}
    _plan, _psk, computed, _deposed = mesh.own_plan(nodes, [], "a1", options, {})
    first = dict((s["location"], s["leader"]) for s in computed["segments"])
    # c's leader broke first and was deposed (the others still name it: hold-down); its stand-in
    # leads c and judges. Then a's leader breaks: the judges now are b's leader and c's stand-in.
    _plan, _psk, computed, _deposed = mesh.own_plan(
        nodes, [], "a1", options, {first["a"]: {first["c"]}, first["b"]: {first["c"]}}
    )
    stand_in = [s["leader"] for s in computed["segments"] if s["location"] == "c"][0]
    assert stand_in != first["c"]
    reports = {
        first["a"]: {first["c"], first["b"], stand_in},
        first["b"]: {first["c"], first["a"]},
        stand_in: {first["a"]},
    }
    for own in ("b1", "b2", "c1", "c2", "a1", "a2"):  # every node reaches the same choice
        _plan, _psk, computed, deposed = mesh.own_plan(nodes, [], own, options, reports)
        assert deposed == {first["a"], first["c"]}, own
        leaders = dict((s["location"], s["leader"]) for s in computed["segments"])
        assert (
            leaders["a"] != first["a"] and leaders["c"] == stand_in and leaders["b"] == first["b"]
        ), own


def test_a_node_that_leads_nothing_forgets_whom_it_saw_dead():
    # a leader whose tunnels broke saw every other leader dead; once deposed it judges nobody, and
    # its held-down names must not stand against the healthy leaders later
    p = health.Prober(dead_after=20, hold_down=600)
    p.set_targets({"a1": "10.4.0.1", "b1": "10.4.0.2"}, now=0)
    p.record(set(), now=30)
    assert p.dead(30) == {"a1", "b1"}
    p.set_targets({}, now=40)
    assert p.dead(40) == set()


def test_a_mark_holds_for_the_hold_down_and_is_renewed_only_while_deposed():
    assert health.held(
        {"a1": "1000", "b1": "bad", "c1": None}, now=1000 + health.HOLD_DOWN - 1
    ) == {"a1"}
    assert health.held({"a1": "1000"}, now=1000 + health.HOLD_DOWN) == set()
    assert health.mark("a1", {"a1"}, None, now=1000) == "1000"  # deposed now: marked now
    assert health.mark("a1", {"a1"}, "1000", now=1300) == "1000"  # the mark it has holds
    assert health.mark("a1", set(), "1000", now=1000 + health.HOLD_DOWN) is None  # over: removed
    assert health.mark("a1", {"a1"}, "1000", now=1000 + health.HOLD_DOWN) == str(
        1000 + int(health.HOLD_DOWN)
    )


def test_failures_one_after_another_are_each_replaced_and_the_marks_keep_them_out():
    nodes = [
        _node("a1", "a", 0),
        _node("a2", "a", 4),
        _node("b1", "b", 1),
        _node("b2", "b", 5),
        _node("c1", "c", 2),
        _node("c2", "c", 3),
    ]
    options = {"encapsulate": "never"}

    def choice(reports, held):
        seen = set()
        for own in sorted(n["name"] for n in nodes):  # every node reaches the same choice
            _plan, _psk, computed, deposed = mesh.own_plan(
                nodes, [], own, options, reports, held=held
            )
            seen.add(
                (
                    frozenset(deposed),
                    tuple(sorted((s["location"], s["leader"]) for s in computed["segments"])),
                )
            )
        assert len(seen) == 1, seen
        deposed, leaders = seen.pop()
        return set(deposed), dict(leaders)

    _d, first = choice({}, ())
    a, b, c = first["a"], first["b"], first["c"]
    # a's leader breaks; the other leaders name it; it is deposed and marks itself
    deposed, leaders = choice({b: {a}, c: {a}, a: {b, c}}, ())
    assert deposed == {a} and leaders["a"] != a
    # the judges' names lapse (NAME_HOLD), the deposed one names nobody: its mark keeps it out
    deposed, leaders = choice({}, {a})
    assert deposed == {a} and leaders["a"] != a
    # then b's leader breaks: the stand-in of a judges with c's leader
    stand_in = leaders["a"]
    deposed, leaders = choice({stand_in: {b}, c: {b}, b: {stand_in, c}}, {a})
    assert deposed == {a, b} and leaders["b"] != b and leaders["a"] == stand_in
    deposed, leaders = choice({}, {a, b})
    assert deposed == {a, b}
    # the hold-down of a is over: a leads again (repaired), b stays out
    deposed, leaders = choice({}, {b})
    assert deposed == {b} and leaders["a"] == a


def test_a_held_node_that_still_leads_judges_nobody():
    # a's only node is marked (deposed, broken, but nobody else can lead a): from its broken end it
    # names everyone; c alone naming b must not depose b (two judges at least, a is none)
    nodes = [_node("a1", "a", 0), _node("b1", "b", 1), _node("b2", "b", 4), _node("c1", "c", 2)]
    options = {"encapsulate": "never"}
    _plan, _psk, computed, deposed = mesh.own_plan(
        nodes, [], "c1", options, {"a1": {"b1", "c1"}, "c1": {"b1"}}, held={"a1"}
    )
    assert deposed == {"a1"}
    assert dict((s["location"], s["leader"]) for s in computed["segments"])["b"] == "b1"


def test_a_mark_ahead_of_the_readers_clock_holds_too():
    assert health.held({"a1": "1100"}, now=1000) == {"a1"}
    assert health.held({"a1": str(1000 + int(health.HOLD_DOWN))}, now=1000) == set()
