"""Run the collection's modules and playbooks through real Ansible (subprocess), as a user would."""

import json
import os
import re
import subprocess
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, ".venv", "bin")
CRD_NAME = "peers.kilo.squat.ai"
_RESULT = re.compile(r"^localhost \| (CHANGED|SUCCESS|FAILED!)(?: \| rc=\d+)? => ", re.MULTILINE)


def environment(**extra):
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"),
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
    )
    for var in (
        "K8S_AUTH_KUBECONFIG",
        "K8S_AUTH_CONTEXT",
        "K8S_AUTH_HOST",
        "K8S_AUTH_API_KEY",
        "K8S_AUTH_VERIFY_SSL",
        "K8S_AUTH_SSL_CA_CERT",
    ):
        env.pop(var, None)
    env.update(extra)
    return env


def module(name, args, *flags, env=None):
    """`ansible localhost -m kilo.mesh.NAME -a JSON`: (status, result dict, stdout)."""
    done = subprocess.run(
        [
            os.path.join(BIN, "ansible"),
            "localhost",
            "-m",
            "kilo.mesh." + name,
            "-a",
            json.dumps(args),
            *flags,
        ],
        cwd=ROOT,
        env=env or environment(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    match = _RESULT.search(done.stdout)
    assert match, f"no result in the output:\n{done.stdout}\n{done.stderr}"
    return match.group(1).rstrip("!"), json.loads(done.stdout[match.end() :]), done.stdout


def playbook(path, *args, env=None):
    """`ansible-playbook PATH ARGS`: (returncode, stdout)."""
    done = subprocess.run(
        [os.path.join(BIN, "ansible-playbook"), path, *args],
        cwd=ROOT,
        env=env or environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout + done.stderr


def recap(output):
    """The PLAY RECAP counters of localhost, as a dict."""
    line = re.search(r"^localhost\s+:(.*)$", output, re.MULTILINE)
    assert line, output
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line.group(1))}


def crd(api):
    """The Peer CRD as a dict, None when absent; waits while one is being deleted."""
    ext = client.ApiextensionsV1Api(api)
    deadline = time.monotonic() + 60
    while True:
        try:
            got = ext.read_custom_resource_definition(CRD_NAME)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        if not got.metadata.deletion_timestamp:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{CRD_NAME} still terminating after 60 s")
        time.sleep(0.5)


def delete_crd(api):
    """Delete the Peer CRD and wait until it is gone."""
    try:
        client.ApiextensionsV1Api(api).delete_custom_resource_definition(CRD_NAME)
    except ApiException as e:
        if e.status != 404:
            raise
    crd(api)
