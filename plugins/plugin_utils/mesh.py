# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The controller's one reading of the mesh, which every controller-side action asks.

The inventory (with the Nodes the inventory plugin read), the registry and this run's
kilo.mesh.key results give the nodes, the outside peers and each host's public facts
(``inputs.py``); the engine gives segments and plans. An action makes one ``MeshReading`` and
asks it: it reads each part at most once, and only the parts asked for (a step about one host
reads that host, not the mesh). What the engine decides (a host's segment, its endpoint, the
port it listens on) is asked of the engine here, never worked out again by an action.

Across the hosts of a run the plans are computed once, by the run-once ``kilo.mesh.topology``
with ``save_plans`` (``plan_store.py``); ``plan()`` takes a host's plan from there when the task
names that step's registered result.
"""

from __future__ import annotations

import ipaddress

from ansible_collections.kilo.mesh.plugins.module_utils.plan import mark_roaming
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, host_subject
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import (
    TopologyError,
    build_plans,
    listen_port,
    node_segment,
)
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import (
    FIELDS,
    host_location,
    read_families,
)
from ansible_collections.kilo.mesh.plugins.module_utils.options import engine_defaults, engine_names
from ansible_collections.kilo.mesh.plugins.plugin_utils import plan_store
from ansible_collections.kilo.mesh.plugins.plugin_utils.validate import as_host_error, check_mesh
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import (
    INPUT_VARS,
    gather_nodes,
    host_node,
    mesh_peers,
    missing_warning,
    placed,
    read_registry,
    registry_path,
    update_registry,
)


# Stand-ins (``MeshReading(stand_ins=True)``, kilo.mesh.topology and kilo.mesh.graph for people
# only): a host that reported nothing yet is shown with a made-up key that says what it is, an
# internal IP and a "public" endpoint (Kilo's test: outside 10/8, 172.16/12, 192.168/16) from
# 100.64.0.0/10, clear of every network the mesh names. Never in a plan a host gets: the run-once
# step, join, annotate and showconf read no stand-ins.
STAND_IN_KEY = "kiloMeshStandInNoKeyYet%019d0="
STAND_IN_INTERNAL = ipaddress.ip_network("100.64.0.0/11")
STAND_IN_EXTERNAL = ipaddress.ip_network("100.96.0.0/11")
STAND_IN_INTERNAL6 = ipaddress.ip_network("fd6b:696c:6f00::/64")


def _networks(value):
    """The IP networks of a node's or peer's field value (one, a list, text with commas); what does
    not parse is skipped (the engine's checks name it)."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",") if value else []
    out = []
    for item in items:
        text = str(item).strip()
        if text.startswith("["):  # [IPv6]:port
            text = text[1:].partition("]")[0]
        elif text.count(":") == 1:  # IPv4:port
            text = text.partition(":")[0]
        try:
            out.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            continue
    return out


def stand_in_facts(hosts, nodes, peers, options, dual=False):
    """host -> made-up public facts (key, internal IP, external IP) for ``hosts``, for display:
    each address unique and outside every network ``nodes``, ``peers`` and ``options`` name."""
    taken = _networks(options.get("subnet")) + _networks(options.get("service_cidrs"))
    for node in nodes:
        for field in ("internal_ip", "pod_cidr", "allowed_location_ips", "endpoint"):
            taken += _networks(node.get(field))
    for peer in peers or ():
        if isinstance(peer, dict):
            taken += _networks(peer.get("allowed_ips"))

    def free(network):
        """The addresses of ``network`` (not its first or last) outside every taken network, in order:
        a taken network is stepped over whole, so a big one costs one step."""
        near = sorted(
            (net for net in taken if net.version == network.version and net.overlaps(network)),
            key=lambda net: int(net.network_address),
        )
        last = int(network.broadcast_address) - 1
        value = int(network.network_address) + 1
        while value <= last:
            inside = [
                net
                for net in near
                if int(net.network_address) <= value <= int(net.broadcast_address)
            ]
            if inside:
                value = max(int(net.broadcast_address) for net in inside) + 1
                continue
            yield (
                ipaddress.ip_address(value)
                if network.version == 4
                else ipaddress.IPv6Address(value)
            )
            value += 1
        raise KiloError("no address left for a stand-in in %s" % network, "task", "stand_ins")

    internal, external, internal6 = (
        free(STAND_IN_INTERNAL),
        free(STAND_IN_EXTERNAL),
        free(STAND_IN_INTERNAL6),
    )
    out = {}
    for index, host in enumerate(hosts, 1):
        ip = "%s/%d" % (next(internal), STAND_IN_INTERNAL.prefixlen)
        if dual:
            ip = [ip, "%s/%d" % (next(internal6), STAND_IN_INTERNAL6.prefixlen)]
        out[host] = dict(
            public_key=stand_in_key(index), internal_ip=ip, external_ip=str(next(external))
        )
    return out


def stand_in_key(index):
    """The ``index``-th stand-in key (a valid public key that says what it is)."""
    return STAND_IN_KEY % index


def stand_in_fields(hvars, node, facts):
    """The fields of a host's ``node`` (made from its variables ``hvars`` and stand-in ``facts``)
    that stand in for what it has not reported: its key, internal IP, endpoint unless it pins them."""
    fields = set()
    if node.get("public_key") == facts["public_key"]:
        fields.add("public_key")
    if hvars.get(FIELDS["internal_ip"].var) is None:
        fields.add("internal_ip")
    if not hvars.get(FIELDS["endpoint"].var):
        fields.add("endpoint")
    return fields


def mark_stand_ins(computed, hosts):
    """The engine's answer with the stand-in nodes ``hosts`` marked for display: their members
    (``stand_in``, no internal IP or endpoint) and the segments they lead (no key or endpoint,
    ``leader_stand_in``). The plans are the engine's, shared, unchanged."""
    hosts = set(hosts)
    if not hosts:
        return computed
    segments = []
    for seg in computed["segments"]:
        seg = dict(
            seg,
            members=[
                dict(m, stand_in=True, internal_ip=None, endpoint=None) if m["name"] in hosts else m
                for m in seg.get("members") or []
            ],
        )
        if seg["leader"] in hosts:
            seg.update(leader_stand_in=True, endpoint=None, public_key=None)
        segments.append(seg)
    return dict(computed, segments=segments)


def engine_options(args):
    """The options the topology engine reads (Kilo's flags); an action that computes no host's plan
    (graph, showconf: no ``plans`` scope) leaves those to their defaults, which change no segment,
    leader, WireGuard peer or graph."""
    defaults = engine_defaults()
    return dict((k, args[k] if k in args else defaults[k]) for k in engine_names())


def not_a_node(group):
    return KiloError(
        "not a node of the mesh: it is not in group %r or reported no key (run kilo.mesh.key"
        " first, or set kilo_public_key and kilo_force_endpoint, or kilo_behind_nat)" % group
    )


class MeshReading(object):
    """The mesh as one action reads it.

    ``action`` is the KiloAction asking (its variable look-ups and the inventory's locations),
    ``args`` the options of the "mesh" and "inputs" scopes (an action about one host may give
    fewer: only what its questions need). ``check_mode``: the task's (no registry write).
    ``earlier``: host -> inputs of hosts outside the play
    as an earlier step of the play read them (``KiloAction.earlier_reading``). ``location_groups``:
    ``KiloAction.location_groups``' answer when the caller has it already. ``stand_ins``: hosts
    that reported nothing yet are nodes with stand-in facts (``stand_in_facts``), for a reading
    shown to people only (a preview before the first run); ``stand_ins`` then lists them.
    """

    def __init__(
        self,
        action,
        task_vars,
        args,
        check_mode=False,
        earlier=None,
        location_groups=None,
        stand_ins=False,
    ):
        self._action = action
        self._stand_ins = stand_ins
        self.check_mode = check_mode
        self.task_vars = task_vars
        self.args = args
        self.group = args.get("group")
        self._earlier = earlier or {}
        self._memo = {}
        if location_groups is not None:
            self._memo["location_groups"] = location_groups

    def _once(self, key, compute):
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def read_registry_again(self):
        """Forget what came from the registry (and all computed from it): the next question reads
        it again (``registry_wait``: other slices of a job write it meanwhile)."""
        for key in ("registry", "gathered", "peers", "planned", "checked", "computed"):
            self._memo.pop(key, None)

    # --- what is read ---------------------------------------------------------------------

    @property
    def options(self):
        return engine_options(self.args)

    @property
    def dual(self):
        """Whether the mesh is dual-stack (``subnet`` a list of two): its nodes then take internal IPs and
        a Node's pod ranges of both families (``nodes.read_families``)."""
        return bool(read_families(self.args.get("subnet")))

    @property
    def registry_file(self):
        return self._once(
            "registry_file",
            lambda: registry_path(self.task_vars, self.args.get("registry"), self.group),
        )

    @property
    def registry(self):
        return self._once("registry", lambda: read_registry(self.registry_file))

    @property
    def location_groups(self):
        return self._once(
            "location_groups", lambda: self._action.location_groups(self.task_vars, self.group)
        )

    @property
    def locations(self):
        return self._once(
            "locations",
            lambda: self._action.locations(self.task_vars, self.group, self.location_groups),
        )

    def _gathered(self):
        def gather():
            if self.args.get("nodes") is not None:  # explicit nodes win over the inventory
                return [dict(n) for n in self.args["nodes"]], [], {}, set(), []
            nodes, missing, fresh, rotating = gather_nodes(
                self.task_vars,
                self.group,
                self.args["port"],
                self.args["facts_var"],
                self.registry,
                self.locations,
                self._earlier,
                self.dual,
            )
            stand_ins = []
            if self._stand_ins and missing:
                facts = stand_in_facts(missing, nodes, self.peers, self.args, self.dual)
                locations = self.locations or {}
                for host in missing:
                    node = self._stand_in_node(host, self.host_vars(host), facts[host], locations)
                    nodes.append(node)
                    stand_ins.append(host)
                missing = []
            return nodes, missing, fresh, rotating, stand_ins

        return self._once("gathered", gather)

    @property
    def nodes(self):
        """Every node of the mesh (this run's facts, else the registry, else the Node's annotations)."""
        return self._gathered()[0]

    @property
    def missing(self):
        """Hosts of the mesh group with no data at all (left out of the mesh)."""
        return self._gathered()[1]

    @property
    def fresh(self):
        """host -> public facts reported in this run (for the registry)."""
        return self._gathered()[2]

    @property
    def rotating(self):
        """Hosts whose key step of this run reported a key switch to come (kilo.mesh.key's ``rotating``)."""
        return self._gathered()[3]

    @property
    def stand_ins(self):
        """Hosts shown with stand-in facts (``stand_ins=True``): they still need their first run."""
        return self._gathered()[4]

    @property
    def peers(self):
        """The outside peers: kilo_peers, then the registry's."""
        return self._once("peers", lambda: mesh_peers(self.args.get("peers"), self.registry))

    @property
    def planned(self):
        """(nodes, stand-ins): every host of the mesh as a node, for the one check (kilo.mesh.validate)
        before any host has reported: the known ones as read, and each host without data (``missing``,
        or shown with stand-ins) with the stand-in facts of ``stand_in_facts`` for what its key step
        reports; stand-ins maps such a host to the fields of its node that are stand-ins (they take
        part in no conflict, engine/conflicts.py)."""

        def plan():
            shown = set(self.stand_ins)
            nodes = [node for node in self.nodes if node["name"] not in shown]
            hosts = list(self.missing) + list(self.stand_ins)
            if not hosts:
                return nodes, {}
            facts = stand_in_facts(hosts, nodes, self.peers, self.args, self.dual)
            locations = placed(hosts, self.host_vars, self.locations, self.group)
            standins = {}
            for host in hosts:
                hvars = self.host_vars(host)
                node = self._stand_in_node(host, hvars, facts[host], locations)
                nodes.append(node)
                standins[host] = stand_in_fields(hvars, node, facts[host])
            return nodes, standins

        return self._once("planned", plan)

    def checked(self, connecting=()):
        """The one check of the whole mesh (``validate.check_mesh``) for this reading, once: every
        playbook that reads a mesh runs it before anything else. Returns its answer; None for nodes
        given as the task's ``nodes`` (no inventory mesh to check: the engine refuses a bad node
        when it reads them)."""
        if self.args.get("nodes") is not None:
            return None
        return self._once(
            "checked", lambda: check_mesh(self._action, self.task_vars, self.args, self, connecting)
        )

    def computed(self, only=None, check=None, now=None, lazy=False):
        """The engine's answer for the whole mesh (plans of ``only``, default every node). The whole
        mesh is checked first (``checked``): its reader (a plan, a picture) runs the one check.
        ``check``: build_plans' (called on the engine's mesh before any plan of ``only``);
        ``now``: the time the nodes' timed inputs count at (a push run's direct paths); ``lazy``:
        build_plans', the plans of ``only`` rendered one by one as they are read."""
        if only is not None:
            try:
                return build_plans(
                    self.nodes, self.peers, self.options, only=only, check=check, now=now, lazy=lazy
                )
            except KiloError as e:  # the engine's, and its parsers' (a bad node field)
                raise self.as_inventory_error(e)
        self.checked()
        return self._once(
            "computed",
            lambda: mark_stand_ins(
                build_plans(self.nodes, self.peers, self.options, now=now, lazy=lazy),
                self.stand_ins,
            ),
        )

    def as_inventory_error(self, e):
        """The engine's error ``e`` in validate's words (``validate.as_host_error``): a node's field
        as its host's variable, a mesh-wide option as the first host's (a step without validate
        before it: a role alone, a playbook of one host)."""
        if e.field == "only":
            return e
        first = (self.task_vars["groups"].get(self.group) or [None])[0]
        return as_host_error(e, self.task_vars["hostvars"], first)

    # --- one host ----------------------------------------------------------------------------

    def host_vars(self, host):
        """What the mesh reads of one host's variables (and its registered key result)."""
        wanted = list(INPUT_VARS) + ([self.args["facts_var"]] if self.args.get("facts_var") else [])
        if host in self._earlier:
            return self._earlier[host]
        return self._action.variables(self.task_vars, host, wanted)

    def _stand_in_node(self, host, hvars, facts, locations):
        """The node of a host that reported nothing, from its variables and stand-in ``facts``."""
        return host_node(
            host, hvars, None, facts, locations.get(host, ""), self.args["port"], self.dual
        )[0]

    def node(self, host, facts=None):
        """``host``'s node as the whole reading makes it, reading this host only; None when the
        host has no data at all. ``facts``: its public facts of this run, for a step that has them
        before they are registered (kilo.mesh.key); else its registered result, the registry,
        its Node's annotations."""
        hvars = self.host_vars(host)
        # a reading without a mesh group (kilo.mesh.key's) asks nothing a location changes
        location = (
            placed([host], lambda h: hvars, self.locations, self.group).get(host, "")
            if self.group
            else ""
        )
        known = facts if facts is not None else self.registry["hosts"].get(host)
        return host_node(
            host, hvars, self.args.get("facts_var"), known, location, self.args["port"], self.dual
        )[0]

    def location(self, host):
        """``host``'s location as its node has it (``nodes.host_location``): its kilo_location,
        else its location group; None when neither says."""
        return host_location(
            self.host_vars(host), (self.locations or {}).get(host), host_subject(host)
        )

    def segment(self, host):
        """The engine's segment key of ``host`` (None when it is no node of the mesh)."""
        node = self.node(host)
        return None if node is None else node_segment(node, self.options)

    def listen_port(self, host, port):
        """The port ``host``'s WireGuard listens on, by the engine's rule: its forced endpoint's,
        else ``port`` (kilo_port or the default)."""
        found = self._action.variables(self.task_vars, host, ["kilo_force_endpoint"])
        return listen_port(
            found.get("kilo_force_endpoint"), port, host_subject(host), "kilo_force_endpoint"
        )

    def plan(self, host, topology_var=None, result=None):
        """``host``'s plan: the run-once step's (``topology_var`` names its registered result),
        else computed here from the whole mesh (a playbook of one host). Computing it here warns
        of hosts left out (into ``result``) and keeps this host's fresh facts in the registry."""
        stored = (self.task_vars.get(topology_var) or {}) if topology_var else {}
        if stored.get("plan_store"):
            plan = plan_store.load(stored["plan_store"], host)
            if plan is None:
                raise not_a_node(self.group)
            return plan
        try:
            # validates every node and peer first: a bad one is named before this host is
            computed = self.computed(only=[host])
        except TopologyError as e:
            if e.field != "only":
                raise
            raise not_a_node(self.group)
        plan = computed["plans"][host]
        mark_roaming([plan], computed)
        if self.missing and result is not None:
            result["warnings"] = [missing_warning(self.missing)]
        # Only this host's fresh facts: parallel workers each write their own entry.
        if not self.check_mode and host in self.fresh:
            update_registry(self.registry_file, {host: self.fresh[host]})
        return plan
