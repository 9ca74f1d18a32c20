"""The registry kept in a ConfigMap of a real API server (kilo_registry: kubernetes://NAMESPACE/NAME):
the same reads, writes and removal as the file and Redis, and many concurrent writers (separate
processes, as the slices of an AWX job) losing no update through resourceVersion conflicts."""

import multiprocessing
import os
import time

import pytest
from kubernetes import client

from ansible_collections.kilo.mesh.plugins.plugin_utils import inputs, registry_store
from test_apiserver import admin  # noqa: F401 pylint: disable=import-error,unused-import

FACTS = {"public_key": "k", "external_ip": "203.0.113.1", "internal_ip": "10.0.0.1/24", "mtu": 1420}
WRITERS, ROUNDS = 8, 6


@pytest.fixture
def location(kube, admin, monkeypatch):  # noqa: F811 pylint: disable=redefined-outer-name
    namespace = "kilo-registry-test"
    core = client.CoreV1Api(admin)
    try:
        core.create_namespace({"metadata": {"name": namespace}})
    except client.ApiException as e:
        if e.status != 409:
            raise
    # the store's client: the environment's, as AWX's Kubernetes credential sets it
    monkeypatch.setenv("K8S_AUTH_HOST", kube.host)
    monkeypatch.setenv("K8S_AUTH_API_KEY", kube.token)
    monkeypatch.setenv("K8S_AUTH_SSL_CA_CERT", kube.ca_cert)
    name = "reg-%d" % (time.time_ns() % 10**9)
    yield "kubernetes://%s/%s" % (namespace, name)
    try:
        core.delete_namespaced_config_map(name, namespace)
    except client.ApiException:
        pass


def test_reads_writes_and_forgets_as_the_file_does(location):
    assert inputs.read_registry(location) == {"hosts": {}, "peers": {}}
    assert inputs.update_registry(location, {"a": dict(FACTS), "b": dict(FACTS)}) is True
    assert inputs.update_registry(location, {"a": dict(FACTS)}) is False
    assert sorted(inputs.read_registry(location)["hosts"]) == ["a", "b"]
    assert (
        inputs.set_registry_peer(location, "laptop", {"public_key": "x", "allowed_ips": []}) is None
    )
    assert inputs.forget_registry_hosts(location, ["a", "b"]) == ["a", "b"]
    assert inputs.set_registry_peer(location, "laptop", None) == {
        "public_key": "x",
        "allowed_ips": [],
    }
    assert not registry_store.open_store(location).exists()  # deleted once empty


def writer(location, index, start):
    while time.time() < start:
        time.sleep(0.001)
    for r in range(ROUNDS):
        inputs.update_registry(location, {"w%d" % index: dict(FACTS, mtu=1300 + r)})


def test_concurrent_writers_lose_no_update(location):
    start = time.time() + 1.0
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=writer, args=(location, i, start)) for i in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    hosts = inputs.read_registry(location)["hosts"]
    print("%d writers x %d rounds into a ConfigMap: %d hosts" % (WRITERS, ROUNDS, len(hosts)))
    assert sorted(hosts) == sorted("w%d" % i for i in range(WRITERS))
    assert all(entry["mtu"] == 1300 + ROUNDS - 1 for entry in hosts.values()), hosts
    assert os.environ["K8S_AUTH_HOST"]
