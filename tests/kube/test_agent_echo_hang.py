"""A watch of Nodes that hangs without a word, against the real kube-apiserver.

The agent's informer reaches the API server through a TCP proxy of this test; `freeze()` makes
the proxy stop forwarding on every connection it has (no data, no FIN, no RST: what a dead NAT
entry does) while new connections still pass. The agent (its real loop, check-ins and echo
check; the reconcile is only the check-in, no host is converged) patches its own Node's
last-seen every CHECKIN s over a client of its own that does not cross the proxy (the flow of
the watch is the one that died). A change to another Node made after the freeze must reach the
agent's copy within the bound: a check-in period plus main.ECHO_TIMEOUT (then the reconnect).
Without the echo check the copy stays stale (the read timeout alone would end the watch after
330 s): the second test shows the proxy really hangs the watch.
"""

import select
import socket
import threading
import time

import pytest
from kubernetes import client

from ansible_collections.kilo.mesh.plugins.module_utils.agent import main as agent_main
from ansible_collections.kilo.mesh.plugins.module_utils.agent.informer import Informer
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

CHECKIN = 2.0
SELF, OTHER = "kme-echo-self", "kme-echo-other"
# What the machine's load may add to the bound (a reconnect and a re-read on 2 busy cores).
SLACK = 10.0


class FreezingProxy(object):
    """127.0.0.1:port -> target; freeze() stalls every connection open at that moment."""

    def __init__(self, target):
        self.target = target
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.pairs = []  # [client socket, server socket, frozen event]
        self.lock = threading.Lock()
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed.is_set():
            try:
                near, _addr = self.listener.accept()
            except OSError:
                return
            far = socket.create_connection(self.target)
            pair = [near, far, threading.Event()]
            with self.lock:
                self.pairs.append(pair)
            threading.Thread(target=self._pump, args=(pair,), daemon=True).start()

    def _pump(self, pair):
        near, far, frozen = pair
        other = {near: far, far: near}
        while not self.closed.is_set() and not frozen.is_set():
            ready, _w, _x = select.select([near, far], [], [], 0.2)
            if frozen.is_set():
                break
            for sock in ready:
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    for s in (near, far):
                        s.close()
                    return
                other[sock].sendall(data)
        # frozen: both sockets stay open and nothing more passes either way

    def freeze(self):
        with self.lock:
            for pair in self.pairs:
                pair[2].set()
            return len(self.pairs)

    def close(self):
        self.closed.set()
        self.listener.close()
        with self.lock:
            for near, far, _frozen in self.pairs:
                for s in (near, far):
                    try:
                        s.close()
                    except OSError:
                        pass


class Peers(object):
    """No Peers: the Node watch is what this test is about."""

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


def _api(kube, host=None):
    conf = client.Configuration()
    conf.host = host or kube.host
    conf.ssl_ca_cert = kube.ca_cert
    conf.api_key = {"authorization": kube.token}
    conf.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(conf)


@pytest.fixture()
def cluster(kube):
    direct = _api(kube)
    core = client.CoreV1Api(direct)
    for name in (SELF, OTHER):
        core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "annotations": {kn.LAST_SEEN: str(int(time.time()))}},
            }
        )
    port = int(kube.host.rsplit(":", 1)[1])
    proxy = FreezingProxy(("127.0.0.1", port))
    try:
        yield direct, core, proxy
    finally:
        proxy.close()
        for name in (SELF, OTHER):
            core.delete_node(name)


def _agent(direct, proxy, logs):
    config = {
        "node": SELF,
        "resync_period": CHECKIN,
        "checkin_period": CHECKIN,
        "debounce": 0.05,
        "liveness": 0,
    }
    agent = agent_main.Agent(config, direct, None)
    agent.metrics = type(
        "Metrics", (), {"health": None, "errors": type("C", (), {"inc": lambda self: None})()}
    )()
    proxied = client.CoreV1Api(_api_through(direct, proxy))
    agent.informers = {
        "nodes": Informer(
            "nodes", proxied.list_node, agent.changed, logs.append, on_error=agent.api_error
        ),
        "peers": Peers(),
    }

    def reconcile(force=False):
        agent.write_back_checkin()
        return True

    def write_back_checkin():
        now = agent.clock()
        if now >= agent.next_checkin:
            agent.check_in({kn.LAST_SEEN: str(int(now))})
            agent.next_checkin = now + CHECKIN

    agent.write_back_checkin = write_back_checkin
    agent.reconcile = reconcile
    return agent


def _api_through(direct, proxy):
    conf = direct.configuration
    through = client.Configuration()
    through.host = "https://127.0.0.1:%d" % proxy.port
    through.ssl_ca_cert = conf.ssl_ca_cert
    through.api_key = dict(conf.api_key)
    through.api_key_prefix = dict(conf.api_key_prefix)
    return client.ApiClient(through)


def _marker(agent):
    obj = agent.informers["nodes"].snapshot().get(OTHER) or {}
    return (obj.get("metadata", {}).get("annotations") or {}).get("test.kilo.mesh/marker")


def _hang_and_change(direct, core, proxy, logs, echo_check=True):
    """Freeze the watch's connection, change the other Node; seconds until the agent's copy has it
    (None when it did not within the bound plus SLACK)."""
    agent = _agent(direct, proxy, logs)
    if not echo_check:
        agent.check_echo = lambda now: None
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        watching = agent.informers["nodes"]
        deadline = time.monotonic() + 30
        while watching.proven_at is None:  # one check-in echoed: the watch works through the proxy
            assert time.monotonic() < deadline, "no check-in echoed through the proxy: %s" % logs
            time.sleep(0.05)
        frozen = proxy.freeze()
        assert frozen >= 1
        start = time.monotonic()
        core.patch_node(
            OTHER, {"metadata": {"annotations": {"test.kilo.mesh/marker": "after-freeze"}}}
        )
        bound = CHECKIN + agent_main.ECHO_TIMEOUT
        while _marker(agent) != "after-freeze":
            if time.monotonic() - start > bound + SLACK:
                return None, bound, watching
            time.sleep(0.05)
        return time.monotonic() - start, bound, watching
    finally:
        agent.stop()
        thread.join(10)


def test_a_silently_dead_watch_is_reopened_within_the_bound(cluster):
    direct, core, proxy = cluster
    logs = []
    took, bound, watching = _hang_and_change(direct, core, proxy, logs)
    print(
        "\nsilent watch hang: copy current again after %s s (bound %.0f s = check-in %.0f s + echo %.0f s);"
        " watches opened %d, reopened %d, lists %d"
        % (
            "%.1f" % took if took is not None else "never",
            bound,
            CHECKIN,
            agent_main.ECHO_TIMEOUT,
            watching.watches,
            watching.reopened,
            watching.lists,
        )
    )
    assert took is not None, "the copy stayed stale: %s" % logs[-5:]
    assert watching.reopened >= 1 and watching.watches >= 2
    assert any("never came back on the watch" in line for line in logs)


def test_without_the_echo_check_the_frozen_watch_keeps_the_copy_stale(cluster):
    direct, core, proxy = cluster
    logs = []
    took, bound, watching = _hang_and_change(direct, core, proxy, logs, echo_check=False)
    print(
        "\nwithout the echo check: copy current again after %s (waited %.0f s)"
        % ("%.1f s" % took if took is not None else "never", bound + SLACK)
    )
    assert took is None and watching.reopened == 0 and watching.watches == 1
