# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Every option of the collection, defined once: name, type, default, choices, doc, variable.

Everything else is derived from ``OPTIONS``: the modules' and action plugins' argument
specs (``argument_spec``), the engine's defaults (``defaults``), the doc fragments and the
roles' ``meta/argument_specs.yml`` (written by ``scripts/specs.py``, checked by a unit test).
An option's inventory variable is ``kilo_<name>`` unless ``var`` says otherwise; an action
takes a task argument first, then that variable, then the default.

Scopes say who reads an option:

* ``mesh``: the topology engine (Kilo's flags); every host of a mesh must agree on them.
* ``inputs``: where the controller finds the mesh (group, registry, nodes, peers).
* ``plans``: what only the hosts' plans read, never the segments, leaders, WireGuard peers or the
  graph (Kilo's C(--cni) and C(--iptables-forward-rules): firewall and CNI fields): the actions that
  compute hosts' plans (kilo.mesh.topology, kilo.mesh.join, kilo.mesh.agent, kilo.mesh.validate), not
  graph or showconf. Every host of a mesh must agree on them, as on ``mesh``.
* ``slicing``: the run-once plan step of a play (kilo.mesh.topology with save_plans) waiting for the
  other slices of a job.
* ``host``: the converge backends on each host.
* ``key``: kilo.mesh.key (the key file and IP discovery).
* ``prepare``: kilo.mesh.prepare (packages, sysctls, the firewall port).
* ``run``: the playbooks and roles themselves (no module reads them).
* ``registry``: where kilo.mesh.peer finds the registry with ``store: registry``.
* ``connect``: kilo.mesh.connect and the role connect (a machine outside the mesh as a peer).
* ``agent``: kilo.mesh.agent and the role agent (the agent that keeps a node in the mesh between runs).
* ``kube``: the Kubernetes client of the actions that talk to the API (KiloAction.client_options) and
  playbooks/kubernetes.yml; no task argument (the actions' own client options are kubernetes.core's).
* ``output``: the controller actions that write files for people (kilo.mesh.graph, kilo.mesh.showconf).
"""

from __future__ import absolute_import, division, print_function
from __future__ import annotations

__metaclass__ = type

import copy

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    to_int,
)

# Where a node's pod ranges come from (option pod_cidr_source): the Node's spec.podCIDR(s) (Kilo's),
# Calico's IPAM block affinities, Cilium's CiliumNode (cluster-pool IPAM).
POD_SOURCES = ("node", "calico", "cilium")
# one node's own source: a host variable, or the inventory plugin's reading of the annotation
NODE_POD_SOURCE_VAR = "kilo_node_pod_cidr_source"
# The fields of the node table in the ``nodes`` option's doc (``doc`` fills them in: the node
# table imports this one).
NODE_FIELDS_DOC = "{node fields}"

# Type hints: the annotations are never evaluated (``annotations`` above), and typing is not
# imported at run time (a host's call pays for every import); type checkers read this block.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional

    # an option's row: type, description, scopes, var, and default, choices, bounds, ...
    Spec = dict[str, Any]


DEFAULT_INTERFACE = "kilo0"
DEFAULT_PORT = 51820
DEFAULT_KEY_PATH = "/var/lib/kilo/key"
DEFAULT_SUBNET = "10.4.0.0/16"
DEFAULT_CNI_PATH = "/etc/cni/net.d/10-kilo.conflist"
# Seconds a remote task may take: covers a slow first package install, bounds a dark host.
DEFAULT_TASK_TIMEOUT = 300
# Where kilo.mesh.agent puts the agent on a host.
DEFAULT_AGENT_APP = "/usr/lib/kilo-mesh/kilo-mesh-agent.pyz"
DEFAULT_AGENT_CONFIG = "/etc/kilo-mesh/agent.json"
DEFAULT_AGENT_KUBECONFIG = "/etc/kilo-mesh/kubeconfig"
# The boot restore's own copy of the same code (not the agent's file: each is replaced and
# removed with what runs it)
DEFAULT_BOOT_APP = "/usr/lib/kilo-mesh/kilo-mesh.pyz"


def _option(
    name: str,
    scopes: tuple[str, ...],
    type: str,
    description: list[str],
    default: Any = None,
    var: Optional[str] = "",
    **extra: Any,
) -> tuple[str, Spec]:
    """One row; ``bounds`` (low, high; None: open) limits an int option (``out_of_bounds``)."""
    spec = dict(
        type=type,
        description=description,
        scopes=scopes,
        var=("kilo_" + name) if var == "" else var,
    )
    if default is not None:
        spec["default"] = default
    spec.update(extra)
    return name, spec


OPTIONS: dict[str, Spec] = dict(
    [
        # --- mesh: Kilo's flags -------------------------------------------------------------
        _option(
            "granularity",
            ("mesh",),
            "str",
            [
                "V(location) - one segment per location, its leader links to the other leaders (Kilo's default).",
                "V(full) - every node is its own segment.",
                "V(cross) - every node links over WireGuard to every node in other locations; no WireGuard inside"
                " a location, whose members reach each other over their private network.",
            ],
            default="location",
            choices=["location", "full", "cross"],
        ),
        _option(
            "subnet",
            ("mesh", "key"),
            "raw",
            [
                "Subnet the WireGuard IPs of the segments come from (a CIDR).",
                "Beyond Kilo: a list of two CIDRs, one of each IP family, makes the mesh dual-stack - each"
                " segment gets a WireGuard IP from each, the first is the primary (Kilo's one WireGuard IP), and nodes"
                " may carry internal IPs and pod ranges of both families.",
                "M(kilo.mesh.key) fails on a host that has an address on another interface inside it (a LAN in the way).",
            ],
            default=DEFAULT_SUBNET,
        ),
        _option(
            "port",
            ("mesh", "key"),
            "int",
            [
                "WireGuard UDP port, used for endpoints made from discovered addresses.",
                "A host whose endpoint is forced (C(kilo_force_endpoint)) listens on that endpoint's port.",
                "M(kilo.mesh.key) fails on a host where another process already holds the port.",
            ],
            default=DEFAULT_PORT,
            bounds=(1, 65535),  # a port's, everywhere (``bounds``)
        ),
        _option(
            "interface",
            ("mesh", "host", "key"),
            "str",
            ["Name of the WireGuard interface."],
            default=DEFAULT_INTERFACE,
        ),
        _option(
            "encapsulate",
            ("mesh",),
            "str",
            [
                "When traffic inside a location goes through the IPIP tunnel C(tunl0) (Kilo's C(--encapsulate))."
            ],
            default="always",
            choices=["always", "crosssubnet", "never"],
        ),
        _option(
            "local",
            ("mesh",),
            "bool",
            ["Manage routes between nodes of the same location (Kilo's C(--local))."],
            default=True,
        ),
        _option(
            "service_cidrs",
            ("mesh",),
            "list",
            ["Service CIDRs that are never masqueraded (Kilo's C(--service-cidr))."],
            default=[],
            elements="str",
        ),
        _option(
            "cni",
            ("plans",),
            "bool",
            [
                "Kilo's C(--cni) flag: masquerade traffic from the node's pod CIDR, and keep the node's CNI"
                " configuration (C(cni_path)) pointing at that pod CIDR."
            ],
            default=True,
            engine=True,
        ),
        _option(
            "forward_rules",
            ("plans",),
            "bool",
            [
                "Add FORWARD accept rules for the node's own ranges (Kilo's C(--iptables-forward-rules))."
            ],
            default=False,
            engine=True,
        ),
        _option(
            "compatibility",
            ("mesh",),
            "str",
            [
                "Kilo's C(--compatibility) (add-on mode beside another CNI): which encapsulator carries traffic"
                " inside a location.",
                "V(none) - Kilo's IPIP tunnel C(tunl0) towards the member's internal IP.",
                "V(flannel) - Flannel's VXLAN device C(flannel.1) (it must exist on the host) towards the member's"
                " pod network address; no IPIP firewall rules and no tunnel address.",
                "V(cilium) - C(tunl0) towards the member's C(cni_compatibility_ip) (C(kilo_cni_compatibility_ip),"
                " its C(cilium_host) address), else its pod network address.",
                "With V(flannel) or V(cilium) and C(local) off, a leader still routes the internal IPs of its"
                " location's nodes through that device in table 1107 for traffic from the WireGuard interface.",
            ],
            default="none",
            choices=["none", "flannel", "cilium"],
        ),
        _option(
            "relays",
            ("mesh",),
            "list",
            [
                "Beyond Kilo: the locations whose leaders may relay between locations that cannot reach each other"
                " (every node of each marked C(kilo_behind_nat) or without an endpoint); V([]) - every location with a"
                " reachable leader.",
                "A relay forwards that traffic through its own WireGuard interface and so reads it, as a leader reads its"
                " own location's: name only locations you trust. Meshes without such locations are Kilo's, whatever this says.",
            ],
            default=[],
            elements="str",
        ),
        # --- inputs: where the mesh comes from ------------------------------------------------
        _option(
            "group",
            ("inputs", "registry"),
            "str",
            ["Inventory group whose hosts form the mesh; its child groups are the locations."],
            default="kilo",
        ),
        _option(
            "registry",
            ("inputs", "registry"),
            "path",
            [
                "JSON file on the controller holding the public data (keys, endpoints, IPs) of every host seen,"
                " so that hosts outside C(--limit) or unreachable keep their place in the mesh,"
                " and the peers added with M(kilo.mesh.peer) O(kilo.mesh.peer#module:store=registry).",
                "Defaults to C(kilo-registry.json) in the inventory directory (of the mesh group's first host"
                " when the play's host has none, as V(localhost)); C(.kilo-registry.json) there when that"
                " directory is an inventory source itself (Ansible would read the visible file as inventory).",
                "A Redis URL instead (V(redis://HOST:6379/0), V(rediss://...), V(unix:///PATH?db=0); a password as"
                " V(redis://:PASSWORD@HOST:6379/0), shown masked; URL-encode a C($) in it as C(%24), since the option is a path and"
                " Ansible expands variables in it) keeps the registry in Redis, where every controller,"
                " job and slice of an AWX or Automation Controller job reads and writes it (one hash field per host,"
                " written under Redis' WATCH: concurrent runs never lose each other's update). The query argument"
                " C(key) names the mesh's keys (default V(kilo-registry)), so meshes may share a database. Needs the"
                " Python package C(redis) on the controller.",
                "Where there is a cluster, V(kubernetes://NAMESPACE/NAME) keeps it in that ConfigMap instead (replaced"
                " with its resourceVersion: a concurrent writer retries, no update is lost; deleted once empty; 1 MiB"
                " at most, some thousands of hosts). Its client is the environment's (C(K8S_AUTH_*), as AWX's Kubernetes"
                " credential sets them), else in-cluster, else the default kubeconfig; the query arguments C(kubeconfig)"
                " and C(context) name another (C(kilo_kube) is not read for it). The credentials need get, create,"
                " update and delete of that ConfigMap.",
            ],
        ),
        _option(
            "registry_wait",
            ("slicing",),
            "int",
            [
                "Seconds the run-once plan step (M(kilo.mesh.topology) with O(kilo.mesh.topology#module:save_plans),"
                " the role C(kilo.mesh.node)) waits, after writing its hosts' data to the registry (C(kilo_registry)), until every"
                " host of the mesh group is known (this run, the registry or its Node), reading the registry again"
                " every second.",
                "For a job run as several concurrent C(--limit) slices (AWX job slicing) with a shared registry, so"
                " that each slice's first run computes its plans with every other slice's hosts, as one run would."
                " Hosts still unknown then are left out with a warning naming them (the next run adds them).",
                "V(0) - no wait (a host without data is left out at once, as before).",
            ],
            default=0,
            bounds=(0, 3600),
        ),
        _option(
            "peers",
            ("inputs",),
            "list",
            [
                "Outside WireGuard clients (Kilo's Peer resources), each with C(name), C(public_key), C(allowed_ips),"
                " and optionally C(endpoint), C(persistent_keepalive), C(preshared_key).",
                "The peers stored in the registry (M(kilo.mesh.peer) with O(kilo.mesh.peer#module:store=registry)) are"
                " added; a peer of this list wins over a registry peer of the same name.",
            ],
            elements="dict",
        ),
        _option(
            "nodes",
            ("inputs",),
            "list",
            [
                "The nodes, instead of the inventory. Each has C(name) and the fields of the node table: %s."
                % NODE_FIELDS_DOC,
                "C(healthy) false: not chosen as leader while a healthy node of the location can lead.",
            ],
            elements="dict",
            var=None,
        ),
        _option(
            "leader_health",
            ("inputs", "agent"),
            "bool",
            [
                "Beyond Kilo (its issue 489: a leader that is up but cannot forward blackholes its location):"
                " a host of the play that failed or became unreachable earlier in this run is not chosen as"
                " leader when another node of its location can lead. Off by default, as Kilo chooses.",
                "In agent mode, each leader's agent probes the other leaders through the tunnels and publishes"
                " those it sees dead on its Node; a leader every other leader (at least two) sees dead for 20 s"
                " loses leadership to a healthy member of its location for 10 minutes.",
            ],
            default=False,
        ),
        _option(
            "leader_handshake_timeout",
            ("inputs", "agent"),
            "int",
            [
                "With C(leader_health) - a host whose latest WireGuard handshakes with every other node it peers"
                " with (as reported by M(kilo.mesh.key) in this run) are older than this many seconds, or never"
                " happened, counts as down too. V(0) turns this test off.",
                "In agent mode, a value other than V(0) makes the agents judge the other leaders by the age of"
                " their latest handshake alone, instead of probing them: for meshes that filter ICMP through"
                " the tunnel. Use V(180) or more (a live session handshakes every 2 minutes).",
                "Set persistent keepalive on the nodes (C(kilo_persistent_keepalive)) when using it: without"
                " traffic WireGuard does not handshake, and an idle healthy leader would look stale.",
            ],
            default=0,
            bounds=(0, None),
        ),
        _option(
            "direct_paths",
            ("inputs",),
            "str",
            [
                "Beyond Kilo: how a push run treats two locations behind NAT that reach each other through a relay.",
                "V(agent) - push runs keep them relayed; node agents (M(kilo.mesh.agent)) try direct paths on their own.",
                "V(always) - a run probes them directly (an entry without allowed IPs, at the mapping the relays"
                " saw) while their traffic stays on the relay; the next run moves a pair whose two leaders both report"
                " a fresh handshake of that probe to a direct path, both ends at one instant, and a direct pair whose"
                " handshake went stale back to its relay. Works behind NATs that keep a mapping for every destination"
                " (most home routers); behind symmetric ones (carrier-grade NAT) pairs stay relayed.",
                "V(never) - push runs never probe.",
                "V(agent) and V(never) do the same in push runs (every such pair relayed); node agents ignore this"
                " option and try direct paths whatever it says.",
                "Switching from V(always) to V(agent) or V(never): the next run puts the live direct pairs of the"
                " leaders in the run back on their relays, both ends at one instant as V(always) moves them; a leader"
                " left out of that run (C(--limit)) keeps its direct entry, and that pair is cut until a run includes it.",
            ],
            default="agent",
            choices=["agent", "always", "never"],
        ),
        _option(
            "facts_var",
            ("inputs",),
            "str",
            ["Name of the registered result of M(kilo.mesh.key) on each host."],
            default="kilo_host",
            var=None,
        ),
        # --- host: the converge backends --------------------------------------------------------
        _option(
            "backend",
            ("host", "prepare"),
            "str",
            [
                "How WireGuard runs. V(kernel) uses the kernel module over netlink; V(userspace) runs"
                " C(userspace_command) and configures it through its UAPI socket; V(auto) picks kernel when"
                " the module loads."
            ],
            default="auto",
            choices=["auto", "kernel", "userspace"],
        ),
        _option(
            "userspace_command",
            ("host",),
            "str",
            ["Userspace WireGuard implementation to start (wireguard-go or boringtun)."],
            default="wireguard-go",
        ),
        _option(
            "key_path",
            ("host", "key"),
            "path",
            ["Path of the private key file made by M(kilo.mesh.key); it never leaves the host."],
            default=DEFAULT_KEY_PATH,
            no_log=False,
        ),
        _option(
            "key_rotate",
            ("key",),
            "bool",
            [
                "Replace the host's WireGuard key in this run: a new private key is made on the host (0600, written"
                " atomically), the old one is gone from the disk, and every peer, the registry and the Node's C(key)"
                " annotation follow in the same run. The host switches first, its peers right after, so tunnels"
                " keep their traffic (see the rotation guide). C(playbooks/rotate.yml -e hosts=PATTERN) sets it for"
                " one run; set in the inventory it rotates on every run."
            ],
            default=False,
            no_log=False,
        ),
        _option(
            "key_max_age",
            ("key", "agent"),
            "int",
            [
                "Seconds a WireGuard key may live (counted from when its file was written); an older key is rotated by"
                " the next C(site.yml) run and, in agent mode, by the agent itself. V(0) never rotates by age."
            ],
            default=0,
            bounds=(0, None),
            no_log=False,
        ),
        _option(
            "mtu",
            ("host",),
            "int",
            [
                "MTU of the interface; V(0) means Kilo's auto value (default-route MTU - 80, else 1420)."
            ],
            default=0,
            bounds=(0, 65535),
        ),
        _option(
            "firewall",
            ("host",),
            "str",
            ["Firewall backend for the NAT, forward and IPIP rules of the plan."],
            default="nftables",
            choices=["nftables", "iptables", "none"],
        ),
        _option(
            "route_conflict",
            ("host",),
            "str",
            [
                "What to do when a foreign route (another routing protocol) already holds a destination of the plan.",
                "V(fail) stops with a message naming the route, in check mode too, before anything changes;"
                " V(replace) takes the route over, as Kilo does.",
            ],
            default="fail",
            choices=["fail", "replace"],
        ),
        _option(
            "ssh_guard",
            ("host",),
            "bool",
            [
                "Fail, before anything changes, when the plan adds or replaces a main-table route that would carry"
                " this run's own SSH connection (its client address, from C(SSH_CONNECTION)) into the mesh, and"
                " name that route.",
                "A route that is already in place (a controller that manages the hosts over the mesh as a peer) passes.",
            ],
            default=True,
        ),
        _option(
            "cni_path",
            ("host",),
            "path",
            [
                "Path of the node's CNI configuration list (Kilo's C(--cni-path)), managed when C(cni) is on and the"
                " node has a pod CIDR. Absent, Kilo's conflist is written (bridge C(kube-bridge), host-local IPAM"
                " with the pod CIDR, portmap); a conflist named V(kilo) only has its IPAM subnet updated, as Kilo"
                " does; any other file there is left alone with a warning."
            ],
            default=DEFAULT_CNI_PATH,
        ),
        _option(
            "boot_restore",
            ("host",),
            "bool",
            [
                "Bring the host back to its last converged plan at boot: the plan is kept on the host"
                " (C(/var/lib/kilo/mesh-plan.json), 0600, no key in it; preshared keys apart in"
                " C(/var/lib/kilo/mesh-preshared-keys.json)) with the collection's host code as one file"
                " (C(/usr/lib/kilo-mesh/kilo-mesh.pyz)) and the unit C(kilo-mesh.service), enabled where systemd runs,"
                " which runs the same converge on that plan after the network is up and before C(kubelet). A host that"
                " was down while the mesh changed comes back with its last plan; the next run (or the agent) brings it"
                " up to date.",
                "V(false) removes the unit, the stored plan and that file.",
            ],
            default=True,
        ),
        _option(
            "state",
            ("host",),
            "str",
            ["V(absent) removes exactly what this collection owns on the host."],
            default="present",
            choices=["present", "absent"],
        ),
        # --- key: kilo.mesh.key -------------------------------------------------------------------
        _option(
            "ignore_interfaces",
            ("key",),
            "list",
            [
                "Interfaces whose addresses must not be chosen as internal or external IP, for example"
                " a management NIC whose address Kilo's rules would count as public.",
                "C(tunl0), C(cilium_tunl), C(kube-bridge) and the WireGuard interface are always ignored, as Kilo ignores them.",
            ],
            default=[],
            elements="str",
            var="kilo_discovery_ignore_interfaces",
        ),
        _option(
            "force_internal_ip",
            ("key",),
            "raw",
            [
                "The host's internal IP as forced in the inventory (Kilo's C(force-internal-ip) annotation);"
                ' V("") or V(-) means none; a list of two, one of each IP family, in a dual-stack mesh.'
                " M(kilo.mesh.key) warns when no interface of the host carries it."
            ],
        ),
        _option(
            "internal_cidrs",
            ("key",),
            "list",
            [
                "Only private addresses inside one of these CIDRs may become the host's internal IP (Kilo's"
                " C(--internal-cidr)); empty means any. Public addresses (the endpoint) are not filtered."
            ],
            default=[],
            elements="str",
        ),
        _option(
            "prioritise_private_addresses",
            ("key",),
            "bool",
            [
                "Use the discovered internal (private) IP as the endpoint even when the host has a public address"
                " (Kilo's C(--prioritise-private-addresses)). A forced endpoint still wins."
            ],
            default=False,
        ),
        _option(
            "prepare",
            ("key",),
            "bool",
            [
                "Prepare the host first, in the same remote call, as M(kilo.mesh.prepare) does (forwarding sysctls,"
                " the firewall port, the probe for missing packages; options C(install_packages), C(open_port),"
                " C(sysctls)). Missing packages are installed by the action with M(ansible.builtin.package) and"
                " the key step then runs again, so only a host that lacks something pays a second call.",
                "The role C(kilo.mesh.node) turns it on: a re-run costs one remote call before the converge instead of two.",
            ],
            default=False,
            var=None,
        ),
        # --- prepare: kilo.mesh.prepare --------------------------------------------------------------
        _option(
            "install_packages",
            ("prepare",),
            "bool",
            [
                "Install WireGuard tools, a userspace WireGuard where the kernel lacks the module, and the"
                " Python libraries the host-side modules import."
            ],
            default=True,
            var="wireguard_install_packages",
        ),
        _option(
            "open_port",
            ("prepare",),
            "bool",
            [
                "Open the host's WireGuard UDP port in an active firewalld, ufw or nftables C(inet filter) input chain."
            ],
            default=True,
            var="wireguard_open_port",
        ),
        _option(
            "sysctls",
            ("prepare",),
            "dict",
            ["Sysctls to set now and at boot (forwarding: a leader routes between locations)."],
            default={"net.ipv4.ip_forward": 1, "net.ipv6.conf.all.forwarding": 1},
            var="wireguard_sysctls",
        ),
        # --- connect: an outside machine joining as a peer (kilo.mesh.connect, like kgctl connect) ---
        _option(
            "connect_name",
            ("connect",),
            "str",
            [
                "Name of this machine as a peer of the mesh (a DNS-1123 subdomain); the inventory name when not set."
            ],
        ),
        _option(
            "connect_allowed_ip",
            ("connect",),
            "raw",
            [
                "This peer's address inside the mesh, in CIDR form (kgctl connect's C(--allowed-ip)): the address of"
                " its WireGuard interface and the peer's allowed IP on every leader.",
                "Beyond Kilo: in a dual-stack mesh (C(kilo_subnet) a list of two), a list of two addresses,"
                " one of each IP family, gives the peer both families; refused in a single-stack mesh.",
            ],
            default="10.10.10.10/32",
        ),
        _option(
            "connect_allowed_ips",
            ("connect",),
            "list",
            [
                "Further networks this peer routes into the mesh through one segment (kgctl connect's"
                " C(--allowed-ips)), for example the service CIDR.",
                "V(0.0.0.0/0) makes that segment's leader the peer's VPN exit: the peer sends everything through"
                " it (as two /1 routes, beside its own default route), and the leader masquerades it.",
            ],
            default=[],
            elements="str",
        ),
        _option(
            "connect_via",
            ("connect",),
            "str",
            [
                "The node whose segment carries C(connect_allowed_ips) (under location granularity, its location's"
                " leader); the first node by name when not set, as kgctl connect chooses."
            ],
        ),
        _option(
            "connect_persistent_keepalive",
            ("connect",),
            "int",
            [
                "Seconds between keepalives this peer sends to the leaders, and the leaders to it; V(0) sends none."
                " The leaders learn the peer's endpoint from its packets, so a peer behind NAT needs it."
            ],
            default=10,
            bounds=(0, 65535),  # a keepalive's, everywhere (``bounds``): WireGuard's 16 bits
        ),
        _option(
            "connect_store",
            ("connect",),
            "str",
            [
                "Where the peer is kept - V(registry), the mesh's registry beside the inventory; V(kubernetes), a Kilo"
                " Peer resource in the cluster of the Kubernetes client options (the inventory plugin"
                " C(kilo.mesh.kubernetes) reads it back).",
                "When not set - V(kubernetes) when the mesh has Kubernetes client options (C(kilo_kube), which the"
                " inventory plugin C(kilo.mesh.kubernetes) sets; or C(playbooks/connect.yml)'s deprecated"
                " C(-e kubeconfig=...), C(-e context=...)), else V(registry).",
            ],
            choices=["registry", "kubernetes"],
        ),
        _option(
            "connect_state",
            ("connect",),
            "str",
            [
                "V(absent) removes the peer everywhere - from the registry or cluster, from every leader, and this"
                " machine's interface and routes (its key file stays, as C(kilo_state=absent) keeps a node's)."
            ],
            default="present",
            choices=["present", "absent"],
        ),
        # --- run: read by the playbooks and roles ------------------------------------------------
        _option(
            "task_timeout",
            ("run",),
            "int",
            [
                "Seconds each remote task of the roles may take (Ansible's task C(timeout)). A host that stops"
                " answering during a run fails after this long, the run goes on with the others, and its peers"
                " stay on every host. The default covers a slow first package install."
            ],
            default=DEFAULT_TASK_TIMEOUT,
            bounds=(1, None),
        ),
        _option(
            "agent",
            ("run", "prepare"),
            "bool",
            [
                "Agent mode: C(playbooks/site.yml) converges as usual, then installs and starts the agent"
                " (role C(kilo.mesh.agent)), which keeps the host in the mesh from its Kubernetes Node and Peers between"
                " runs. False on a host where an agent runs removes it, leaving the mesh as the last converge left it.",
                "The host preparation then installs the agent's Python libraries (Kubernetes client, Prometheus client).",
            ],
            default=False,
        ),
        # --- agent: kilo.mesh.agent ------------------------------------------------------------------
        _option(
            "agent_node",
            ("agent",),
            "str",
            [
                "Name of this host's Kubernetes Node, which the agent watches and annotates; the inventory name when not set."
            ],
        ),
        _option(
            "agent_namespace",
            ("agent",),
            "str",
            ["Namespace of the agents' ServiceAccounts (one per node, C(kilo-mesh-agent-<node>))."],
            default="kube-system",
        ),
        _option(
            "agent_api_server",
            ("agent",),
            "str",
            [
                "URL of the API server as this host reaches it, written in the agent's kubeconfig; the server of the"
                " controller's Kubernetes client options when not set."
            ],
        ),
        _option(
            "agent_resync_period",
            ("agent",),
            "int",
            [
                "Seconds between the agent's full reconciles (Kilo's C(--resync-period)); changes of Nodes and Peers"
                " are acted on at once."
            ],
            default=30,
            bounds=(1, None),
        ),
        _option(
            "agent_listen",
            ("agent",),
            "str",
            [
                "Address of the agent's metrics and health endpoint (Kilo's C(--listen)), V(host:port) or V(:port);"
                ' V("") serves none.'
            ],
            default=":1107",
        ),
        _option(
            "agent_token_lifetime",
            ("agent",),
            "int",
            [
                "Seconds the agent's service account token is asked to live (the API server may cap it). A run renews"
                " the token once a third of its life has passed, and restarts the agent then."
            ],
            default=31536000,
            bounds=(600, None),
            no_log=False,
        ),  # a lifetime, not a secret
        _option(
            "agent_app",
            ("agent",),
            "path",
            ["Where the agent's zip application goes on the host (run by C(/usr/bin/python3))."],
            default=DEFAULT_AGENT_APP,
        ),
        _option(
            "pod_cidr_source",
            ("inputs", "agent"),
            "str",
            [
                "Beyond Kilo: where the nodes' pod ranges come from, for the whole mesh (a group variable: every"
                " host must agree, M(kilo.mesh.validate) checks it; the agents take it from their configuration) - V(node),"
                " the Node's C(spec.podCIDR) (Kilo's); V(calico), Calico's IPAM blocks (confirmed C(BlockAffinity) objects of"
                " C(crd.projectcalico.org/v1), several per node, each its own route); V(cilium), the C(spec.ipam.podCIDRs)"
                " of the node's C(CiliumNode) (C(cilium.io/v2), cluster-pool IPAM).",
                "A node's own C(kilo.mesh/pod-cidr-source) annotation (or C(kilo_node_pod_cidr_source) on its host, push"
                " runs only) picks its source; its C(kilo.mesh/pod-cidrs) annotation (CIDRs separated by commas) or C(kilo_pod_cidr) forces"
                " its ranges, for any other IPAM.",
                "The agents may list and watch the objects of the source in effect (their ClusterRole follows it).",
            ],
            default="node",
            choices=list(POD_SOURCES),
        ),
        # --- kube: how the controller reaches the Kubernetes API ------------------------------------
        _option(
            "kube",
            ("kube",),
            "dict",
            [
                "How the controller reaches the Kubernetes API - kubernetes.core's client options as one mapping:"
                " C(kubeconfig), C(context), C(host), C(api_key), C(ca_cert), C(validate_certs) (also C(ssl_ca_cert),"
                " C(verify_ssl)), C(client_cert), C(client_key), C(proxy), C(no_proxy), C(impersonate_user),"
                " C(impersonate_groups); each one not given comes from its C(K8S_AUTH_*) environment variable, as for"
                " kubernetes.core's modules.",
                "Read by every task that talks to the API - the write-back M(kilo.mesh.annotate), M(kilo.mesh.agent) (the"
                " role C(kilo.mesh.agent)), M(kilo.mesh.peer) with C(store=kubernetes) (C(playbooks/connect.yml)) and"
                " C(playbooks/kubernetes.yml); a task's own client options win. A host outside the mesh group (a"
                " connecting machine, V(localhost)) takes the mesh group's first host's.",
                "The inventory plugin C(kilo.mesh.kubernetes) sets it on every host it makes to the client options of"
                " its own configuration file, so every task reaches the cluster the inventory was read from: with the"
                " plugin, give them in its file, once.",
                "Replaces C(kilo_kube_kubeconfig), C(kilo_kube_context), C(kilo_kube_host), C(kilo_kube_api_key),"
                " C(kilo_kube_ca_cert) and C(kilo_kube_validate_certs), which are still read (deprecated).",
            ],
            no_log=True,
        ),
        # --- output: the files the controller writes for people -----------------------------------
        _option(
            "output_dir",
            ("output",),
            "path",
            [
                "Directory on the controller where the files written for people go (C(playbooks/plan.yml)'s DOT file,"
                " C(playbooks/graph.yml)'s picture, a configuration C(playbooks/showconf.yml) writes), and where a relative"
                " C(dest) is taken from.",
                "Default - the directory C(ansible-playbook) runs in (never the playbook's or the inventory's).",
                "A file inside a directory given as inventory source is refused: Ansible would read it as inventory.",
            ],
        ),
    ]
)

SCOPES = (
    "mesh",
    "inputs",
    "host",
    "key",
    "prepare",
    "run",
    "registry",
    "connect",
    "agent",
    "kube",
    "output",
    "plans",
    "slicing",
)

# Variables that are no longer read under this name: the old name -> what replaces it.
DEPRECATED_VARS = dict(
    ("kilo_kube_" + name, "kilo_kube.%s" % name)
    for name in ("kubeconfig", "context", "host", "api_key", "ca_cert", "validate_certs")
)

# --- every kilo_* variable the collection reads ---------------------------------------------------
# The options' variables (above), the node variables (nodes.FIELDS), the deprecated names still read
# (DEPRECATED_VARS), and these: one list, which
# kilo.mesh.validate holds every host's kilo_* variables to (anything else is refused, naming the
# closest), its documentation prints (the VARIABLES doc fragment) and tests/unit/plugins/plugin_utils/test_variables.py
# holds to every name the playbooks, roles and plugins read.
VAR_PREFIX = "kilo_"
OTHER_VARIABLES = {
    "kilo_kubernetes_node": "set by the inventory plugin C(kilo.mesh.kubernetes) - what the host's Node says (Kilo's"
    " agent annotations, its pod ranges by source)",
    NODE_POD_SOURCE_VAR: "one host's own source of pod ranges instead of the mesh's C(kilo_pod_cidr_source) (the"
    " inventory plugin reads it from the Node's annotation C(kilo.mesh/pod-cidr-source))",
    "kilo_rotate_hosts": "C(playbooks/rotate.yml) - the hosts whose WireGuard key rotates (as C(-e hosts=PATTERN))",
    "kilo_remove_keys": "C(playbooks/uninstall.yml) - remove the hosts' private keys too (C(-e kilo_remove_keys=true))",
}
# Families of kilo_* variables by prefix that no part of the collection reads, with why they pass.
OTHER_PREFIXES = {
    "kilo_lab_": "the test lab's description of its hosts (C(lab/lab.py) writes them into its inventory)",
}


def known_variables() -> dict[str, str]:
    """{kilo_* variable: what reads it} of every kilo_* variable the collection reads."""
    from ansible_collections.kilo.mesh.plugins.module_utils.nodes import FIELDS

    known = dict(
        (spec["var"], "option %s" % name)
        for name, spec in OPTIONS.items()
        if spec["var"] and spec["var"].startswith(VAR_PREFIX)
    )
    known.update(
        (field.var, "node field %s" % field.name) for field in FIELDS.values() if field.var
    )
    known.update((name, "deprecated: %s" % new) for name, new in DEPRECATED_VARS.items())
    known.update(OTHER_VARIABLES)
    return known


# The keys of an option that Ansible's argument spec knows.
_SPEC_KEYS = ("type", "default", "choices", "elements", "no_log")


def names(*scopes: str) -> list[str]:
    """Option names of ``scopes``, in table order."""
    return [name for name, spec in OPTIONS.items() if any(s in spec["scopes"] for s in scopes)]


def engine_names() -> list[str]:
    """The options the topology engine reads: Kilo's flags (``mesh``) and those of the ``plans``
    scope marked ``engine``."""
    return names("mesh") + [name for name in names("plans") if OPTIONS[name].get("engine")]


def engine_defaults() -> dict[str, Any]:
    """{name: default} of engine_names()."""
    return dict((name, copy.deepcopy(OPTIONS[name].get("default"))) for name in engine_names())


def argument_spec(*scopes: str) -> dict[str, dict[str, Any]]:
    """An Ansible argument spec for the options of ``scopes`` (fresh copies: callers may add)."""
    return dict(
        (name, dict((k, copy.deepcopy(OPTIONS[name][k])) for k in _SPEC_KEYS if k in OPTIONS[name]))
        for name in names(*scopes)
    )


def defaults(*scopes: str) -> dict[str, Any]:
    """{name: default} of ``scopes`` (None where an option has no default)."""
    return dict((name, copy.deepcopy(OPTIONS[name].get("default"))) for name in names(*scopes))


# ``state`` of kilo.mesh.key, kilo.mesh.prepare and kilo.mesh.peer (each module and its action); a
# task argument only, never a variable: a ``kilo_state`` never removes a key or the install step.
STATE_SPEC = dict(type="str", choices=["present", "absent"], default="present")
# kilo.mesh.status: seconds after the latest handshake from which a tunnel counts as stale.
DEFAULT_STALE_AFTER = 180


def status_spec() -> dict[str, dict[str, Any]]:
    """kilo.mesh.status's options, for the module and its action."""
    return dict(
        interface=argument_spec("key")["interface"],
        stale_after=dict(type="int", default=DEFAULT_STALE_AFTER),
        textfile=dict(type="path"),
        mesh_nodes=dict(type="int"),
        mesh_peers=dict(type="int"),
        summary=dict(type="bool", default=False),
        status_var=dict(type="str", default="kilo_status"),
    )


def out_of_bounds(name: str, value: Any) -> Optional[str]:
    """Why ``value`` (already of the option's type) is outside option ``name``'s bounds, or None."""
    bounds = OPTIONS.get(name, {}).get("bounds")
    if bounds is None or value is None:
        return None
    try:
        to_int(value, low=bounds[0], high=bounds[1])
    except KiloError as e:
        return e.message
    return None


def _bounds_doc(bounds: tuple[int, Optional[int]]) -> str:
    low, high = bounds
    if high is None:
        return "At least V(%d)." % low
    return "From V(%d) to V(%d)." % (low, high)


def bounds(name: str) -> tuple[int, Optional[int]]:
    """(low, high) of int option ``name``: the one definition of a port's range (``port``) and a
    keepalive's (``connect_persistent_keepalive``), which every check of one takes."""
    return OPTIONS[name]["bounds"]


def variable(name: str) -> Optional[str]:
    """The inventory variable of option ``name`` (None: task argument only)."""
    return OPTIONS[name]["var"]


def doc(*scopes: str, **overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``options:`` documentation of ``scopes``, as ansible-doc reads it."""
    out = {}
    for name in names(*scopes):
        spec = OPTIONS[name]
        entry = {"description": list(spec["description"])}
        if any(NODE_FIELDS_DOC in d for d in entry["description"]):
            from ansible_collections.kilo.mesh.plugins.module_utils.nodes import engine_doc

            entry["description"] = [
                d.replace(NODE_FIELDS_DOC, engine_doc()) for d in entry["description"]
            ]
        if "bounds" in spec:
            entry["description"].append(_bounds_doc(spec["bounds"]))
        if spec["var"]:
            entry["description"].append(
                "Defaults to the inventory variable C(%s), then to the default below." % spec["var"]
            )
        for key in ("type", "elements", "choices", "default"):
            if key in spec:
                entry[key] = copy.deepcopy(spec[key])
        entry.update(overrides.get(name, {}))
        out[name] = entry
    return out


# Roles and the scopes of their variables (``meta/argument_specs.yml`` come from here).
ROLES = {
    "node": {
        "short": "Join this host to the Kilo mesh: the key step, then one converge call",
        "description": [
            "Runs M(kilo.mesh.key) (which prepares the host as the role C(kilo.mesh.wireguard) does, in the same"
            " call) and then M(kilo.mesh.join) on each host. Every option is read from the"
            " inventory variable named here (Kilo's default otherwise); the roles have no defaults of their own.",
            "The mesh is the whole group, not the play - hosts outside C(--limit) keep their peers through the registry.",
        ],
        "scopes": ("mesh", "plans", "slicing", "inputs", "host", "key", "prepare", "run", "kube"),
    },
    "connect": {
        "short": "Connect a machine outside the mesh as a peer, like kgctl connect",
        "description": [
            "Makes the machine's key on it (M(kilo.mesh.key)), keeps it as a peer (M(kilo.mesh.peer), in the registry"
            " or the cluster) and converges its WireGuard interface and routes to the mesh (M(kilo.mesh.connect)).",
            "C(playbooks/connect.yml) runs it, then the mesh's join, so the leaders take the peer in the same run.",
            "The mesh-wide options (subnet, granularity, port, ...) come from the mesh group's first host.",
        ],
        "scopes": ("connect", "host", "run", "kube"),
        # kilo.mesh.connect converges no CNI and reads kilo_connect_state, never kilo_state
        "exclude": ("cni_path", "state"),
    },
    "wireguard": {
        "short": "Prepare a host for kilo.mesh - WireGuard, Python libraries, forwarding, UDP port",
        "description": [
            "Runs M(kilo.mesh.prepare) (probe, sysctls, firewall port) and installs what is missing.",
            "Supports Debian/Ubuntu (apt), EL 9 (dnf; pyroute2 comes from EPEL) and Arch (pacman).",
        ],
        "scopes": ("prepare", "run"),
    },
    "agent": {
        "short": "Install, configure and start the kilo.mesh agent on a node, or stop and remove it",
        "description": [
            "Runs M(kilo.mesh.agent) - with C(kilo_agent) true (and C(kilo_state) present) it installs the agent's"
            " zip application, configuration and least-privilege kubeconfig and starts it (a systemd unit, else a"
            " supervised daemon); otherwise it stops and removes it. C(playbooks/site.yml) runs it after the mesh's"
            " converge.",
            "The agent reads the same C(kilo_*) variables as the push run (mesh, host and key options).",
        ],
        "scopes": ("agent", "mesh", "plans", "host", "key", "run", "kube"),
    },
    "mesh": {
        "short": "Deprecated - the old name of the role kilo.mesh.node, kept for one release",
        "description": [
            "Runs the role C(kilo.mesh.node) with the same variables; use that role instead (this one goes in 1.0.0).",
            "Its old variable C(mesh_state) still works and is C(kilo_state); the other old C(mesh_*) variables are"
            " the C(kilo_*) ones listed here.",
        ],
        "scopes": ("mesh", "plans", "slicing", "inputs", "host", "key", "prepare", "run", "kube"),
        "extra": {
            "mesh_state": {
                "description": [
                    "Deprecated - C(kilo_state): V(absent) removes exactly what this collection owns on the host."
                ],
                "type": "str",
                "choices": ["present", "absent"],
                "required": False,
            }
        },
    },
}


def role_argument_specs(role: str) -> dict[str, Any]:
    """``argument_specs`` of ``role``: the inventory variables of its options."""
    meta = ROLES[role]
    options = {}
    for name, entry in doc(*meta["scopes"]).items():
        var = variable(name)
        if not var or name in meta.get("exclude", ()):
            continue
        entry = dict(
            entry,
            description=[
                d for d in entry["description"] if not d.startswith("Defaults to the inventory")
            ],
            required=False,
        )
        options[var] = entry
    options.update(copy.deepcopy(meta.get("extra", {})))
    return {
        "argument_specs": {
            "main": {
                "short_description": meta["short"],
                "description": list(meta["description"]),
                "options": options,
            }
        }
    }
