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

from ansible_collections.kilo.mesh.plugins.module_utils.plan import mark_roaming
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, host_subject
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import (
    TopologyError, build_plans, listen_port, node_segment)
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import host_location, parse_subnets, read_families
from ansible_collections.kilo.mesh.plugins.module_utils.options import names
from ansible_collections.kilo.mesh.plugins.plugin_utils import plan_store
from ansible_collections.kilo.mesh.plugins.plugin_utils.validate import check_mesh
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import (
    INPUT_VARS, gather_nodes, host_node, mesh_peers, missing_warning, placed, read_registry, registry_path,
    standin_node, update_registry)


def engine_options(args):
    """The options the topology engine reads (Kilo's flags)."""
    return dict((k, args[k]) for k in names("mesh"))


def not_a_node(group):
    return KiloError("not a node of the mesh: it is not in group %r or reported no key (run kilo.mesh.key"
                     " first, or set kilo_public_key and kilo_force_endpoint)" % group)


class MeshReading(object):
    """The mesh as one action reads it.

    ``action`` is the KiloAction asking (its variable look-ups and the inventory's locations),
    ``args`` the options of the "mesh" and "inputs" scopes (an action about one host may give
    fewer: only what its questions need). ``check_mode``: the task's (no registry write).
    ``earlier``: host -> inputs of hosts outside the play
    as an earlier step of the play read them (``KiloAction.earlier_reading``). ``location_groups``:
    ``KiloAction.location_groups``' answer when the caller has it already.
    """

    def __init__(self, action, task_vars, args, check_mode=False, earlier=None, location_groups=None):
        self._action = action
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
        return self._once("registry_file",
                          lambda: registry_path(self.task_vars, self.args.get("registry"), self.group))

    @property
    def registry(self):
        return self._once("registry", lambda: read_registry(self.registry_file))

    @property
    def location_groups(self):
        return self._once("location_groups", lambda: self._action.location_groups(self.task_vars, self.group))

    @property
    def locations(self):
        return self._once("locations",
                          lambda: self._action.locations(self.task_vars, self.group, self.location_groups))

    def _gathered(self):
        def gather():
            if self.args.get("nodes") is not None:  # explicit nodes win over the inventory
                return [dict(n) for n in self.args["nodes"]], [], {}, set()
            return gather_nodes(self.task_vars, self.group, self.args["port"], self.args["facts_var"],
                                self.registry, self.locations, self._earlier, self.dual)
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
    def peers(self):
        """The outside peers: kilo_peers, then the registry's."""
        return self._once("peers", lambda: mesh_peers(self.args.get("peers"), self.registry))

    @property
    def planned(self):
        """(nodes, stand-ins): every host of the mesh as a node, the known ones as ``nodes`` has them
        and each host without data (``missing``) with stand-ins for what its key step reports
        (``inputs.standin_node``); stand-ins maps such a host to its stand-in fields. What
        kilo.mesh.validate checks before any host has reported."""
        def plan():
            nodes, standins = list(self.nodes), {}
            if not self.missing:
                return nodes, standins
            try:
                families = [net.version for net in parse_subnets(self.args.get("subnet"), "options")]
            except KiloError:
                families = [4]  # the engine names the bad subnet
            locations = placed(self.missing, self.host_vars, self.locations, self.group)
            for index, host in enumerate(self.missing):
                node, fields = standin_node(host, self.host_vars(host), index, locations.get(host, ""),
                                            self.args["port"], families, self.dual)
                nodes.append(node)
                standins[host] = fields
            return nodes, standins
        return self._once("planned", plan)

    def checked(self, connecting=()):
        """The one check of the whole mesh (``validate.check_mesh``) for this reading, once: every
        playbook that reads a mesh runs it before anything else. Returns its answer."""
        return self._once("checked", lambda: check_mesh(self._action, self.task_vars, self.args, self, connecting))

    def computed(self, only=None, check=None):
        """The engine's answer for the whole mesh (plans of ``only``, default every node). The whole
        mesh is checked first (``checked``): its reader (a plan, a picture) runs the one check.
        ``check``: build_plans' (called on the engine's mesh before any plan of ``only``)."""
        if only is not None:
            return build_plans(self.nodes, self.peers, self.options, only=only, check=check)
        self.checked()
        return self._once("computed", lambda: build_plans(self.nodes, self.peers, self.options))

    # --- one host ----------------------------------------------------------------------------

    def host_vars(self, host):
        """What the mesh reads of one host's variables (and its registered key result)."""
        wanted = list(INPUT_VARS) + ([self.args["facts_var"]] if self.args.get("facts_var") else [])
        if host in self._earlier:
            return self._earlier[host]
        return self._action.variables(self.task_vars, host, wanted)

    def node(self, host, facts=None):
        """``host``'s node as the whole reading makes it, reading this host only; None when the
        host has no data at all. ``facts``: its public facts of this run, for a step that has them
        before they are registered (kilo.mesh.key); else its registered result, the registry,
        its Node's annotations."""
        hvars = self.host_vars(host)
        # a reading without a mesh group (kilo.mesh.key's) asks nothing a location changes
        location = placed([host], lambda h: hvars, self.locations, self.group).get(host, "") if self.group else ""
        known = facts if facts is not None else self.registry["hosts"].get(host)
        return host_node(host, hvars, self.args.get("facts_var"), known, location, self.args["port"], self.dual)[0]

    def location(self, host):
        """``host``'s location as its node has it (``nodes.host_location``): its kilo_location,
        else its location group; None when neither says."""
        return host_location(self.host_vars(host), (self.locations or {}).get(host), host_subject(host))

    def segment(self, host):
        """The engine's segment key of ``host`` (None when it is no node of the mesh)."""
        node = self.node(host)
        return None if node is None else node_segment(node, self.options)

    def listen_port(self, host, port):
        """The port ``host``'s WireGuard listens on, by the engine's rule: its forced endpoint's,
        else ``port`` (kilo_port or the default)."""
        found = self._action.variables(self.task_vars, host, ["kilo_force_endpoint"])
        return listen_port(found.get("kilo_force_endpoint"), port, host_subject(host), "kilo_force_endpoint")

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
