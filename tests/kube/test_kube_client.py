"""kube_client against the real API server, with both clients this project meets: the
controller's (PyPI's kubernetes) and the hosts' (Debian's python3-kubernetes 22, for the agent)."""

import json
import os
import subprocess
import sys

import pytest
from kubernetes import client

from test_apiserver import admin  # noqa: F401 pylint: disable=import-error,unused-import

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATCH = r"""
import json, sys
sys.path.insert(0, %(collections)r)
from kubernetes import client
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client
conf = client.Configuration()
conf.host, conf.ssl_ca_cert = %(host)r, %(ca)r
conf.api_key = {"authorization": %(token)r}
conf.api_key_prefix = {"authorization": "Bearer"}
api = client.ApiClient(conf)
first = kube_client.merge_patch_node(api, %(node)r, {"metadata": {"annotations": {"a": "1", "b": "2"}}})
second = kube_client.merge_patch_node(api, %(node)r, {"metadata": {"annotations": {"a": None}}})
print(json.dumps([first["metadata"]["annotations"], second["metadata"]["annotations"]]))
"""


def pythons():
    found = [sys.executable]
    debian = "/usr/bin/python3"
    if subprocess.run([debian, "-c", "import kubernetes"], capture_output=True).returncode == 0:
        found.append(debian)
    return found


@pytest.mark.parametrize("python", pythons())
def test_merge_patch_node_with_either_client(kube, admin, python):  # noqa: F811
    core = client.CoreV1Api(admin)
    name = "kc-%d" % len(python)
    core.create_node(
        client.V1Node(metadata=client.V1ObjectMeta(name=name, annotations={"keep": "x"}))
    )
    try:
        code = PATCH % dict(
            collections=os.path.join(ROOT, ".collections"),
            host=kube.host,
            ca=kube.ca_cert,
            token=kube.token,
            node=name,
        )
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        first, second = json.loads(done.stdout)
        assert first == {"keep": "x", "a": "1", "b": "2"}
        assert second == {"keep": "x", "b": "2"}  # None removes, the others stay
    finally:
        core.delete_node(name)
