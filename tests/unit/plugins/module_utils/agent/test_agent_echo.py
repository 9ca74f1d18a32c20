"""A watch that hangs without a word is found by the echo of our own check-in and reopened.

The informer runs its real thread against a fake transport whose watch streams what the test
puts in a queue and otherwise blocks, as a connection whose NAT entry died does: no data, no
end, until its socket is shut down (tests/kube/test_agent_echo_hang.py does it for real).
"""

import json
import queue
import threading
import time

import kubernetes

from ansible_collections.kilo.mesh.plugins.module_utils.agent import main as agent_main
from ansible_collections.kilo.mesh.plugins.module_utils.agent.informer import (
    Informer,
    later_or_same,
    slim,
)
from agent_fakes import FakeMetrics


def _node(name, version):
    return {
        "metadata": {
            "name": name,
            "resourceVersion": str(version),
            "annotations": {},
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:metadata": {}}}],
        },
        "status": {
            "conditions": [],
            "images": [{"names": ["registry.example/big:1"], "sizeBytes": 1}],
        },
    }


class Socket(object):
    def __init__(self, events):
        self.events = events

    def shutdown(self, _how):
        self.events.put(None)


class Connection(object):
    def __init__(self, events):
        self.sock = Socket(events)


class Watch(object):
    """A streamed watch: yields what is put in ``events``, blocks while it is empty, ends at None."""

    def __init__(self):
        self.events = queue.Queue()
        self.connection = Connection(self.events)

    def stream(self, amt=None, decode_content=False):
        while True:
            event = self.events.get()
            if event is None:
                return
            yield json.dumps(event).encode() + b"\n"

    def release_conn(self):
        pass


class Listing(object):
    def __init__(self, items, version):
        self.data = json.dumps(
            {"metadata": {"resourceVersion": str(version)}, "items": items}
        ).encode()


class Server(object):
    """The calls the informer makes: lists answer at once; each watch is a Watch, recorded."""

    def __init__(self, items, version):
        self.items, self.version = items, version
        self.watches = []
        self.lists = 0

    def __call__(self, **kwargs):
        if kwargs.get("watch"):
            watch = Watch()
            watch.resource_version = kwargs.get("resource_version")
            self.watches.append(watch)
            return watch
        self.lists += 1
        return Listing(self.items, self.version)


def _wait(what, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _informer(server):
    informer = Informer("nodes", server, log=lambda msg: None).start()
    _wait(lambda: len(server.watches) == 1)
    return informer


def test_resource_versions_compare_as_numbers_when_they_are():
    assert later_or_same("100", "99") and later_or_same("7", "7") and not later_or_same("99", "100")
    assert (
        later_or_same("abc", "abc")
        and not later_or_same("abd", "abc")
        and not later_or_same(None, "1")
    )


def test_the_copy_leaves_out_managed_fields_and_images():
    informer = _informer(Server([_node("a", 5)], 5))
    try:
        obj = informer.snapshot()["a"]
        assert "managedFields" not in obj["metadata"] and "images" not in obj["status"]
        assert obj["status"]["conditions"] == [] and obj["metadata"]["resourceVersion"] == "5"
        assert slim({"metadata": {"name": "x"}}) == {"metadata": {"name": "x"}}
    finally:
        informer.stop()


def test_an_echo_on_the_watch_proves_the_copy_current():
    server = Server([_node("self", 5)], 5)
    informer = _informer(server)
    try:
        informer.expect_echo("self", "9", 1000.0)
        assert informer.echo_due() == 1000.0 and informer.proven_at is None
        server.watches[0].events.put({"type": "MODIFIED", "object": _node("other", 8)})
        _wait(lambda: informer.version == "8")
        assert informer.echo_due() == 1000.0  # not yet: 8 comes before our 9
        server.watches[0].events.put({"type": "MODIFIED", "object": _node("self", 9)})
        _wait(lambda: informer.echo_due() is None)
        assert informer.proven_at == 1000.0
        # a bookmark past a later write counts as well (the write's own event came before it)
        informer.expect_echo("self", "12", 2000.0)
        server.watches[0].events.put(
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}
        )
        _wait(lambda: informer.echo_due() is None)
        assert informer.proven_at == 2000.0 and len(server.watches) == 1
        # a write the copy already holds (the watch was quicker than the PATCH's answer)
        informer.expect_echo("self", "9", 3000.0)
        assert informer.echo_due() is None and informer.proven_at == 3000.0
    finally:
        informer.stop()


def test_reopen_ends_a_silent_watch_and_watches_again_from_the_last_version():
    server = Server([_node("self", 5)], 5)
    errors = []
    informer = Informer(
        "nodes", server, log=lambda msg: None, on_error=lambda kind, exc: errors.append(kind)
    ).start()
    try:
        _wait(lambda: len(server.watches) == 1)
        server.watches[0].events.put({"type": "MODIFIED", "object": _node("other", 7)})
        _wait(lambda: informer.version == "7")
        informer.expect_echo("self", "9", 1000.0)
        first_since = informer.connected_since
        informer.reopen("no echo")
        assert not informer.connected and informer.echo_due() is None
        assert (
            informer.lost_at == first_since
        )  # no echo ever came: last proven current when it connected
        _wait(lambda: len(server.watches) == 2 and informer.connected)
        assert server.watches[1].resource_version == "7" and server.lists == 1  # no list needed
        assert (
            informer.reopened == 1
            and errors == ["nodes"]
            and informer.connected_since >= first_since
        )
    finally:
        informer.stop()


class Other(object):
    """The Peer informer: always in order."""

    synced = threading.Event()
    connected = True

    def __init__(self):
        self.synced.set()

    def start(self):
        return self

    def stop(self):
        pass

    def echo_due(self):
        return None


def _agent(server, monkeypatch, echo):
    """An agent whose every pass writes a check-in acknowledged as version 100, echoed or not."""
    monkeypatch.setattr(agent_main, "ECHO_TIMEOUT", 0.3)
    config = {
        "node": "self",
        "resync_period": 0.2,
        "checkin_period": 0.2,
        "debounce": 0.01,
        "liveness": 60,
    }
    agent = agent_main.Agent(config, kubernetes.client.ApiClient(), FakeMetrics())
    agent.informers = {
        "nodes": Informer("nodes", server, agent.changed, lambda msg: None),
        "peers": Other(),
    }
    passes = []

    def reconcile(force=False):
        passes.append(agent.clock())
        if agent.informers["nodes"].echo_due() is None:
            agent.informers["nodes"].expect_echo("self", "100", agent.clock())
            if echo:
                server.watches[-1].events.put({"type": "MODIFIED", "object": _node("self", 100)})
        return True

    agent.reconcile = reconcile
    return agent, passes


def _run(agent, seconds):
    thread = threading.Thread(target=agent.run)
    thread.start()
    time.sleep(seconds)
    assert thread.is_alive()
    agent.stop()
    thread.join(5)
    assert not thread.is_alive()


def test_the_agent_reopens_a_watch_that_does_not_echo_its_check_in(monkeypatch):
    server = Server([_node("self", 5)], 5)
    agent, passes = _agent(server, monkeypatch, echo=False)
    _run(agent, 1.5)
    assert passes and agent.informers["nodes"].reopened >= 1 and len(server.watches) >= 2
    assert server.watches[1].resource_version == "5"


def test_a_watch_that_echoes_is_left_open(monkeypatch):
    server = Server([_node("self", 5)], 5)
    agent, passes = _agent(server, monkeypatch, echo=True)
    _run(agent, 1.5)
    assert len(passes) >= 3 and agent.informers["nodes"].reopened == 0 and len(server.watches) == 1
    assert agent.informers["nodes"].proven_at is not None
