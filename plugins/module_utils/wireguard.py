"""The WireGuard backend of host converge: one Backend, two implementations.

* userspace: `wireguard-go` supervised by us (systemd transient unit when systemd runs, else
  its own session), configured over its UAPI unix socket;
* kernel: `ip link add ... type wireguard` and generic netlink via pyroute2.

Changes are applied by difference, peer by peer: a peer that is not changed is not named in the
request, so its session, handshake and counters survive. Never `replace_peers`; a running
daemon is never restarted. The private key is read from settings['key_path'] and only its
public key appears in states, changes and renders; preshared keys appear as "(set)".

The interface address is not managed here (netstate owns addresses); link state and MTU are:
like Kilo, a leader's interface is up and a non-leader's is down.
"""
import hashlib
import ipaddress
import os
import shlex
import signal
import socket
import subprocess
import time

from ansible_collections.kilo.mesh.plugins.module_utils import keys as keymod
from ansible_collections.kilo.mesh.plugins.module_utils import discovery
from ansible_collections.kilo.mesh.plugins.module_utils.wireguard_uapi import (
    SOCKET_DIR, UAPIClient, UAPIError, build_set, format_endpoint, hex_to_b64, socket_path)
from ansible_collections.kilo.mesh.plugins.module_utils.wireguard_kernel import KernelWG, KernelWGError

DEFAULTS = {
    "interface": "kilo0",
    "backend": "auto",
    "userspace_command": "wireguard-go",
    "key_path": keymod.DEFAULT_KEY_PATH,
    "mtu": 0,
    "listen_port": 51820,
    # not module options; overridable for tests and unusual hosts
    "run_dir": "/run/kilo",
    "socket_dir": SOCKET_DIR,
    "start_timeout": 15.0,
}
USERSPACE_ENV = "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD"
STAT_FIELDS = ("latest_handshake", "rx_bytes", "tx_bytes")


class WireGuardError(Exception):
    pass


# ---------------------------------------------------------------- helpers (pure)

def psk_digest(b64):
    """One-way tag of a preshared key, so states can be compared without holding the key."""
    if not b64:
        return None
    return hashlib.sha256(b"kilo.mesh preshared key\0" + keymod.validate_key(b64)).hexdigest()[:16]


def split_endpoint(endpoint, where="endpoint"):
    """'host:port' or '[v6]:port' -> (host, port); raises WireGuardError naming `where`."""
    text = str(endpoint).strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise WireGuardError("%s: %r is not [IPv6]:port" % (where, endpoint))
        port = rest[1:]
    else:
        host, sep, port = text.rpartition(":")
        if not sep or not host or ":" in host:
            raise WireGuardError("%s: %r is not host:port" % (where, endpoint))
    try:
        port = int(port)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise WireGuardError("%s: %r has no valid port" % (where, endpoint))
    return host, port


def normalize_cidrs(cidrs, where="allowed_ips"):
    """Canonical network strings, sorted (IPv4 first); host bits are masked like WireGuard does."""
    nets = []
    for c in cidrs or ():
        try:
            net = ipaddress.ip_network(str(c).strip(), strict=False)
        except ValueError:
            raise WireGuardError("%s: %r is not a CIDR" % (where, c))
        if net not in nets:
            nets.append(net)
    nets.sort(key=lambda n: (n.version, n.network_address, n.prefixlen))
    return [str(n) for n in nets]


def _absent_state(interface, backend):
    return {"interface": interface, "backend": backend, "present": False, "up": False,
            "mtu": None, "listen_port": None, "fwmark": None, "public_key": None, "peers": []}


def _peer_state(public_key, endpoint, allowed_ips, keepalive, psk_b64=None, name=None, stats=None):
    p = {"public_key": public_key, "endpoint": endpoint, "allowed_ips": allowed_ips,
         "persistent_keepalive": int(keepalive or 0), "preshared_key": bool(psk_b64),
         "preshared_key_digest": psk_digest(psk_b64)}
    if name is not None:
        p["name"] = name
    if stats:
        p.update(stats)
    return p


# A handshake younger than this proves the live endpoint works (WireGuard rekeys every 2 min).
LIVE_HANDSHAKE = 180


def _roamed(desired, current):
    """The remote sends keepalives (it may sit behind NAT) and WireGuard learned a live
    endpoint for it: keep that one. Resetting it to the configured address would cut the
    tunnel until the next keepalive, and the next run would learn it back (flip-flop)."""
    handshake = current.get("latest_handshake") or 0
    return bool(desired.get("roaming")) and bool(current.get("endpoint")) and time.time() - handshake < LIVE_HANDSHAKE


# ---------------------------------------------------------------- backend

class WireGuardBackend(object):
    name = "wireguard"

    def __init__(self, settings=None):
        s = dict(DEFAULTS)
        for k, v in (settings or {}).items():
            if v is not None:
                s[k] = v
        if s["backend"] not in ("auto", "kernel", "userspace"):
            raise WireGuardError("backend: %r is not one of auto, kernel, userspace" % s["backend"])
        self.settings = s
        self.interface = s["interface"]
        self._private_key = None  # held only in memory between desired() and apply()
        self._resolved = {}
        self._psks = {}

    # ---- live facts

    def _link(self):
        """{'index', 'kind', 'up', 'mtu'} of our interface, or None."""
        from pyroute2 import IPRoute
        with IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=self.interface)
            if not idx:
                return None
            link = list(ipr.get_links(idx[0]))[0]
            kind = None
            info = link.get_attr("IFLA_LINKINFO")
            if info is not None:
                kind = info.get_attr("IFLA_INFO_KIND")
            return {"index": idx[0], "kind": kind, "up": bool(link["flags"] & 1),
                    "mtu": link.get_attr("IFLA_MTU")}

    def _socket(self):
        return socket_path(self.interface, self.settings["socket_dir"])

    def _pidfile(self):
        return os.path.join(self.settings["run_dir"], self.interface + ".pid")

    @staticmethod
    def kernel_available():
        """Kernel WireGuard is there or loadable (modprobe -n only checks, loads nothing)."""
        if os.path.isdir("/sys/module/wireguard"):
            return True
        try:
            return subprocess.call(["modprobe", "-n", "-q", "wireguard"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0
        except OSError:
            return False

    def implementation(self, link="unknown"):
        """'kernel' or 'userspace' for this interface, given its live link (if any)."""
        if link == "unknown":
            link = self._link()
        want = self.settings["backend"]
        if link is not None and link["kind"] == "wireguard":
            if want == "userspace":
                raise WireGuardError("interface %s is a kernel WireGuard interface but backend=userspace"
                                     % self.interface)
            return "kernel"
        if link is not None or os.path.exists(self._socket()):
            if want == "kernel":
                raise WireGuardError("interface %s exists and is not a kernel WireGuard interface "
                                     "(kind %s) but backend=kernel" % (self.interface, (link or {}).get("kind")))
            return "userspace"
        if want != "auto":
            return want
        return "kernel" if self.kernel_available() else "userspace"

    def current(self):
        link = self._link()
        impl = self.implementation(link)
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
            peers.append(_peer_state(
                p["public_key"], p["endpoint"], normalize_cidrs(p["allowed_ips"]),
                p["persistent_keepalive"], p["preshared_key_b64"],
                stats={"latest_handshake": p["last_handshake"], "rx_bytes": p["rx_bytes"],
                       "tx_bytes": p["tx_bytes"]}))
        state["peers"] = sorted(peers, key=lambda p: p["public_key"])
        return state

    def discovered_endpoints(self, current=None):
        """{public_key: 'ip:port'} that WireGuard learned (peers with a handshake), for NAT
        traversal: the leader shares these like Kilo's discovered-endpoints annotation."""
        if current is None:
            current = self.current()
        return dict((p["public_key"], p["endpoint"]) for p in current.get("peers", [])
                    if p.get("endpoint") and p.get("latest_handshake"))

    # ---- desired

    def desired(self, plan):
        """What the plan asks for, in current()'s shape; plan None means state=absent."""
        if plan is None:
            return _absent_state(self.interface, self.implementation())
        host = plan.get("name") or "?"
        where = "host %s" % host
        if os.path.exists(self.settings["key_path"]):
            try:
                priv = keymod.read_private_key(self.settings["key_path"])
            except keymod.KeyError_ as e:
                raise WireGuardError("%s: %s" % (where, e))
            own_pub = keymod.public_key(priv)
        else:
            # Only in check mode on a host whose key step has not run for real: the
            # changes can still be listed; apply() reads the key and fails without it.
            priv, own_pub = None, "(key to be created)"
        self._private_key = priv
        port = plan.get("listen_port", self.settings["listen_port"])
        try:
            port = int(port)
        except (TypeError, ValueError):
            port = -1
        if not 0 < port < 65536:
            raise WireGuardError("%s: listen_port %r is not a port" % (where, plan.get("listen_port")))
        peers, seen = [], {}
        for i, p in enumerate(plan.get("peers") or []):
            pname = p.get("name") or "#%d" % i
            pw = "%s, peer %s" % (where, pname)
            try:
                keymod.validate_key(p.get("public_key") or "", "%s: public_key" % pw)
                if p.get("preshared_key"):
                    keymod.validate_key(p["preshared_key"], "%s: preshared_key" % pw)
            except keymod.KeyError_ as e:
                raise WireGuardError(str(e))
            pub = p["public_key"].strip()
            if pub in seen:
                raise WireGuardError("%s: public_key is also used by peer %s" % (pw, seen[pub]))
            if pub == own_pub:
                raise WireGuardError("%s: public_key is this host's own key" % pw)
            seen[pub] = pname
            allowed = normalize_cidrs(p.get("allowed_ips"), "%s: allowed_ips" % pw)
            endpoint = p.get("endpoint") or None
            if endpoint:
                split_endpoint(endpoint, "%s: endpoint" % pw)
            ka = p.get("persistent_keepalive") or 0
            if not isinstance(ka, int) or not 0 <= ka < 65536:
                raise WireGuardError("%s: persistent_keepalive %r is not 0..65535" % (pw, ka))
            peers.append(_peer_state(pub, endpoint, allowed, ka, p.get("preshared_key"), name=pname))
            if p.get("roaming"):
                peers[-1]["roaming"] = True
            if p.get("preshared_key"):
                # kept in memory for apply(), never in a state
                self._psks[pub] = p["preshared_key"].strip()
        return {"interface": self.interface, "backend": self.implementation(), "present": True,
                "up": bool(plan.get("leader", True)),
                "mtu": discovery.wireguard_mtu(self.settings["mtu"]),
                "listen_port": port, "fwmark": None, "public_key": own_pub,
                "peers": sorted(peers, key=lambda p: p["public_key"])}

    # ---- difference

    def _endpoints_for(self, endpoint, where):
        """Every 'ip:port' a configured endpoint stands for (DNS names resolved once per run)."""
        if endpoint in self._resolved:
            return self._resolved[endpoint]
        host, port = split_endpoint(endpoint, where)
        try:
            out = [format_endpoint(str(ipaddress.ip_address(host)), port)]
        except ValueError:
            try:
                infos = socket.getaddrinfo(host, port, 0, socket.SOCK_DGRAM)
            except (socket.gaierror, UnicodeError) as e:
                raise WireGuardError("%s: cannot resolve %r: %s" % (where, host, e))
            infos.sort(key=lambda i: 0 if i[0] == socket.AF_INET else 1)
            out = []
            for i in infos:
                ep = format_endpoint(i[4][0].split("%")[0], port)
                if ep not in out:
                    out.append(ep)
            if not out:
                raise WireGuardError("%s: %r resolves to no address" % (where, host))
        self._resolved[endpoint] = out
        return out

    def _ops(self, current, desired):
        """[(message, op)]: op is ('create'|'remove'|'device'|'peer'|'link', data)."""
        ops = []
        iface = self.interface
        if not desired["present"]:
            if current["present"]:
                ops.append(("remove WireGuard interface %s (%s)" % (iface, current["backend"]), ("remove", None)))
            return ops
        if not current["present"]:
            ops.append(("create WireGuard interface %s (%s)" % (iface, desired["backend"]), ("create", None)))
            current = _absent_state(iface, desired["backend"])
        if current["public_key"] != desired["public_key"]:
            ops.append(("set private key (public key %s)" % desired["public_key"], ("device", "private_key")))
        if current["listen_port"] != desired["listen_port"]:
            ops.append(("set listen_port %s (was %s)" % (desired["listen_port"], current["listen_port"]),
                        ("device", "listen_port")))
        cur = dict((p["public_key"], p) for p in current["peers"])
        wanted = set(d["public_key"] for d in desired["peers"])
        for p in current["peers"]:
            if p["public_key"] not in wanted:
                ops.append(("remove peer %s" % p["public_key"],
                            ("peer", {"public_key": p["public_key"], "remove": True})))
        for d in desired["peers"]:
            pub = d["public_key"]
            label = "%s (%s)" % (d.get("name"), pub[:8]) if d.get("name") else pub
            where = "peer %s: endpoint" % (d.get("name") or pub)
            c = cur.get(pub)
            if c is None:
                op = {"public_key": pub, "allowed_ips": d["allowed_ips"],
                      "persistent_keepalive": d["persistent_keepalive"]}
                if d["endpoint"]:
                    op["endpoint"] = self._endpoints_for(d["endpoint"], where)[0]
                if d["preshared_key"]:
                    op["preshared_key"] = self._psk(pub)
                msg = "add peer %s allowed_ips %s" % (label, ",".join(d["allowed_ips"]))
                if d["endpoint"]:
                    msg += " endpoint %s" % d["endpoint"]
                ops.append((msg, ("peer", op)))
                continue
            op = {"public_key": pub, "update_only": True}
            what = []
            # No configured endpoint: keep whatever WireGuard learned (roaming / NAT), as Kilo.
            if d["endpoint"]:
                candidates = self._endpoints_for(d["endpoint"], where)
                if c["endpoint"] not in candidates and not _roamed(d, c):
                    op["endpoint"] = candidates[0]
                    what.append("endpoint %s -> %s" % (c["endpoint"], d["endpoint"]))
            if c["persistent_keepalive"] != d["persistent_keepalive"]:
                op["persistent_keepalive"] = d["persistent_keepalive"]
                what.append("persistent_keepalive %s -> %s" % (c["persistent_keepalive"], d["persistent_keepalive"]))
            if c["preshared_key_digest"] != d["preshared_key_digest"]:
                op["preshared_key"] = self._psk(pub) if d["preshared_key"] else ""
                what.append("preshared_key %s" % ("(set)" if d["preshared_key"] else "(removed)"))
            if c["allowed_ips"] != d["allowed_ips"]:
                op["replace_allowed_ips"] = True
                op["allowed_ips"] = d["allowed_ips"]
                added = [x for x in d["allowed_ips"] if x not in c["allowed_ips"]]
                gone = [x for x in c["allowed_ips"] if x not in d["allowed_ips"]]
                what.append("allowed_ips%s%s" % (" +" + ",".join(added) if added else "",
                                                 " -" + ",".join(gone) if gone else ""))
            if what:
                ops.append(("update peer %s: %s" % (label, "; ".join(what)), ("peer", op)))
        if current["mtu"] != desired["mtu"]:
            ops.append(("set mtu %s (was %s)" % (desired["mtu"], current["mtu"]), ("link", "mtu")))
        if current["up"] != desired["up"]:
            ops.append(("set link %s" % ("up" if desired["up"] else "down (not the leader)"),
                        ("link", "up")))
        return ops

    def _psk(self, pub):
        if pub not in self._psks:
            raise WireGuardError("preshared key of peer %s is not known to this backend "
                                 "(desired() was computed elsewhere)" % pub)
        return self._psks[pub]

    def changes(self, current, desired):
        return [msg for msg, dummy in self._ops(current, desired)]

    # ---- apply

    def apply(self, current, desired):
        """Make it so by difference; returns the change messages (empty when converged)."""
        ops = self._ops(current, desired)
        if not ops:
            return []
        msgs = [m for m, dummy in ops]
        if ops[0][1][0] == "remove":
            self.remove()
            return msgs
        if self._private_key is None:
            # Checked before anything is created: no half-made interface without a key.
            raise WireGuardError("no private key at %s: run kilo.mesh.key first" % self.settings["key_path"])
        impl = desired["backend"]
        if ops[0][1][0] == "create":
            self._create(impl)
            ops = self._ops(self.current(), desired)
        device = dict((op[1], True) for dummy, op in ops if op[0] == "device")
        peer_ops = [op[1] for dummy, op in ops if op[0] == "peer"]
        # removals first, so a re-keyed peer never overlaps its allowed IPs with the old one
        peer_ops.sort(key=lambda p: 0 if p.get("remove") else 1)
        if device or peer_ops:
            priv = None
            if device.get("private_key"):
                priv = self._private_key or keymod.read_private_key(self.settings["key_path"])
            listen_port = desired["listen_port"] if device.get("listen_port") else None
            if impl == "userspace":
                try:
                    UAPIClient(self._socket()).set(build_set(priv, listen_port, None, peer_ops))
                except (OSError, socket.error, UAPIError) as e:
                    raise WireGuardError("configuring %s over %s: %s" % (self.interface, self._socket(), e))
            else:
                try:
                    KernelWG(self.interface).set(private_key=priv, listen_port=listen_port, peers=peer_ops)
                except KernelWGError as e:
                    raise WireGuardError(str(e))
            del priv
        link_ops = set(op[1] for dummy, op in ops if op[0] == "link")
        if link_ops:
            from pyroute2 import IPRoute
            with IPRoute() as ipr:
                idx = ipr.link_lookup(ifname=self.interface)
                if not idx:
                    raise WireGuardError("interface %s vanished while configuring it" % self.interface)
                if "mtu" in link_ops:
                    ipr.link("set", index=idx[0], mtu=int(desired["mtu"]))
                if "up" in link_ops:
                    ipr.link("set", index=idx[0], state="up" if desired["up"] else "down")
        return msgs

    # ---- create / remove

    def _create(self, impl):
        if impl == "kernel":
            try:
                KernelWG(self.interface).create()
            except KernelWGError as e:
                raise WireGuardError(str(e))
            return
        self._start_userspace()

    def _systemd(self):
        return os.path.isdir("/run/systemd/system")

    def _unit(self):
        return "kilo-wireguard-%s" % self.interface

    def _start_userspace(self):
        run_dir = self.settings["run_dir"]
        if not os.path.isdir(run_dir):
            os.makedirs(run_dir, 0o700)
        sock = self._socket()
        if os.path.exists(sock):
            # The daemon that owned it is gone (current() could not talk to it).
            os.unlink(sock)
        argv = shlex.split(self.settings["userspace_command"] or "")
        if not argv:
            raise WireGuardError("userspace_command: empty; name a userspace WireGuard such as wireguard-go")
        # wireguard-go daemonizes unless -f; we want the PID of the process that stays.
        if os.path.basename(argv[0]).startswith("wireguard-go"):
            argv.append("-f")
        argv.append(self.interface)
        env = dict(os.environ)
        env[USERSPACE_ENV] = "1"
        proc = None
        if self._systemd():
            unit = self._unit()
            subprocess.call(["systemctl", "reset-failed", unit], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
            rc = subprocess.call(["systemd-run", "--unit", unit, "--description",
                                  "kilo.mesh WireGuard userspace daemon for %s" % self.interface,
                                  "--property", "Restart=on-failure", "--setenv", USERSPACE_ENV + "=1",
                                  "--"] + argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if rc != 0:
                raise WireGuardError("systemd-run of %s failed (rc %d)" % (unit, rc))
            pid = subprocess.check_output(["systemctl", "show", "-p", "MainPID", "--value", unit]).strip()
            pid = int(pid or 0)
        else:
            log = open(os.path.join(run_dir, self.interface + ".log"), "wb")
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                        env=env, close_fds=True, start_new_session=True)
            except OSError as e:
                raise WireGuardError("cannot start %s: %s" % (argv[0], e))
            finally:
                log.close()
            pid = proc.pid
        with open(self._pidfile(), "w") as f:
            f.write("%d\n%s\n" % (pid, self._unit() if self._systemd() else ""))
        deadline = time.time() + float(self.settings["start_timeout"])
        client = UAPIClient(sock, timeout=2.0)
        while time.time() < deadline:
            if os.path.exists(sock) and client.alive():
                return
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.05)
        raise WireGuardError("%s did not open %s%s" % (
            " ".join(argv), sock, self._log_tail()))

    def _log_tail(self):
        path = os.path.join(self.settings["run_dir"], self.interface + ".log")
        try:
            with open(path, "rb") as f:
                tail = f.read()[-400:].decode("utf-8", "replace").strip()
        except (IOError, OSError):
            return ""
        return ": " + tail if tail else ""

    def _our_pid(self):
        """PID recorded at start, if that process still runs our daemon for this interface."""
        try:
            with open(self._pidfile()) as f:
                pid = int(f.readline().strip() or 0)
        except (IOError, OSError, ValueError):
            return None
        if pid <= 1:
            return None
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                args = f.read().split(b"\0")
        except (IOError, OSError):
            return None
        # Guard against a recycled PID: it must still be our userspace daemon (the configured
        # command) serving our interface, not any process that merely names the interface.
        command = os.path.basename(shlex.split(self.settings.get("userspace_command") or "wireguard-go")[0])
        if self.interface.encode() not in args or os.path.basename(args[0].decode(errors="replace")) != command:
            return None
        return pid

    def remove(self):
        """Remove the interface; stop our daemon by its recorded PID. Returns messages."""
        msgs = []
        link = self._link()
        impl = self.implementation(link)
        if impl == "userspace":
            if self._systemd() and os.path.exists(self._pidfile()):
                if subprocess.call(["systemctl", "stop", self._unit()], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL) == 0:
                    msgs.append("stopped unit %s" % self._unit())
            pid = self._our_pid()
            if pid:
                os.kill(pid, signal.SIGTERM)
                deadline = time.time() + 5
                while time.time() < deadline and self._alive(pid):
                    time.sleep(0.05)
                if self._alive(pid):
                    os.kill(pid, signal.SIGKILL)
                msgs.append("stopped %s daemon (pid %d)" % (self.settings["userspace_command"], pid))
            for path in (self._pidfile(), os.path.join(self.settings["run_dir"], self.interface + ".log")):
                if os.path.exists(path):
                    os.unlink(path)
            sock = self._socket()
            if os.path.exists(sock) and not UAPIClient(sock, timeout=1.0).alive():
                os.unlink(sock)
            link = self._link()
        if link is not None:
            # kernel interface, or a tun left by a daemon we did not start: deleting the link
            # makes wireguard-go exit by itself.
            from pyroute2 import IPRoute
            with IPRoute() as ipr:
                ipr.link("del", index=link["index"])
            msgs.append("deleted interface %s" % self.interface)
        return msgs

    @staticmethod
    def _alive(pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            return state != "Z"
        except (IOError, OSError, IndexError):
            return False

    # ---- render

    def render(self, state):
        """JSON-able view for diffs: no keys but public ones, no live counters."""
        if state is None:
            return None
        # fwmark is reported by current() but not managed: left out so diffs show no noise
        out = dict((k, v) for k, v in state.items() if k != "fwmark")
        peers = []
        for p in state.get("peers", []):
            q = dict((k, v) for k, v in p.items() if k not in STAT_FIELDS and k != "preshared_key_digest")
            q["preshared_key"] = "(set)" if p.get("preshared_key") else None
            peers.append(q)
        out["peers"] = peers
        return out

    def owns(self, state):
        """Whether the interface of ours exists (state=absent then has something to remove)."""
        return bool(state and state.get("present"))

    def render_pair(self, current, desired):
        """(before, after) for a diff that shows only what apply() would change.

        The plan names peers and may leave an endpoint to WireGuard (none configured, or a
        roaming peer with a fresh handshake); carry those over so they are not shown as
        differences that apply() would never make.
        """
        before, after = self.render(current), self.render(desired)
        if not before or not after or not before.get("present") or not after.get("present"):
            return before, after
        live = dict((p["public_key"], p) for p in (current or {}).get("peers", []))
        names = {}
        for p in after["peers"]:
            c = live.get(p["public_key"])
            names[p["public_key"]] = p.pop("name", None)
            roaming = p.pop("roaming", False)
            if c is not None and c.get("endpoint") and (not p.get("endpoint") or _roamed(dict(p, roaming=roaming), c)):
                p["endpoint"] = c["endpoint"]
        for side in (before, after):
            for p in side["peers"]:
                if names.get(p["public_key"]):
                    p["name"] = names[p["public_key"]]
        return before, after
