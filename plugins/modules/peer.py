#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: peer
short_description: Manage one outside peer of the mesh, as a Kilo Peer resource or in the registry
version_added: 0.2.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - Creates, updates or deletes one cluster-scoped C(Peer) resource (C(peers.kilo.squat.ai/v1alpha1)), the
    object Kilo's agent and the inventory plugin C(kilo.mesh.kubernetes) read as an outside peer of the mesh.
  - The peer is checked as Kilo's admission webhook checks it, by the same code the inventory plugin reads
    Peers with, before anything is sent; an error names the peer and the option.
  - With O(state=present) the resource's C(spec) becomes exactly what the options say (an option left out is
    removed from the spec); labels and annotations of an existing resource are kept.
  - The C(Peer) CRD must be installed first, with C(playbooks/kubernetes.yml).
  - Runs where the task runs, usually V(localhost); that Python needs the C(kubernetes) library.
  - With O(store=registry) (a mesh from the inventory, no cluster) the peer is kept in the mesh's registry on the
    controller instead, checked by the same rules; every run of the mesh then adds it to C(kilo_peers).
options:
  store:
    description:
      - V(kubernetes) - a C(Peer) resource in the cluster the client options name.
      - V(registry) - an entry of the registry beside the inventory (O(registry), O(group)); runs on the controller,
        public data only (no O(preshared_key)); the Kubernetes client options do not apply.
    type: str
    choices: [kubernetes, registry]
    default: kubernetes
  name:
    description:
      - Name of the Peer resource (a DNS-1123 subdomain); the peer's name in the mesh.
    type: str
    required: true
  state:
    description:
      - V(present) creates the Peer or makes its spec match; V(absent) deletes it.
    type: str
    choices: [present, absent]
    default: present
  public_key:
    description:
      - The peer's WireGuard public key, base64 of 32 bytes.
      - Required with O(state=present).
    type: str
  allowed_ips:
    description:
      - Addresses and networks routed to the peer through its tunnel, each in CIDR form (V(10.5.0.1/32)).
      - At least one; required with O(state=present).
    type: list
    elements: str
  endpoint:
    description:
      - Where the mesh first sends packets for the peer, V(host:port), V([IPv6]:port) or V(dns-name:port).
      - Without it the mesh waits for the peer to connect first.
    type: str
  persistent_keepalive:
    description:
      - Seconds between keepalive packets to the peer; V(0) (the default) sends none.
    type: int
    default: 0
  preshared_key:
    description:
      - A WireGuard preshared key for the peer, base64 of 32 bytes. Never logged, never shown in results or diffs.
    type: str
extends_documentation_fragment:
  - kilo.mesh.kubernetes
  - kilo.mesh.options.registry
  - kilo.mesh.attributes
attributes:
  check_mode:
    support: full
    details: The server checks the change as a dry run (schema, permissions); nothing is stored.
  diff_mode:
    support: full
    details: The spec before and after; the preshared key is masked.
notes:
  - With O(store=kubernetes), a client option not given in the task comes from the inventory variable
    C(kilo_kube) (a mapping of these options) of this host, or of the mesh group's first host for a host
    outside the mesh (a connecting machine) - the inventory plugin P(kilo.mesh.kubernetes#inventory) sets it
    to the options of its own file - else from its C(K8S_AUTH_*) environment variable.
  - The spec is compared in canonical form (keys in base64's canonical spelling, endpoint names in lower case),
    so a second run with the same options changes nothing.
  - A missing C(Peer) CRD (the server answers 404 for the resource type) fails with a pointer to C(playbooks/kubernetes.yml).
requirements:
  - kubernetes >= 22.6.0 (the Kubernetes Python client) where the module runs
seealso:
  - module: kilo.mesh.showconf
  - plugin: kilo.mesh.kubernetes
    plugin_type: inventory
"""

EXAMPLES = r"""
- name: A laptop as an outside peer of the mesh
  kilo.mesh.peer:
    name: laptop
    public_key: zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw=
    allowed_ips: [10.5.0.1/32]
    persistent_keepalive: 25
    kubeconfig: ~/.kube/config
  delegate_to: localhost

- name: Another cluster's location, reached at a DNS name, with a preshared key
  kilo.mesh.peer:
    name: office
    public_key: HrvQbzPuMwVlzdGx6qtlRwjONFThcrY/AMyM4UbNuCc=
    allowed_ips: [10.4.0.1/32, 10.20.0.0/16]
    endpoint: vpn.example.com:51820
    preshared_key: "{{ vault_office_psk }}"

- name: Remove the laptop
  kilo.mesh.peer:
    name: laptop
    state: absent

- name: A mesh from the inventory - the peer goes to the registry beside it
  kilo.mesh.peer:
    name: laptop
    public_key: zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw=
    allowed_ips: [10.5.0.1/32]
    store: registry
  delegate_to: localhost
"""

RETURN = r"""
peer:
  description:
    - The peer as the mesh reads it (the form of an item of C(kilo_peers)); the preshared key masked.
    - The peer that was there for O(state=absent); null when there was none.
  returned: always
  type: dict
  sample: {"name": "laptop", "public_key": "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw=",
           "allowed_ips": ["10.5.0.1/32"], "endpoint": null, "persistent_keepalive": 25, "preshared_key": null}
registry:
  description: The registry file the peer was written to or removed from.
  returned: with O(store=registry)
  type: str
  sample: /srv/mesh/kilo-registry.json
resource:
  description:
    - The Peer resource as the server returned it (a dry run's result in check mode), without C(managedFields),
      the preshared key masked; null when there is none (after O(state=absent)).
  returned: with O(store=kubernetes)
  type: dict
  sample: {"apiVersion": "kilo.squat.ai/v1alpha1", "kind": "Peer", "metadata": {"name": "laptop"},
           "spec": {"allowedIPs": ["10.5.0.1/32"], "persistentKeepalive": 25,
                    "publicKey": "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw="}}
"""

import copy


from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, peer_subject
from ansible_collections.kilo.mesh.plugins.module_utils.kube.kube_node import (
    PEER_API_VERSION,
    PEER_GROUP,
    PEER_PLURAL,
    PEER_VERSION,
    check_peer_name,
    desired_peer,
    peer_argument_spec,
    peer_from_resource,
    spec_of,
)
from ansible_collections.kilo.mesh.plugins.module_utils.options import (
    argument_spec as options_of_scopes,
)

PATH = "/apis/%s/%s/%s" % (PEER_GROUP, PEER_VERSION, PEER_PLURAL)
MASK = "********"


def current_spec(obj):
    """An existing resource's spec in canonical form; as stored when it does not pass the checks."""
    try:
        return spec_of(peer_from_resource(obj))
    except KiloError:
        return obj.get("spec") or {}


def masked_spec(spec, other=None):
    """``spec`` with its preshared key masked; marked when it differs from ``other``'s."""
    if not spec:
        return {}
    spec = copy.deepcopy(spec)
    if spec.get("presharedKey"):
        changed = other is not None and spec["presharedKey"] != (other or {}).get("presharedKey")
        spec["presharedKey"] = MASK + (" (changed)" if changed else "")
    return spec


def shown(obj):
    """A resource for the result: no managedFields, preshared key masked."""
    if not obj:
        return None
    obj = copy.deepcopy(obj)
    (obj.get("metadata") or {}).pop("managedFields", None)
    obj["spec"] = masked_spec(obj.get("spec"))
    return obj


def shown_peer(peer):
    if not peer:
        return None
    return dict(peer, preshared_key=MASK if peer.get("preshared_key") else None)


def run(module, api):
    params = module.params
    name = params["name"]
    subject = peer_subject(name)
    path = "%s/%s" % (PATH, name)
    dry_run = kube_client.DRY_RUN if module.check_mode else None
    peer = desired_peer(params) if params["state"] == "present" else None

    try:
        existing = kube_client.json_call(
            api.get_cluster_custom_object, "GET", path, PEER_GROUP, PEER_VERSION, PEER_PLURAL, name
        )
    except kube_client.KubeError as e:
        if e.status != 404:
            raise KiloError(e.message, subject)
        if getattr(e, "not_found_name", None) != name:
            raise KiloError(
                "the cluster does not serve %s (the Peer CRD is not installed): run"
                " playbooks/kubernetes.yml first" % PATH,
                subject,
            )
        existing = None
    before = current_spec(existing) if existing else {}

    if params["state"] == "absent":
        result = dict(changed=existing is not None, peer=None, resource=None)
        if existing is not None:
            try:
                result["peer"] = shown_peer(peer_from_resource(existing))
            except KiloError:
                pass
            kube_client.json_call(
                api.delete_cluster_custom_object,
                "DELETE",
                path,
                PEER_GROUP,
                PEER_VERSION,
                PEER_PLURAL,
                name,
                dry_run=dry_run,
            )
        result["diff"] = dict(before=masked_spec(before), after={})
        return result

    after = spec_of(peer)
    if existing is None:
        body = {
            "apiVersion": PEER_API_VERSION,
            "kind": "Peer",
            "metadata": {"name": name},
            "spec": after,
        }
        stored = kube_client.json_call(
            api.create_cluster_custom_object,
            "POST",
            PATH,
            PEER_GROUP,
            PEER_VERSION,
            PEER_PLURAL,
            body,
            dry_run=dry_run,
        )
    elif before != after:
        body = copy.deepcopy(existing)
        body["spec"] = after  # with metadata.resourceVersion: a concurrent change fails with 409
        stored = kube_client.json_call(
            api.replace_cluster_custom_object,
            "PUT",
            path,
            PEER_GROUP,
            PEER_VERSION,
            PEER_PLURAL,
            name,
            body,
            dry_run=dry_run,
        )
    else:
        stored = None
    return dict(
        changed=stored is not None,
        peer=shown_peer(peer),
        resource=shown(stored or existing),
        diff=dict(
            before=masked_spec(before), after=masked_spec(after, before if existing else None)
        ),
    )


def main():
    argument_spec = peer_argument_spec()
    # store=registry is done by the action plugin on the controller, never here
    argument_spec.update(options_of_scopes("registry"))
    argument_spec.update(kube_client.argument_spec())
    module = AnsibleModule(
        argument_spec=argument_spec,
        required_if=[("state", "present", ["public_key", "allowed_ips"])],
        supports_check_mode=True,
    )
    if module.params["store"] != "kubernetes":
        module.fail_json(
            msg="store=%s is handled on the controller by the action plugin kilo.mesh.peer; it cannot"
            " run as a bare module" % module.params["store"]
        )
    if not kube_client.HAS_KUBERNETES:
        module.fail_json(
            msg=missing_required_lib("kubernetes"), exception=kube_client.KUBERNETES_IMPORT_ERROR
        )
    from kubernetes.client import CustomObjectsApi  # pylint: disable=import-outside-toplevel

    try:
        check_peer_name(module.params["name"])
        if module.params["state"] == "present":
            desired_peer(module.params)  # every check before the first request
        with kube_client.api_client(module.params) as client:
            result = run(module, CustomObjectsApi(client))
    except KiloError as e:
        if not e.subject:
            e = e.about(peer_subject(module.params["name"]))
        module.fail_json(msg=str(e))
    if not module._diff:
        result.pop("diff")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
