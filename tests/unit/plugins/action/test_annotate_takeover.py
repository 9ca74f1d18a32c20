"""kilo.mesh.annotate's two options for a node that changes agents in place (playbooks/migrate.yml):
``takeover`` refuses a write that changes what the other nodes read, ``handback_timeout`` keeps
last-seen fresh until another writer's value appears. Against a real API server: tests/kube
(test_agent_migrate.py moves a cluster with them)."""

import pytest

from ansible_collections.kilo.mesh.plugins.action import annotate
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn

KG = {
    kn.KEY: "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls=",
    kn.ENDPOINT: "203.0.113.11:51820",
    kn.INTERNAL_IP: "172.16.1.1/24",
    kn.WIREGUARD_IP: "10.4.0.1/16",
    kn.GRANULARITY: "location",
    kn.LAST_SEEN: "1700000000",
    kn.DISCOVERED_ENDPOINTS: "{}",
}


def test_a_takeover_that_keeps_every_value_passes_and_observed_ones_may_differ():
    ours = dict(KG, **{kn.LAST_SEEN: "1700000099", kn.DISCOVERED_ENDPOINTS: '{"x": "1.2.3.4:5"}'})
    annotate.ActionModule.refuse_moves("aws-1", KG, ours)


@pytest.mark.parametrize(
    "key, value",
    [
        (kn.ENDPOINT, "198.18.17.1:51820"),
        (kn.WIREGUARD_IP, ""),
        (kn.KEY, "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw="),
        (kn.INTERNAL_IP, ""),
        (kn.GRANULARITY, "full"),
    ],
)
def test_a_takeover_that_moves_what_the_others_read_is_refused_naming_it(key, value):
    with pytest.raises(KiloError) as info:
        annotate.ActionModule.refuse_moves("aws-1", KG, dict(KG, **{key: value}))
    assert str(info.value).startswith(
        "node 'aws-1': takeover: taking the node over would change what the other"
        ' nodes see: %s "%s" -> "%s"' % (key, KG[key], value)
    ), str(info.value)


def test_a_node_no_agent_wrote_on_has_nothing_to_keep():
    annotate.ActionModule.refuse_moves("new", {kn.LAST_SEEN: "1"}, dict(KG))


class FakeNode(object):
    """The Node's last-seen as a run of writers sees it: ``others`` {second: value} another agent writes."""

    def __init__(self, others):
        self.now, self.value, self.others, self.patches = 0.0, "100", dict(others), []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
        for at in sorted(self.others):
            if at <= self.now:
                self.value = self.others.pop(at)


def test_hand_back_writes_every_10_s_until_another_writer_and_fails_without_one(monkeypatch):
    node = FakeNode({35: "999"})

    def read_node(client, name):
        return {"metadata": {"annotations": {kn.LAST_SEEN: node.value}}}

    def merge_patch_node(client, name, body):
        node.value = body["metadata"]["annotations"][kn.LAST_SEEN]
        node.patches.append(node.now)

    monkeypatch.setattr(annotate.kube_client, "read_node", read_node)
    monkeypatch.setattr(annotate.kube_client, "merge_patch_node", merge_patch_node)
    got = annotate.ActionModule.hand_back(None, "n", "100", 120, clock=node.clock, sleep=node.sleep)
    assert got == {"last_seen": 999, "waited": 35.0}
    assert node.patches == [10.0, 20.0, 30.0]
    silent = FakeNode({})
    node.__dict__.update(silent.__dict__)
    with pytest.raises(KiloError) as info:
        annotate.ActionModule.hand_back(None, "n", "100", 30, clock=node.clock, sleep=node.sleep)
    assert "handback_timeout: no other agent wrote last-seen within 30 s" in str(info.value)
