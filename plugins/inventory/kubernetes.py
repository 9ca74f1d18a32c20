# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
name: kubernetes
short_description: The mesh from a Kubernetes cluster - Nodes become hosts, Peer resources become kilo_peers
description:
  - Reads the cluster's Nodes and Kilo's C(Peer) resources (C(peers.kilo.squat.ai/v1alpha1)) and makes the
    inventory the rest of the collection reads, as Kilo reads its Kubernetes backend.
  - One host per Node, all in the group O(group) (default V(kilo)); the host is also in a child group per
    location, so the locations are the inventory groups as in a hand-written inventory.
  - Location names that are not valid Ansible group names (Kubernetes allows V(-) and V(.)) are changed to
    one for the group only; the host variable C(kilo_location) keeps the exact location.
  - Host variables from Kilo's annotations, as the notes list. C(kilo_location)
    is the annotation C(kilo.squat.ai/location) when present, even empty, else the label O(topology_label),
    else empty; the annotation C(kilo.squat.ai/leader) counts by its presence.
  - C(kilo_kubernetes_node) holds what Kilo's agent wrote on the Node (C(public_key), C(endpoint),
    C(internal_ip), C(wireguard_ip), C(discovered_endpoints), C(last_seen), C(granularity); null when not
    written; in a dual-stack mesh C(internal_ip) and C(wireguard_ip) are lists of two, one of each IP family,
    the primary's first, from C(kilo.mesh/internal-ips) and C(kilo.mesh/wireguard-ips) where their first agrees
    with Kilo's annotation), C(ready), the Node's Ready condition, and C(pod_cidrs), the node's pod ranges per source
    (C(kilo_pod_cidr_source)) - V(node) (C(spec.podCIDR), as Kilo; in a dual-stack mesh C(spec.podCIDRs),
    the ranges of both families),
    V(calico) (its confirmed C(BlockAffinity) blocks) and V(cilium) (its C(CiliumNode)'s C(spec.ipam.podCIDRs)),
    each IPAM source only where its resource type is installed and readable.
  - The annotation C(kilo.mesh/pod-cidrs) (CIDRs separated by commas) sets C(kilo_pod_cidr), forcing the node's
    pod ranges; C(kilo.mesh/pod-cidr-source) sets C(kilo_node_pod_cidr_source), the node's own source.
  - C(kubernetes_labels) and C(kubernetes_annotations) hold the Node's labels and annotations, for
    O(compose), O(groups) and O(keyed_groups).
  - C(kilo_kube) holds the Kubernetes client options given in this file (O(kubeconfig), O(context), O(host),
    O(api_key), O(ca_cert), O(validate_certs); those not given are not set, and come from their C(K8S_AUTH_*)
    environment variables for every reader alike). The tasks that talk to the API later - the write-back
    M(kilo.mesh.annotate) in C(playbooks/site.yml), M(kilo.mesh.agent), M(kilo.mesh.peer),
    C(playbooks/kubernetes.yml) - read it, so they reach the cluster this inventory came from; give the
    options here, once. An O(api_key) given here is in that variable too (as it is in this file); prefer
    E(K8S_AUTH_API_KEY), or Ansible Vault.
  - A value the collection cannot use (a bad annotation, an invalid Peer with O(invalid_peers=error)) fails
    the inventory with the Node or Peer and the annotation or field named.
  - The configuration file's name must end with C(kubernetes.yml) or C(kubernetes.yaml).
author: kilo.mesh developers (@kilo-mesh)
extends_documentation_fragment:
  - kilo.mesh.kubernetes
  - kilo.mesh.options.node_vars
  - constructed
options:
  plugin:
    description: Marks this file as a source for this plugin.
    required: true
    choices: [kilo.mesh.kubernetes]
    type: str
  group:
    description:
      - Group every Node's host is put in; the location groups are its children.
      - The collection's modules find the mesh in the group of their C(kilo_group) variable (default V(kilo)).
    type: str
    default: kilo
  topology_label:
    description:
      - Node label holding the location when a Node has no C(kilo.squat.ai/location) annotation
        (Kilo's C(--topology-label)).
    type: str
    default: topology.kubernetes.io/region
  address:
    description:
      - What C(ansible_host) is set to.
      - V(InternalIP), V(ExternalIP) or V(Hostname) take the first Node address of that type in C(status.addresses).
      - A name with a V(/) (for example V(kilo.squat.ai/force-endpoint)) takes the value of that annotation,
        without a prefix length or port.
      - No C(ansible_host) is set when the Node has no such address; O(compose) can set it instead.
    type: str
    default: InternalIP
  peers:
    description:
      - Read the cluster's Peer resources into the variable C(kilo_peers) of the group O(group), items as the
        C(kilo_peers) variable takes them (C(name), C(public_key), C(allowed_ips), C(endpoint),
        C(persistent_keepalive), C(preshared_key)).
      - When the Peer resource type is not installed, C(kilo_peers) is not set.
    type: bool
    default: true
  invalid_peers:
    description:
      - What to do with a Peer that fails the checks of Kilo's admission webhook (or has no allowed IP or a bad
        preshared key).
      - V(error) fails the inventory naming the Peer; V(skip) leaves it out with a warning naming it (Kilo leaves
        such a Peer out silently).
    type: str
    choices: [error, skip]
    default: error
"""

EXAMPLES = r"""
# cluster.kubernetes.yml - "plugin: kilo.mesh.kubernetes" alone reads the current kubeconfig context
# (or the in-cluster service account); this one uses a token (from the environment variable
# K8S_AUTH_API_KEY) and no kubeconfig.
plugin: kilo.mesh.kubernetes
host: https://203.0.113.10:6443
ca_cert: /etc/kilo/cluster-ca.crt
# locations from a label of our own; invalid Peers left out with a warning
topology_label: example.com/site
invalid_peers: skip
# reach the hosts at their public address, group them by instance type
address: ExternalIP
keyed_groups:
  - prefix: type
    key: kubernetes_labels['node.kubernetes.io/instance-type'] | default('unknown')
compose:
  ansible_user: "'admin'"
"""

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.inventory.group import to_safe_group_name
from ansible.plugins.inventory import BaseInventoryPlugin, Constructable

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client, kube_node
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, node_subject
from ansible_collections.kilo.mesh.plugins.module_utils.options import OPTIONS

RESERVED_GROUPS = ("all", "ungrouped")
# The host variable holding the client options this file gave (options.py's kube option).
CLIENT_VAR = OPTIONS["kube"]["var"]


class InventoryModule(BaseInventoryPlugin, Constructable):
    NAME = "kilo.mesh.kubernetes"

    def verify_file(self, path):
        return super(InventoryModule, self).verify_file(path) and path.endswith(
            ("kubernetes.yml", "kubernetes.yaml")
        )

    def parse(self, inventory, loader, path, cache=True):
        super(InventoryModule, self).parse(inventory, loader, path, cache)
        self._read_config_data(path)
        if not kube_client.HAS_KUBERNETES:
            raise AnsibleError(
                "%s needs the Python library 'kubernetes' on the controller (pip install kubernetes): %s"
                % (self.NAME, kube_client.KUBERNETES_IMPORT_ERROR.strip().splitlines()[-1])
            )
        # the client options of this file: every host gets them as kilo_kube, so the tasks that talk to
        # the API later (the write-back, the agent, kilo.mesh.peer, playbooks/kubernetes.yml) reach this cluster
        self._client = dict(
            (name, self.get_option(name))
            for name in kube_client.ENV
            if self.get_option(name) not in (None, "")
        )
        try:
            client = kube_client.api_client(self._client)
            nodes = kube_client.list_nodes(client)
            peers = self._peers(client) if self.get_option("peers") else None
            ipam = self._ipam(client)
        except KiloError as e:
            raise AnsibleParserError("%s: %s" % (self.NAME, e))
        group = self.inventory.add_group(self.get_option("group"))
        locations = {}
        for node in sorted(nodes, key=lambda n: (n.get("metadata") or {}).get("name") or ""):
            try:
                self._add_node(node, group, locations, ipam)
            except KiloError as e:
                raise AnsibleParserError("%s: %s" % (self.NAME, e))
        if peers is not None:
            self.inventory.set_variable(group, "kilo_peers", peers)

    def _peers(self, client):
        """The valid Peers, or None when the Peer resource type is not installed."""
        try:
            items = kube_client.list_cluster_objects(
                client, kube_node.PEER_GROUP, kube_node.PEER_VERSION, kube_node.PEER_PLURAL
            )
        except kube_client.KubeError as e:
            if e.status == 404:
                return None
            raise
        peers, errors = kube_node.peers_of(items)
        for _name, e in errors:
            if self.get_option("invalid_peers") == "error":
                raise e
            self.display.warning("%s: leaving out %s" % (self.NAME, e))
        return peers

    def _ipam(self, client):
        """{source: {node: [CIDR]}} of every IPAM source whose objects can be listed (a type not
        installed or not readable is left out: only a node of that source then fails)."""
        out = {}
        for source, (api_group, version, plural) in sorted(kube_node.IPAM_KINDS.items()):
            try:
                items = kube_client.list_cluster_objects(client, api_group, version, plural)
            except kube_client.KubeError as e:
                if e.status == 403:
                    self.display.warning("%s: %s not read (%s)" % (self.NAME, plural, e))
                if e.status in (403, 404):
                    continue
                raise
            out[source] = kube_node.IPAM_READERS[source](items)
        return out

    def _location_group(self, host, location, group, locations):
        name = to_safe_group_name(location, force=True, silent=True)
        if name == group or name in RESERVED_GROUPS:
            raise KiloError(
                "location %r cannot be an inventory group: %r is taken" % (location, name),
                node_subject(host),
                "kilo_location",
            )
        if locations.setdefault(name, location) != location:
            self.display.warning(
                "%s: locations %r and %r share the inventory group %r; kilo_location keeps"
                " them apart" % (self.NAME, locations[name], location, name)
            )
        self.inventory.add_group(name)
        self.inventory.add_child(group, name)
        return name

    def _add_node(self, node, group, locations, ipam):
        hvars = kube_node.host_vars(node, self.get_option("topology_label"), ipam)
        meta = node["metadata"]
        name = self.inventory.add_host(meta["name"], group=group)
        if hvars["kilo_location"]:
            self.inventory.add_host(
                name, group=self._location_group(name, hvars["kilo_location"], group, locations)
            )
        for key, value in hvars.items():
            self.inventory.set_variable(name, key, value)
        self.inventory.set_variable(name, CLIENT_VAR, dict(self._client))
        self.inventory.set_variable(name, "kubernetes_labels", dict(meta.get("labels") or {}))
        self.inventory.set_variable(
            name, kube_node.ANNOTATIONS_VAR, dict(meta.get("annotations") or {})
        )
        address = kube_node.node_address(node, self.get_option("address"))
        if address:
            self.inventory.set_variable(name, "ansible_host", address)
        strict = self.get_option("strict")
        variables = self.inventory.get_host(name).get_vars()
        self._set_composite_vars(self.get_option("compose"), variables, name, strict=strict)
        self._add_host_to_composed_groups(self.get_option("groups"), variables, name, strict=strict)
        self._add_host_to_keyed_groups(
            self.get_option("keyed_groups"), variables, name, strict=strict
        )
