# -*- coding: utf-8 -*-
"""The docs of dual-stack meshes (issue 23) where a reader looks first: README's map of the docs,
the kilo_pod_cidr variable, the inventory plugin's host variables, the bad inputs and the limits."""

import re

import yaml

from ansible_collections.kilo.mesh.plugins.inventory import kubernetes
from ansible_collections.kilo.mesh.plugins.module_utils import nodes
from test_docs import README, _pages, _read


def test_readme_rows_of_push_mode_and_kubernetes_name_dual_stack():
    rows = dict(re.findall(r"^\| \[([^]]+)\]\([^)]+\) \| (.*) \|$", _read(README), re.M))
    assert "dual-stack" in rows["Push mode"] and "dual-stack" in rows["Kubernetes"]


def test_kilo_pod_cidr_admits_both_families_in_a_dual_stack_mesh():
    doc = nodes.FIELDS["pod_cidr"].doc
    assert "one IP family" not in doc and "dual-stack" in doc


def test_inventory_plugin_tells_the_dual_stack_host_variables():
    text = " ".join(yaml.safe_load(kubernetes.DOCUMENTATION)["description"])
    assert (
        "spec.podCIDRs" in text
        and "kilo.mesh/internal-ips" in text
        and "kilo.mesh/wireguard-ips" in text
    )


def test_bad_inputs_and_limits_cover_ip_families():
    pages = dict((name, " ".join(text.split())) for name, text in _pages().items())
    for message in (
        "is IPv6 but the mesh's subnet 10.4.0.0/16 is IPv4",
        "kilo_subnet: fd04::/64 is IPv6 but every",
        "are both IPv4",
        "flannel in a dual-stack mesh",
    ):
        assert message in pages["guide_bad_inputs"], message
    limits = pages["guide_limits"]
    for words in (
        "IPv6 is never encapsulated",
        "crosssubnet",
        "add-on mode",
        "kilo_force_internal_ip",
        "VPN exit",
        "over IPv6 is untested",
    ):
        assert words in limits, words
