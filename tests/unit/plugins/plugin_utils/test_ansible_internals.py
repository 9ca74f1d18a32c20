"""The one reader of Ansible's private attributes (plugin_utils/ansible_internals.py): what it
reads from real Ansible objects, and the fallback each caller takes when they are gone."""

import pytest

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

from ansible_collections.kilo.mesh.plugins.plugin_utils import ansible_internals as internals
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import HostVarsOnce, KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import InputError, placed

INVENTORY = """
kilo:
  children:
    aws: {hosts: {a1: {}, a2: {}}}
    gcp: {hosts: {g1: {}}}
connect:
  hosts: {laptop: {}}
"""


@pytest.fixture
def ansible_hostvars(tmp_path):
    path = tmp_path / "inventory.yml"
    path.write_text(INVENTORY)
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(path)])
    manager = VariableManager(loader=loader, inventory=inventory)
    return HostVars(inventory=inventory, variable_manager=manager, loader=loader), manager


def test_real_hostvars_give_the_inventory_and_the_hosts_this_run_touched(ansible_hostvars):
    hostvars, manager = ansible_hostvars
    assert internals.inventory_of(hostvars) is not None
    groups = KiloAction.location_groups({"hostvars": HostVarsOnce(hostvars)}, "kilo")
    assert groups == {"a1": ["aws"], "a2": ["aws"], "g1": ["gcp"]}
    touched = internals.set_in_run(hostvars)
    assert touched is not None and not touched("a1")
    manager.set_nonpersistent_facts("a1", {"kilo_host": {"public_key": "x"}})  # a register
    assert touched("a1") and not touched("g1")


@pytest.mark.parametrize("injected", [True, False])
def test_gathered_facts_count_where_ansible_injects_them_as_variables(
    ansible_hostvars, monkeypatch, injected
):
    """Ansible's default injects facts as variables; the fact cache is a mapping on 2.17 and 2.18
    and a cache plugin without ``in`` from 2.19 on: both are asked."""
    from ansible import constants as C

    monkeypatch.setattr(C, "INJECT_FACTS_AS_VARS", injected)
    hostvars, manager = ansible_hostvars
    touched = internals.set_in_run(hostvars)
    assert touched is not None and not touched("g1")
    manager.set_host_facts("g1", {"kilo_fact": 1})  # gathered facts
    assert touched("g1") is injected and not touched("a1")


def test_the_hosts_limit_admits_are_read_whatever_play_runs(ansible_hostvars):
    """--limit's subset counts; the restriction the executor sets for the running play (or a
    serial batch) does not: a play of other hosts must not make the mesh look left out."""
    hostvars, dummy = ansible_hostvars
    inventory = internals.inventory_of(hostvars)
    assert internals.limit_admits(inventory, "kilo") == {"a1", "a2", "g1"}  # no --limit
    inventory.subset("laptop:a1")
    inventory.restrict_to_hosts([inventory.get_host("laptop")])  # a play of the laptop alone
    assert internals.limit_admits(inventory, "kilo") == {"a1"}
    assert (
        internals.limit_admits(None, "kilo") is None and internals.limit_admits({}, "kilo") is None
    )


def test_without_the_inventory_locations_are_unknown_and_every_host_must_set_one():
    plain = {"a1": {}, "g1": {"kilo_location": "gcp"}}
    assert internals.inventory_of(plain) is None
    assert KiloAction.location_groups({"hostvars": HostVarsOnce(plain)}, "kilo") is None
    assert KiloAction.location_groups({"hostvars": plain}, "kilo") is None
    # the fallback: kilo_location of each host, or a failure naming the first host without one
    assert placed(["g1"], plain.__getitem__, None, "kilo") == {}
    with pytest.raises(InputError) as e:
        placed(["a1", "g1"], plain.__getitem__, None, "kilo")
    assert (e.value.subject, e.value.field) == ("host 'a1'", "kilo_location")


def test_without_the_variable_manager_nothing_read_earlier_is_trusted():
    assert internals.set_in_run({}) is None
    assert HostVarsOnce({}).set_in_run() is None

    class Manager(object):  # a variable manager missing one of its caches
        _nonpersistent_fact_cache = {}
        _vars_cache = {}

    class Hostvars(dict):
        _variable_manager = Manager()

    assert internals.set_in_run(Hostvars()) is None
    Manager._fact_cache = object()  # a fact cache that cannot tell whose facts it has
    assert internals.set_in_run(Hostvars()) is None


class FakeTask(object):
    def __init__(self, play):
        self._play = play

    def get_play(self):
        return self._play


def test_play_id_and_its_fallbacks():
    class Play(object):
        _uuid = "1234"

    assert internals.play_id(FakeTask(Play())) == "1234"
    assert internals.play_id(FakeTask(None)) is None  # a task outside a play's blocks
    assert internals.play_id(FakeTask(object())) is None  # a play that does not tell
    assert internals.play_id(object()) is None  # no get_play at all


def test_without_a_play_id_validate_hands_nothing_to_the_topology_step(tmp_path, monkeypatch):
    from ansible import constants as C

    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path))
    action = KiloAction.__new__(KiloAction)
    action._task = FakeTask(None)
    task_vars = {
        "ansible_play_hosts_all": ["a1"],
        "groups": {"kilo": ["a1", "g1"]},
        "hostvars": HostVarsOnce({"a1": {}, "g1": {"kilo_location": "gcp"}}),
    }
    action.keep_reading(task_vars, "kilo")
    assert list(tmp_path.iterdir()) == []
    assert action.earlier_reading(task_vars, "kilo") == {}
