#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: agent
short_description: Install, configure and start the kilo.mesh agent on a node, or stop and remove it
version_added: 0.2.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - The agent keeps a node in the mesh between Ansible runs, as Kilo's C(kg) does - it watches the cluster's
    Nodes and Peers and converges the host with the same engine and backends as M(kilo.mesh.join).
  - With O(state=present), on the controller - creates the node's own identity with the controller's
    Kubernetes credentials (the client options below, else the host's C(kilo_kube) variable, as
    for M(kilo.mesh.annotate)) -
    a ServiceAccount C(kilo-mesh-agent-<node>) in O(agent_namespace), bound to the shared ClusterRole
    C(kilo-mesh-agent) (get, list, watch Nodes and Peers) and to a ClusterRole allowing get and patch of
    B(its own Node only) (C(resourceNames)). Its token comes from the TokenRequest API.
  - Then, on the host - writes the agent's zip application (O(agent_app), only when its digest differs),
    its configuration C(/etc/kilo-mesh/agent.json) (0600; the same mesh, host and key options as the push
    run, so an inventory variable means the same in both modes) and its kubeconfig C(/etc/kilo-mesh/kubeconfig)
    (0600), each atomically, and starts it.
  - Where PID 1 is systemd, the agent runs as the unit C(kilo-mesh-agent.service) with C(Restart=always)
    and hardening (only C(CAP_NET_ADMIN) and C(CAP_NET_RAW); the system read-only except the key's and
    CNI configuration's directories, C(/run/kilo) and C(/run/wireguard); no home, private C(/tmp), no new
    privileges). Elsewhere a supervisor in a session of its own starts the agent again when it dies (PID in
    C(/run/kilo/kilo-mesh-agent.pid), output in C(/run/kilo/kilo-mesh-agent.log)).
  - A run with nothing to change changes nothing and does not restart the agent; the agent restarts only when
    its application, configuration or kubeconfig changed. The kubeconfig is kept while its API server, CA and
    identity are the ones wanted and its token is within the first third of its life.
  - With O(state=absent), stops and removes the agent and its files, then deletes the node's identity (its
    tokens stop working). The mesh stays as the agent last left it.
extends_documentation_fragment:
  - kilo.mesh.options.agent
  - kilo.mesh.options.mesh
  - kilo.mesh.options.plans
  - kilo.mesh.options.host
  - kilo.mesh.options.key
  - kilo.mesh.kubernetes
  - kilo.mesh.attributes
options:
  python:
    description:
      - The host's Python that runs the agent; it needs the C(kubernetes) and C(prometheus_client) libraries
        (Debian - C(python3-kubernetes), C(python3-prometheus-client); the host preparation installs them when
        C(kilo_agent) is true).
    type: str
    default: /usr/bin/python3
  service_manager:
    description:
      - V(auto) - the systemd unit when PID 1 is systemd, else the supervisor.
    type: str
    default: auto
    choices: [auto, systemd, supervisor]
  app_digest:
    description: Set by the action - the sha256 digest of the zip application. Do not give it.
    type: str
  app_src:
    description: Set by the action - a file on the host holding the zip application. Do not give it.
    type: path
  config:
    description: Set by the action - the agent's configuration. Do not give it.
    type: dict
  kubeconfig:
    description: Set by the action - the cluster and identity the agent's kubeconfig must name. Do not give it.
    type: dict
  token:
    description: Set by the action - a new token for the agent's kubeconfig. Never logged. Do not give it.
    type: str
attributes:
  check_mode:
    support: full
    details: Cluster objects are compared with a server-side dry run; no token is requested.
  diff_mode:
    support: full
    details: The app's digest, the configuration, the unit and the kubeconfig's server, CA digest, identity and expiry - never the token.
notes:
  - Runs as root on the host - log in as root, or let Ansible become root (C(-b), C(ansible_become)). A call
    that does not run as root fails first, before anything changes, with a message naming the host and that fix.
  - Needs the Python library C(kubernetes) on the controller.
  - The host's agent reads its own Node as O(agent_node) names it; run it on hosts of a Kubernetes cluster
    (the inventory plugin C(kilo.mesh.kubernetes) names hosts after their Nodes).
seealso:
  - module: kilo.mesh.join
  - module: kilo.mesh.annotate
  - name: Kilo
    description: The Kubernetes WireGuard mesh whose behaviour this collection reproduces.
    link: https://github.com/squat/kilo
"""

EXAMPLES = r"""
- name: Run the agent on every node (the role kilo.mesh.agent does this in playbooks/site.yml)
  kilo.mesh.agent:
    kubeconfig: ~/.kube/config
    agent_api_server: https://10.0.0.1:6443

- name: Stop and remove the agent; the mesh stays as it was
  kilo.mesh.agent:
    state: absent
"""

RETURN = r"""
changes:
  description: What was changed (or would be, in check mode) - cluster objects, files, the service.
  returned: always
  type: list
  elements: str
  sample: ["created ServiceAccount/kube-system/kilo-mesh-agent-node1", "write /etc/kilo-mesh/agent.json", "start the agent"]
service:
  description: How the agent runs - V(systemd) or V(supervisor).
  returned: when O(state=present)
  type: str
  sample: systemd
pid:
  description: The PID of the agent's main process (the unit's, else the supervisor's), null in check mode before a start.
  returned: always
  type: int
  sample: 4242
restarted:
  description: Whether a running agent was restarted (its app, configuration, kubeconfig or unit changed).
  returned: always
  type: bool
  sample: false
node:
  description: The Node the agent is for.
  returned: always
  type: str
  sample: node1
app_digest:
  description: The sha256 digest of the agent's zip application.
  returned: when O(state=present)
  type: str
  sample: "4f1e5c3a9b0d7e26c8a1f3b5d7092e4c6a8b0d2f4e6a8c0b2d4f6a8c0e2b4d6f"
"""

import os
import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kilo.mesh.plugins.module_utils.agent import service
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.host_checks import require_root
from ansible_collections.kilo.mesh.plugins.module_utils.kube.kube_client import (
    argument_spec as client_spec,
)
from ansible_collections.kilo.mesh.plugins.module_utils.options import argument_spec

INTERNAL_SPEC = dict(
    python=dict(type="str", default=service.PYTHON),
    service_manager=dict(type="str", default="auto", choices=["auto", "systemd", "supervisor"]),
    app_digest=dict(type="str"),
    app_src=dict(type="path"),
    config=dict(type="dict"),
    kubeconfig=dict(type="dict"),
    token=dict(type="str", no_log=True),
)


def run_module():
    spec = argument_spec("agent", "mesh", "plans", "host", "key")
    spec.update(client_spec())
    spec.update(INTERNAL_SPEC)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    require_root(module)  # first, before the host changes (the action names the host)
    p = dict(module.params, app_path=module.params["agent_app"])
    try:
        if p["state"] == "absent":
            result = service.absent(p, check_mode=module.check_mode)
        else:
            for name in ("app_digest", "config", "kubeconfig"):
                if not p[name]:
                    module.fail_json(
                        msg="%s: set by the action kilo.mesh.agent; run the module through it"
                        % name
                    )
            result = service.present(p, check_mode=module.check_mode)
            if p["python"] == sys.executable or os.path.realpath(p["python"]) == os.path.realpath(
                sys.executable
            ):
                missing = [
                    lib for lib in ("kubernetes", "prometheus_client") if not _importable(lib)
                ]
                if missing:
                    module.warn(
                        "the agent needs %s under %s (set kilo_agent: true so that the host preparation"
                        " installs them)" % (", ".join(missing), p["python"])
                    )
    except (KiloError, OSError) as e:
        module.fail_json(msg=str(e))
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)


def _importable(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


def main():
    run_module()


if __name__ == "__main__":
    main()
