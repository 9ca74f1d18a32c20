"""The converge glue, with backends that record calls (the real ones are tested on real
hosts in tests/host and the VM): compare everything first, then apply; keys travel apart."""
import pytest

from ansible_collections.kilo.mesh.plugins.action.mesh import split_preshared_keys
from ansible_collections.kilo.mesh.plugins.module_utils.converge import converge, with_preshared_keys

PSK = "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="


class Recorder(object):
    def __init__(self, name, log, fail_in_desired=False, changes=("x",)):
        self.name, self.log, self.fail, self._changes = name, log, fail_in_desired, list(changes)

    def current(self):
        self.log.append((self.name, "current"))
        return {"live": True}

    def desired(self, plan):
        self.log.append((self.name, "desired"))
        if self.fail:
            raise ValueError("%s cannot carry out this plan" % self.name)
        return {"plan": plan["name"]}

    def changes(self, current, desired):
        return self._changes

    def apply(self, current, desired):
        self.log.append((self.name, "apply"))

    def render(self, state):
        return state

    def owns(self, state):
        return True

    def remove(self):
        self.log.append((self.name, "remove"))


def test_a_plan_one_backend_cannot_carry_out_changes_nothing():
    log = []
    backends = [Recorder("wireguard", log), Recorder("netstate", log, fail_in_desired=True)]
    with pytest.raises(ValueError):
        converge({"name": "a"}, {}, backends=backends)
    assert ("wireguard", "apply") not in log


def test_later_backends_compare_again_after_an_earlier_one_applied():
    log = []
    backends = [Recorder("wireguard", log), Recorder("netstate", log), Recorder("firewall", log, changes=())]
    result = converge({"name": "a"}, {}, backends=backends)
    assert result["changes"] == {"wireguard": ["x"], "netstate": ["x"]}
    assert log == [("wireguard", "current"), ("wireguard", "desired"), ("netstate", "current"), ("netstate", "desired"),
                   ("firewall", "current"), ("firewall", "desired"), ("wireguard", "apply"),
                   ("netstate", "current"), ("netstate", "desired"), ("netstate", "apply")]


def test_check_mode_and_absent():
    log = []
    converge({"name": "a"}, {}, check_mode=True, backends=[Recorder("wireguard", log)])
    assert ("wireguard", "apply") not in log
    log = []
    result = converge(None, {"state": "absent"}, backends=[Recorder("wireguard", log), Recorder("netstate", log)])
    assert [e for e in log if e[1] == "remove"] == [("netstate", "remove"), ("wireguard", "remove")]
    assert result["changes"] == {"netstate": ["remove netstate"], "wireguard": ["remove wireguard"]}


def test_preshared_keys_leave_the_plan_and_come_back_on_the_host():
    plan = {"name": "a", "peers": [{"public_key": "k1", "preshared_key": PSK}, {"public_key": "k2"}]}
    keys = split_preshared_keys(plan)
    assert keys == {"k1": PSK}
    assert PSK not in repr(plan)  # what is logged on the host as module arguments
    restored = with_preshared_keys(plan, keys)
    assert restored["peers"][0]["preshared_key"] == PSK and "preshared_key" not in restored["peers"][1]
