"""The informer's 410 Gone as an HTTP status (a watch refused outright, or a list's continue token
expired between pages): it lists again from the first page and watches from the new version.
The 410 as a watch event, from the real kube-apiserver, is tests/kube/test_agent_observed.py's."""

import json

from ansible_collections.kilo.mesh.plugins.module_utils.agent.informer import Informer


class ApiError(Exception):
    """What the client raises for an HTTP error: the status as ``status``."""

    def __init__(self, status):
        Exception.__init__(self, "HTTP %d" % status)
        self.status = status


class Response(object):
    def __init__(self, body=None, events=()):
        self.data = json.dumps(body).encode() if body is not None else b""
        self.events = events

    def stream(self, amt=None, decode_content=False):
        for event in self.events:
            yield json.dumps(event).encode() + b"\n"

    def release_conn(self):
        pass


def page(names, version, token=None):
    meta = {"resourceVersion": version}
    if token:
        meta["continue"] = token
    return Response({"items": [{"metadata": {"name": n}} for n in names], "metadata": meta})


def run(informer, answer):
    """Run ``informer`` against ``answer(n, kwargs)`` (n: the call's number) until the second
    watch; returns the calls' keyword arguments."""
    calls = []

    def call(**kwargs):
        calls.append(kwargs)
        if kwargs.get("watch") and sum(1 for c in calls if c.get("watch")) == 2:
            informer.stop()
            return Response(events=[])
        return answer(len(calls), kwargs)

    informer.call = call
    informer.run()
    return calls


def test_a_watch_refused_with_410_lists_again_and_watches_from_the_new_version():
    informer = Informer("nodes", None, log=lambda m: None)
    informer.version = "5"
    informer.objects = {"deleted-meanwhile": {"metadata": {"name": "deleted-meanwhile"}}}

    def answer(n, kwargs):
        if n == 1:
            raise ApiError(410)
        return page(["a", "b"], "9")

    calls = run(informer, answer)
    assert [bool(c.get("watch")) for c in calls] == [True, False, True]
    assert calls[0]["resource_version"] == "5" and calls[2]["resource_version"] == "9"
    assert set(informer.objects) == {"a", "b"} and informer.lists == 1


def test_a_continue_token_expired_between_pages_starts_the_list_over():
    informer = Informer("nodes", None, log=lambda m: None, page=2)

    def answer(n, kwargs):
        if n == 1:
            return page(["a", "b"], "7", token="t1")
        if n == 2:
            raise ApiError(410)  # the token's version was compacted away
        if n == 3:
            return page(["a", "c"], "12", token="t2")
        if n == 4:
            return page(["d"], "12")
        return Response(events=[])

    calls = run(informer, answer)
    assert [c.get("_continue") for c in calls[:4]] == [None, "t1", None, "t2"]
    assert set(informer.objects) == {"a", "c", "d"} and informer.lists == 1
    assert calls[4]["resource_version"] == "12"
