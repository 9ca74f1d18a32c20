# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.annotate: write on this host's Kubernetes Node what Kilo's agent writes there.

Runs on the controller only. The values are those the engine used for this run (the host's
kilo.mesh.key result, else the registry, else the Node's own annotations; its stored plan for the
WireGuard IP), in Kilo's formats (``kube_node.node_annotations``, as the agent writes them), sent
as one JSON merge patch of the Node's annotations when one of them differs. What the node
observes (``last-seen``, ``discovered-endpoints``: ``kube_node.OBSERVED_ANNOTATIONS``) never
makes the task changed (``kube_node.annotation_changes``, the agent's rule too): it is refreshed
by every run that reaches the host (not in check mode) and left out of the diff.

For a node that changes agents in place (``playbooks/migrate.yml``): ``takeover`` refuses a write
that would change what the other nodes build their mesh from (``kube_node.SEEN_BY_OTHERS``) as the
Node's current agent wrote it; ``handback_timeout`` keeps ``last-seen`` fresh after the write until
another writer (Kilo's ``kg``, taking the node back) writes its own.
"""

from __future__ import annotations

import json
import time

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client, kube_node
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, node_subject
from ansible_collections.kilo.mesh.plugins.module_utils.options import argument_spec
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.mesh import not_a_node


# Seconds between two writes of last-seen while a node is handed back to another agent: well inside
# the 60 s after which the other agents drop a silent node.
HANDBACK_REFRESH = 10


def _extra_spec():
    # the client options keep kubernetes.core's alias names (verify_ssl, ssl_ca_cert)
    spec = dict(
        node=dict(type="str"),
        topology_var=dict(type="str"),
        state=argument_spec("host")["state"],
        takeover=dict(type="bool", default=False),
        handback_timeout=dict(type="int", default=0),
    )
    spec.update(kube_client.argument_spec())
    return spec


class ActionModule(KiloAction):
    _requires_connection = False
    SCOPES = ("mesh", "inputs")
    EXTRA_SPEC = _extra_spec()

    def run_kilo(self, args, task_vars):
        host = task_vars["inventory_hostname"]
        name = args["node"] or host
        result = {}
        if args["state"] == "present":
            # the plan and the node the engine used for this host in this run (the run-once
            # step's plan when topology_var names it)
            mesh = self.mesh(task_vars, args)
            plan = mesh.plan(host, args["topology_var"], result)
            node = mesh.node(host)
            if node is None or not node.get("public_key"):
                raise not_a_node(args["group"])
            now = int(time.time())
        else:
            now = None  # once the Node's annotations are read: removed_when_leaving
        client = kube_client.api_client(self.client_options(args, task_vars))
        path = "/api/v1/nodes/" + name
        api = kube_client.kubernetes.client.CoreV1Api(client)
        try:
            obj = kube_client.json_call(api.read_node, "GET", path, name)
        except kube_client.KubeError as e:
            if e.status == 404 and args["state"] == "absent":
                return dict(
                    changed=False, node=name, annotations={}, last_seen=None
                )  # gone with its Node
            if e.status == 404:
                raise KiloError(
                    "no such Node in the cluster (option node, default the inventory hostname)",
                    node_subject(name),
                )
            raise
        current = (obj.get("metadata") or {}).get("annotations") or {}
        if args["state"] == "present":
            wanted = kube_node.node_annotations(node, plan, args["granularity"], now, current)
            # Kilo's agent annotations and ours; cni-compatibility-ip, which the agent writes back
            # too, is left as the Node has it
            wanted = dict(
                (k, v)
                for k, v in wanted.items()
                if k
                in kube_node.AGENT_ANNOTATIONS
                + kube_node.DUAL_ANNOTATIONS
                + kube_node.OWN_AGENT_ANNOTATIONS
            )
        else:
            wanted = kube_node.removed_when_leaving(current)  # the dual-stack ones among them
        if args["takeover"] and args["state"] == "present":
            self.refuse_moves(name, current, wanted)
        if args["handback_timeout"] and args["state"] == "present":
            wanted.update(
                kube_node.handed_back_removals(current)
            )  # Kilo's agent marks nothing of ours
        ours = [k for k in kube_node.AGENT_ANNOTATIONS if k not in kube_node.OBSERVED_ANNOTATIONS]
        # a dual-stack node's, or one to remove; our agent's own, removed when leaving
        ours += [
            k for k in kube_node.DUAL_ANNOTATIONS + kube_node.OWN_AGENT_ANNOTATIONS if k in wanted
        ]
        differ, _refreshed = kube_node.annotation_changes(wanted, current)
        patch = dict(differ)
        if args["state"] == "present":
            # what the node observes, refreshed by every run that reaches it, and no change
            patch.update((k, wanted[k]) for k in kube_node.OBSERVED_ANNOTATIONS)
        if patch and not self._task.check_mode:
            kube_client.merge_patch_node(client, name, {"metadata": {"annotations": patch}})
        if args["handback_timeout"] and args["state"] == "present" and not self._task.check_mode:
            result["handed_back"] = self.hand_back(
                client, name, wanted[kube_node.LAST_SEEN], args["handback_timeout"]
            )
        after = dict((k, wanted[k] if k in wanted else current.get(k)) for k in ours)
        result.update(
            changed=bool(differ),
            node=name,
            annotations=dict((k, v) for k, v in after.items() if v is not None),
            last_seen=int(wanted[kube_node.LAST_SEEN]) if args["state"] == "present" else None,
        )
        if self._task.diff:
            result["diff"] = dict(
                before=self.shown(current, ours),
                after=self.shown(after, ours),
                before_header="Node %s" % name,
                after_header="Node %s" % name,
            )
        return result

    @staticmethod
    def refuse_moves(name, current, wanted):
        """KiloError, before anything is written, when ``wanted`` changes an annotation the other
        nodes read (``kube_node.SEEN_BY_OTHERS``) from what the Node's agent wrote; a Node no agent
        wrote a key on yet has nothing to keep."""
        if not current.get(kube_node.KEY):
            return
        moved = [
            "%s %s -> %s" % (k, json.dumps(current.get(k) or ""), json.dumps(wanted[k]))
            for k in kube_node.SEEN_BY_OTHERS
            if (current.get(k) or "") != wanted[k]
        ]
        if moved:
            raise KiloError(
                "taking the node over would change what the other nodes see: %s; nothing was written"
                " (set the kilo_* options to Kilo's flags, and forced values as the Node's annotations,"
                " so that this run computes what its agent did)" % "; ".join(moved),
                node_subject(name),
                "takeover",
            )

    @staticmethod
    def hand_back(client, name, written, timeout, clock=time.monotonic, sleep=time.sleep):
        """Keep the Node's ``last-seen`` fresh (every HANDBACK_REFRESH s) until another writer puts
        another value there; its value and how long it took, else KiloError after ``timeout`` s.

        Kilo's agent, started on a node whose annotations already say what it computes, first
        writes ``last-seen`` at its first check-in, 30 s after it starts: without this the node
        could stay silent past the other agents' 60 s and leave their mesh for a moment."""
        ours, start = str(written), clock()
        wrote = start
        while True:
            sleep(1)
            obj = kube_client.read_node(client, name)
            seen = ((obj.get("metadata") or {}).get("annotations") or {}).get(kube_node.LAST_SEEN)
            if seen and seen.isdigit() and seen != ours:
                return {"last_seen": int(seen), "waited": round(clock() - start, 1)}
            if clock() - start > timeout:
                raise KiloError(
                    "no other agent wrote last-seen within %d s (is Kilo's agent running on the node?);"
                    " the node leaves the other agents' mesh a minute after the last write"
                    % timeout,
                    node_subject(name),
                    "handback_timeout",
                )
            if clock() - wrote >= HANDBACK_REFRESH:
                ours, wrote = str(int(time.time())), clock()
                kube_client.merge_patch_node(
                    client, name, {"metadata": {"annotations": {kube_node.LAST_SEEN: ours}}}
                )

    @staticmethod
    def shown(annotations, keys):
        return "".join(
            "%s: %s\n" % (k, annotations[k]) for k in keys if annotations.get(k) is not None
        )
