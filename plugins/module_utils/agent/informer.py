# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""A local copy of one kind of cluster object, kept current by list + watch.

The agent's view of Nodes and Peers: list once (page by page), then watch from the list's
resourceVersion; a watch that ends is resumed from the last version seen, a 410 Gone (the
version fell out of etcd's window) lists again, and a failed call waits with exponential backoff
(1 s doubling up to ``backoff_max``) before it tries again. No polling: between changes the only
traffic is the open watch, which the server ends every ``timeout`` seconds and we reopen.

Objects are kept as the plain JSON the API server sends (no client model objects: a cluster of
1,000 Nodes stays small), less what nothing here reads and a real cluster makes big (``slim``).
The transport, authentication and TLS are the official client's: the generated list call with
``watch=True`` and ``_preload_content=False``.

A watch can also hang without a word (no FIN, no data: a dead NAT entry, a partition): the read
timeout then ends it only after ``timeout`` + 30 s, with the copy frozen all that time. A write of
our own that the server acknowledged with a resourceVersion must come back on the watch: the
agent announces each such write (``expect_echo``, its own Node's check-in) and, when the echo is
``overdue``, ``reopen`` ends the connection; the thread watches again from the last version seen
(and lists again if that is gone).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import socket
import threading
import time

WATCH_TIMEOUT = 300  # seconds the server keeps one watch open before we reopen it
BACKOFF_MAX = 30.0
CONNECT_TIMEOUT = 10


class Gone(Exception):
    """The resourceVersion we watch from is too old (HTTP 410): list again."""


class NotInstalled(Exception):
    """The resource is not served (HTTP 404: Kilo's Peer CRD not applied)."""


def _status_of(exc):
    return getattr(exc, "status", None)


def slim(obj):
    """``obj`` without what the agent never reads and a real cluster makes big: ``metadata.managedFields``
    (the server's field bookkeeping: a third of a bare Node's JSON) and ``status.images`` (a kubelet
    lists up to 50 images on its Node, often most of a real Node's size)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj["metadata"] = dict((k, v) for k, v in meta.items() if k != "managedFields")
    status = obj.get("status")
    if isinstance(status, dict) and "images" in status:
        obj["status"] = dict((k, v) for k, v in status.items() if k != "images")
    return obj


def later_or_same(version, than):
    """Whether resourceVersion ``version`` is ``than`` or comes after it. Versions are opaque to
    clients, but etcd's are increasing integers: compared as numbers when both are, else only
    equality counts."""
    if version is None or than is None:
        return False
    version, than = str(version), str(than)
    if version.isdigit() and than.isdigit():
        return int(version) >= int(than)
    return version == than


def iter_lines(response):
    """The newline-separated JSON events of a streamed watch response."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield line
    if pending.strip():
        yield pending


class Informer(object):
    """Objects of one kind by name, kept current in a thread of their own.

    ``call(**kwargs)`` is a generated list call of the client (``CoreV1Api.list_node``, or
    ``CustomObjectsApi.list_cluster_custom_object`` with its group, version and plural bound).
    ``on_change(kind)`` runs after every change, in the informer's thread; ``log(msg)`` reports.
    ``synced`` is set once the first list has arrived; ``error`` holds the last failure, if any.
    """

    def __init__(
        self,
        kind,
        call,
        on_change=None,
        log=None,
        timeout=WATCH_TIMEOUT,
        backoff_max=BACKOFF_MAX,
        page=500,
        on_error=None,
        relevant=None,
    ):
        self.kind = kind
        self.call = call
        self.on_change = on_change or (lambda kind: None)
        # relevant(old, new): whether a changed object (old None: a new one) calls on_change;
        # the copy is updated either way. None: every change does.
        self.relevant = relevant
        self.on_error = on_error or (lambda kind, exc: None)
        self.log = log or (lambda msg: None)
        self.timeout = timeout
        self.backoff_max = backoff_max
        self.page = page
        self.objects = {}
        self.version = None
        self.synced = threading.Event()
        self.installed = True
        self.error = None
        # Whether the last call reached the server, and since when without a break: another
        # node's last-seen cannot be judged while we could not see its check-ins.
        self.connected = False
        self.connected_since = None
        # when we last stopped seeing changes: the break of the watch, first the informer's start
        self.lost_at = time.time()
        self.lists = 0  # full lists made (the first, and one after every 410 or 404)
        self.watches = 0  # watches opened
        self.reopened = 0  # watches ended by reopen() (taken for dead)
        # The echo of our last acknowledged write not yet seen on the watch: (name, version,
        # when it was sent); and when the copy was last proven current (an echo came back).
        self._echo = None
        self.proven_at = None
        self._reopening = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response = None
        self._thread = None

    # -- what the agent reads --------------------------------------------------------------------
    def snapshot(self):
        """{name: object} as of now (a shallow copy; objects are replaced, never changed)."""
        with self._lock:
            return dict(self.objects)

    # -- life cycle ------------------------------------------------------------------------------
    def start(self):
        self._thread = threading.Thread(target=self.run, name="informer-%s" % self.kind)
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        _shut(self._response)  # ends a blocked read of the watch

    def run(self):
        backoff = 1.0
        while not self._stop.is_set():
            try:
                if self.version is None:
                    self._list()
                self._watch()
                self._reopening = False
                backoff = 1.0
            except Gone:
                self.log(
                    "%s: watch from version %s is gone (410): listing again"
                    % (self.kind, self.version)
                )
                self.version = None
            except NotInstalled:
                if self.installed:
                    self.log(
                        "%s: not served by the API server (404): treated as none; checking again every %ds"
                        % (self.kind, int(self.backoff_max))
                    )
                self.installed = False
                self._replace({})
                self.synced.set()
                self.version = None
                self._stop.wait(self.backoff_max)
            except Exception as exc:  # pylint: disable=broad-exception-caught
                if self._stop.is_set():
                    break
                if self._reopening:  # the end reopen() asked for: watch again at once
                    self._reopening = False
                    continue
                self.error = "%s: %s" % (type(exc).__name__, exc)
                if self.connected:
                    self.lost_at = time.time()
                self.connected = False
                self.on_error(self.kind, exc)
                self.log("%s: %s; retrying in %.0fs" % (self.kind, self.error, backoff))
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max)

    # -- list and watch --------------------------------------------------------------------------
    def _request(self, **kwargs):
        try:
            return self.call(_preload_content=False, **kwargs)
        except Exception as exc:
            status = _status_of(exc)
            if status == 410:
                raise Gone()
            if status == 404:
                raise NotInstalled()
            raise

    def _list(self):
        items, token, version = {}, None, None
        while True:
            kwargs = {"limit": self.page}
            if token:
                kwargs["_continue"] = token
            response = self._request(**kwargs)
            page = json.loads(response.data)
            for obj in page.get("items") or []:
                items[obj["metadata"]["name"]] = slim(obj)
            meta = page.get("metadata") or {}
            version = meta.get("resourceVersion") or version
            token = meta.get("continue")
            if not token:
                break
        self.lists += 1
        self._reached()
        self.installed = True
        self.error = None
        self.version = version
        self._replace(items)
        self.synced.set()

    def _reached(self):
        if not self.connected:
            self.connected, self.connected_since = True, time.time()

    def _replace(self, items):
        with self._lock:
            changed = items != self.objects
            self.objects = items
            self._echoed()
        if changed:
            self.on_change(self.kind)

    def _watch(self):
        # A read timeout past the server's own end of the watch: a connection that died without a
        # word (a partition, a lost FIN) would otherwise block this read for ever, the copy frozen
        # and `connected` still True (every other node then looks dead to liveness).
        response = self._request(
            watch=True,
            resource_version=self.version,
            timeout_seconds=self.timeout,
            allow_watch_bookmarks=True,
            _request_timeout=(CONNECT_TIMEOUT, self.timeout + 30),
        )
        self._response = response
        self._reached()
        self.watches += 1
        try:
            for line in iter_lines(response):
                if self._stop.is_set():
                    return
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise RuntimeError("watch error: %s" % (obj.get("message") or obj))
                meta = obj.get("metadata") or {}
                if meta.get("resourceVersion"):
                    self.version = meta["resourceVersion"]
                if kind == "BOOKMARK":
                    with self._lock:
                        self._echoed()
                    continue
                name = meta.get("name")
                obj = slim(obj)
                with self._lock:
                    old = self.objects.get(name)
                    if kind == "DELETED":
                        changed = self.objects.pop(name, None) is not None
                    else:
                        changed = old != obj
                        self.objects[name] = obj
                    self._echoed()
                if changed:
                    self.error = None
                    if (
                        kind == "DELETED"
                        or old is None
                        or self.relevant is None
                        or self.relevant(old, obj)
                    ):
                        self.on_change(self.kind)
        finally:
            self._response = None
            try:
                response.release_conn()
            except Exception:  # pylint: disable=broad-exception-caught
                pass

    # -- the echo of our own writes -------------------------------------------------------------
    def expect_echo(self, name, version, sent_at):
        """Our write of object ``name``, acknowledged by the server with ``version``, sent at
        ``sent_at``: the watch must deliver it (or anything later). The oldest echo not yet seen
        is the one that counts."""
        with self._lock:
            if self._echo is None:
                self._echo = (name, version, sent_at)
            self._echoed()

    def _echoed(self):
        """(under the lock) Clear the awaited echo when the watch has delivered it: an event of
        that object at that version or later, or any event or bookmark past it."""
        if self._echo is None:
            return
        name, version, sent_at = self._echo
        have = ((self.objects.get(name) or {}).get("metadata") or {}).get("resourceVersion")
        if later_or_same(self.version, version) or have == version or later_or_same(have, version):
            self._echo = None
            self.proven_at = sent_at

    def echo_due(self):
        """When the awaited echo's write was sent, None when no echo is awaited."""
        echo = self._echo
        return echo[2] if echo else None

    def reopen(self, reason):
        """Take the open watch for dead: the copy counts as seen only up to when it was last
        proven current (``lost_at``, so liveness grants the grace of a broken watch), ``connected``
        is False until the next watch answers, and the connection is shut down so the blocked
        read returns; the thread then watches again from the last version seen."""
        with self._lock:
            self._echo = None
        if self.connected:
            self.lost_at = max(
                t for t in (self.proven_at, self.connected_since, self.lost_at) if t is not None
            )
        self.connected = False
        self.error = reason
        self.reopened += 1
        self._reopening = True
        self.on_error(self.kind, RuntimeError(reason))
        self.log("%s: %s: reopening the watch" % (self.kind, reason))
        _shut(self._response)


def _shut(response):
    """End a streamed response from another thread: shutting its socket down wakes the thread
    blocked reading it (closing alone does not on Linux)."""
    if response is None:
        return
    sock = getattr(getattr(response, "connection", None), "sock", None)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        else:
            response.close()
    except (OSError, ValueError):
        pass


def _without(obj, annotations):
    """A Node (or any object) without what a check-in changes: resourceVersion, managedFields,
    the named annotations and the conditions' heartbeat times."""
    meta = dict(obj.get("metadata") or {})
    meta.pop("resourceVersion", None)
    meta.pop("managedFields", None)
    meta["annotations"] = dict(
        (k, v) for k, v in (meta.get("annotations") or {}).items() if k not in annotations
    )
    status = dict(obj.get("status") or {})
    status["conditions"] = [
        dict(c, lastHeartbeatTime=None) if isinstance(c, dict) else c
        for c in status.get("conditions") or []
    ]
    return dict(obj, metadata=meta, status=status)


def only_checked_in(old, new, annotations):
    """True when ``new`` differs from ``old`` in nothing but a check-in: the ``annotations``
    (e.g. last-seen), resourceVersion, managedFields, heartbeat times."""
    return _without(old, annotations) == _without(new, annotations)


def wait_synced(informers, timeout):
    """True once every informer has its first list, False after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    for informer in informers:
        if not informer.synced.wait(max(0.0, deadline - time.monotonic())):
            return False
    return True
