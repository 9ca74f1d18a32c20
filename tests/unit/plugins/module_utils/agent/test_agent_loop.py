"""The agent's loop: no busy loop when a pass fails or cannot run; one node's bad data (a key
another node has) leaves that node out instead of failing every pass of every agent."""

import threading
import time

import kubernetes

from ansible_collections.kilo.mesh.plugins.module_utils.agent import main as agent_main, mesh
from agent_fakes import FakeMetrics


def _node(name, location, n, key=None):
    return dict(
        name=name,
        location=location,
        public_key=key or chr(65 + n) * 43 + "=",
        endpoint="203.0.113.%d:51820" % (n + 1),
        internal_ip="10.%d.0.%d/24" % (n, n + 1),
        pod_cidr="10.50.%d.0/24" % n,
    )


def test_a_key_two_other_nodes_share_leaves_one_out():
    nodes = [_node("a1", "a", 0), _node("b1", "b", 1), _node("c1", "c", 2, key="B" * 43 + "=")]
    skipped = {}
    plan, _psk, _computed, _out = mesh.own_plan(
        nodes, [], "a1", {"encapsulate": "never"}, None, skipped
    )
    assert plan is not None and list(skipped) == ["c1"] and "same key" in skipped["c1"]
    assert [p["name"] for p in plan["peers"]] == ["location:b"]


def test_a_node_that_took_our_key_is_left_out_not_us():
    nodes = [
        _node("a1", "a", 0, key="Z" * 43 + "="),
        _node("b1", "b", 1),
        _node("z9", "z", 2, key="Z" * 43 + "="),
    ]
    skipped = {}
    plan, _psk, _computed, _out = mesh.own_plan(
        nodes, [], "z9", {"encapsulate": "never"}, None, skipped
    )
    assert plan is not None and list(skipped) == ["a1"]


class FakeInformer(object):
    def __init__(self, connected):
        self.synced = threading.Event()
        self.synced.set()
        self.connected = connected
        self.connected_since = 0.0 if connected else None
        self.error = "ConnectionError: refused"

    def start(self):
        return self

    def stop(self):
        pass

    def snapshot(self):
        return {}

    def echo_due(self):
        return None


def _agent(connected):
    config = {
        "node": "a1",
        "resync_period": 30,
        "checkin_period": 30,
        "debounce": 0.2,
        "liveness": 60,
    }
    agent = agent_main.Agent(config, kubernetes.client.ApiClient(), FakeMetrics())
    agent.informers = {"nodes": FakeInformer(connected), "peers": FakeInformer(connected)}
    return agent


def _run_briefly(agent, seconds=0.6):
    thread = threading.Thread(target=agent.run)
    thread.start()
    time.sleep(seconds)
    agent.stop()
    thread.join(5)
    assert not thread.is_alive()


def test_no_busy_loop_while_the_api_server_is_away():
    agent = _agent(connected=False)
    _run_briefly(agent)
    assert agent.metrics.sets <= 2  # once, then RETRY s later: not thousands of passes


def test_no_busy_loop_after_a_failed_pass_with_a_check_in_due():
    agent = _agent(connected=True)
    calls = []

    def reconcile(force=False):
        calls.append(force)
        return False  # failed (or our Node is gone): no check-in was written

    agent.reconcile = reconcile
    _run_briefly(agent)
    assert len(calls) == 1
