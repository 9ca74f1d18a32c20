"""Privilege escalation is the user's for the hosts and never happens on the controller: every
controller play (hosts: localhost) and every task delegated to the controller says become: false,
no host play or role task sets become itself, and a host call that is not root says the fix."""

import glob
import os

import yaml

from ansible_collections.kilo.mesh.plugins.module_utils.host import host_checks
from checkout import ROOT

CONTROLLER = ("localhost", "127.0.0.1")


def load(path):
    with open(path) as f:
        return yaml.safe_load(f) or []


def tasks(items):
    """Every task of a task list, blocks opened."""
    for task in items or []:
        yield task
        for part in ("block", "rescue", "always"):
            yield from tasks(task.get(part))


def test_controller_plays_and_delegated_tasks_say_become_false_and_host_plays_leave_it_to_the_user():
    plays = [
        (path, play)
        for path in sorted(glob.glob(os.path.join(ROOT, "playbooks", "*.yml")))
        for play in load(path)
        if "hosts" in play
    ]
    controller = [(p, play) for p, play in plays if play["hosts"] in CONTROLLER]
    assert len(controller) >= 8, [play["name"] for _p, play in controller]
    for path, play in plays:
        if play["hosts"] in CONTROLLER:
            assert play.get("become") is False, (path, play["name"])
        else:
            assert "become" not in play, (path, play["name"])
    role_tasks = [
        (path, task)
        for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml")))
        for task in tasks(load(path))
    ]
    every = role_tasks + [(path, task) for path, play in plays for task in tasks(play.get("tasks"))]
    delegated = [(path, task) for path, task in every if task.get("delegate_to") in CONTROLLER]
    assert delegated, "no task delegated to the controller found"
    for path, task in every:
        if task.get("delegate_to") in CONTROLLER:
            assert task.get("become") is False, (path, task.get("name"))
        else:
            assert task.get("become") in (None, False), (path, task.get("name"))


HOST_MODULES = ("key", "prepare", "converge", "status", "agent")


def test_every_host_module_refuses_a_call_that_is_not_root_and_only_those():
    """A host module not run as root fails at once (status would report every host out of the
    mesh, converge fail half-way on a permission); kilo.mesh.peer runs on the controller, as its user."""
    for path in sorted(glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py"))):
        name = os.path.basename(path)[:-3]
        with open(path) as f:
            text = f.read()
        calls = text.count("require_root(module)")
        assert calls == (1 if name in HOST_MODULES else 0), name


def test_a_call_that_is_not_root_names_the_user_and_the_fix(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert host_checks.not_root() is None
    monkeypatch.setattr(os, "geteuid", lambda: 65534)
    message = host_checks.not_root()
    assert message.startswith("runs as nobody (uid 65534), not as root: ")
    for fix in ("-b", "ansible_become: true", "ansible_become_password"):
        assert fix in message, message
    monkeypatch.setattr(os, "geteuid", lambda: 54321)  # a uid without a passwd entry
    assert host_checks.not_root().startswith("runs as uid 54321, not as root")

    class Module(object):
        def fail_json(self, **result):
            raise SystemExit(result)

    failed = {}
    try:
        host_checks.require_root(Module())
    except SystemExit as e:
        failed = e.args[0]
    assert failed.get("not_root") is True and failed.get("msg") == host_checks.not_root()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert host_checks.require_root(Module()) is None
