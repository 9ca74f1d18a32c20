# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The whole mesh checked on the controller before any host changes (kilo.mesh.validate).

Every host's kilo_* variables, the agreement of mesh-wide settings, and the topology of every
host known so far (this run's facts, else the registry, else the pinned key and endpoint).
Errors name the host and the inventory variable, not the engine's field.
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, host_subject, node_subject
from ansible_collections.kilo.mesh.plugins.module_utils.options import OPTIONS, names
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import Topology
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology_parse import OPTIONS_SUBJECT, TopologyError
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import check_host_vars, pod_source_of, var_of_field


def agree(per_host):
    """Mesh-wide settings must be the same on every host: {host: options} -> None or raise."""
    hosts = sorted(per_host)
    if not hosts:
        return
    first = hosts[0]
    # pod_cidr_source: the mesh's (the agents' one informer and shared role); a node's own is kilo_node_pod_cidr_source
    for name in names("mesh") + ["group", "registry", "peers", "pod_cidr_source"]:
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


def check_node_vars(hosts, hostvars):
    """Every node variable of every host of the mesh, by its row of the node table: hosts that
    never reported (a fresh mesh, the engine leaves them out) are checked too, before any host
    is contacted."""
    for host in hosts:
        check_host_vars(hostvars[host], host_subject(host))


def check_topology(nodes, peers, options, hostvars, first):
    """Compute the mesh once (every check of the engine, no plan rendered), then check_one_family;
    a node's error is told as its host's variable, a mesh-wide option's as the variable of
    ``first`` (every host agrees on those)."""
    try:
        # ours on the nodes as the engine parsed them (no second reading of the inputs)
        topology = Topology(nodes, peers or [], options)
        check_one_family(topology.opts, topology.nodes)
    except KiloError as e:
        if e.kind == "options" and e.field in OPTIONS and OPTIONS[e.field]["var"]:
            raise KiloError(e.message, host_subject(first), OPTIONS[e.field]["var"])
        host = e.name if e.kind == "node" else None
        if host is not None and host in hostvars and e.field:
            # a node's field as the host's variable; fields of a list or mapping as the whole field
            var = var_of_field(e.field.split("[")[0])
            if var and var in hostvars[host]:
                raise KiloError(e.message, host_subject(host), var)
            if e.field == "pod_cidr":  # not a variable: the ranges of the host's source (its Kubernetes Node)
                source = pod_source_of(hostvars[host], None, host_subject(host))
                raise KiloError(e.message, host_subject(host), "pod_cidr (kilo_pod_cidr_source %s)" % source)
            raise KiloError(e.message, host_subject(host), "%s (reported by kilo.mesh.key)" % e.field)
        raise


def check_one_family(opts, parsed):
    """In a single-stack mesh (``opts``: the engine's parsed options; ``parsed``: its parsed nodes),
    every node's internal IP and pod ranges are of the subnet's IP family; raise TopologyError
    naming the node and field, or the subnet when no node has an address of its family (the
    subnet is then the odd one, as fd04::/64 in a mesh of IPv4 nodes).

    Kilo's own engine takes such a mesh: its topology keeps the node, and its routes pair a
    destination of one family with a gateway of the other (an IPv6 pod range through a leader's
    IPv4 internal or WireGuard IP). Only its agent's netlink call refuses each such route, every
    resync ("gateway, source, and destination ip are not the same IP family"), on every host
    routing to the node. Our engine matches Kilo's output, so it computes those plans too and
    plan.check_plan refuses them at each host's converge, naming that host. Refusing here names
    the node at fault before any host changes."""
    if len(opts["subnets"]) == 2:
        return  # a dual-stack mesh: the engine checks each node's families itself
    subnet = opts["subnet"]
    odd, matching = [], False
    for node in parsed:
        for field, nets in (("internal_ip", node.internals), ("pod_cidr", node.pods)):
            for net in nets:
                if net.version != subnet.version:
                    odd.append((node, field, net))
                else:
                    matching = True
    if not odd:
        return
    if not matching:
        raise TopologyError(OPTIONS_SUBJECT, "subnet", "%s is IPv%d but every node's internal IPs and pod ranges are"
                            " IPv%d: the mesh's routes would mix both families" % (subnet, subnet.version, odd[0][2].version))
    node, field, net = odd[0]
    raise TopologyError(node_subject(node.name), field, "%s is IPv%d but the mesh's subnet %s is IPv%d: a single-stack"
                        " mesh routes one family (for both, set a subnet of each)" % (net, net.version, subnet, subnet.version))


def converged_together(task_vars):
    """The hosts this task's run converges with this host: the play's, or its batch in a serial
    play (a batch is converged alone: the other batches' hosts count as left out)."""
    return set(task_vars.get("ansible_play_batch") or task_vars.get("ansible_play_hosts_all") or ())


def outside_play(hosts, per_host, play):
    """Hosts of the mesh staying in it that this play leaves out (--limit): they are not
    converged in this run, so they would keep a rotating host's old key."""
    return sorted(host for host in hosts if host not in play and per_host[host]["state"] == "present")


def check_rotation(hosts, per_host, play):
    """A key rotates only in a run that converges every host of the mesh; else refuse it before
    any host changes, naming the rotating host, its variable and the hosts left out."""
    outside = outside_play(hosts, per_host, play)
    if not outside:
        return
    for host in hosts:
        if host in play and per_host[host]["key_rotate"]:
            raise KiloError("this host's key would rotate, but %s outside the play or its batch (--limit, serial) would"
                            " keep its old key and cut it off; rotate in a run of every host of the mesh at once"
                            % some_of(outside), host_subject(host), OPTIONS["key_rotate"]["var"])


def some_of(hosts):
    """The hosts an error names: the first five, then "..." (a limit may leave thousands out)."""
    return ", ".join(hosts[:5]) + (" ..." if len(hosts) > 5 else "")
