#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: converge
short_description: Converge one host's WireGuard, addresses, routes, rules and firewall to a Kilo plan
version_added: 0.1.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - Brings one host to the plan that M(kilo.mesh.topology) computed for it, in one call.
  - The WireGuard interface is configured by difference, peer by peer; it is never restarted
    and the peer set is never replaced wholesale, so tunnels that did not change keep carrying traffic.
  - Only state this collection owns is read and changed. Routes carry routing protocol 107,
    ip rules use table 1107, the firewall lives in the nftables table C(inet kilo_mesh) or the
    iptables chains C(KILO-NAT), C(KILO-FORWARD) and C(KILO-IPIP).
  - Usually called by M(kilo.mesh.join), which computes the plan on the controller.
  - Options not given in the task are read from the host's C(kilo_*) inventory variables.
options:
  preshared_keys:
    description:
      - Preshared keys of the plan's WireGuard peers, by public key. They travel apart from O(plan)
        because module arguments are logged on the host, and this option is never logged.
    type: dict
  switch_at:
    description:
      - A key rotation's moment for this host, in seconds since the epoch (the controller's clock; hosts
        keep theirs in step with NTP). The changes are computed at once and applied at that moment, so
        a host whose key rotates switches just before its peers switch to its new key. A moment more
        than 30 s ahead, or past, applies at once.
      - M(kilo.mesh.join) sets it in a run that rotates keys; there is no need to set it by hand.
    type: float
  pending_public_key:
    description:
      - In check mode, the public key M(kilo.mesh.key) stood in for a key it would create or rotate
        (its RV(kilo.mesh.key#module:pending) result), so the WireGuard comparison and diff show the switch
        to it. Ignored outside check mode. M(kilo.mesh.join) sets it.
    type: str
  takeover:
    description:
      - The WireGuard interface is run by another agent (Kilo's C(kg)) and is taken over in place, as
        C(playbooks/migrate.yml) does - fail, before anything changes, when the plan would give it another
        key, listen port or peers while it is up (the tunnels must already be what the plan says); its MTU and
        link state, the addresses, routes and firewall converge as usual. An interface that is not there yet
        is made, and one that is down (a non-leader's) converges as usual.
      - The other agent's routes at the plan's destinations are taken over as with O(route_conflict=replace),
        for this call alone - the stored plan of the boot restore keeps O(route_conflict) as given.
      - M(kilo.mesh.join) with O(kilo.mesh.join#module:takeover=true) sets it.
    type: bool
    default: false
  app_digest:
    description:
      - SHA-256 of the collection's zip application for the boot restore (O(boot_restore)). When the host's
        copy (C(/usr/lib/kilo-mesh/kilo-mesh.pyz)) differs and O(app_src) is not given, nothing changes and
        the result's RV(need) names V(app). The action plugin sets it and sends the app when asked; there is no need to set it by hand.
    type: str
  app_src:
    description:
      - A file on the host holding the zip application of O(app_digest) (the action plugin's transfer).
    type: path
extends_documentation_fragment:
  - kilo.mesh.options.plan
  - kilo.mesh.options.host
  - kilo.mesh.attributes
attributes:
  check_mode:
    support: full
    details: Reports exactly what would change and changes nothing.
  diff_mode:
    support: full
    details: Shows peers, addresses, routes, rules, firewall, the stored plan and the boot unit before and
      after, without keys.
notes:
  - Runs as root on the host - log in as root, or let Ansible become root (C(-b), C(ansible_become)). A call
    that does not run as root fails first, before anything changes, with a message naming the host and that fix.
  - Private and preshared keys never appear in results or diffs.
  - With O(boot_restore) (the default) the host keeps its plan and comes back to it at boot by the unit
    C(kilo-mesh.service), which runs this same converge (C(python3 APP --restore /var/lib/kilo/mesh-plan.json)).
seealso:
  - module: kilo.mesh.join
  - module: kilo.mesh.topology
"""

EXAMPLES = r"""
- name: Compute the plans of the mesh once
  kilo.mesh.topology:
  run_once: true
  register: mesh

- name: Converge this host
  kilo.mesh.converge:
    plan: "{{ mesh.plans[inventory_hostname] }}"
    backend: userspace
"""

RETURN = r"""
changes:
  description: What changed (or would change in check mode), by backend.
  returned: always
  type: dict
  sample: {"wireguard": ["add peer location:gcp"], "netstate": ["add route 10.2.0.0/16 via 10.4.0.2 dev kilo0"]}
leader:
  description: Whether this host leads its segment.
  returned: when state is present
  type: bool
  sample: true
need:
  description: What the host lacks before it can converge (V(app) - the zip application); nothing changed.
    The action plugin sends it and calls again, so a playbook never sees it.
  returned: when the host lacks something
  type: list
  elements: str
  sample: ["app"]
late:
  description: Seconds past O(switch_at) at which the changes were applied (0 - on time).
  returned: when O(switch_at) is set and something changed
  type: float
  sample: 0.0
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import converge
from ansible_collections.kilo.mesh.plugins.module_utils.host.host_checks import require_root
from ansible_collections.kilo.mesh.plugins.module_utils.options import argument_spec
from ansible_collections.kilo.mesh.plugins.module_utils.plan import CONVERGE_SPEC


def main():
    module = AnsibleModule(
        argument_spec=dict(argument_spec("host"), **CONVERGE_SPEC),
        required_if=[("state", "present", ["plan"])],
        supports_check_mode=True,
    )
    require_root(module)  # first, before the host changes (the action names the host)
    plan = module.params.pop("plan")
    preshared_keys = module.params.pop("preshared_keys") or {}
    if any(isinstance(p, dict) and p.get("preshared_key") for p in (plan or {}).get("peers") or []):
        # The plan is logged on the host as it arrives: a key inside it would be in syslog.
        module.fail_json(
            msg="plan: peers carry preshared keys; pass them in preshared_keys (no_log) instead"
        )
    app_digest, app_src = module.params.pop("app_digest"), module.params.pop("app_src")
    app = dict(digest=app_digest, src=app_src) if app_digest else None
    try:
        result = converge(
            plan,
            module.params,
            check_mode=module.check_mode,
            preshared_keys=preshared_keys,
            switch_at=module.params.pop("switch_at"),
            pending_public_key=module.params.pop("pending_public_key"),
            app=app,
            takeover=module.params.pop("takeover"),
        )
    except KiloError as e:
        module.fail_json(msg=str(e))
    except Exception as e:  # pylint: disable=broad-exception-caught
        module.fail_json(msg="%s: %s" % (type(e).__name__, e), exception=traceback.format_exc())
    if plan is not None and not result.get("need"):
        result["leader"] = bool(plan.get("leader"))
    if not module._diff:
        result.pop("diff")
    for warning in result.pop("warnings", ()):
        module.warn(warning)  # exit_json(warnings=...) is deprecated in ansible-core 2.19 and later
    module.exit_json(**result)


if __name__ == "__main__":
    main()
