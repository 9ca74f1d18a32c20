#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: key
short_description: Ensure a host's WireGuard key and report what the mesh needs to know about the host
version_added: "0.1.0"
author: kilo.mesh developers (@kilo-mesh)
description:
  - Makes sure a WireGuard private key exists on the host (created with X25519, stored base64
    like C(wg genkey), file mode C(0600) in a C(0700) directory when the directory is created),
    and returns its B(public) key. The private key never leaves the host.
  - Reports the internal and external IP candidates of the host, chosen the way Kilo chooses
    them (hostname addresses, then the default-route interface, then every interface; private
    and public addresses kept apart; loopback and link-local ignored; O(internal_cidrs) and
    O(prioritise_private_addresses) as Kilo's C(--internal-cidr) and C(--prioritise-private-addresses)).
  - Reports the MTU of the default-route interface and, when the WireGuard interface already
    exists, the endpoints WireGuard learned for its peers (for NAT traversal).
  - This is the first step of a mesh run; its results feed the topology engine on the
    controller (see M(kilo.mesh.join) and M(kilo.mesh.topology)).
  - Checks what only the host can tell, before any converge call changes it, in check mode too -
    it fails when an address of another interface overlaps O(subnet) or when another process (or
    another kernel WireGuard interface) holds O(port); it warns when no interface carries
    O(force_internal_ip).
  - With O(prepare), it first does in the same call what M(kilo.mesh.prepare) does. When packages are
    missing it stops there (the libraries it needs may be among them) and returns them in RV(prepared);
    the action installs them with M(ansible.builtin.package) and runs the key step again.
options:
  state:
    description:
      - V(present) ensures the key and reports the host as described above.
      - V(absent) removes the private key file at O(key_path) (and temporary files of a key write cut short), then
        its directory when that leaves it empty. Nothing is discovered or checked, and only C(changed) and RV(msg)
        are returned. C(playbooks/uninstall.yml) runs it with C(-e kilo_remove_keys=true).
      - A task argument only; C(kilo_state) does not set it (a node leaving the mesh keeps its key).
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - kilo.mesh.options.key
  - kilo.mesh.options.prepare
  - kilo.mesh.attributes
notes:
  - Runs as root on the host - log in as root, or let Ansible become root (C(-b), C(ansible_become)). A call
    that does not run as root fails first, before anything changes, with a message naming the host and that fix.
  - The key file - an existing valid key is kept; a file that is not a valid key is an error (it is
    never overwritten). A key file readable by others is tightened to C(0600).
  - Options not given in the task are read from the host's inventory variables (C(kilo_key_path),
    C(kilo_interface), C(kilo_discovery_ignore_interfaces)).
  - Runs on the managed host with the host's Python; needs C(pyroute2) (the public key is computed in Python, RFC 7748).
  - >-
    An address counts as public the way Kilo counts it - any IPv4 address outside 10.0.0.0/8,
    172.16.0.0/12 and 192.168.0.0/16 (so also 100.64.0.0/10, 198.18.0.0/15 and the documentation
    ranges), any IPv6 address not starting with fd00.
attributes:
  check_mode:
    support: full
    details: In check mode a missing key is reported as to be created; RV(public_key) is then that of an unsaved stand-in key and RV(pending) is true.
  diff_mode:
    support: partial
    details: With O(prepare), the sysctls, the boot file and the port state before and after, as M(kilo.mesh.prepare) shows them.
seealso:
  - module: kilo.mesh.converge
  - name: Kilo
    description: The Kubernetes WireGuard mesh whose behaviour this collection reproduces.
    link: https://github.com/squat/kilo
"""

EXAMPLES = r"""
- name: Ensure the WireGuard key and discover addresses
  kilo.mesh.key:
  register: kilo_key

- name: Lab host whose management NIC must not become the endpoint
  kilo.mesh.key:
    key_path: /var/lib/kilo/key
    interface: kilo0
    ignore_interfaces:
      - mgmt0
  register: kilo_key

- name: Prepare the host (sysctls, port, packages) and ensure the key in one remote call
  kilo.mesh.key:
    prepare: true
  register: kilo_key

- name: Remove the private key (as playbooks/uninstall.yml does with -e kilo_remove_keys=true)
  kilo.mesh.key:
    state: absent

- name: Use the results
  ansible.builtin.debug:
    msg: "{{ kilo_key.public_key }} at {{ kilo_key.external_ip }} (internal {{ kilo_key.internal_ip }})"
"""

RETURN = r"""
public_key:
  description:
    - WireGuard public key (base64) of the host.
    - In check mode, when the key would be created, the public key of an unsaved stand-in key (see RV(pending)).
  returned: when O(state=present)
  type: str
  sample: "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="
pending:
  description: True in check mode when the key does not exist yet and RV(public_key) is a stand-in.
  returned: when O(state=present)
  type: bool
  sample: false
internal_ip:
  description:
    - The chosen internal (private) IP with its prefix length, or null when the host has no private address.
    - In a dual-stack mesh (O(subnet) a list of two), a list of two where the host has a private address of each
      IP family on one interface - the primary family's first (the family of the first subnet), then the
      other family's on the same interface.
  returned: when O(state=present)
  type: raw
  sample: 10.1.0.5/24
external_ip:
  description:
    - The chosen external IP (no prefix length), the host part of the node's endpoint.
    - The first public candidate, else the first private one, else null.
    - With O(prioritise_private_addresses), the chosen internal IP when there is one.
  returned: when O(state=present)
  type: str
  sample: 203.0.113.5
candidates:
  description: All candidates, in order of preference.
  returned: when O(state=present)
  type: dict
  contains:
    internal:
      description: Private addresses (CIDR) that could be the internal IP.
      type: list
      elements: str
      sample: [10.1.0.5/24]
    external:
      description: Public addresses (CIDR) that could be the external IP.
      type: list
      elements: str
      sample: [203.0.113.5/24]
mtu:
  description: MTU of the interface holding the default route, or null when there is no default route.
  returned: when O(state=present)
  type: int
  sample: 1500
discovered_endpoints:
  description:
    - Map of peer public key to the C(ip:port) WireGuard last saw it at, for peers that completed
      a handshake. Empty when the interface does not exist.
  returned: when O(state=present)
  type: dict
  sample: {"kXp0...=": "198.51.100.7:40112"}
handshakes:
  description: Seconds since the latest handshake with each peer of the WireGuard interface (null - never); empty without the interface.
  returned: when O(state=present)
  type: dict
  sample: {"kXp0...=": 42}
wireguard_read:
  description:
    - Whether the WireGuard interface could be read (true also when it does not exist yet). False after a
      failed reading (a warning says why); then C(handshakes) and C(probes) say nothing and a push run with
      C(kilo_direct_paths=always) treats this host as left out of the run for its direct pairs.
  returned: when O(state=present)
  type: bool
  sample: true
probes:
  description:
    - Public keys of the peers of the WireGuard interface without allowed IPs (direct probes between two
      locations behind NAT, C(kilo_direct_paths=always)); empty without the interface.
  returned: when O(state=present)
  type: list
  elements: str
  sample: ["kXp0...="]
prepared:
  description:
    - With O(prepare), what the preparation found and did - the keys M(kilo.mesh.prepare) returns (C(pkg_mgr),
      C(kernel_module), C(firewall), C(port), C(missing), C(unknown_sysctls), C(changes)), and C(installed),
      the packages the action installed in this run (in check mode, would install).
  returned: when O(prepare) is true
  type: dict
  sample: {"pkg_mgr": "apt", "missing": [], "installed": [], "changes": [], "firewall": "nftables", "port": 51820}
msg:
  description: What happened to the key.
  returned: always
  type: str
  sample: key /var/lib/kilo/key exists
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    check_interface_name,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host import report
from ansible_collections.kilo.mesh.plugins.module_utils.host.host_checks import (
    host_problems,
    require_root,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import carry_out, compare
from ansible_collections.kilo.mesh.plugins.module_utils.host.keys import (
    KeyBackend,
    key_file_errors,
    key_result,
    remove_key,
)
from ansible_collections.kilo.mesh.plugins.module_utils.options import STATE_SPEC, argument_spec
from ansible_collections.kilo.mesh.plugins.module_utils.host.prepare import (
    compare_install,
    diff_of,
    install_result,
    module_view,
)


def install_step(module):
    """The install step (``prepare``) read and compared; a host that misses packages leaves here
    (the install step carried out): discovery may need them (pyroute2), so the action installs
    them and calls again."""
    if not module.params["prepare"]:
        return None
    try:
        install = compare_install(module.params)
        if install.current["missing"]:
            if not module.check_mode:
                carry_out([install])
            prepared = module_view(module, install_result(install))
            module.exit_json(
                changed=bool(prepared["changes"]),
                msg="packages missing: %s" % ", ".join(prepared["missing"]),
                prepared=prepared,
                **diff_of(prepared),
            )
    except KiloError as e:
        module.fail_json(msg=str(e))
    return install


def key_step(module, install, errors):
    """The key compared (no rotation on a host with ``errors``), then the install step and the key
    carried out (outside check mode): neither changes the host before both compared. Returns
    ``keys.ensure_key``'s result."""
    p = module.params
    want = {"rotate": p["key_rotate"] and not errors, "max_age": 0 if errors else p["key_max_age"]}
    try:
        with key_file_errors(p["key_path"]):
            steps = compare([KeyBackend(p["key_path"])], want)
            if not module.check_mode:
                carry_out(([install] if install else []) + steps, again=False)
        return key_result(steps[0], module.check_mode)
    except (KiloError, ValueError) as e:
        module.fail_json(msg=str(e))


def run_module():
    module = AnsibleModule(
        argument_spec=dict(argument_spec("key", "prepare"), state=STATE_SPEC),
        supports_check_mode=True,
    )
    p = module.params
    require_root(module)  # first, before the host changes (the action names the host)
    if p["state"] == "absent":
        try:
            module.exit_json(**remove_key(p["key_path"], check_mode=module.check_mode))
        except KiloError as e:
            module.fail_json(msg=str(e))
    install = install_step(module)
    try:
        check_interface_name(p["interface"], field="interface")
        from ansible_collections.kilo.mesh.plugins.module_utils.host.discovery import parse_cidrs

        parse_cidrs(p["internal_cidrs"])
    except (KiloError, ValueError) as e:
        module.fail_json(msg=str(e))

    try:
        ips, mtu, host = report.addresses(p)
        errors, warnings = host_problems(
            host, p["interface"], p["subnet"], p["port"], p["force_internal_ip"]
        )
    except ImportError as e:
        module.fail_json(msg="IP discovery needs pyroute2 on the host: %s" % e)
    except KiloError as e:  # a subnet the controller let through (an older controller)
        module.fail_json(msg=str(e))
    except (OSError, ValueError) as e:  # netlink errors: say what failed, not a traceback
        module.fail_json(msg="IP discovery: %s: %s" % (type(e).__name__, e))

    # after the host checks: a host that fails them leaves the run with its key as it was,
    # rather than a rotation cut short
    key = key_step(module, install, errors)
    prepared = module_view(module, install_result(install)) if install else None

    for warning in warnings:
        module.warn(warning)
    if errors:
        # before the converge call: nothing of the mesh changed on this host yet
        module.fail_json(msg="; ".join(errors), public_key=key["public_key"])

    discovered, handshakes, current, read = {}, {}, None, True
    try:
        current, discovered, handshakes = report.wireguard_reading(p["interface"])
    except Exception as e:  # reading is best effort: a broken interface must not block keys
        module.warn("could not read WireGuard interface %s: %s" % (p["interface"], e))
        read = False
    # The interface still runs another key than the file: rotated now, or a rotation cut short
    # before its converge. The role converges such a host before its peers either way.
    live_key = report.switching_from(current, key["public_key"])
    rotating = live_key is not None
    previous = live_key if rotating else key.get("previous_public_key")

    extra = {}
    if prepared is not None:
        extra = dict(diff_of(prepared), prepared=prepared)
    if key.get("rotated") or rotating:
        # public keys only: which key goes, and that a new one comes (check mode: a stand-in)
        before, after = (
            extra.get("diff", {}).get("before", {}),
            extra.get("diff", {}).get("after", {}),
        )
        before = dict(before, public_key=previous)
        after = dict(
            after,
            public_key="(new key, made in the run)" if module.check_mode else key["public_key"],
        )
        extra["diff"] = {"before": before, "after": after}
    module.exit_json(
        changed=key["changed"] or bool(prepared and prepared["changes"]),
        msg=key["msg"],
        public_key=key["public_key"],
        pending=bool(key.get("pending")),
        rotated=key.get("rotated"),
        rotating=rotating or bool(key.get("rotated")),
        previous_public_key=previous,
        internal_ip=ips["internal_ip"],
        external_ip=ips["external_ip"],
        candidates=ips["candidates"],
        mtu=mtu,
        discovered_endpoints=discovered,
        handshakes=handshakes,
        wireguard_read=read,
        probes=report.probe_peers(current),
        **extra,
    )


def main():
    run_module()


if __name__ == "__main__":
    main()
