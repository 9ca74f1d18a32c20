# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The WireGuard backend of host converge: one Backend, two implementations.

* userspace: a daemon such as `wireguard-go` (supervised by ``wireguard.daemon``), configured
  over its UAPI unix socket (``wireguard.uapi``);
* kernel: `ip link add ... type wireguard` and generic netlink via pyroute2 (``wireguard.kernel``).

This module chooses the implementation, configures the device and renders diffs. Changes are
applied by difference, peer by peer: a peer that is not changed is not named in the request,
so its session, handshake and counters survive. Never `replace_peers`; a running daemon is
never restarted. The private key is read from settings['key_path'] when apply() needs it and
is represented in states by its public key; preshared keys come in the constructor and are
represented by a digest (shown as "(set)").

The interface address is not managed here (netstate owns addresses); link state and MTU are:
like Kilo, a leader's interface is up and a non-leader's is down.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import ipaddress
import os
import socket
import time

from ansible_collections.kilo.mesh.plugins.module_utils.host import discovery
from ansible_collections.kilo.mesh.plugins.module_utils.host import keys as keymod
from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink import links as netlink_links
from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    format_endpoint,
    host_subject,
    kernel_module_available,
    parse_key,
)
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import split_endpoint
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import Backend
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.daemon import (
    RUN_DIR,
    START_TIMEOUT,
    Daemon,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.kernel import KernelWG
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.uapi import (
    SOCKET_DIR,
    UAPIClient,
    UAPIError,
    build_set,
    hex_to_b64,
    socket_path,
)

# RUN_DIR, START_TIMEOUT (wireguard.daemon) and SOCKET_DIR (wireguard.uapi) are imported as
# attributes of this module and read at call time, so a test moves them here (backendtools'
# ``patch``) without touching the modules that define them.

STAT_FIELDS = ("latest_handshake", "rx_bytes", "tx_bytes")
KEY_TO_BE_CREATED = "(key to be created)"
# A handshake younger than this proves the live endpoint works (WireGuard rekeys every 2 min).
LIVE_HANDSHAKE = 180


class WireGuardError(KiloError):
    """The WireGuard interface cannot be read or brought to the plan."""


# ---------------------------------------------------------------- helpers (pure)


def psk_digest(b64):
    """One-way tag of a (canonical base64) preshared key: states compare it, never the key."""
    if not b64:
        return None
    return hashlib.sha256(b"kilo.mesh preshared key\0" + base64.b64decode(b64)).hexdigest()[:16]


def sort_cidrs(cidrs):
    """Canonical network strings, deduplicated and sorted (IPv4 first), host bits masked."""
    nets = []
    for c in cidrs or ():
        net = ipaddress.ip_network(str(c).strip(), strict=False)
        if net not in nets:
            nets.append(net)
    nets.sort(key=lambda n: (n.version, n.network_address, n.prefixlen))
    return [str(n) for n in nets]


def resolve_endpoint(endpoint):
    """Every 'ip:port' a (checked) endpoint stands for, IPv4 first; WireGuardError when none."""
    host, port = split_endpoint(endpoint)
    try:
        return [format_endpoint(ipaddress.ip_address(host), port)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, 0, socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError) as e:
        raise WireGuardError("cannot resolve %r: %s" % (host, e))
    infos.sort(key=lambda i: 0 if i[0] == socket.AF_INET else 1)
    out = []
    for info in infos:
        ep = format_endpoint(info[4][0].split("%")[0], port)
        if ep not in out:
            out.append(ep)
    if not out:
        raise WireGuardError("%r resolves to no address" % (host,))
    return out


def _absent_state(interface, backend):
    return {
        "interface": interface,
        "backend": backend,
        "present": False,
        "up": False,
        "mtu": None,
        "listen_port": None,
        "fwmark": None,
        "public_key": None,
        "peers": [],
    }


def _peer_state(public_key, endpoint, allowed_ips, persistent_keepalive, psk_b64=None):
    """A peer as compared: ``persistent_keepalive`` an int as both readings and the checked plan
    (``plan.check_plan``) give it."""
    return {
        "public_key": public_key,
        "endpoint": endpoint,
        "allowed_ips": allowed_ips,
        "persistent_keepalive": persistent_keepalive,
        "preshared_key": bool(psk_b64),
        "preshared_key_digest": psk_digest(psk_b64),
    }


def _roamed(desired, current):
    """The remote sends keepalives (it may sit behind NAT) and WireGuard learned a live
    endpoint for it: keep that one. Resetting it to the configured address would cut the
    tunnel until the next keepalive, and the next run would learn it back (flip-flop)."""
    handshake = current.get("latest_handshake") or 0
    return (
        bool(desired.get("roaming"))
        and bool(current.get("endpoint"))
        and time.time() - handshake < LIVE_HANDSHAKE
    )


def _keeps_live_endpoint(desired, current):
    """Whether apply() leaves the endpoint WireGuard holds for this peer as it is."""
    if not current.get("endpoint"):
        return False
    return (
        not desired.get("endpoint")
        or current["endpoint"] in desired.get("resolved", ())
        or _roamed(desired, current)
    )


def render(state):
    """JSON-able view for diffs: no keys but public ones, no live counters, nothing unmanaged."""
    if state is None:
        return None
    # fwmark is reported by current() but not managed: left out so diffs show no noise
    out = dict((k, v) for k, v in state.items() if k != "fwmark")
    peers = []
    for p in state.get("peers", []):
        q = dict(
            (k, v)
            for k, v in p.items()
            if k not in STAT_FIELDS and k not in ("preshared_key_digest", "resolved", "roaming")
        )
        q["preshared_key"] = "(set)" if p.get("preshared_key") else None
        peers.append(q)
    out["peers"] = peers
    return out


def _freed(current, removed):
    """{allowed IP: the current peer holding it} of the current peers whose keys are in ``removed``."""
    return dict(
        (ip, p) for p in current["peers"] if p["public_key"] in removed for ip in p["allowed_ips"]
    )


def _learned_endpoints(current, wanted):
    """{allowed IP: endpoint} of the peers to be removed that WireGuard holds an endpoint for. A
    peer re-keyed in place (a connecting machine that rotated its own key: its new key takes the
    old one's allowed IPs) has no configured endpoint when it sits behind NAT; its new entry gets
    the one learned for the old key, so this host can start the handshake under the new key at
    once (``_nudge``) instead of waiting for the machine's retry (5 s, past WireGuard's queue)."""
    removed = set(p["public_key"] for p in current["peers"]) - wanted
    return dict(
        (ip, p["endpoint"]) for ip, p in _freed(current, removed).items() if p.get("endpoint")
    )


def rekeyed(current, peer_ops):
    """The peer ops adding a peer in place of one they remove (allowed IPs in common): a node
    that changed its key, as a key rotation does."""
    freed = _freed(current, set(op["public_key"] for op in peer_ops if op.get("remove")))
    return [
        op
        for op in peer_ops
        if not op.get("remove")
        and not op.get("update_only")
        and freed.keys() & set(op.get("allowed_ips") or ())
    ]


# ---------------------------------------------------------------- backend


class WireGuardBackend(Backend):
    """The WireGuard interface of a host; the state shape is ``_absent_state``'s.

    ``preshared_keys``: {peer public key: preshared key}, base64; kept for apply(), never put
    in a state (states carry ``preshared_key_digest``).
    """

    name = "wireguard"

    def __init__(self, settings, preshared_keys=None):
        super(WireGuardBackend, self).__init__(settings, preshared_keys)
        self.preshared_keys = {}
        for pub, psk in (preshared_keys or {}).items():
            field = "preshared_keys[%s]" % (pub,)
            psk = parse_key(psk, None, field, required=False)
            if psk:
                self.preshared_keys[parse_key(pub, None, field)] = psk

    # ---- live facts

    @property
    def subject(self):
        return "interface %s" % self.interface

    def _link(self):
        """{'index', 'kind', 'up', 'mtu'} of our interface, or None (stdlib netlink: a re-run
        of the userspace backend never imports pyroute2 here)."""
        return netlink_links.link(self.interface)

    def _socket(self):
        return socket_path(self.interface, SOCKET_DIR)

    def _daemon(self):
        after_start = None
        if self.settings.get("boot_restore"):
            # a daemon systemd restarted comes back empty: the stored plan fills it again
            from ansible_collections.kilo.mesh.plugins.module_utils.host import boot

            after_start = boot.after_restart_command(boot.APP_PATH)
        return Daemon(
            self.interface,
            self.settings["userspace_command"],
            self._socket(),
            run_dir=RUN_DIR,
            start_timeout=START_TIMEOUT,
            after_start=after_start,
        )

    def implementation(self, link, strict=True):
        """'kernel' or 'userspace' for this interface, given its live link (or None).

        A live interface decides; when it contradicts the ``backend`` setting that is an error,
        unless ``strict`` is false (removal takes away whatever we find).
        """
        want = self.settings["backend"]
        if link is not None and link["kind"] == "wireguard":
            if want == "userspace" and strict:
                raise WireGuardError(
                    "a kernel WireGuard interface, but the backend setting is userspace",
                    self.subject,
                    "backend",
                )
            return "kernel"
        if link is not None or os.path.exists(self._socket()):
            if want == "kernel" and strict:
                raise WireGuardError(
                    "exists and is not a kernel WireGuard interface (kind %s), but the backend"
                    " setting is kernel" % (link or {}).get("kind"),
                    self.subject,
                    "backend",
                )
            return "userspace"
        if want != "auto":
            return want
        return "kernel" if kernel_module_available("wireguard") else "userspace"

    def current(self, plan=None):
        link = self._link()
        impl = self.implementation(link, strict=plan is not None)
        state = _absent_state(self.interface, impl)
        if impl == "userspace":
            if not os.path.exists(self._socket()):
                return state
            try:
                dev = UAPIClient(self._socket()).get()
            except (OSError, socket.error, UAPIError):
                return state  # stale socket of a dead daemon: treated as absent
            priv_hex = dev.pop("private_key_hex", None)
            priv = hex_to_b64(priv_hex) if priv_hex else None
            for p in dev["peers"]:
                hx = p.pop("preshared_key_hex", None)
                p["preshared_key_b64"] = hex_to_b64(hx) if hx else None
        else:
            if link is None:
                return state
            dev = KernelWG(self.interface).get()
            priv = dev.pop("private_key_b64", None)
        state["present"] = True
        if link is not None:
            state["up"] = link["up"]
            state["mtu"] = link["mtu"]
        state["listen_port"] = dev["listen_port"]
        state["fwmark"] = dev["fwmark"]
        state["public_key"] = keymod.public_key(priv) if priv else None
        del priv
        peers = []
        for p in dev["peers"]:
            peer = _peer_state(
                p["public_key"],
                p["endpoint"],
                sort_cidrs(p["allowed_ips"]),
                p["persistent_keepalive"],
                p["preshared_key_b64"],
            )
            peer.update(
                latest_handshake=p["last_handshake"], rx_bytes=p["rx_bytes"], tx_bytes=p["tx_bytes"]
            )
            peers.append(peer)
        state["peers"] = sorted(peers, key=lambda p: p["public_key"])
        return state

    def discovered_endpoints(self, current=None):
        """{public_key: 'ip:port'} that WireGuard learned (peers with a handshake), for NAT
        traversal: the leader shares these like Kilo's discovered-endpoints annotation."""
        if current is None:
            current = self.current()
        return dict(
            (p["public_key"], p["endpoint"])
            for p in current.get("peers", [])
            if p.get("endpoint") and p.get("latest_handshake")
        )

    # ---- desired

    def desired(self, plan, current):
        """What the checked plan asks for, in current()'s shape (peers also carry ``name``,
        ``roaming`` and ``resolved``, the addresses of their endpoint)."""
        subject = host_subject(plan["name"])
        if self.settings.get("pending_public_key"):
            # check mode: the key the key step would make or rotate (apply() never sees this)
            own_pub = self.settings["pending_public_key"]
        elif os.path.exists(self.settings["key_path"]):
            own_pub = keymod.public_key(keymod.read_private_key(self.settings["key_path"]))
        else:
            # Only in check mode on a host whose key step has not run for real: the
            # changes can still be listed; apply() reads the key and fails without it.
            own_pub = KEY_TO_BE_CREATED
        peers, seen = [], {}
        for i, p in enumerate(plan["peers"]):
            field = "plan.peers[%d]" % i
            pub = p["public_key"]
            if pub in seen:
                raise WireGuardError(
                    "peer %s: public_key is also used by peer %s" % (p["name"], seen[pub]),
                    subject,
                    field + ".public_key",
                )
            if pub == own_pub:
                raise WireGuardError(
                    "peer %s: public_key is this host's own key" % p["name"],
                    subject,
                    field + ".public_key",
                )
            seen[pub] = p["name"]
            peer = _peer_state(
                pub,
                p["endpoint"],
                sort_cidrs(p["allowed_ips"]),
                p["persistent_keepalive"],
                self.preshared_keys.get(pub),
            )
            peer.update(name=p["name"], roaming=p["roaming"], resolved=[])
            if p["endpoint"]:
                try:
                    peer["resolved"] = resolve_endpoint(p["endpoint"])
                except WireGuardError as e:
                    if not getattr(self, "lenient_endpoints", False):
                        raise WireGuardError(
                            "peer %s: %s" % (p["name"], e.message), subject, field + ".endpoint"
                        )
                    # the boot restore: DNS may not be up yet; the peer waits for the other end
                    # (or the next run) rather than the whole host staying out of the mesh
                    peer["endpoint"] = None
                    self.warnings = list(getattr(self, "warnings", ())) + [
                        "peer %s: %s; configured without an endpoint" % (p["name"], e.message)
                    ]
            peers.append(peer)
        return {
            "interface": self.interface,
            "backend": current["backend"],
            "present": True,
            "up": plan["leader"],
            "mtu": discovery.wireguard_mtu(self.settings["mtu"]),
            "listen_port": plan["listen_port"],
            "fwmark": None,
            "public_key": own_pub,
            "peers": sorted(peers, key=lambda p: p["public_key"]),
        }

    # ---- difference

    def _ops(self, current, desired):
        """[(message, op)]: op is ('create'|'device'|'peer'|'link', data); peer data may hold a
        preshared key, so ops never leave this backend (changes() returns the messages)."""
        ops = []
        iface = self.interface
        if not current["present"]:
            ops.append(
                (
                    "create WireGuard interface %s (%s)" % (iface, desired["backend"]),
                    ("create", None),
                )
            )
            current = _absent_state(iface, desired["backend"])
        if current["public_key"] != desired["public_key"]:
            ops.append(
                (
                    "set private key (public key %s)" % desired["public_key"],
                    ("device", "private_key"),
                )
            )
        if current["listen_port"] != desired["listen_port"]:
            ops.append(
                (
                    "set listen_port %s (was %s)"
                    % (desired["listen_port"], current["listen_port"]),
                    ("device", "listen_port"),
                )
            )
        cur = dict((p["public_key"], p) for p in current["peers"])
        wanted = set(d["public_key"] for d in desired["peers"])
        learned = _learned_endpoints(current, wanted)
        for p in current["peers"]:
            if p["public_key"] not in wanted:
                ops.append(
                    (
                        "remove peer %s" % p["public_key"],
                        ("peer", {"public_key": p["public_key"], "remove": True}),
                    )
                )
        for d in desired["peers"]:
            pub = d["public_key"]
            label = "%s (%s)" % (d["name"], pub[:8]) if d.get("name") else pub
            c = cur.get(pub)
            if c is None:
                op = {
                    "public_key": pub,
                    "allowed_ips": d["allowed_ips"],
                    "persistent_keepalive": d["persistent_keepalive"],
                }
                if d["endpoint"]:
                    op["endpoint"] = d["resolved"][0]
                else:
                    inherited = next(
                        (learned[ip] for ip in d["allowed_ips"] if ip in learned), None
                    )
                    if inherited:
                        op["endpoint"] = inherited
                if d["preshared_key"]:
                    op["preshared_key"] = self._psk(d)
                msg = "add peer %s allowed_ips %s" % (label, ",".join(d["allowed_ips"]))
                if d["endpoint"]:
                    msg += " endpoint %s" % d["endpoint"]
                elif op.get("endpoint"):
                    msg += " endpoint %s (learned for its previous key)" % op["endpoint"]
                ops.append((msg, ("peer", op)))
                continue
            op = {"public_key": pub, "update_only": True}
            what = []
            # No configured endpoint: keep whatever WireGuard learned (roaming / NAT), as Kilo.
            if d["endpoint"] and not _keeps_live_endpoint(d, c):
                op["endpoint"] = d["resolved"][0]
                what.append("endpoint %s -> %s" % (c["endpoint"], d["endpoint"]))
            if c["persistent_keepalive"] != d["persistent_keepalive"]:
                op["persistent_keepalive"] = d["persistent_keepalive"]
                what.append(
                    "persistent_keepalive %s -> %s"
                    % (c["persistent_keepalive"], d["persistent_keepalive"])
                )
            if c["preshared_key_digest"] != d["preshared_key_digest"]:
                op["preshared_key"] = self._psk(d) if d["preshared_key"] else ""
                what.append("preshared_key %s" % ("(set)" if d["preshared_key"] else "(removed)"))
            if c["allowed_ips"] != d["allowed_ips"]:
                op["replace_allowed_ips"] = True
                op["allowed_ips"] = d["allowed_ips"]
                added = [x for x in d["allowed_ips"] if x not in c["allowed_ips"]]
                gone = [x for x in c["allowed_ips"] if x not in d["allowed_ips"]]
                what.append(
                    "allowed_ips%s%s"
                    % (
                        " +" + ",".join(added) if added else "",
                        " -" + ",".join(gone) if gone else "",
                    )
                )
            if what:
                ops.append(("update peer %s: %s" % (label, "; ".join(what)), ("peer", op)))
        if current["mtu"] != desired["mtu"]:
            ops.append(("set mtu %s (was %s)" % (desired["mtu"], current["mtu"]), ("link", "mtu")))
        if current["up"] != desired["up"]:
            ops.append(
                (
                    "set link %s" % ("up" if desired["up"] else "down (not the leader)"),
                    ("link", "up"),
                )
            )
        return ops

    def _psk(self, desired_peer):
        """The preshared key behind a desired peer's digest (given to this backend's constructor)."""
        psk = self.preshared_keys.get(desired_peer["public_key"])
        if psk_digest(psk) != desired_peer["preshared_key_digest"]:
            raise WireGuardError(
                "preshared key of peer %s is not the one the desired state was computed with"
                % desired_peer["public_key"],
                self.subject,
                "preshared_keys",
            )
        return psk

    def changes(self, current, desired):
        return [msg for msg, dummy in self._ops(current, desired)]

    def tunnel_changes(self, current, desired):
        """The changes that touch the tunnels (key, port, peers), not the link (MTU, up): what a
        takeover in place must not do (``converge(takeover=True)``). None on an interface that is
        not there yet or is down (a non-leader's, whose peers carry nothing; Kilo's agent leaves
        there the peers of a moment it led): there is no traffic to keep."""
        if not current["present"] or not current["up"]:
            return None
        return [msg for msg, op in self._ops(current, desired) if op[0] != "link"]

    # ---- apply

    def _private_key(self, desired):
        """The private key behind desired['public_key'], read from the key file."""
        path = self.settings["key_path"]
        if not os.path.exists(path):
            # Checked before anything is created: no half-made interface without a key.
            raise WireGuardError(
                "no private key at %s: run kilo.mesh.key first" % path, self.subject, "key_path"
            )
        priv = keymod.read_private_key(path)
        if keymod.public_key(priv) != desired["public_key"]:
            raise WireGuardError(
                "the key at %s changed since the comparison" % path, self.subject, "key_path"
            )
        return priv

    def apply(self, current, desired):
        """Bring the interface from ``current`` to ``desired`` by difference."""
        ops = self._ops(current, desired)
        if not ops:
            return
        priv = None
        if any(op == ("device", "private_key") for dummy, op in ops):
            priv = self._private_key(desired)
        impl = desired["backend"]
        if ops[0][1][0] == "create":
            self._create(impl)
            ops = self._ops(self.current(None), desired)
        device = dict((op[1], True) for dummy, op in ops if op[0] == "device")
        peer_ops = [op[1] for dummy, op in ops if op[0] == "peer"]
        # removals first, so a re-keyed peer never overlaps its allowed IPs with the old one
        peer_ops.sort(key=lambda p: 0 if p.get("remove") else 1)
        if device or peer_ops:
            if not device.get("private_key"):
                priv = None
            listen_port = desired["listen_port"] if device.get("listen_port") else None
            self._set(impl, priv, listen_port, peer_ops)
            del priv
            self._nudge(impl, rekeyed(current, peer_ops))
        link_ops = set(op[1] for dummy, op in ops if op[0] == "link")
        if link_ops:
            from pyroute2 import IPRoute

            with IPRoute() as ipr:
                idx = ipr.link_lookup(ifname=self.interface)
                if not idx:
                    raise WireGuardError("vanished while configuring it", self.subject)
                if "mtu" in link_ops:
                    ipr.link("set", index=idx[0], mtu=int(desired["mtu"]))
                if "up" in link_ops:
                    ipr.link("set", index=idx[0], state="up" if desired["up"] else "down")

    def _set(self, impl, priv, listen_port, peer_ops):
        """One configuration request (UAPI set or netlink) for the device and ``peer_ops``."""
        if impl == "userspace":
            try:
                UAPIClient(self._socket()).set(build_set(priv, listen_port, None, peer_ops))
            except (OSError, socket.error) as e:
                raise WireGuardError("configuring over %s: %s" % (self._socket(), e), self.subject)
            except UAPIError as e:
                raise WireGuardError(
                    "configuring over %s: %s" % (self._socket(), e.message), self.subject
                )
        else:
            KernelWG(self.interface).set(private_key=priv, listen_port=listen_port, peers=peer_ops)

    def _nudge(self, impl, added):
        """Start the handshake with re-keyed peers now.

        A re-keyed peer switched to its new key before this host (the role converges rotating
        hosts first); what it sends meanwhile waits in its queue (WireGuard keeps up to 128
        packets per peer) until a handshake under the new key. This host has no session with the
        new key, so its own next packet would start one; with no traffic of its own the remote's
        retry would come only after its 5 s rekey timeout, past what that queue holds. Turning
        persistent keepalive on sends a keepalive at once, in the kernel and in wireguard-go,
        which starts the handshake; a peer added with a keepalive already got one, and one
        without gets it switched on and off again.
        """
        quiet = [op["public_key"] for op in added if not op.get("persistent_keepalive")]
        if not quiet:
            return
        for keepalive in (1, 0):
            self._set(
                impl,
                None,
                None,
                [
                    {"public_key": pub, "update_only": True, "persistent_keepalive": keepalive}
                    for pub in quiet
                ],
            )

    def rearm(self, keepalives):
        """Send a keepalive to each peer now ({public key: its persistent keepalive}), by the toggle
        0 -> n (``_nudge``): a probe whose handshake retries stopped (after 90 s) starts again. The
        keepalive ends as it was, so the interface's configuration does not change."""
        if not keepalives:
            return
        impl = self.implementation(self._link(), strict=False)
        for phase in (0, 1):
            self._set(
                impl,
                None,
                None,
                [
                    {
                        "public_key": pub,
                        "update_only": True,
                        "persistent_keepalive": keepalive if phase else 0,
                    }
                    for pub, keepalive in sorted(keepalives.items())
                ],
            )

    # ---- create / remove

    def _create(self, impl):
        if impl == "kernel":
            KernelWG(self.interface).create()
        else:
            self._daemon().start()

    def owns(self, current):
        """Whether the interface of ours exists, or a userspace daemon of ours left its files
        (its unit, PID file: state=absent then has something to remove)."""
        if not current:
            return False
        return bool(current.get("present")) or (
            current.get("backend") == "userspace" and self._daemon().recorded()
        )

    def remove(self, current):
        """Remove the interface; stop our daemon (recorded PID or unit), nothing else."""
        if current["backend"] == "userspace":
            self._daemon().stop()
        link = self._link()
        if link is not None:
            # kernel interface, or a tun left by a daemon we did not start: deleting the link
            # makes wireguard-go exit by itself.
            from pyroute2 import IPRoute

            with IPRoute() as ipr:
                ipr.link("del", index=link["index"])

    # ---- diff

    def diff(self, current, desired):
        """(before, after) showing only what apply() would change; no private or preshared keys.

        The plan names peers and may leave an endpoint to WireGuard (none configured, a DNS
        name, or a roaming peer with a fresh handshake); the live endpoint is carried over
        then, so the diff shows no difference apply() would never make. Removing (desired
        None) shows the interface absent.
        """
        before = render(current)
        if desired is None:
            return before, render(_absent_state(self.interface, current["backend"]))
        after = render(desired)
        live = dict((p["public_key"], p) for p in current["peers"])
        names = {}
        for want, shown in zip(desired["peers"], after["peers"]):
            names[want["public_key"]] = shown.pop("name", None)
            c = live.get(want["public_key"])
            if c is not None and _keeps_live_endpoint(want, c):
                shown["endpoint"] = c["endpoint"]
        for side in (before, after):
            for p in side["peers"]:
                if names.get(p["public_key"]):
                    p["name"] = names[p["public_key"]]
        return before, after
