# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Argument specs shared by the action plugins kilo.mesh.topology and kilo.mesh.mesh."""

from __future__ import annotations

# Mesh-wide options: Kilo's flags, with Kilo's defaults.
TOPOLOGY_SPEC = dict(
    nodes=dict(type="list", elements="dict"),
    peers=dict(type="list", elements="dict"),
    group=dict(type="str", default="kilo"),
    facts_var=dict(type="str", default="kilo_host"),
    registry=dict(type="path"),
    granularity=dict(type="str", default="location", choices=["location", "full", "cross"]),
    subnet=dict(type="str", default="10.4.0.0/16"),
    port=dict(type="int", default=51820),
    interface=dict(type="str", default="kilo0"),
    encapsulate=dict(type="str", default="always", choices=["always", "crosssubnet", "never"]),
    local=dict(type="bool", default=True),
    service_cidrs=dict(type="list", elements="str", default=[]),
    cni=dict(type="bool", default=True),
    forward_rules=dict(type="bool", default=False),
)

# Host-side settings passed through to kilo.mesh.converge.
CONVERGE_SPEC = dict(
    backend=dict(type="str", default="auto", choices=["auto", "kernel", "userspace"]),
    userspace_command=dict(type="str", default="wireguard-go"),
    key_path=dict(type="path", default="/var/lib/kilo/key", no_log=False),
    mtu=dict(type="int", default=0),
    firewall=dict(type="str", default="nftables", choices=["nftables", "iptables", "none"]),
    route_conflict=dict(type="str", default="fail", choices=["fail", "replace"]),
    state=dict(type="str", default="present", choices=["present", "absent"]),
)

ENGINE_OPTIONS = ("granularity", "subnet", "port", "interface", "encapsulate", "local",
                  "service_cidrs", "cni", "forward_rules")


def engine_options(args):
    return dict((k, args[k]) for k in ENGINE_OPTIONS)
