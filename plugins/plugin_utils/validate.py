# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The whole mesh checked on the controller before any host changes: the one path every playbook
that reads a mesh takes (``check_mesh``).

kilo.mesh.validate runs it first in site.yml, rotate.yml, connect.yml and status.yml; the plan,
graph and showconf readings run it through ``MeshReading.checked`` (``MeshReading.computed``
of the whole mesh asks it first). So every one of them refuses the same inputs, with the same
words, in the same order, before any remote call:

1. the mesh group (``mesh_hosts``): it exists and has hosts;
2. names (``check_names``): every ``kilo_*`` variable of every host is one the collection reads
   (``options.known_variables``: the option table, the node table, ``options.OTHER_VARIABLES``), and every
   Node annotation of Kilo's prefix or ours is one it knows (``kube_node.KNOWN_ANNOTATIONS``);
3. every option of every host (``host_options``: types, choices, bounds, as each action reads it);
4. mesh-wide options agree between hosts (``agree``), and name the group in use;
5. locations (``check_locations``): one location group each, none directly under the mesh group;
6. every node variable of every host, by its row of the node table, once: as the reading makes
   each host's node (``nodes.node_from_host``; ``MeshReading.planned`` reads every host, those
   that never reported with stand-ins), so a host that never reported is refused as one that did
   (a row without a check of its own, the keepalive, is refused by the engine's parse in 7,
   named as the host's variable all the same);
7. the topology of every host (``check_topology``): the engine's checks (keys, peers, families,
   the subnet's room for the segments, a segment's endpoint, pod ranges) and the conflicts
   between parties (``engine/conflicts.py``). A host that has not reported yet takes part with
   stand-ins for what its key step reports (``MeshReading.planned``), so a first run is
   refused before the key step as a later run is.

Errors name the host and the inventory variable (``host 'aws-1': kilo_subnet: ...``), not the
engine's field; a peer's name the peer and its field. kilo.mesh.validate adds what only a run
knows (``check_rotation``: a key rotation under --limit).
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    did_you_mean,
    host_subject,
    node_subject,
)
from ansible_collections.kilo.mesh.plugins.module_utils.engine.conflicts import check_conflicts
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import Topology
from ansible_collections.kilo.mesh.plugins.module_utils.engine.parse import (
    OPTIONS_SUBJECT,
    TopologyError,
)
from ansible_collections.kilo.mesh.plugins.module_utils.kube.kube_node import (
    ANNOTATIONS_VAR,
    KNOWN_ANNOTATIONS,
)
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import (
    ANNOTATION_PREFIX,
    OWN_PREFIX,
    REPORTED_FIELDS,
    pod_source_of,
    var_of_field,
)
from ansible_collections.kilo.mesh.plugins.module_utils.options import (
    OPTIONS,
    OTHER_PREFIXES,
    SCOPES,
    VAR_PREFIX,
    known_variables,
    names,
)
from ansible_collections.kilo.mesh.plugins.plugin_utils import ansible_internals


# --- 1. the mesh group ------------------------------------------------------------------------


def mesh_hosts(task_vars, group):
    """The hosts of the mesh group ``group``; refuse a group that does not exist or is empty,
    naming the host whose inventory kilo_group names another group (a play's hosts, and the
    playbooks' ``hosts:``, see extra variables only), else the groups it may mean."""
    groups = task_vars.get("groups", {})
    hosts = groups.get(group) or []
    if hosts:
        return list(hosts)
    hostvars = task_vars["hostvars"]
    for host in groups.get("all") or ():
        named = hostvars[host].get("kilo_group") if "kilo_group" in hostvars[host] else None
        if named and named != group and groups.get(named):
            raise KiloError(
                "%r in the inventory, but this run reads group %r: the playbooks' plays see extra variables"
                " only; run with -e kilo_group=%s" % (named, group, named),
                host_subject(host),
                "kilo_group",
            )
    meant = inventory_groups(task_vars)
    hint = (" (the inventory's groups with child groups: %s)" % ", ".join(meant)) if meant else ""
    raise KiloError(
        "no host in group %r, the mesh group%s: name it with -e kilo_group=NAME" % (group, hint),
        "inventory",
        "kilo_group",
    )


def inventory_groups(task_vars):
    """The groups of the inventory that have child groups (what a mesh group looks like), sorted."""
    hostvars = task_vars.get("hostvars")
    inventory = getattr(hostvars, "inventory", None) or ansible_internals.inventory_of(hostvars)
    groups = getattr(inventory, "groups", None) or {}
    return sorted(
        name
        for name, group in groups.items()
        if name != "all" and getattr(group, "child_groups", None)
    )


# --- 2. names ---------------------------------------------------------------------------------


def check_names(hosts, hostvars):
    """Every kilo_* variable of every host is one the collection reads, and every Node annotation of
    Kilo's prefix or ours (the inventory plugin's ``kubernetes_annotations``) one it knows; refuse
    another, naming the host, the name and the closest known one. A variable this run set on the
    host (a task's registered result, set_fact) is the play's own, not the inventory's."""
    known = known_variables()
    set_in_run = getattr(hostvars, "names_set_in_run", lambda: None)()
    for host in hosts:
        hvars = hostvars[host]
        own = set_in_run(host) if set_in_run else ()
        for name in sorted(str(n) for n in hvars if str(n).startswith(VAR_PREFIX)):
            if name in known or name in own or name.startswith(tuple(OTHER_PREFIXES)):
                continue
            raise KiloError(
                "unknown variable%s (every kilo_* variable: ansible-doc kilo.mesh.validate)"
                % did_you_mean(name, known, (VAR_PREFIX,)),
                host_subject(host),
                name,
            )
        annotations = hvars.get(ANNOTATIONS_VAR) if ANNOTATIONS_VAR in hvars else None
        for name in sorted(annotations or ()) if isinstance(annotations, dict) else ():
            if name.startswith((ANNOTATION_PREFIX, OWN_PREFIX)) and name not in KNOWN_ANNOTATIONS:
                closest = did_you_mean(name, KNOWN_ANNOTATIONS, (ANNOTATION_PREFIX, OWN_PREFIX))
                raise KiloError(
                    "unknown annotation on the host's Node%s" % closest, host_subject(host), name
                )


# --- 3. and 4. options --------------------------------------------------------------------------

# A live tunnel handshakes every 120 s (WireGuard's REKEY_AFTER_TIME); anything shorter than
# this would call healthy leaders stale between two handshakes.
MIN_HANDSHAKE_BOUND = 180


def host_options(action, task_vars, hosts, args):
    """{host: its options of every scope} as its actions will read them (each variable checked
    against the option table: type, choices, bounds); an option the task gives (``args``) is
    the task's for every host."""
    given = dict((name, args[name]) for name in getattr(action._task, "args", {}) if name in args)
    per_host = {}
    for host in hosts:
        per_host[host] = options = action.options_of(task_vars, source=host, scopes=SCOPES)
        options.update((name, value) for name, value in given.items() if name in options)
        bound = per_host[host]["leader_handshake_timeout"]
        if 0 < bound < MIN_HANDSHAKE_BOUND:
            raise KiloError(
                "%d s is below WireGuard's rekey interval (a live tunnel handshakes every 120 s);"
                " use 0 (off) or at least %d" % (bound, MIN_HANDSHAKE_BOUND),
                host_subject(host),
                OPTIONS["leader_handshake_timeout"]["var"],
            )
    return per_host


def agree(per_host, group=None):
    """Mesh-wide settings must be the same on every host: {host: options} -> None or raise; and
    (``group``) the mesh group they name is the one in use."""
    hosts = sorted(per_host)
    if not hosts:
        return
    first = hosts[0]
    # pod_cidr_source: the mesh's (the agents' one informer and shared role); a node's own is kilo_node_pod_cidr_source
    for name in names("mesh", "plans") + ["group", "registry", "peers", "pod_cidr_source"]:
        for host in hosts[1:]:
            if per_host[host].get(name) != per_host[first].get(name):
                if name == "peers":
                    # peers may carry preshared keys: say where they differ, never what they hold
                    shown = "differs from the value"
                else:
                    shown = "%r here, %r" % (per_host[host].get(name), per_host[first].get(name))
                raise KiloError(
                    "%s on host %r: every host of one mesh needs the same value" % (shown, first),
                    host_subject(host),
                    OPTIONS[name]["var"] or name,
                )
    if group is not None and per_host[first].get("group") not in (None, group):
        raise KiloError(
            "%r, but the mesh read here is group %r (a play's hosts see extra variables only: name the"
            " group with -e kilo_group=NAME)" % (per_host[first]["group"], group),
            host_subject(first),
            OPTIONS["group"]["var"],
        )


# --- 5. locations -------------------------------------------------------------------------------


def check_locations(hosts, location_groups, hostvars, group):
    """A host is in one location group (a host in two would sit in whichever sorts first), and none
    sits directly under the mesh group, outside every location group, when the mesh has location
    groups (it would lead a location of its own named ""); kilo_location decides for either."""
    location_groups = location_groups or {}
    for host, groups in sorted(location_groups.items()):
        if len(groups) > 1 and "kilo_location" not in hostvars[host]:
            raise KiloError(
                "in location groups %s; a host has one location (or set kilo_location)"
                % ", ".join(groups),
                host_subject(host),
                "location",
            )
    if not location_groups:
        return  # no location groups: one location, "" (Kilo's nodes without a location), or kilo_location
    locations = sorted(set(name for names_ in location_groups.values() for name in names_))
    for host in hosts:
        if host not in location_groups and "kilo_location" not in hostvars[host]:
            raise KiloError(
                "directly in group %r, in none of its location groups (%s): it would lead a location"
                ' of its own named ""; put it in a location group or set kilo_location'
                % (group, ", ".join(locations[:5]) + (" ..." if len(locations) > 5 else "")),
                host_subject(host),
                "location",
            )


# --- 7. the topology ------------------------------------------------------------------------------


def check_topology(nodes, peers, options, hostvars, first, standins=None):
    """Compute the mesh once (every check of the engine, no plan rendered), then
    ``check_parties``; returns the engine's Topology. ``standins``: host -> the fields of its
    node that stand in for what it has not reported. A node's error is told as its host's
    variable, a mesh-wide option's as the variable of ``first`` (every host agrees on those)."""
    try:
        # ours on the nodes as the engine parsed them (no second reading of the inputs)
        topology = Topology(nodes, peers or [], options)
        check_parties(topology, peers, standins)
        return topology
    except KiloError as e:
        raise as_host_error(e, hostvars, first)


def check_parties(topology, peers, standins=None):
    """Our checks of the engine's parsed mesh (``topology``): check_one_family and the conflicts
    between parties (``engine/conflicts.py``); ``peers`` as the engine was given them."""
    check_one_family(topology.opts, topology.nodes, standins)
    check_conflicts(topology, peers or [], standins)


def as_host_error(e, hostvars, first):
    """The engine's error ``e`` told as the inventory says it: a node's field as its host's
    variable (fields of a list or mapping as the whole field) where the host sets it, else as
    kilo.mesh.key's report where the key step reports that field, else as the field; a mesh-wide
    option as the variable of ``first``; other errors as they are."""
    if e.kind == "options" and e.field in OPTIONS and OPTIONS[e.field]["var"] and first is not None:
        return KiloError(e.message, host_subject(first), OPTIONS[e.field]["var"])
    host = e.name if e.kind == "node" else None
    if host is not None and host in hostvars and e.field:
        var = var_of_field(e.field.split("[")[0])
        if var and var in hostvars[host]:
            return KiloError(e.message, host_subject(host), var)
        if (
            e.field == "pod_cidr"
        ):  # not a variable: the ranges of the host's source (its Kubernetes Node)
            source = pod_source_of(hostvars[host], None, host_subject(host))
            return KiloError(
                e.message, host_subject(host), "pod_cidr (kilo_pod_cidr_source %s)" % source
            )
        if e.field.split("[")[0] in REPORTED_FIELDS:
            return KiloError(
                e.message, host_subject(host), "%s (reported by kilo.mesh.key)" % e.field
            )
        return KiloError(e.message, host_subject(host), e.field)
    return e


def check_one_family(opts, parsed, standins=None):
    """In a single-stack mesh (``opts``: the engine's parsed options; ``parsed``: its parsed nodes),
    every node's internal IP and pod ranges are of the subnet's IP family; raise TopologyError
    naming the node and field, or the subnet when no node has an address of its family (the
    subnet is then the odd one, as fd04::/64 in a mesh of IPv4 nodes). Stand-in internal IPs
    (``standins``: node name -> stand-in fields) do not count.

    Kilo's own engine takes such a mesh: its topology keeps the node, and its routes pair a
    destination of one family with a gateway of the other (an IPv6 pod range through a leader's
    IPv4 internal or WireGuard IP). Only its agent's netlink call refuses each such route, every
    resync ("gateway, source, and destination ip are not the same IP family"), on every host
    routing to the node. Our engine matches Kilo's output, so it computes those plans too and
    plan.check_plan refuses them at each host's converge, naming that host. Refusing here names
    the node at fault before any host changes."""
    if len(opts["subnets"]) == 2:
        return  # a dual-stack mesh: the engine checks each node's families itself
    standins = standins or {}
    subnet = opts["subnet"]
    odd, matching = [], False
    for node in parsed:
        internals = [] if "internal_ip" in standins.get(node.name, ()) else node.internals
        for field, nets in (
            ("internal_ip", internals),
            ("pod_cidr", [pod.net for pod in node.pods]),
        ):
            for net in nets:
                if net.version != subnet.version:
                    odd.append((node, field, net))
                else:
                    matching = True
    if not odd:
        return
    if not matching:
        raise TopologyError(
            "%s is IPv%d but every node's internal IPs and pod ranges are"
            " IPv%d: the mesh's routes would mix both families"
            % (subnet, subnet.version, odd[0][2].version),
            OPTIONS_SUBJECT,
            "subnet",
        )
    node, field, net = odd[0]
    raise TopologyError(
        "%s is IPv%d but the mesh's subnet %s is IPv%d: a single-stack"
        " mesh routes one family (for both, set a subnet of each)"
        % (net, net.version, subnet, subnet.version),
        node_subject(node.name),
        field,
    )


def relay_warnings(topology, hostvars, hosts):
    """What a relayed mesh (engine/relays.py) may get wrong without being refused: a node marked
    ``behind_nat`` without ``persistent_keepalive`` on a Kubernetes Node (the engine keeps alive for
    it, but Kilo's own nodes (kg) read only the annotation, and without it reset its endpoint every
    resync, squat/kilo#34), and a ``relays`` entry naming no location of the mesh."""
    out = []
    mesh = set(hosts)
    # the engine's parsed nodes (a keepalive as given is parsed there, once); an unreachable
    # leader's own keepalive is 0 where the engine set its 25 s (``Relays.kept_alive``)
    kept = topology.relays.kept_alive if topology.relays is not None else frozenset()
    for node in topology.nodes:
        name = node.name
        if (
            node.behind_nat
            and (not node.persistent_keepalive or name in kept)
            and name in mesh
            and isinstance(hostvars[name].get("kilo_kubernetes_node"), dict)
        ):
            out.append(
                "host %r: %s: without %s, Kilo's nodes (kg) of this cluster reset this node's endpoint every"
                " resync instead of following its NAT mapping; set it (25)"
                % (name, var_of_field("behind_nat"), var_of_field("persistent_keepalive"))
            )
    locations = set(node.location for node in topology.nodes)
    for entry in topology.opts["relays"]:
        if entry not in locations:
            out.append(
                "host %r: %s: %r names no location of the mesh (%s)"
                % (hosts[0], OPTIONS["relays"]["var"], entry, ", ".join(sorted(locations)[:10]))
            )
    return out


# --- the one path ---------------------------------------------------------------------------------


class Checked(object):
    """What ``check_mesh`` read: the mesh's hosts, each host's options, the engine's Topology of
    the mesh with stand-ins, the peers it was checked with, and its warnings (``relay_warnings``)."""

    def __init__(self, hosts, per_host, topology, peers, warnings=()):
        self.hosts, self.per_host, self.topology, self.peers = hosts, per_host, topology, peers
        self.warnings = list(warnings)


def check_mesh(action, task_vars, args, reading, connecting=()):
    """Every check of the module's doc, in its order, on the mesh that ``reading`` (a
    ``MeshReading`` of ``action``) reads; ``connecting``: the peers of connect.yml's machines, as
    ``connecting_peers`` makes them, checked with the mesh's. Raises KiloError; returns Checked."""
    group = reading.group
    hostvars = task_vars["hostvars"]
    hosts = mesh_hosts(task_vars, group)  # 1
    check_names(hosts, hostvars)  # 2
    per_host = host_options(action, task_vars, hosts, args)  # 3
    agree(per_host, group)  # 4
    check_locations(hosts, reading.location_groups, hostvars, group)  # 5
    nodes, standins = reading.planned  # 6: each host's node variables, read by the node table
    peers = with_connecting(reading.peers, args.get("peers"), connecting)
    topology = check_topology(  # 7
        nodes, peers, reading.options, hostvars, hosts[0], standins
    )
    return Checked(hosts, per_host, topology, peers, relay_warnings(topology, hostvars, hosts))


def with_connecting(peers, inventory_peers, connecting):
    """The mesh's peers (``peers``: kilo_peers, then the registry's) with connect.yml's machines
    (``connecting``, peers as ``inputs.connect_peer`` makes them; those leaving as None entries
    of ``(name, None)``): a machine's peer replaces its registry entry, never a kilo_peers one
    (the inventory wins by name, as everywhere)."""
    if not connecting:
        return peers
    inventory = set(p.get("name") for p in inventory_peers or [] if isinstance(p, dict))
    by_name = dict((name, peer) for name, peer in connecting if name not in inventory)
    kept = [p for p in peers if not (isinstance(p, dict) and p.get("name") in by_name)]
    return kept + [peer for name, peer in sorted(by_name.items()) if peer is not None]


# --- what only a run knows --------------------------------------------------------------------------


def converged_together(task_vars):
    """The hosts this task's run converges with this host: the play's, or its batch in a serial
    play (a batch is converged alone: the other batches' hosts count as left out)."""
    return set(task_vars.get("ansible_play_batch") or task_vars.get("ansible_play_hosts_all") or ())


def outside_play(hosts, per_host, play):
    """Hosts of the mesh staying in it that this play leaves out (--limit): they are not
    converged in this run, so they would keep a rotating host's old key."""
    return sorted(
        host for host in hosts if host not in play and per_host[host]["state"] == "present"
    )


def check_rotation(hosts, per_host, play):
    """A key rotates only in a run that converges every host of the mesh; else refuse it before
    any host changes, naming the rotating host, its variable and the hosts left out."""
    outside = outside_play(hosts, per_host, play)
    if not outside:
        return
    for host in hosts:
        if host in play and per_host[host]["key_rotate"]:
            raise KiloError(
                "this host's key would rotate, but %s outside the play or its batch (--limit, serial) would"
                " keep its old key and cut it off; rotate in a run of every host of the mesh at once"
                % some_of(outside),
                host_subject(host),
                OPTIONS["key_rotate"]["var"],
            )


def some_of(hosts):
    """The hosts an error names: the first five, then "..." (a limit may leave thousands out)."""
    return ", ".join(hosts[:5]) + (" ..." if len(hosts) > 5 else "")
