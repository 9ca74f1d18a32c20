# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Host network state of a kilo.mesh node: WireGuard interface addresses, routes, ip rules, tunl0.

Runs on the host (Debian's /usr/bin/python3 with pyroute2 0.7.2, and pyroute2 0.9.x). No Ansible.
The plan comes checked and normalised (``plan.check_plan``): nothing here parses it again.

Ownership (only this is ever changed or removed):
- routes carrying routing protocol 107 (any table; the plan uses main and 1107);
- ip rules that look up table 1107;
- global addresses on the WireGuard interface named in settings (the link itself belongs to
  the WireGuard backend);
- tunl0 is brought up when a route or the plan's tunnel_address needs it, never deleted (it is
  the kernel's fallback device);
- on tunl0, only the IPv4 address carrying our label (TUNL_LABEL): like Kilo, the plan's
  tunnel_address (first address of the pod CIDR, /32). Unlike Kilo, other addresses on tunl0
  (e.g. another CNI's) are left alone. IPv6 tunnel addresses are not managed: IPIP carries IPv4
  only, and an IPv6 address has no label to mark it as ours.

The host is read once per current() through one reader (netlink.links.open_reader: the standard
library's NetlinkReader with netlink strict checking where the kernel (4.20+) allows it): the kernel then returns only our
protocol's routes, and foreign routes (another protocol's) only from the tables where the plan
puts a route of ours that is not there yet; an idempotent re-run reads no foreign route at all,
so a host carrying a full BGP table stays cheap, and never imports pyroute2. A first converge
reads those tables decoding only the messages at the plan's keys. Without strict checking,
pyroute2 with one whole dump per family, filtered here. Changes go through pyroute2.

This module composes the parts, one module each, that read through that reader and change
through apply's one pyroute2 IPRoute: netstate.addresses (the interface's addresses),
netstate.routes (ours and the foreign ones in their way), netstate.rules, netstate.tunnel
(tunl0 and our address on it), netstate.ssh (the SSH guard) and netstate.redirects (a relay's
ICMP redirects off); netstate.base holds what they share.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    host_subject,
    kernel_module_available,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import (
    addresses,
    redirects,
    routes,
    rules,
    ssh,
    tunnel,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import Backend
from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink.links import open_reader
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.base import (
    NetStateError,
    by_name,
    iproute_class,
    read_links,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.routes import route_str
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate.rules import rule_str
from ansible_collections.kilo.mesh.plugins.module_utils.plan import PRIVATE, TUNNEL, as_list


class NetStateBackend(Backend):
    """Addresses, routes, rules and tunl0 of one host, converged by difference."""

    name = "netstate"

    def __init__(self, settings, preshared_keys=None):
        super(NetStateBackend, self).__init__(settings)
        # 'fail': a foreign route at one of our destinations is an error;
        # 'replace': take it over (Kilo's behaviour: it always replaces).
        self.route_conflict = settings["route_conflict"]
        self.ssh_guard = settings["ssh_guard"]
        self._ipr_class = None

    # ---------------------------------------------------------------- netlink
    def _ipr(self, **options):
        """pyroute2's IPRoute, for changes (and reading on a kernel without strict checking)."""
        if self._ipr_class is None:
            self._ipr_class = iproute_class()
        return self._ipr_class(**options)

    def _reader(self):
        """(reader, strict) of one reading (netlink.links.open_reader)."""
        return open_reader(self._ipr)

    def _read(self, reader, strict, plan):
        """current() out of ``reader``: each part reads through it."""
        links = read_links(reader)
        wg_index = by_name(links, self.interface)
        host_addrs = addresses.global_addresses(reader)
        plan_routes = (plan or {}).get("routes") or []
        ours, foreign = routes.read(
            reader, strict, links, set((r["dst"], r["table"]) for r in plan_routes)
        )
        device = tunnel.tunnel_device(links, plan)
        tunl, tunnel_address = tunnel.read(reader, links, device)
        # the private interface of each family: in a dual-stack plan the IPv4 and the IPv6
        # internal IP may sit on different links, and a route goes out on its own family's
        private = addresses.holders(host_addrs, links, as_list((plan or {}).get("internal_ip")))
        ipip = tunl is not None
        # devices the plan routes through that must exist already (flannel.1): we never make them
        names = set(link["name"] for link in links.values())
        absent = sorted(
            set(r["device"] for r in plan_routes)
            - names
            - set((PRIVATE, TUNNEL, device, self.interface))
        )
        if not ipip and plan and tunnel.tunnel_needed(plan):
            # side-effect free (modprobe -n), so check mode sees a host without IPIP too
            ipip = kernel_module_available("ipip")
        return {
            "interface": self.interface,
            "interface_present": wg_index is not None,
            "addresses": sorted(str(a) for idx, a in host_addrs if idx == wg_index),
            "routes": routes.sorted_routes(ours),
            "rules": rules.sorted_rules(rules.read(reader)),
            "tunl0": tunl,
            "tunnel_device": device,
            "tunnel_address": tunnel_address,
            # what desired() and changes() need to know of the host beyond what we own: foreign
            # routes at plan destinations not ours yet
            "foreign": sorted(
                foreign, key=lambda r: (r["table"], r["family"], r["dst"], r["proto"])
            ),
            "private_devices": private,
            "absent_devices": absent,
            "ipip": ipip,
            "ssh": ssh.read(reader, plan) if self.ssh_guard and plan else None,
            "redirects": redirects.read(self.interface, plan),
        }

    # ---------------------------------------------------------------- Backend API
    def current(self, plan):
        """Our addresses, routes, rules and tunl0; with a plan also the foreign routes at its
        destinations, the interface holding its internal_ip and whether IPIP is available."""
        reader, strict = self._reader()
        try:
            return self._read(reader, strict, plan)
        finally:
            reader.close()

    def desired(self, plan, current):
        """Resolve the plan against ``current`` (device 'private', tunl0 MTU); reads nothing."""
        subject = host_subject(plan["name"])
        device = current.get("tunnel_device") or TUNNEL
        want_routes = routes.desired(plan, current, device, subject)  # its errors come first
        tunl, tunnel_address = tunnel.desired(plan, current, subject)
        return {
            "interface": self.interface,
            "subject": subject,
            "addresses": as_list(plan["address"]),
            "routes": want_routes,
            "rules": rules.desired(plan),
            "tunl0": tunl,
            "tunnel_device": device,
            "tunnel_address": tunnel_address,
            "redirects": redirects.desired(self.interface, plan),
        }

    def changes(self, current, desired):
        """What apply() would do; KiloError when a route would take over the SSH path, or a
        foreign route holds a destination of the plan and route_conflict is 'fail', so check
        mode fails where the real run would."""
        ssh.check(current, desired)
        taken = routes.taken(current, desired, self.route_conflict)
        return (
            addresses.changes(self.interface, current, desired)
            + tunnel.changes(current, desired)
            + routes.changes(current, desired, taken)
            + rules.changes(current["rules"], desired["rules"])
            + redirects.changes(current.get("redirects") or {}, desired.get("redirects") or {})
        )

    @staticmethod
    def render(state):
        out = {
            "interface": state["interface"],
            "addresses": list(state["addresses"]),
            "routes": sorted(route_str(r) for r in state["routes"]),
            "rules": sorted(rule_str(r) for r in state["rules"]),
        }
        if state.get("tunl0"):
            out["tunl0"] = "%s %s mtu %s" % (
                state.get("tunnel_device") or TUNNEL,
                "up" if state["tunl0"]["up"] else "down",
                state["tunl0"]["mtu"],
            )
        if state.get("tunnel_address"):
            out["tunnel_address"] = state["tunnel_address"]
        if state.get("redirects"):
            out["sysctls"] = dict(state["redirects"])
        return out

    def _empty(self):
        return {
            "interface": self.interface,
            "subject": None,
            "addresses": [],
            "routes": [],
            "rules": [],
            "tunl0": None,
            "tunnel_address": None,
        }

    def diff(self, current, desired):
        """(before, after); removing (desired None) leaves nothing of ours."""
        return self.render(current), self.render(desired if desired is not None else self._empty())

    @staticmethod
    def owns(current):
        """Whether ``current`` holds anything remove() would delete. tunl0 itself and the
        interface are not ours to remove."""
        return bool(
            current
            and (
                current["addresses"]
                or current["routes"]
                or current["rules"]
                or current.get("tunnel_address")
            )
        )

    def remove(self, current):
        """Remove our routes, rules, the addresses on our interface and our tunl0 address."""
        self.apply(dict(current, foreign=[]), self._empty())

    def apply(self, current, desired):
        """Converge by difference; a foreign route in the way fails before anything changes."""
        self.changes(current, desired)
        ipr = self._ipr()
        try:
            wg_index = by_name(read_links(ipr), self.interface)
            needs_wg = desired["addresses"] or any(
                r["device"] == self.interface for r in desired["routes"]
            )
            if wg_index is None and needs_wg:
                raise NetStateError(
                    "interface %s does not exist; the WireGuard backend must "
                    "create it before addresses and routes" % self.interface
                )
            # tunl0 first: a host without IPIP fails before anything else was changed
            tunnel.apply(ipr, current, desired)
            if wg_index is not None:
                addresses.apply(ipr, self.interface, wg_index, desired["addresses"])
            # diff routes against the live state: address or tunl0 changes can make the kernel
            # drop routes, and ``current`` may be older than this call
            links = read_links(ipr)
            reader, strict = self._reader()
            try:
                live, dummy = routes.read(reader, strict, links, set())
            finally:
                reader.close()
            routes.apply(ipr, links, live, desired["routes"])
            rules.apply(ipr, rules.read(ipr), desired["rules"])
            redirects.apply(current.get("redirects") or {}, desired.get("redirects") or {})
        finally:
            ipr.close()
