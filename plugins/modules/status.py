#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: status
short_description: Report a host's place in the mesh and the health of its WireGuard tunnels
version_added: 0.1.0
author: kilo.mesh developers (@kilo-mesh)
description:
  - Reads the host's WireGuard interface (kernel or userspace) and changes nothing - whether the host leads
    its segment (a leader's interface is up and carries the peers; a member's is down), its location (from
    the inventory) and segment (the engine's, from the inventory and the registry), and for each WireGuard peer the endpoint, allowed IPs, seconds since the
    latest handshake and bytes received and sent.
  - A tunnel is B(stale) when its latest handshake is older than O(stale_after) seconds or never happened.
    WireGuard handshakes again every 2 minutes while traffic flows, so an idle tunnel without persistent
    keepalive (C(kilo_persistent_keepalive)) does not handshake and looks stale although it would work.
  - With O(textfile), also writes a node_exporter textfile collector file (Prometheus text format, replaced
    atomically) with Kilo's metric names where they apply (C(kilo_leader), C(kilo_nodes), C(kilo_peers)) and
    per peer C(kilo_peer_handshake_age_seconds), C(kilo_peer_stale), C(kilo_peer_receive_bytes_total) and
    C(kilo_peer_transmit_bytes_total), labelled with the interface and the peer's public key.
  - In a mesh with locations behind NAT, each peer is also named as the plan the host last applied names it
    (the boot restore's stored plan, or the agent's plan file), with the locations a relay's entry carries
    (RV(peers[].relayed)) and whether it is a probe for a direct path (RV(peers[].probe), never stale). The
    textfile then also has C(kilo_path) (1 per far segment, labelled with C(segment), C(path) and C(via)) on a
    leader behind NAT, and C(kilo_relay_forwarded_bytes_total) on a relay (what its forwarding rule counted).
    The summary adds a PATHS table, for each pair of segments with an end behind NAT, whether it is direct,
    relayed or probing, through which relay, and the latest handshake of the entry that carries it.
  - With O(summary), runs on the controller only (use C(run_once)) - reads the registered results of every
    host of the play (O(status_var)) and returns a mesh-wide table, peers named by host (or outside peer) name.
  - Only public keys are returned.
options:
  interface:
    description:
      - Name of the WireGuard interface.
      - Defaults to the inventory variable C(kilo_interface), then to the default below.
    type: str
    default: kilo0
  stale_after:
    description: Seconds after the latest handshake from which a tunnel counts as stale.
    type: int
    default: 180
  textfile:
    description:
      - Path on the host of a node_exporter textfile (for example
        C(/var/lib/prometheus/node-exporter/kilo.prom)); its directory must exist.
      - Not written in check mode. Writing it does not count as a change.
    type: path
  mesh_nodes:
    description:
      - Number of nodes in the mesh, for the C(kilo_nodes) metric. Filled by the action from the hosts of
        the mesh group (C(kilo_group)); left out of the textfile when unknown.
    type: int
  mesh_peers:
    description:
      - Number of outside peers in the mesh, for the C(kilo_peers) metric. Filled by the action from
        C(kilo_peers).
    type: int
  summary:
    description:
      - Do not read this host - build the mesh-wide table from the results every play host registered
        as O(status_var). Controller only; use with C(run_once).
    type: bool
    default: false
  status_var:
    description: Name of the registered result of this module on each host, read with O(summary).
    type: str
    default: kilo_status
extends_documentation_fragment:
  - kilo.mesh.attributes
attributes:
  check_mode:
    support: full
    details: Reads only; O(textfile) is not written in check mode.
  diff_mode:
    support: none
    details: Reports state, not differences.
notes:
  - Runs as root on the host - log in as root, or let Ansible become root (C(-b), C(ansible_become)). A call
    that does not run as root fails first, with a message naming the host and that fix (not root, it could read
    neither the interface nor the key, and every host would look out of the mesh).
  - Runs on the managed host with the host's Python and pyroute2 (O(summary) on the controller).
seealso:
  - module: kilo.mesh.key
  - module: kilo.mesh.graph
  - name: Kilo's metrics
    description: The Prometheus metrics of the Kilo agent whose names the textfile reuses.
    link: https://kilo.squat.ai/docs/monitoring/
"""

EXAMPLES = r"""
- name: Status of each host, stale after 5 minutes
  kilo.mesh.status:
    stale_after: 300
  register: kilo_status

- name: The mesh as a table
  kilo.mesh.status:
    summary: true
    status_var: kilo_status
  run_once: true
  register: kilo_summary

- name: Print it
  ansible.builtin.debug:
    msg: "{{ kilo_summary.lines }}"
  run_once: true

- name: Metrics for node_exporter's textfile collector
  kilo.mesh.status:
    textfile: /var/lib/prometheus/node-exporter/kilo.prom
"""

RETURN = r"""
in_mesh:
  description: Whether the WireGuard interface exists.
  returned: on a host
  type: bool
  sample: true
leader:
  description: Whether the host leads its segment (its interface is up).
  returned: on a host
  type: bool
  sample: true
location:
  description: The host's location (its child group of the mesh group).
  returned: on a host
  type: str
  sample: aws
segment:
  description:
    - The segment the host belongs to, as the engine names it (C(location:NAME), or C(node:HOST) under granularity full or cross,
      and for a node without an internal IP under any granularity).
    - Null when the host is no node of the mesh (it never reported a key and pins none).
  returned: on a host
  type: str
  sample: location:aws
public_key:
  description: The interface's public key.
  returned: on a host
  type: str
  sample: "Xp2rT0wK2r0dq5rP6r3L8qYz1sV3mN9bQ4cW7eR5tY0="
addresses:
  description:
    - Addresses on the interface (a leader's WireGuard IP; in a dual-stack mesh one of each IP family,
      IPv4 first). The kernel's own IPv6 link-local address is left out.
  returned: on a host
  type: list
  elements: str
  sample: [10.4.0.1/16, fd04::1/64]
peers:
  description: One entry per WireGuard peer.
  returned: on a host
  type: list
  elements: dict
  contains:
    public_key:
      description: The peer's public key.
      type: str
      sample: "Xp2rT0wK2r0dq5rP6r3L8qYz1sV3mN9bQ4cW7eR5tY0="
    endpoint:
      description: Where WireGuard sends to the peer (V(ip:port)), null when unknown.
      type: str
      sample: "203.0.113.20:51820"
    allowed_ips:
      description: The peer's allowed IPs.
      type: list
      elements: str
      sample: ["10.4.0.2/32", "10.2.0.0/24"]
    latest_handshake:
      description: Unix time of the latest handshake, null when none.
      type: int
      sample: 1764288000
    handshake_age:
      description: Seconds since the latest handshake, null when none.
      type: int
      sample: 12
    rx_bytes:
      description: Bytes received from the peer.
      type: int
      sample: 18244
    tx_bytes:
      description: Bytes sent to the peer.
      type: int
      sample: 20512
    stale:
      description: Whether the handshake is older than O(stale_after) or never happened (a probe never is).
      type: bool
      sample: false
    name:
      description: The peer as the applied plan names it (C(location:NAME) or an outside peer's name); absent
        when the host keeps no plan or the plan has no entry of that key.
      type: str
      sample: location:gcp
    relayed:
      description: The segments this peer (a relay) carries for the host; only in meshes with locations behind NAT.
      type: list
      elements: str
      sample: [location:home]
    probe:
      description: Whether the entry is a probe for a direct path (no allowed IPs); only where one exists.
      type: bool
      sample: true
plan_segment:
  description: The host's segment as the plan it last applied says; absent when it keeps no plan.
  returned: on a host that keeps a plan
  type: str
  sample: location:aws
own_paths:
  description:
    - The pairs of segments the plan the host applied sends through a relay - C(a) (its own segment), C(b),
      C(path) (V(relayed), or V(probing) while a probe entry tries the direct path), C(via) (the relay's
      segment) and C(handshake_age) (of the relay's entry, or the probe's while probing; null when none).
  returned: on a leader behind NAT in a mesh with relays
  type: list
  elements: dict
  sample: [{a: location:azure, b: location:gcp, path: relayed, via: location:aws, handshake_age: 4}]
relay_forwarded_bytes:
  description: Bytes the host forwarded as a relay between its WireGuard peers (its relay rule's counter).
  returned: on a relay
  type: int
  sample: 8044
paths:
  description:
    - For each pair of segments with an end behind NAT, C(a), C(b), C(path) (V(direct), V(relayed) or V(probing)),
      C(via) (the relay's segment, null when direct) and C(handshake) (the age of the latest handshake of the
      entry that carries the pair, as the table prints it; V(-) when no end reported).
  returned: with O(summary), in a mesh with locations behind NAT
  type: list
  elements: dict
  sample: [{a: location:azure, b: location:gcp, path: relayed, via: location:aws, handshake: 4s}]
stale:
  description: Public keys of the peers whose tunnel is stale.
  returned: on a host
  type: list
  elements: str
  sample: []
textfile:
  description: The textfile path, when written.
  returned: when O(textfile) is given and not in check mode
  type: str
  sample: "/var/lib/node_exporter/kilo.prom"
metrics:
  description: The Prometheus text written to O(textfile).
  returned: when O(textfile) is given
  type: str
  sample: "kilo_leader 1"
lines:
  description: The mesh-wide table, one line per item (hosts, then tunnels, then a total).
  returned: with O(summary)
  type: list
  elements: str
  sample: ["host   location  leader  peers  stale", "aws-1  aws       yes     2      0"]
leaders:
  description: Hosts that lead their segment.
  returned: with O(summary)
  type: list
  elements: str
  sample: ["aws-1", "gcp-1"]
unreported:
  description: Hosts of the play without a status result (failed or unreachable).
  returned: with O(summary)
  type: list
  elements: str
  sample: []
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    check_interface_name,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.host_checks import require_root
from ansible_collections.kilo.mesh.plugins.module_utils.options import status_spec
from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import update_file
from ansible_collections.kilo.mesh.plugins.module_utils.host.status import (
    host_status,
    label_peers,
    metrics,
    relay_forwarded,
    stored_plan,
)


def plan_files():
    """Where a host keeps the plan it applied: the boot restore's (push) and the agent's plan file."""
    from ansible_collections.kilo.mesh.plugins.module_utils.host.boot import PLAN_PATH
    from ansible_collections.kilo.mesh.plugins.module_utils.plan import AGENT_PLAN_FILE

    return (PLAN_PATH, AGENT_PLAN_FILE)


def interface_addresses(interface):
    """The interface's CIDRs ([] when it is gone): a dual-stack leader's WireGuard IP of each
    family, IPv4 first as the kernel lists them. The kernel's own IPv6 link-local address (a
    userspace tun device gets one) is no address of the mesh, so left out, as netstate leaves it.
    Read as every host reading is (netlink.links.open_reader: the standard library's netlink, else
    pyroute2)."""
    from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink.links import (
        link,
        open_reader,
    )
    from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.base import RT_SCOPE_LINK

    reader, _strict = open_reader()
    try:
        found = link(interface, reader)
        if found is None:
            return []
        return [
            "%s/%s" % (a.get_attr("IFA_ADDRESS"), a["prefixlen"])
            for a in reader.get_addr()
            if a["index"] == found["index"] and a["scope"] != RT_SCOPE_LINK
        ]
    finally:
        reader.close()


def run_module():
    module = AnsibleModule(argument_spec=status_spec(), supports_check_mode=True)
    p = module.params
    if p["summary"]:
        module.fail_json(
            msg="summary: runs on the controller through the kilo.mesh.status action only"
        )
    # the interface and its key are root's to read: not root, every host would look out of the mesh
    require_root(module)
    if p["stale_after"] < 0:
        module.fail_json(msg="stale_after: must be 0 or more seconds")
    try:
        check_interface_name(p["interface"], field="interface")
        from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
        from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.backend import (
            WireGuardBackend,
        )

        state = WireGuardBackend(host_settings({"interface": p["interface"]})).current()
        now = time.time()
        addresses = interface_addresses(p["interface"]) if state.get("present") else []
    except KiloError as e:
        module.fail_json(msg=str(e))
    except ImportError as e:
        module.fail_json(msg="reading WireGuard needs pyroute2 on the host: %s" % e)
    except (OSError, ValueError) as e:
        module.fail_json(msg="reading interface %s: %s: %s" % (p["interface"], type(e).__name__, e))
    result = host_status(state, now, p["stale_after"], addresses)
    plan, settings = stored_plan(plan_files()) if state.get("present") else (None, {})
    label_peers(result, plan)
    forwarded = relay_forwarded(plan, settings, p["interface"])
    if forwarded is not None:
        result["relay_forwarded_bytes"] = forwarded
    if p["textfile"]:
        result["metrics"] = metrics(result, p["mesh_nodes"], p["mesh_peers"], forwarded)
        if not module.check_mode:
            try:
                update_file(p["textfile"], result["metrics"])
            except (IOError, OSError) as e:
                module.fail_json(msg="textfile: %s: %s" % (p["textfile"], e))
            result["textfile"] = p["textfile"]
    # Monitoring output, rewritten every run: reading and the textfile are no change of the host.
    module.exit_json(changed=False, **result)


def main():
    run_module()


if __name__ == "__main__":
    main()
