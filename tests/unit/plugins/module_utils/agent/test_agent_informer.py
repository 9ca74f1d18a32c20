"""The agent's informer: a Node that only checked in (last-seen) updates the copy without waking the agent."""

import json

from ansible_collections.kilo.mesh.plugins.module_utils.agent.informer import (
    Informer,
    only_checked_in,
)

SEEN = "kilo.squat.ai/last-seen"


def node(name, version, seen, **annotations):
    annotations[SEEN] = str(seen)
    return {
        "metadata": {
            "name": name,
            "resourceVersion": str(version),
            "annotations": annotations,
            "managedFields": [{"time": str(version)}],
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": str(version)}]
        },
    }


def test_only_checked_in():
    assert only_checked_in(node("a", 1, 100), node("a", 2, 130), (SEEN,))
    assert not only_checked_in(node("a", 1, 100), node("a", 2, 130, other="x"), (SEEN,))
    ready = node("a", 2, 100)
    ready["status"]["conditions"][0]["status"] = "False"
    assert not only_checked_in(node("a", 1, 100), ready, (SEEN,))


class Response(object):
    def __init__(self, events):
        self.data = b"".join(json.dumps(e).encode() + b"\n" for e in events)

    def stream(self, amt=None, decode_content=False):
        yield self.data

    def release_conn(self):
        pass


def test_a_check_in_is_kept_but_wakes_nobody():
    woken = []
    events = [
        {"type": "MODIFIED", "object": node("a", 2, 130)},  # a check-in: no wake-up
        {"type": "MODIFIED", "object": node("a", 3, 160, x="1")},  # a real change
        {"type": "ADDED", "object": node("b", 4, 160)},
        {"type": "MODIFIED", "object": node("b", 5, 190)},
    ]  # b is skipped (say, stale): wakes

    def relevant(old, new):
        return new["metadata"]["name"] == "b" or not only_checked_in(old, new, (SEEN,))

    informer = Informer("nodes", lambda **kw: Response(events), woken.append, relevant=relevant)
    informer.objects = {"a": node("a", 1, 100)}
    informer.version = "1"
    informer._watch()  # pylint: disable=protected-access
    assert woken == ["nodes", "nodes", "nodes"]
    assert informer.objects["a"]["metadata"]["resourceVersion"] == "3"
    assert informer.version == "5"


def test_a_watch_has_a_read_timeout_past_the_servers_own_end():
    seen = []

    def call(**kwargs):
        seen.append(kwargs)
        return Response([])

    informer = Informer("nodes", call, timeout=300)
    informer.version = "1"
    informer._watch()  # pylint: disable=protected-access
    connect, read = seen[0]["_request_timeout"]
    assert seen[0]["timeout_seconds"] == 300 and read > 300 and 0 < connect <= 30
