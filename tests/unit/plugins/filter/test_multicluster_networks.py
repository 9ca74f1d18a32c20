# -*- coding: utf-8 -*-
"""playbooks/multicluster.yml's lists of each mesh's networks, rendered by Ansible's templar from
the playbook itself, then compared by kilo.mesh.overlaps as the play's overlap check does: a
dual-stack mesh's subnet (a list of two) must come out as two CIDRs, not one nested list."""

import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.kilo.mesh.plugins.filter.overlaps import overlaps
from checkout import ROOT

try:  # ansible-core 2.19+ templates only strings marked as trusted (a playbook's own are)
    from ansible.template import trust_as_template
except ImportError:  # older releases template every string

    def trust_as_template(text):
        return text


PLAYBOOK = os.path.join(ROOT, "playbooks", "multicluster.yml")


def networks(this_subnet, this_allowed, other_subnet, other_allowed):
    """(this mesh's networks, the other mesh's) as the play computes them."""
    with open(PLAYBOOK) as f:
        play = [
            p for p in yaml.safe_load(f) if "multicluster_this_networks" in (p.get("vars") or {})
        ][0]
    variables = dict(
        (k, trust_as_template(v) if isinstance(v, str) else v) for k, v in play["vars"].items()
    )
    variables.update(
        multicluster_topology={"subnet": this_subnet},
        multicluster_showconf={"results": [{"data": {"spec": {"allowedIPs": this_allowed}}}]},
        multicluster_other={
            "subnet": other_subnet,
            "peers": [{"spec": {"allowedIPs": other_allowed}}],
        },
    )
    templar = Templar(loader=DataLoader(), variables=variables)
    return tuple(
        templar.template(trust_as_template("{{ %s }}" % name))
        for name in ("multicluster_this_networks", "multicluster_other_networks")
    )


@pytest.mark.parametrize(
    "this_subnet, other_subnet",
    [
        (["10.4.0.0/16", "fd04::/64"], ["10.5.0.0/16", "fd05::/64"]),
        ("10.4.0.0/16", "10.5.0.0/16"),
    ],
)
def test_each_meshs_networks_are_a_flat_list_of_cidrs(this_subnet, other_subnet):
    this, other = networks(
        this_subnet, ["10.4.0.1/32", "fd04::1/128"], other_subnet, ["10.5.0.1/32"]
    )
    dual = isinstance(this_subnet, list)
    assert this == (this_subnet if dual else [this_subnet]) + ["10.4.0.1/32", "fd04::1/128"]
    assert other == (other_subnet if dual else [other_subnet]) + ["10.5.0.1/32"]
    assert (
        overlaps(["10.5.0.1/32"], this) == []
        and overlaps(["10.4.0.1/32", "fd04::1/128"], other) == []
    )


def test_an_overlap_of_the_second_family_is_found():
    this, other = networks(
        ["10.4.0.0/16", "fd04::/64"],
        ["10.4.0.1/32"],
        ["10.5.0.0/16", "fd04::/48"],
        ["10.5.0.1/32", "fd04::1/128"],
    )
    assert overlaps(["10.5.0.1/32", "fd04::1/128"], this) == ["fd04::1/128 overlaps fd04::/64"]
    assert overlaps(["10.4.0.1/32"], other) == []
