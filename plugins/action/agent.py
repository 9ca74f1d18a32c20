# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Action kilo.mesh.agent: the controller's share of installing (or removing) a node's agent.

Present: the node's identity in the cluster (``plugin_utils/agent_identity.py``) with the
controller's Kubernetes credentials, the agent's configuration from the same options the push
run reads (mesh, host and key scopes of ``KiloAction.options_of``), the zip application
(``plugin_utils/agent_zip.py``); then the module on the host. The module is called with the
app's digest and the kubeconfig's wanted cluster and identity only; when the host lacks the app
or needs a token it says so and changes nothing, and this action sends the zip (a file
transfer) and/or a new token (TokenRequest) in a second call. A re-run is one remote call.

Absent: the module stops and removes the agent, then the node's identity is deleted (its
tokens die with its ServiceAccount).
"""

from __future__ import annotations

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client
from ansible_collections.kilo.mesh.plugins.module_utils.options import argument_spec, names
from ansible_collections.kilo.mesh.plugins.plugin_utils import agent_identity
from ansible_collections.kilo.mesh.plugins.plugin_utils.action import KiloAction
from ansible_collections.kilo.mesh.plugins.plugin_utils.mesh import engine_options

# Options of the module that are no option of the table (tests and unusual hosts).
MODULE_ONLY = dict(
    python=dict(type="str"),
    service_manager=dict(type="str", default="auto", choices=["auto", "systemd", "supervisor"]),
)


def _extra_spec():
    spec = dict(MODULE_ONLY)
    spec.update(kube_client.argument_spec())
    return spec


class ActionModule(KiloAction):
    SCOPES = ("mesh", "plans", "host", "key", "agent")
    EXTRA_SPEC = _extra_spec()

    def run_kilo(self, args, task_vars):
        host = task_vars.get("inventory_hostname")
        node = args["agent_node"] or host
        client = self.client_options(args, task_vars)
        module_args = dict(
            state=args["state"],
            agent_app=args["agent_app"],
            python=args["python"],
            service_manager=args["service_manager"],
        )
        if args["state"] == "absent":
            result = self.module(module_args, task_vars)
            if result.get("failed"):
                return result
            if agent_identity.has_client_config(client):
                changes, _uid = agent_identity.ensure(
                    client, node, args["agent_namespace"], "absent", self._task.check_mode
                )
                result["changes"] = list(result.get("changes") or []) + changes
                result["changed"] = bool(result.get("changed") or changes)
            return self.finish(result, node)

        identity, uid = agent_identity.ensure(
            client,
            node,
            args["agent_namespace"],
            "present",
            self._task.check_mode,
            pod_source=args["pod_cidr_source"],
        )
        server, ca_data, insecure = agent_identity.cluster_of(client, args["agent_api_server"])
        module_args.update(
            config=self.agent_config(args, node),
            kubeconfig=dict(
                server=server,
                ca_data=ca_data,
                insecure=insecure,
                subject=agent_identity.subject(node, args["agent_namespace"]),
                uid=uid,
            ),
        )

        def provide(need):
            if "token" not in need:
                return {}
            return {
                "token": agent_identity.token(
                    client, node, args["agent_namespace"], args["agent_token_lifetime"]
                )
            }

        result, digest = self.run_with_app("kilo.mesh.agent", module_args, task_vars, provide)
        if result.get("failed"):
            return result
        result["changes"] = identity + list(result.get("changes") or [])
        result["changed"] = bool(result.get("changed") or identity)
        result["app_digest"] = digest
        warnings = self.drift_warnings(client, node, task_vars)
        if warnings:
            result["warnings"] = list(result.get("warnings") or []) + warnings
        return self.finish(result, node)

    @staticmethod
    def drift_warnings(client, node, task_vars):
        """A warning per node variable of the host that its Node says otherwise: the agents read
        node fields from the Node, so they would undo it between runs."""
        from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
        from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node
        from ansible_collections.kilo.mesh.plugins.module_utils.nodes import UNSET

        try:
            found = kube_node.drift(
                kube_client.read_node(kube_client.api_client(client), node), task_vars
            )
        except KiloError:
            return []  # the Node's own errors are validate's and the agent's to report
        return [
            "host %s: %s is %r but its Node says %s: agents read node fields from the Node and will use"
            " that between runs; set it on the Node (Kilo's annotation) instead"
            % (
                task_vars.get("inventory_hostname"),
                var,
                value,
                "nothing" if have is UNSET else repr(have),
            )
            for var, value, have in found
        ]

    def finish(self, result, node):
        result["node"] = node
        result.pop("need", None)
        if not self._task.diff:
            result.pop("diff", None)
        return result

    def module(self, module_args, task_vars):
        given = dict((k, v) for k, v in module_args.items() if v is not None)
        return self._execute_module(
            module_name="kilo.mesh.agent", module_args=given, task_vars=task_vars
        )

    @staticmethod
    def agent_config(args, node):
        """The agent's configuration: the push run's options of this host, and the agent's own."""
        settings = dict((k, args[k]) for k in names("host") if k != "state")
        # kilo_key_rotate is one run's request (rotate.yml), never the agent's: it would rotate on every pass
        key = dict(
            (k, args[k])
            for k in names("key")
            if k in argument_spec("key") and k not in ("prepare", "key_rotate")
        )
        return dict(
            node=node,
            options=engine_options(args),
            settings=settings,
            key=key,
            resync_period=args["agent_resync_period"],
            listen=args["agent_listen"],
            leader_health=args["leader_health"],
            leader_handshake_timeout=args["leader_handshake_timeout"],
            pod_cidr_source=args["pod_cidr_source"],
        )
