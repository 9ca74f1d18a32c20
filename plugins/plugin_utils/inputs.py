# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Controller side: turn the inventory (and the registry) into topology inputs.

The mesh is every host of the ``kilo`` group, not the hosts of the play. Hosts that this run
did not reach (``--limit``, unreachable, failed) keep their entry through the registry: a
JSON file beside the inventory, or Redis (``registry_store``), holding public data only (public
keys, endpoints, IPs).
"""

from __future__ import annotations

import os
import time

from ansible_collections.kilo.mesh.plugins.module_utils.common import host_subject
from ansible_collections.kilo.mesh.plugins.module_utils.engine.connect import peer_addresses
from ansible_collections.kilo.mesh.plugins.module_utils.engine.relays import SETTLE
from ansible_collections.kilo.mesh.plugins.module_utils.kube.kube_node import check_peer_name

# A node from a host's variables and facts is the node table's (the agent reads Nodes with it too).
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import (  # noqa: F401
    FIELDS,
    NODE_POD_SOURCE_VAR,
    POD_SOURCE_VAR,
    REGISTRY_FIELDS,
    InputError,
    annotation_facts,
    facts_from_result,
    node_from_host,
)
from ansible_collections.kilo.mesh.plugins.plugin_utils.registry_store import FileStore, open_store

# A node's fields -> the host variables that set them (Kilo's node annotations): the node table's.
NODE_VARS = dict((field.name, field.var) for field in FIELDS.values() if field.var)

# Every variable of a host the mesh reads (host_inputs), besides the registered kilo.mesh.key result.
INPUT_VARS = tuple(NODE_VARS.values()) + (
    "kilo_kubernetes_node",
    POD_SOURCE_VAR,
    NODE_POD_SOURCE_VAR,
)


def host_facts(hvars, facts_var, known):
    """(facts, fresh) of one host: this run's kilo.mesh.key result (fresh True), else its registry
    entry in ``known``, else what its Kubernetes Node says (annotation_facts), else None."""
    facts = facts_from_result(hvars.get(facts_var))
    if facts is not None:
        return facts, True
    if known is not None:
        return known, False
    return annotation_facts(hvars), False


def host_inputs(hvars):
    """What the mesh reads of one host's variables (INPUT_VARS), as a plain dict."""
    return dict((var, hvars[var]) for var in INPUT_VARS if var in hvars)


def placed(hosts, vars_of, locations, group):
    """``locations`` (host -> location group), or {} when the inventory could not tell (None) and
    each of ``hosts`` sets kilo_location itself; ``vars_of(host)`` gives a host's variables."""
    if locations is not None:
        return locations
    unplaced = [h for h in hosts if "kilo_location" not in vars_of(h)]
    if unplaced:
        # Never collapse every location into one segment silently.
        raise InputError(
            "not set, and the child groups of %r (the locations) cannot be read from this inventory"
            % group,
            host_subject(unplaced[0]),
            "kilo_location",
        )
    return {}


def behind_nat(host, hvars):
    """Whether the host is marked ``behind_nat`` (its row's check: a bad value is refused)."""
    field = FIELDS["behind_nat"]
    return bool(field.check(hvars.get(field.var), host_subject(host), field.var))


def host_node(host, hvars, facts_var, known, location, port, dual=False):
    """(node, facts, fresh) of one host: its facts as host_facts() finds them (``known``: its
    registry entry) and its node, None when the host has no data at all (it reported nothing and
    does not pin its key and its endpoint, or its key and ``behind_nat``: a host reached through a
    relay needs no endpoint). ``dual``: the mesh is dual-stack."""
    facts, fresh = host_facts(hvars, facts_var, known)
    if facts is None and not (
        hvars.get("kilo_public_key")
        and (hvars.get("kilo_force_endpoint") or behind_nat(host, hvars))
    ):
        return None, facts, fresh
    return node_from_host(host, hvars, facts, location, port, dual=dual), facts, fresh


def gather_nodes(task_vars, group, port, facts_var, registry, locations, read=None, dual=False):
    """Nodes of every host in ``group``, with the facts of this run, else the registry, else the
    agent annotations of the host's Kubernetes Node.

    ``locations`` maps host -> location group (None: the inventory could not tell).
    ``read`` maps hosts outside the play to their host_inputs() as read earlier in the play
    (plan_store.load_reading); their variables are not computed again.
    Returns (nodes, missing, fresh, rotating): hosts with no data at all are listed in ``missing``;
    ``fresh`` maps host -> facts reported in this run (to be written to the registry);
    ``rotating`` is the set of hosts whose key step of this run reported a key switch to come
    (read here, with the rest of the host's variables, rather than computed again per host).
    """
    hostvars = task_vars["hostvars"]
    hosts = task_vars["groups"].get(group, [])
    read = read or {}

    def vars_of(host):
        return read[host] if host in read else hostvars[host]

    locations = placed(hosts, vars_of, locations, group)
    known = registry.get("hosts", {})
    nodes, missing, fresh, rotating = [], [], {}, set()
    for host in hosts:
        hvars = vars_of(host)
        node, facts, now = host_node(
            host, hvars, facts_var, known.get(host), locations.get(host, ""), port, dual
        )
        if now:
            fresh[host] = facts
            reported = hvars.get(facts_var) or {}
            if reported.get("rotating"):
                rotating.add(host)
                fresh[host] = registry_facts(facts, reported)
        if node is None:
            missing.append(host)
        else:
            nodes.append(node)
    return nodes, missing, fresh, rotating


def registry_facts(facts, reported):
    """The registry entry of a host whose key step reported a rotation (``reported``): its key is
    the one its interface still runs (``previous_public_key``) until its converge switched, when
    kilo.mesh.join writes the new one (``facts``). A run cut short before the switch, or a later
    --limit run without this host, then hands its peers the key it runs, not one it does not run yet."""
    if reported.get("previous_public_key"):
        return dict(facts, public_key=reported["previous_public_key"])
    return facts


REGISTRY_FILE = "kilo-registry.json"


def registry_path(task_vars, path=None, group=None):
    """The registry beside the inventory of the mesh's hosts.

    A host outside the mesh group (localhost in playbooks/plan.yml, a laptop given in another
    inventory file) takes the inventory_dir of the group's first host, so every play of one
    mesh shares one registry. Inside a directory given as inventory source, Ansible would read
    the registry as inventory: there it is the hidden ``.kilo-registry.json`` (Ansible skips
    dot files), unless only the visible one exists already (kept, not moved).
    """
    if path:
        return path
    inventory_dir = task_vars.get("inventory_dir")
    hosts = task_vars.get("groups", {}).get(group or "", [])
    if hosts and (not inventory_dir or task_vars.get("inventory_hostname") not in hosts):
        inventory_dir = task_vars["hostvars"][hosts[0]].get("inventory_dir") or inventory_dir
    directory = inventory_dir or os.getcwd()
    visible, hidden = (
        os.path.join(directory, REGISTRY_FILE),
        os.path.join(directory, "." + REGISTRY_FILE),
    )
    if not in_directory_source(directory, task_vars.get("ansible_inventory_sources")):
        return visible
    return visible if os.path.exists(visible) and not os.path.exists(hidden) else hidden


def in_directory_source(directory, sources):
    """Is ``directory`` (in) an inventory source that is a directory, which Ansible reads whole?"""
    real = os.path.realpath(directory)
    for source in sources or ():
        if isinstance(source, str) and os.path.isdir(source):
            top = os.path.realpath(source)
            if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
                return True
    return False


def read_registry(path):
    """The registry's data at ``path`` (a file, or a Redis URL: registry_store)."""
    return open_store(path).read()


def mesh_peers(peers, registry):
    """The mesh's outside peers: ``peers`` (kilo_peers) and then the registry's (kilo.mesh.peer
    with store=registry), as items of ``kilo_peers``; a kilo_peers name wins over the registry's."""
    peers = [dict(p) for p in peers or []]
    names = set(p.get("name") for p in peers)
    return peers + [
        dict(entry, name=name)
        for name, entry in sorted(registry["peers"].items())
        if name not in names
    ]


def connect_peer(args, host, families=(), kubernetes=False):
    """What a machine of connect.yml is as a peer (the arguments of kilo.mesh.peer, which the role
    passes on), from its options ``args`` (kilo_connect_*): its name, state and store, and while
    present its allowed IPs (``engine.connect.peer_addresses``; in a dual-stack mesh, ``families``,
    one of each family) and keepalive. ``kubernetes``: the playbook was given a cluster."""
    name = args["connect_name"] or host
    check_peer_name(name)
    peer = dict(
        name=name,
        state=args["connect_state"],
        store=args["connect_store"] or ("kubernetes" if kubernetes else "registry"),
    )
    if args["connect_state"] == "present":
        addresses = peer_addresses(args["connect_allowed_ip"], host_subject(host), families)
        peer.update(
            allowed_ips=[str(a) for a in addresses],
            persistent_keepalive=args["connect_persistent_keepalive"],
        )
    return peer


def update_registry(path, fresh):
    """Merge this run's public facts into the registry; returns True when it changed.

    Hosts run their action plugins in parallel workers, and a sliced job runs several
    ansible-playbook processes at once: the merge reads the registry again under the store's
    lock (or watch) and writes only what changed (registry_store). Entries of other hosts are kept.
    """
    if not fresh:
        return False
    return _change_registry(path, _merge(fresh))


def _merge(fresh):
    def merge(data):
        changed = False
        for host, facts in fresh.items():
            old = data["hosts"].get(host, {})
            if any(old.get(k) != facts.get(k) for k in REGISTRY_FIELDS):
                data["hosts"][host] = dict(facts, last_seen=int(time.time()))
                changed = True
        return changed

    return merge


def _change_registry(path, change, store=None):
    """Run ``change(data)`` on the registry as it is now (registry_store: under a lock, or a watch
    for Redis); what it changed is written."""
    store = store or open_store(path)
    try:
        return store.change(change)
    except OSError as e:
        raise InputError("cannot write it: %s" % e, store.subject) from e


def forget_registry_hosts(path, hosts, check_mode=False):
    """Take ``hosts`` out of the registry (playbooks/uninstall.yml, once their state is removed);
    returns the hosts that had an entry. A registry file left with no host and no peer is removed,
    with its lock file: a mesh taken away leaves nothing beside the inventory. Check mode
    writes nothing (not even the lock file)."""
    store = open_store(path)
    if check_mode or not store.exists():  # no registry: nothing to forget, no lock file made
        return sorted(h for h in hosts if h in store.read()["hosts"])
    gone = []

    def change(data):
        gone.extend(sorted(h for h in hosts if h in data["hosts"]))
        for host in gone:
            del data["hosts"][host]
        if not data["hosts"] and not data["peers"] and store.exists():
            store.remove()  # under the lock; writers after it find no registry, as on a first run
            return not isinstance(store, FileStore)  # Redis, Kubernetes: the removal is the write
        return bool(gone)

    _change_registry(path, change, store)
    return gone


def set_registry_peer(path, name, entry, check_mode=False):
    """Store peer ``name`` as ``entry`` (None: remove it); returns the entry it had (None if none).

    The registry holds public data only: ``entry`` must not carry a preshared key."""
    store = open_store(path)
    if (entry or {}).get("preshared_key"):
        raise InputError(
            "a preshared key never goes to the registry (public data only)",
            store.subject,
            "peers.%s" % name,
        )
    if check_mode or (entry is None and not store.exists()):  # not even the lock file
        return store.read()["peers"].get(name)
    before = []

    def change(data):
        before.append(data["peers"].get(name))
        if before[0] == entry:
            return False
        if entry is None:
            del data["peers"][name]
        else:
            data["peers"][name] = entry
        return True

    _change_registry(path, change, store)
    return before[0]


def stale_leaders(handshakes_by_host, node_keys, bound):
    """Hosts whose handshakes with every node they peer with are older than ``bound`` seconds
    (or never happened); hosts without node peers (non-leaders) are not judged.

    A dead tunnel looks stale from both ends: when every judged host is stale (two locations
    with one broken leader, or an idle mesh) nobody can tell which end is broken, so nobody is
    named; with a third leader the healthy ones still handshake with each other."""
    judged, out = 0, set()
    for host, handshakes in handshakes_by_host.items():
        ages = [age for key, age in (handshakes or {}).items() if key in node_keys]
        if ages:
            judged += 1
            if all(age is None or age > bound for age in ages):
                out.add(host)
    return set() if len(out) == judged else out


def stale_relays(handshakes_by_host, nodes, bound):
    """Beyond Kilo: names of the nodes that may relay (an endpoint, no ``behind_nat`` mark) whose
    handshakes every reporting node behind NAT (``behind_nat``, or no endpoint) reports older than
    ``bound`` seconds or never happened. Only a node behind NAT keeps alive towards every relay,
    so only its reading says a relay is gone; a relay no such node peers with is not judged."""
    natted = set(n["name"] for n in nodes if n.get("behind_nat") or not n.get("endpoint"))
    ages = {}
    for host, handshakes in handshakes_by_host.items():
        if host in natted:
            for key, age in (handshakes or {}).items():
                ages.setdefault(key, []).append(age)
    out = set()
    for node in nodes:
        seen = ages.get(node.get("public_key"))
        if node["name"] not in natted and seen and all(age is None or age > bound for age in seen):
            out.add(node["name"])
    return out


def live_paths(report, keys):
    """{segment: "direct" | "probing"} of what one NAT'd leader's interface runs for the other NAT'd
    leaders (``report``: its key step's result; ``keys``: public key -> segment): an entry without
    allowed IPs is a probe (``probes``), one with them a direct path; a segment without an entry
    is relayed (absent here)."""
    probes = set(report.get("probes") or ())
    return dict(
        (keys[key], "probing" if key in probes else "direct")
        for key in (report.get("handshakes") or {})
        if key in keys
    )


def reported_wireguard(report):
    """A key step's result (``report``) read its host's WireGuard interface: it says what that host
    runs (``handshakes``; a reading that failed, ``wireguard_read`` false, says nothing)."""
    return (
        isinstance(report, dict)
        and isinstance(report.get("handshakes"), dict)
        and report.get("wireguard_read", True) is not False
    )


def direct_path_states(reports, nodes, computed, now, bound):
    """Beyond Kilo, push runs with ``direct_paths: always``: the path states (node field
    ``path_state``, the agents' ``direct``/``held``) of the leaders of NAT'd segments, from their
    key step's report in this run (``reports``: host -> result), for ``build_plans(now=now)``;
    ``computed``: the mesh computed without them (``only=[]``: segments, leaders, paths).

    A leader in the run publishes ``direct[V]`` for every NAT'd segment V whose leader it
    handshook with within ``bound`` seconds: it has an entry for V only as a probe or a direct
    path, so both ends reporting one go (or stay) direct, and a stale one falls back to the relay.
    Its ``since`` is at least the engine's settle (``relays.SETTLE``) ago: a push run has no later
    moment to wait for, and both ends move at one instant (``switch_at``). A pair with one end out
    of the run keeps what the in-run end's interface runs (``live_paths``: direct, probing, else
    relayed, held on the relay for this computation), with a warning naming the host left out.
    Out of the run is a leader without a report (``--limit``; another batch of a ``serial`` play:
    the caller passes this batch's reports only) or whose WireGuard reading failed
    (``reported_wireguard``), fixed before any pair is judged. Handshakes count under a rotating
    leader's previous key too (``previous_public_key``): its peers still run that one.

    Returns (states: {host: path state}, live: {host: {segment: path}} of the in-run leaders,
    warnings)."""
    keys = dict((n["name"], n.get("public_key")) for n in nodes)
    natted = [s for s in computed["segments"] if s.get("reachable") is False]
    leader_of = dict((s["key"], s["leader"]) for s in natted)
    segment_of_key = dict(
        (keys.get(s["leader"]), s["key"]) for s in natted if keys.get(s["leader"])
    )
    # a leader rotating its key in this run still runs the old one until its converge: its peers'
    # handshakes with it are under that key (the key step's ``previous_public_key``)
    for seg in natted:
        report = reports.get(seg["leader"])
        old = report.get("previous_public_key") if isinstance(report, dict) else None
        if old and report.get("rotating"):
            segment_of_key.setdefault(old, seg["key"])
    # the leaders reporting in this run, fixed before any pair is judged: a leader left out stays
    # out for every pair, whatever state another pair gave it
    reporting = set(
        seg["leader"] for seg in natted if reported_wireguard(reports.get(seg["leader"]))
    )
    states, live = {}, {}
    for seg in natted:
        if seg["leader"] not in reporting:
            continue
        report = reports[seg["leader"]]
        host = seg["leader"]
        states[host] = {"direct": {}, "down": {}, "held": {}}
        live[host] = live_paths(report, segment_of_key)
        for key, age in (report.get("handshakes") or {}).items():
            other = segment_of_key.get(key)
            if other is not None and other != seg["key"] and age is not None and age <= bound:
                states[host]["direct"][other] = now - max(age, SETTLE)
    warnings = []
    for path in computed.get("paths") or ():
        if path["path"] == "direct" or path["a"] not in leader_of or path["b"] not in leader_of:
            continue
        ends = [(path["a"], path["b"]), (path["b"], path["a"])]
        inside = [(u, v) for u, v in ends if leader_of[u] in reporting]
        if len(inside) != 1:
            continue
        u, v = inside[0]
        here, there = leader_of[u], leader_of[v]
        shown = live[here].get(v, "relayed")
        far = states.setdefault(there, {"direct": {}, "down": {}, "held": {}})
        if shown == "direct":
            since = states[here]["direct"].get(v, now - SETTLE)
            states[here]["direct"][v] = far["direct"][u] = since
        else:
            states[here]["direct"].pop(v, None)
            if shown == "relayed":
                states[here]["held"][v] = now + 1
        warnings.append(
            "direct_paths: %s (leader of %s) is not in this run (--limit, another serial batch, or"
            " its WireGuard reading failed): the pair %s - %s stays %s as %s runs it until a run"
            " includes both" % (there, v, path["a"], path["b"], shown, here)
        )
    return states, live, warnings


def direct_switchers(live, computed, leaders):
    """The in-run NAT'd leaders (``live``: ``direct_path_states``' second value) whose interface
    runs another path to a segment than ``computed`` (the mesh with their path states) says: they
    move between the relay and a direct entry in this run, all at one instant."""
    path_of = {}
    for path in computed.get("paths") or ():
        path_of[(path["a"], path["b"])] = path_of[(path["b"], path["a"])] = path["path"]
    out = set()
    for seg, host in leaders.items():
        if host not in live:
            continue
        for (a, b), path in path_of.items():
            if a == seg and b in leaders and (path == "direct") != (live[host].get(b) == "direct"):
                out.add(host)
    return sorted(out)


def missing_warning(missing):
    return "hosts without a key or endpoint are left out of the mesh: %s" % ", ".join(missing)


def missing_result(missing, joining=()):
    """What a controller-side result says of the hosts without a key or endpoint: nothing when
    none are. Those in ``joining`` (hosts that report theirs later in this run: the play's hosts
    before its kilo.mesh.key step) are listed as such, without a warning; the rest are left out."""
    joining = set(joining)
    left_out = [host for host in missing if host not in joining]
    result = (
        dict(joining=[host for host in missing if host in joining])
        if len(left_out) < len(missing)
        else {}
    )
    if left_out:
        result.update(missing=left_out, warnings=[missing_warning(left_out)])
    return result
