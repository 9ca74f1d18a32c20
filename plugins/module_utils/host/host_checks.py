# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Checks only the host can answer, made in its first call (kilo.mesh.key), before any converge.

The controller validated every variable already; these look at the host itself: the call not
running as root, a LAN in the way of the WireGuard subnet, the listen port held by another
process, a forced internal IP no interface carries. Each returns messages; the module fails on
errors and warns on warnings.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import os

# The fix for a call that does not run as root, as the failure and the docs say it.
BECOME_HINT = (
    "log in as root, or let Ansible become root: -b on the command line or ansible_become: true"
    " in the inventory (with ansible_become_password when sudo asks for a password)"
)


def not_root():
    """The failure message when this process is not root, else None. The hosts need root: the
    WireGuard interface, routes, rules, firewall and sysctls are the kernel's, the key and the
    stored plan are root's files. Checked first, before anything on the host changes."""
    uid = os.geteuid()
    if uid == 0:
        return None
    try:
        import pwd

        user = pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        user = "uid %d" % uid
    else:
        user = "%s (uid %d)" % (user, uid)
    return (
        "runs as %s, not as root: kilo.mesh changes the host's network (WireGuard, routes, rules,"
        " firewall, sysctls) and keeps its key in a root-only file; %s" % (user, BECOME_HINT)
    )


def require_root(module):
    """Fail ``module`` (an AnsibleModule) at once when its call is not root: the first thing each
    host module does. ``not_root`` in the result tells the action (KiloAction) to name the host."""
    problem = not_root()
    if problem:
        module.fail_json(msg=problem, not_root=True)


def subnet_conflicts(addrs, subnet, interface):
    """Addresses (from discovery.read_host) of other interfaces that overlap the WireGuard subnet."""
    net = ipaddress.ip_network(subnet, strict=False)
    out = []
    for a in addrs:
        if a["ifname"] == interface:
            continue
        iface = ipaddress.ip_interface(a["cidr"])
        if (
            iface.version == net.version
            and iface.network.overlaps(net)
            and not iface.ip.is_loopback
        ):
            out.append("%s on %s" % (a["cidr"], a["ifname"]))
    return out


def _udp_inodes(port, proc="/proc"):
    """Inodes of the UDP sockets bound to ``port`` (any address, IPv4 and IPv6)."""
    inodes = []
    for name in ("udp", "udp6"):
        try:
            with open(os.path.join(proc, "net", name)) as f:
                lines = f.readlines()[1:]
        except IOError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.append(fields[9])
    return inodes


def _holders(inodes, proc="/proc"):
    """'comm (pid N)' of the processes that hold one of the socket ``inodes``."""
    wanted = set("socket:[%s]" % i for i in inodes)
    out = []
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(os.path.join(fd_dir, fd)) in wanted:
                    with open(os.path.join(proc, pid, "comm")) as f:
                        out.append("%s (pid %s)" % (f.read().strip(), pid))
                    break
            except OSError:
                continue
    return out


def port_holders(port, interface_present, proc="/proc"):
    """Who holds UDP ``port`` besides us: [] when it is free or ours.

    With our interface present the port is taken to be ours (a re-run costs no process scan);
    without it, any holder is someone else: a process, or the kernel (another WireGuard
    interface, say).
    """
    inodes = _udp_inodes(port, proc)
    if not inodes or interface_present:
        return []
    return _holders(inodes, proc) or ["the kernel (another WireGuard interface?)"]


def host_problems(host, interface, subnet, port, force_internal_ip):
    """(errors, warnings) for this host; ``host`` is a discovery.read_host() snapshot. ``subnet``
    and ``force_internal_ip`` are one value each, or a dual-stack mesh's lists of two (one of
    each IP family): each of them is looked for on its own."""
    errors, warnings = [], []
    for net in subnet if isinstance(subnet, (list, tuple)) else [subnet]:
        overlap = subnet_conflicts(host["addrs"], net, interface)
        if overlap:
            errors.append(
                "kilo_subnet: %s overlaps a network this host is on (%s); choose another subnet"
                % (net, ", ".join(overlap))
            )
    present = any(link["name"] == interface for link in host["links"].values())
    holders = port_holders(port, present)
    if holders:
        errors.append("kilo_port: UDP port %d is already in use by %s" % (port, ", ".join(holders)))
    forced_ips = (
        force_internal_ip if isinstance(force_internal_ip, (list, tuple)) else [force_internal_ip]
    )
    for forced in forced_ips:
        forced = str(forced or "").strip()
        if not forced or forced == "-":
            continue
        try:
            want = ipaddress.ip_interface(forced).ip
        except ValueError:
            want = None  # the controller names a malformed value; nothing to look for here
        if want is not None and not any(
            ipaddress.ip_interface(a["cidr"]).ip == want for a in host["addrs"]
        ):
            # Kilo accepts it too: the routes via the private interface will not resolve
            warnings.append("kilo_force_internal_ip: no interface of this host has %s" % want)
    return errors, warnings


def _parent(pid, proc="/proc"):
    with open(os.path.join(proc, str(pid), "stat")) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _environ(pid, proc="/proc"):
    with open(os.path.join(proc, str(pid), "environ"), "rb") as f:
        return dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)


def ssh_client_address(environ=None, proc="/proc", depth=8):
    """The address this run's SSH connection comes from (SSH_CONNECTION's first field), or None.

    become (sudo) drops SSH_CONNECTION from the module's environment, so under sudo (SUDO_USER
    set) the ancestors' environments are read too (root may read them); without become an
    ancestor's SSH_CONNECTION would be someone else's session (a local connection, a CI agent)."""
    environ = os.environ if environ is None else environ
    value = environ.get("SSH_CONNECTION")
    pid = os.getpid()
    if "SSH_CONNECTION" in environ or not environ.get("SUDO_USER"):
        depth = 0  # set here (also empty: "none"), or no become in between: ancestors are not ours
    while not value and depth > 0:
        depth -= 1
        try:
            pid = _parent(pid, proc)
            if pid <= 1:
                break
            value = _environ(pid, proc).get(b"SSH_CONNECTION", b"").decode("ascii", "replace")
        except (IOError, OSError, ValueError, IndexError):
            break
    if not value:
        return None
    try:
        ip = ipaddress.ip_address(value.split()[0].split("%")[0])
    except (ValueError, IndexError):
        return None
    return str(getattr(ip, "ipv4_mapped", None) or ip)
