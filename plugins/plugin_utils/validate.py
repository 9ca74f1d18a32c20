# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The whole mesh checked on the controller before any host changes (kilo.mesh.validate).

Every host's kilo_* variables, the agreement of mesh-wide settings, and the topology of every
host known so far (this run's facts, else the registry, else the pinned key and endpoint).
Errors name the host and the inventory variable, not the engine's field.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, host_subject
from ansible_collections.kilo.mesh.plugins.module_utils.options import OPTIONS, names
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import NODE_VARS


def agree(per_host):
    """Mesh-wide settings must be the same on every host: {host: options} -> None or raise."""
    hosts = sorted(per_host)
    if not hosts:
        return
    first = hosts[0]
    for name in names("mesh") + ["group", "registry", "peers"]:
        for host in hosts[1:]:
            if per_host[host].get(name) != per_host[first].get(name):
                if name == "peers":
                    # peers may carry preshared keys: say where they differ, never what they hold
                    shown = "differs from the value"
                else:
                    shown = "%r here, %r" % (per_host[host].get(name), per_host[first].get(name))
                raise KiloError("%s on host %r: every host of one mesh needs the same value" % (shown, first),
                                host_subject(host), OPTIONS[name]["var"] or name)


def one_location_each(location_groups, hostvars):
    """A host in two location groups would sit in whichever sorts first: say so instead."""
    for host, groups in sorted((location_groups or {}).items()):
        if len(groups) > 1 and "kilo_location" not in hostvars[host]:
            raise KiloError("in location groups %s; a host has one location (or set kilo_location)"
                            % ", ".join(groups), host_subject(host), "location")


def check_topology(nodes, peers, options, hostvars, first):
    """Build every plan once; a node's error is told as its host's variable, a mesh-wide
    option's as the variable of ``first`` (every host agrees on those)."""
    try:
        build_plans(nodes, peers, options, only=[])
    except KiloError as e:
        subject = e.subject or ""
        if subject == "options" and e.field in OPTIONS and OPTIONS[e.field]["var"]:
            raise KiloError(e.message, host_subject(first), OPTIONS[e.field]["var"])
        if subject.startswith("node '") and e.field:
            host = subject[len("node '"):-1]
            field = e.field.split("[")[0]
            var = NODE_VARS.get(field)
            if host in hostvars and var and var in hostvars[host]:
                raise KiloError(e.message, host_subject(host), var)
            if host in hostvars:
                raise KiloError(e.message, host_subject(host), "%s (reported by kilo.mesh.key)" % e.field)
        raise
