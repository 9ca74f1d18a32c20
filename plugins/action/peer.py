# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.peer: one outside peer of the mesh, in the Kubernetes cluster or in the registry.

``store: kubernetes`` (the default) runs the module where the task runs: a Peer resource, through
the Kubernetes client there. ``store: registry`` keeps the peer in the mesh's registry on the
controller (the inventory path has no cluster), under the registry's lock, checked by the same
rules as a Peer resource; every controller-side action then reads it with ``kilo_peers``.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, peer_subject
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client
from ansible_collections.kilo.mesh.plugins.module_utils.kube.kube_node import (
    PEER_STORES,
    check_peer_name,
    desired_peer,
    peer_argument_spec,
)
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import (
    registry_path,
    set_registry_peer,
)
from ansible_collections.kilo.mesh.plugins.plugin_utils.registry_store import (
    shown as registry_shown,
)


def canonical_client_args(args):
    """The task's arguments with the client options' aliases (kubernetes.core's verify_ssl,
    ssl_ca_cert) under their own names, so a value from kilo_kube never meets its alias."""
    out = dict(args)
    for name, spec in kube_client.argument_spec().items():
        for alias in spec.get("aliases") or ():
            if alias in out and name not in out:
                out[name] = out.pop(alias)
    return out


# What the registry keeps of a peer: public data only.
ENTRY_FIELDS = ("public_key", "allowed_ips", "endpoint", "persistent_keepalive")


class ActionModule(KiloAction):
    SCOPES = ("registry",)
    EXTRA_SPEC = peer_argument_spec()

    def run(self, tmp=None, task_vars=None):
        if self._task.args.get("store", PEER_STORES[0]) == "registry":
            return super().run(tmp, task_vars)
        # A Peer resource: the module, where the task runs (the client library is needed there),
        # with the mesh's Kubernetes client options (kilo_kube) for those the task does not give.
        result = ActionBase.run(self, tmp, task_vars)
        module_args = canonical_client_args(self._task.args)
        try:
            module_args.update(
                (k, v)
                for k, v in self.client_options(module_args, task_vars).items()
                if v is not None
            )
        except KiloError as e:
            result.update(failed=True, msg=str(e))
            return result
        result.update(
            self._execute_module(
                module_name="kilo.mesh.peer", module_args=module_args, task_vars=task_vars
            )
        )
        return self.with_deprecations(result)

    def vars_source(self, task_vars, given=None):
        """The registry is the mesh's: on a host outside the mesh group (a laptop, localhost), its
        options come from the mesh's first host, as for a controller-only action."""
        return self.mesh_source(task_vars, given)

    def run_kilo(self, args, task_vars):
        name = check_peer_name(args["name"])
        subject = peer_subject(name)
        path = registry_path(task_vars, args["registry"], args["group"])
        entry = None
        if args["state"] == "present":
            for option in ("public_key", "allowed_ips"):
                if args[option] is None:
                    raise KiloError("required with state=present", subject, option)
            if args["preshared_key"]:
                raise KiloError(
                    "the registry is a plain JSON file that holds public data only: give a peer with"
                    " a preshared key in kilo_peers (with Ansible Vault) or as a Peer resource",
                    subject,
                    "preshared_key",
                )
            peer = desired_peer(args)
            entry = dict((field, peer[field]) for field in ENTRY_FIELDS)
        before = set_registry_peer(path, name, entry, check_mode=bool(self._task.check_mode))
        shown = entry if args["state"] == "present" else before
        result = dict(
            changed=before != entry,
            registry=registry_shown(path),
            peer=dict(shown, name=name, preshared_key=None) if shown else None,
        )
        if self._task.diff:
            result["diff"] = dict(
                before=before or {},
                after=entry or {},
                before_header="%s: peers.%s" % (registry_shown(path), name),
                after_header="%s: peers.%s" % (registry_shown(path), name),
            )
        warning = self._inventory_wins(task_vars, args, name)
        if warning:
            result["warnings"] = [warning]
        return result

    def _inventory_wins(self, task_vars, args, name):
        """A peer of the same name in the mesh's kilo_peers hides the registry's: say so."""
        members = task_vars.get("groups", {}).get(args["group"], [])
        if not members:
            return None
        found, peers = self.variable(task_vars, members[0], "kilo_peers")
        if found and any(isinstance(p, dict) and p.get("name") == name for p in peers or []):
            return (
                "kilo_peers of the inventory has a peer named %r: the mesh uses that one, not the registry's"
                % name
            )
        return None
