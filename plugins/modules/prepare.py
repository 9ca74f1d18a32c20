#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: prepare
short_description: Prepare a host for kilo.mesh - probe packages, set forwarding sysctls, open the WireGuard port
version_added: 0.1.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - Probes the host in one call - package manager (apt, dnf or pacman), the packages kilo.mesh needs
    that are not installed, whether the WireGuard kernel module loads, and the active firewall.
  - Sets the forwarding sysctls now (through C(/proc/sys)) and at boot (the file
    C(/etc/sysctl.d/90-kilo-mesh.conf), one C(key = value) line each).
  - Opens the WireGuard UDP port in an active firewalld, ufw or nftables C(inet filter) input chain.
    The nftables rule carries the comment C(kilo.mesh); a rule of ours for another (old) port is deleted.
  - Installs nothing itself - it returns the missing packages in RV(missing), for M(ansible.builtin.package);
    the role C(kilo.mesh.wireguard) does both.
  - Options not given in the task are read from the host's inventory variables.
options:
  port:
    description:
      - WireGuard UDP port, used for endpoints made from discovered addresses.
      - A host whose endpoint is forced (C(kilo_force_endpoint)) listens on that endpoint's port.
      - This is the port opened in the firewall. When the task does not give it, the action takes the port of the
        host's C(kilo_force_endpoint) when it has one, else C(kilo_port), else the default below.
    type: int
    default: 51820
  state:
    description:
      - V(present) probes and prepares the host as described above.
      - V(absent) removes what this module wrote that is ours - the boot file C(/etc/sysctl.d/90-kilo-mesh.conf)
        and every rule carrying the comment C(kilo.mesh) in the nftables C(inet filter) input chain (the chain and
        its other rules stay). It probes nothing and changes no other option's state.
      - Left as they are with V(absent) - the sysctls' runtime values (forwarding may be what other software on the
        host needs, a kubelet or a container runtime; without the boot file the next boot takes the system's own),
        a port opened in firewalld or ufw (neither marks who opened it) and the installed packages.
      - A task argument only; C(kilo_state) does not set it (C(playbooks/uninstall.yml) does).
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - kilo.mesh.options.prepare
  - kilo.mesh.attributes
attributes:
  check_mode:
    support: full
    details: Probes and reports what would change; writes no sysctl, file or firewall rule.
  diff_mode:
    support: full
    details: Shows the sysctls, the boot file and the port state before and after (with O(state=absent), the boot
      file and the ports of our nftables rules).
notes:
  - Runs as root on the host - log in as root, or let Ansible become root (C(-b), C(ansible_become)). A call
    that does not run as root fails first, before anything changes, with a message naming the host and that fix.
  - A sysctl this kernel does not have (IPv6 disabled, say) is written to the boot file only and
    listed in RV(unknown_sysctls) with a warning.
seealso:
  - module: kilo.mesh.key
  - module: kilo.mesh.join
"""

EXAMPLES = r"""
- name: Probe the host, enable forwarding and open the WireGuard port
  kilo.mesh.prepare:
  register: wireguard_probe

- name: Install what is missing
  ansible.builtin.package:
    name: "{{ wireguard_probe.missing }}"
    state: present
    use: "{{ wireguard_probe.pkg_mgr }}"
    install_recommends: "{{ wireguard_probe.package_args.install_recommends | default(omit) }}"
  when: wireguard_probe.missing | length > 0

- name: Remove the boot file of the sysctls and the nftables rule of ours (playbooks/uninstall.yml)
  kilo.mesh.prepare:
    state: absent

- name: Only forwarding, no packages, no firewall
  kilo.mesh.prepare:
    install_packages: false
    open_port: false
    sysctls:
      net.ipv4.ip_forward: 1
"""

RETURN = r"""
pkg_mgr:
  description: The package manager found (V(apt), V(dnf) or V(pacman)), null when none.
  returned: when O(state=present)
  type: str
  sample: apt
kernel_module:
  description: Whether the WireGuard kernel module is loaded or loadable.
  returned: when O(state=present)
  type: bool
  sample: true
firewall:
  description: The active firewall (V(firewalld), V(ufw) or V(nftables)), null when none.
  returned: when O(state=present)
  type: str
  sample: nftables
port:
  description: The UDP port opened (or that would be).
  returned: when O(state=present)
  type: int
  sample: 51820
missing:
  description: Packages to install; empty when O(install_packages) is false.
  returned: when O(state=present)
  type: list
  elements: str
  sample: ["wireguard-tools", "python3-pyroute2"]
package_args:
  description: Further arguments for the package task (V(install_recommends=false) with apt), to pass on as they are.
  returned: when O(state=present)
  type: dict
  sample: {"install_recommends": false}
unknown_sysctls:
  description: Sysctls this kernel does not have; written to the boot file only.
  returned: when O(state=present)
  type: list
  elements: str
  sample: []
changes:
  description: What changed (or would change in check mode).
  returned: always
  type: list
  elements: str
  sample: ["write /etc/sysctl.d/90-kilo-mesh.conf", "sysctl net.ipv4.ip_forward = 1", "nftables: open port 51820/udp"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kilo.mesh.plugins.module_utils.options import STATE_SPEC, argument_spec
from ansible_collections.kilo.mesh.plugins.module_utils.host.host_checks import require_root
from ansible_collections.kilo.mesh.plugins.module_utils.host.prepare import prepare_module_host


def main():
    module = AnsibleModule(
        argument_spec=dict(
            argument_spec("prepare"), port=argument_spec("mesh")["port"], state=STATE_SPEC
        ),
        supports_check_mode=True,
    )
    require_root(module)  # first, before the host changes (the action names the host)
    result = prepare_module_host(module)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
