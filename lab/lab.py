#!/usr/bin/env python3
"""Multi-location lab hosts on one machine, built from Linux namespaces.

Each lab host is a network namespace plus private mount, UTS and PID namespaces held by a
keeper process (an init script running as PID 1 of the host's PID namespace), with its own
hostname, sshd on its management address, and private writable /etc, /var/lib, /var/log
(overlayfs over the real directories) and /root, /run, /tmp (fresh tmpfs). /root is empty, as
on a real host: the controller user's shell start-up (root's .bashrc running `pyenv init`, whose
rehash takes a lock shared by every host) must not run for each SSH command of a lab host.

Networks (see lab/README.md for the full address plan):
  * management: bridge ``<prefix>mgmt`` in the root namespace, one isolated port per host;
    the root namespace reaches every host, hosts cannot reach each other over it.
  * fabric: namespace ``<prefix>-fabric`` holds one LAN bridge per location and the
    "internet" bridge that public hosts (and NAT routers) sit on. No default routes anywhere.

With a login user (``--user NAME``), every host also has that non-root user in its private /etc
(passwd, shadow, group, sudoers.d) with its own home under a fresh /home, SSH key login only for
it (root cannot log in), and sudo: without a password on some hosts, with one on the others (the
inventory then says ansible_become and, there, ansible_become_password).

Stdlib only; runs on /usr/bin/python3 (3.11) and the controller venv (3.12).
CLI: ``lab.py up|down|status|exec``; API: ``from lab.lab import Lab``.
"""

import argparse
import fcntl
import ipaddress
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PREFIX = "kl"
LOCATION_NAMES = ["aws", "gcp", "azure", "home", "edge", "office", "colo", "branch"]
MGMT_POOL = ipaddress.ip_network("198.18.0.0/15")
MGMT_BLOCK = 20  # one /20 per lab: 198.18.<location>.<host> in the first block
MAX_LOCATIONS = 15  # third octet of a /20 block, 0 is the bridge
MAX_HOSTS = 254
MAX_PUBLIC = 9  # public address 203.0.113.<10*location + host>
MAX_PUBLIC_LOCATIONS = 24
GLOBAL_LOCK = "/run/lock/kilo-lab.lock" if os.path.isdir("/run/lock") else "/tmp/kilo-lab.lock"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Directories each host gets as overlay (lower = the machine's own, so dpkg's database and
# the installed packages stay visible; writes land in the host's upper dir).
# usr/lib: the collection's app goes to /usr/lib/kilo-mesh on a real host, and the lab hosts share
# the machine's /usr otherwise
OVERLAY_DIRS = ["etc", "var/lib", "var/log", "usr/lib"]
# Which hosts' login user needs a password for sudo: some (a checkerboard over location and host
# index, so both kinds sit in every location and among the leaders), all, or none.
SUDO_PASSWORD = ("some", "all", "none")
# How a NAT router maps (``--nat-kind``): plain = masquerade and nothing else (inbound to a mapped
# port passes, the lab's behaviour before NAT kinds); eim = masquerade keeping the source port
# (endpoint-independent mapping, as home routers) with no unsolicited inbound; symmetric =
# ``masquerade fully-random``, a new port per conntrack entry (per destination, as carrier-grade
# NAT often does), no unsolicited inbound.
NAT_KINDS = ("plain", "eim", "symmetric")
# Files and directories `down` removes from the state dir (it never removes anything else,
# so a second lab's state nested in the default state dir survives).
STATE_ENTRIES = [
    "hosts",
    "ssh",
    "cp",
    "lab.json",
    "hosts.json",
    "inventory.yml",
    "ssh_config",
    "known_hosts",
    "guard.nft",
]


class LabError(Exception):
    """A lab operation failed; the message says which host/namespace and why."""


def default_state_dir(prefix):
    base = os.path.join(REPO, ".lab")
    return base if prefix == DEFAULT_PREFIX else os.path.join(base, prefix)


def check_prefix(prefix):
    # <= 5 chars keeps root-side veth names (<prefix>m<loc>h<host>) within IFNAMSIZ.
    if not re.fullmatch(r"[a-z][a-z0-9]{0,4}", prefix or ""):
        raise LabError(
            "prefix %r: must be 1-5 lowercase letters/digits, starting with a letter" % (prefix,)
        )
    return prefix


def location_name(index):
    return LOCATION_NAMES[index - 1] if index <= len(LOCATION_NAMES) else "loc%d" % index


def _run(argv, input=None, check=True, what=None):
    proc = subprocess.run(argv, input=input, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise LabError(
            "%s failed (rc=%d): %s: %s"
            % (
                what or argv[0],
                proc.returncode,
                " ".join(argv),
                (proc.stderr or proc.stdout).strip(),
            )
        )
    return proc


def _ip_batch(lines, netns=None, what=None):
    if not lines:
        return
    argv = ["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"]
    _run(argv, input="\n".join(lines) + "\n", what=what or ("ip batch in %s" % (netns or "root")))


def _in_netns(netns, argv, input=None, check=True):
    """Run argv inside a named netns only (no mount namespace games, unlike `ip netns exec`)."""
    return _run(
        ["nsenter", "--net=/run/netns/%s" % netns, "--"] + argv,
        input=input,
        check=check,
        what="%s in %s" % (argv[0], netns),
    )


def process_starttime(pid):
    """Process start time (clock ticks since boot), to tell a PID from a reused one."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    fields = data[data.rindex(")") + 2 :].split()
    return int(fields[19])


def process_alive(pid, starttime=None):
    st = process_starttime(pid)
    if st is None or (starttime is not None and st != starttime):
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
        return data[data.rindex(")") + 2] != "Z"
    except OSError:
        return False


def _exists(pid, starttime=None):
    st = process_starttime(pid)
    return st is not None and (starttime is None or st == starttime)


def list_netns():
    out = _run(["ip", "-json", "netns", "list"], check=False).stdout.strip()
    try:
        return [n["name"] for n in json.loads(out or "[]")]
    except ValueError:
        return []


def _root_links():
    out = _run(["ip", "-json", "link", "show"]).stdout
    return [link["ifname"] for link in json.loads(out or "[]")]


def _used_networks():
    nets = []
    out = _run(["ip", "-json", "-4", "addr", "show"]).stdout
    for link in json.loads(out or "[]"):
        for a in link.get("addr_info", []):
            nets.append(ipaddress.ip_interface("%s/%s" % (a["local"], a["prefixlen"])).network)
    for line in _run(["ip", "-4", "route", "show", "table", "all"]).stdout.splitlines():
        dst = line.split()[0] if line.split() else ""
        if dst in ("default", "broadcast", "local", "unreachable", "prohibit", "blackhole"):
            dst = line.split()[1] if dst != "default" else "0.0.0.0/0"
        try:
            net = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if net.prefixlen > 0:  # a default route does not claim the pool
            nets.append(net)
    return nets


def pick_mgmt_net():
    """First /20 of 198.18.0.0/15 that no address or route on this machine touches."""
    used = _used_networks()
    for block in MGMT_POOL.subnets(new_prefix=MGMT_BLOCK):
        if not any(block.overlaps(n) for n in used):
            return block
    raise LabError("no free /%d left in %s for the management network" % (MGMT_BLOCK, MGMT_POOL))


def nat_kinds(nat, nat_kind=None):
    """{location index: NAT kind} of the NAT'd locations: ``nat_kind`` is one kind for all of them
    (None: plain) or {index: kind} (the others plain); LabError for anything else."""
    if nat_kind is None or isinstance(nat_kind, str):
        kinds = dict((n, nat_kind or "plain") for n in nat)
    else:
        kinds = dict((n, "plain") for n in nat)
        for n, kind in dict(nat_kind).items():
            if int(n) not in kinds:
                raise LabError(
                    "nat_kind: location %s is not behind NAT (nat: %s)" % (n, nat or "none")
                )
            kinds[int(n)] = kind
    for n, kind in kinds.items():
        if kind not in NAT_KINDS:
            raise LabError(
                "nat_kind: %r (location %d) is not one of %s" % (kind, n, ", ".join(NAT_KINDS))
            )
    return kinds


def nat_ruleset(prefix, kind):
    """The nft ruleset of a NAT router of ``kind`` (NAT_KINDS), in its own namespace."""
    if kind == "plain":
        return (
            "table inet %s_nat {\n  chain postrouting {\n"
            "    type nat hook postrouting priority srcnat; policy accept;\n"
            '    oifname "wan0" masquerade\n  }\n}\n' % prefix
        )
    # The input drop matters as much as the forward drop: a packet from outside to a port no
    # inside host has sent from yet gets a conntrack entry that is never confirmed (dropped), so
    # it cannot claim the tuple and push masquerade to another port.
    return (
        "table inet %s_nat {\n"
        "  chain postrouting {\n"
        "    type nat hook postrouting priority srcnat; policy accept;\n"
        '    oifname "wan0" masquerade%s\n  }\n'
        "  chain forward {\n"
        "    type filter hook forward priority filter; policy drop;\n"
        '    iifname "in0" accept\n'
        "    ct state established,related accept\n  }\n"
        "  chain input {\n"
        "    type filter hook input priority filter; policy drop;\n"
        '    iifname { "in0", "lo" } accept\n'
        "    ct state established,related accept\n  }\n"
        "}\n"
    ) % (prefix, " fully-random" if kind == "symmetric" else "")


def plan_lab(
    locations,
    hosts_per_location,
    public_per_location=1,
    nat=None,
    ipv6=False,
    mgmt_net="198.18.0.0/20",
    prefix=DEFAULT_PREFIX,
    ipv6_only=None,
    user=None,
    sudo_password="some",
    nat_kind=None,
):
    """Address plan of a lab (pure; no side effects). Returns the lab description dict.

    ``nat_kind``: how the NAT routers map (NAT_KINDS; see ``nat_kinds``), default plain.

    ``ipv6_only``: indices of locations whose underlay has IPv6 alone (no IPv4 on their LAN and
    internet links; implies ``ipv6``), to mesh an IPv6-only site with dual-stack ones.
    ``user``: a non-root login user with sudo on every host (each host's ``sudo`` says
    ``nopasswd`` or ``password``, as ``sudo_password`` chooses: see SUDO_PASSWORD); None: root
    logs in (``sudo`` None)."""
    nat = sorted(set(nat or []))
    ipv6_only = sorted(set(ipv6_only or []))
    ipv6 = ipv6 or bool(ipv6_only)
    if not 1 <= locations <= MAX_LOCATIONS:
        raise LabError("locations: %d is out of range 1..%d" % (locations, MAX_LOCATIONS))
    if not 1 <= hosts_per_location <= MAX_HOSTS:
        raise LabError(
            "hosts_per_location: %d is out of range 1..%d" % (hosts_per_location, MAX_HOSTS)
        )
    if not 0 <= public_per_location <= min(MAX_PUBLIC, hosts_per_location):
        raise LabError(
            "public_per_location: %d is out of range 0..%d"
            % (public_per_location, min(MAX_PUBLIC, hosts_per_location))
        )
    if public_per_location and locations > MAX_PUBLIC_LOCATIONS:
        raise LabError("locations: at most %d with public hosts" % MAX_PUBLIC_LOCATIONS)
    for n in nat:
        if not 1 <= n <= locations:
            raise LabError("nat: location index %d is out of range 1..%d" % (n, locations))
        if not public_per_location:
            raise LabError("nat: location %d has no public host to put behind NAT" % n)
    for n in ipv6_only:
        if not 1 <= n <= locations:
            raise LabError("ipv6_only: location index %d is out of range 1..%d" % (n, locations))
        if n in nat:
            raise LabError(
                "ipv6_only: location %d is behind NAT, which the lab only builds for IPv4" % n
            )
    if user is not None and (not re.fullmatch(r"[a-z_][a-z0-9_-]{0,30}", user) or user == "root"):
        raise LabError(
            "user: %r must be a login name other than root (lowercase letters, digits, _ and -)"
            % (user,)
        )
    if sudo_password not in SUDO_PASSWORD:
        raise LabError(
            "sudo_password: %r is not one of %s" % (sudo_password, ", ".join(SUDO_PASSWORD))
        )
    kinds = nat_kinds(nat, nat_kind)
    mgmt = ipaddress.ip_network(mgmt_net)
    if mgmt.prefixlen > MGMT_BLOCK or not mgmt.subnet_of(MGMT_POOL):
        raise LabError(
            "mgmt_net: %s must be a /%d (or larger) inside %s" % (mgmt, MGMT_BLOCK, MGMT_POOL)
        )
    base = int(mgmt.network_address)
    lab = {
        "prefix": prefix,
        "locations": [],
        "hosts": {},
        "mgmt_net": str(mgmt),
        "mgmt_bridge": prefix + "mgmt",
        "mgmt_bridge_ip": str(ipaddress.ip_address(base + 1)),
        "mgmt_prefixlen": mgmt.prefixlen,
        "fabric_netns": "%s-fabric" % prefix,
        "guard_table": "%s_guard" % prefix,
        "ipv6": bool(ipv6),
        "ipv6_only": ipv6_only,
        "nat": nat,
        "routers": {},
        "user": user,
    }
    for i in range(1, locations + 1):
        loc = location_name(i)
        lab["locations"].append(loc)
        if i in nat:
            lab["routers"][loc] = {
                "netns": "%s-nat-%s" % (prefix, loc),
                "index": i,
                "public_ip": "203.0.113.%d" % (10 * i),
                "public_ip6": "2001:db8::%d" % (10 * i) if ipv6 else None,
                "inside_ip": "198.51.100.254",
                "inside_ip6": "2001:db8:ffff::254" if ipv6 else None,
                "kind": kinds[i],
                # remap() moves the router between these two (no host of a NAT'd location
                # holds an address of its range)
                "addresses": ["203.0.113.%d" % (10 * i), "203.0.113.%d" % (10 * i + 9)],
            }
        for k in range(1, hosts_per_location + 1):
            name = "%s-%d" % (loc, k)
            public = k <= public_per_location
            behind_nat = public and i in nat
            h = {
                "name": name,
                "location": loc,
                "location_index": i,
                "index": k,
                "netns": "%s-%s" % (prefix, name),
                "mgmt_ip": str(ipaddress.ip_address(base + 256 * i + k)),
                "mgmt_veth": "%sm%dh%d" % (prefix, i, k),
                "lan_ip": "172.16.%d.%d" % (i, k),
                "lan_ip6": "fd00:16:%d::%d" % (i, k) if ipv6 else None,
                "public": public,
                "nat": behind_nat,
                "public_ip": None,
                "public_ip6": None,
                "nat_ip": None,
                "nat_ip6": None,
                "sudo": None
                if user is None
                else (
                    "password"
                    if sudo_password == "all" or (sudo_password == "some" and (i + k) % 2)
                    else "nopasswd"
                ),
            }
            if public and not behind_nat:
                h["public_ip"] = "203.0.113.%d" % (10 * i + k)
                h["public_ip6"] = "2001:db8::%d" % (10 * i + k) if ipv6 else None
            elif behind_nat:
                # Configured endpoint = the host's own address behind the router; others only
                # ever see the router's public address (nat_ip) as the source of its traffic.
                h["public_ip"] = "198.51.100.%d" % (10 * i + k)
                h["public_ip6"] = "2001:db8:ffff::%d" % (10 * i + k) if ipv6 else None
                h["nat_ip"] = lab["routers"][loc]["public_ip"]
                h["nat_ip6"] = lab["routers"][loc]["public_ip6"]
            if i in ipv6_only:
                h["lan_ip"] = h["public_ip"] = None
            if int(ipaddress.ip_address(h["mgmt_ip"])) not in range(
                base, base + mgmt.num_addresses
            ):
                raise LabError("mgmt_net: %s is too small for host %s" % (mgmt, name))
            lab["hosts"][name] = h
    return lab


INIT_SCRIPT = r"""#!/bin/bash
# PID 1 of lab host {name}: private mounts, hostname, sshd; then reap orphans until killed.
set -eu
H={hdir}
S={sdir}
R={rdir}
hostname {name}
# The checkout and the lab's state dir may sit below a directory this host mounts over (a
# checkout in /root, as CI clones may be): hold them open now and bind them back afterwards.
exec 8<"$R" 9<"$S"
# Our copy of the root mount table holds nsfs mounts (/run/netns/*) of other namespaces;
# drop them so they cannot keep another lab's network namespaces alive.
awk '{{for (i = 7; i <= NF; i++) if ($i == "-") {{ if ($(i+1) == "nsfs") print $5; break }}}}' \
    /proc/self/mountinfo | while read -r m; do umount -l "$m" 2>/dev/null || true; done
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
for d in {overlay_dirs}; do
    mount -t overlay overlay -o "lowerdir=/$d,upperdir=$H/upper/$d,workdir=$H/work/$d" "/$d"
done
# root's own empty home: no .bashrc, .profile or pyenv of the machine's root user
mount -t tmpfs -o mode=0700,nosuid,nodev tmpfs /root
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
mkdir -p /run/sshd /run/wireguard /run/lock
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
# --no-canonicalize: the fd, not the path it names (now maybe an empty dir), is the source.
mkdir -p "$R" "$S"
mount --no-canonicalize --bind /proc/self/fd/8 "$R"
mount --no-canonicalize --bind /proc/self/fd/9 "$S"
exec 8<&- 9<&-
{login}/usr/sbin/sshd -f "$H/sshd_config" -E /var/log/sshd.log
echo ready > "$H/ready"
trap 'exit 0' TERM INT
while :; do sleep 86400 & wait $! || true; done
"""

# The login user of a lab with one (lab "user"), made by the host's init before sshd starts, in
# the host's own /etc (an overlay: passwd, shadow, group, sudoers.d) and its own fresh /home.
# Its shadow entry is "*" (no password, not locked: sshd without PAM refuses a locked account's
# keys) or the hash of the lab's sudo password; sudo asks for it on those hosts only.
LOGIN_SCRIPT = r"""# the login user {user}: key login, sudo {sudo}
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /home
id -u {user} >/dev/null 2>&1 || useradd --no-create-home --home-dir /home/{user} --shell /bin/bash --user-group {user}
usermod -p {hash} {user}
install -d -m 0755 -o {user} -g {user} /home/{user}
install -d -m 0700 -o {user} -g {user} /home/{user}/.ssh
install -m 0600 -o {user} -g {user} "$S/ssh/authorized_keys" /home/{user}/.ssh/authorized_keys
echo '{user} ALL=(ALL:ALL) {tag}ALL' > /etc/sudoers.d/kilo-lab
chmod 0440 /etc/sudoers.d/kilo-lab
"""

ROOT_LOGIN = """AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
# keys live under the state dir, whose parents are not root-only
StrictModes no
"""

USER_LOGIN = """# the login user alone, by the key in its own home (whose modes sshd checks); root cannot log in
AuthorizedKeysFile .ssh/authorized_keys
PermitRootLogin no
AllowUsers {user}
StrictModes yes
"""

SSHD_CONFIG = """# lab host {name}: listen on the management address only
ListenAddress {mgmt_ip}
Port 22
HostKey {hdir}/ssh_host_ed25519_key
{logins}PidFile /run/sshd.pid
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
PrintMotd no
X11Forwarding no
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def _yaml_scalar(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_scalar(v) for v in value) + "]"
    return json.dumps(str(value))  # a JSON string is a valid YAML double-quoted scalar


class Lab(object):
    """One lab, identified by its prefix; its state lives in state_dir."""

    def __init__(self, prefix=None, state_dir=None):
        self.prefix = check_prefix(prefix or os.environ.get("KILO_LAB_PREFIX") or DEFAULT_PREFIX)
        self.state_dir = os.path.abspath(
            state_dir or os.environ.get("KILO_LAB_STATE_DIR") or default_state_dir(self.prefix)
        )
        self._procs = {}  # keeper Popen objects started by this process, reaped on down()

    # -- paths -----------------------------------------------------------------------
    def path(self, *parts):
        return os.path.join(self.state_dir, *parts)

    @property
    def ssh_config(self):
        return self.path("ssh_config")

    @property
    def known_hosts(self):
        return self.path("known_hosts")

    @property
    def inventory(self):
        return self.path("inventory.yml")

    def load(self):
        try:
            with open(self.path("lab.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    @property
    def hosts(self):
        lab = self.load()
        return lab["hosts"] if lab else {}

    def _save(self, lab):
        tmp = self.path("lab.json.tmp")
        with open(tmp, "w") as f:
            json.dump(lab, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path("lab.json"))

    def _lock(self):
        os.makedirs(self.state_dir, exist_ok=True)
        fd = os.open(self.path(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    # -- up --------------------------------------------------------------------------
    def up(
        self,
        locations,
        hosts_per_location,
        public_per_location=1,
        nat=None,
        ipv6=False,
        mgmt_net=None,
        timeout=60,
        ipv6_only=None,
        user=None,
        sudo_password="some",
        nat_kind=None,
    ):
        """Build the lab (see plan_lab for the options); its description. With ``user``, that
        user logs in on every host and becomes root with sudo (see LOGIN_SCRIPT). ``nat_kind``:
        NAT_KINDS, one for every NAT router or {location index: kind}."""
        if isinstance(nat, int):
            nat = [nat]
        fd = self._lock()
        try:
            leftovers = self._leftovers()
            if leftovers:
                raise LabError(
                    "lab %s already exists (%s); run `lab.py down --prefix %s` first"
                    % (self.prefix, ", ".join(leftovers[:5]), self.prefix)
                )
            # Machine-wide lock while choosing and claiming a management network, so labs
            # brought up at the same time never pick the same block.
            gfd = os.open(GLOBAL_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(gfd, fcntl.LOCK_EX)
                lab = plan_lab(
                    locations,
                    hosts_per_location,
                    public_per_location,
                    nat,
                    ipv6,
                    mgmt_net or pick_mgmt_net(),
                    self.prefix,
                    ipv6_only,
                    user,
                    sudo_password,
                    nat_kind,
                )
                if any(h["sudo"] == "password" for h in lab["hosts"].values()):
                    lab["become_password"] = secrets.token_urlsafe(12)
                lab["state_dir"] = self.state_dir
                lab["status"] = "creating"
                self._save(lab)
                try:
                    self._build(lab, timeout, gfd)
                except BaseException:
                    self._teardown(lab)
                    raise
            finally:
                os.close(gfd)
            lab["status"] = "up"
            self._save(lab)
            self._write_outputs(lab)
            return lab
        finally:
            os.close(fd)

    def _build(self, lab, timeout, global_lock):
        p = self.prefix
        hosts = list(lab["hosts"].values())
        self._make_keys(lab)
        # Root namespace: guard table first, so nothing can be forwarded to or from the
        # management bridge even for a moment.
        br = lab["mgmt_bridge"]
        guard = (
            "table inet %s {\n  chain forward {\n"
            "    type filter hook forward priority -10; policy accept;\n"
            '    iifname "%s" drop\n    oifname "%s" drop\n  }\n}\n'
        ) % (lab["guard_table"], br, br)
        with open(self.path("guard.nft"), "w") as f:
            f.write(guard)
        _run(["nft", "-f", self.path("guard.nft")], what="nft guard table %s" % lab["guard_table"])
        spaces = (
            [lab["fabric_netns"]]
            + [r["netns"] for r in lab["routers"].values()]
            + [h["netns"] for h in hosts]
        )
        _ip_batch(["netns add %s" % n for n in spaces], what="creating namespaces")
        root = [
            "link add %s type bridge" % br,
            "link set %s addrgenmode none" % br,
            "addr add %s/%d dev %s" % (lab["mgmt_bridge_ip"], lab["mgmt_prefixlen"], br),
            "link set %s up" % br,
        ]
        fabric = [
            "link set lo up",
            "link add inet type bridge",
            "link set inet addrgenmode none",
            "link set inet up",
        ]
        for i, _loc in enumerate(lab["locations"], 1):
            fabric += [
                "link add lan%d type bridge" % i,
                "link set lan%d addrgenmode none" % i,
                "link set lan%d up" % i,
            ]
        per_ns = {}
        for h in hosts:
            i, k, ns = h["location_index"], h["index"], h["netns"]
            v = h["mgmt_veth"]
            root += [
                "link add %s type veth peer name mgmt0 netns %s" % (v, ns),
                "link set %s addrgenmode none" % v,
                "link set %s master %s" % (v, br),
                "link set dev %s type bridge_slave isolated on" % v,
                "link set %s up" % v,
                "link add l%dh%d netns %s type veth peer name eth0 netns %s"
                % (i, k, lab["fabric_netns"], ns),
            ]
            fabric += ["link set l%dh%d master lan%d" % (i, k, i), "link set l%dh%d up" % (i, k)]
            cmds = [
                "link set lo up",
                "link set mgmt0 addrgenmode none",
                "addr add %s/%d dev mgmt0" % (h["mgmt_ip"], lab["mgmt_prefixlen"]),
                "link set mgmt0 up",
            ]
            if h["lan_ip"]:
                cmds.append("addr add %s/24 dev eth0" % h["lan_ip"])
            if h["lan_ip6"]:
                cmds.append("addr add %s/64 dev eth0 nodad" % h["lan_ip6"])
            cmds.append("link set eth0 up")
            if h["public"]:
                if h["nat"]:
                    r = lab["routers"][h["location"]]
                    root.append(
                        "link add h%d netns %s type veth peer name eth1 netns %s"
                        % (k, r["netns"], ns)
                    )
                    per_ns.setdefault(r["netns"], []).extend(
                        ["link set h%d master in0" % k, "link set h%d up" % k]
                    )
                else:
                    root.append(
                        "link add i%dh%d netns %s type veth peer name eth1 netns %s"
                        % (i, k, lab["fabric_netns"], ns)
                    )
                    fabric += [
                        "link set i%dh%d master inet" % (i, k),
                        "link set i%dh%d up" % (i, k),
                    ]
                if h["public_ip"]:
                    cmds.append("addr add %s/24 dev eth1" % h["public_ip"])
                if h["public_ip6"]:
                    cmds.append("addr add %s/64 dev eth1 nodad" % h["public_ip6"])
                cmds.append("link set eth1 up")
                if h["nat"]:
                    # Not a default route: only the internet bridge's prefix, via the router.
                    cmds.append("route add 203.0.113.0/24 via %s dev eth1" % r["inside_ip"])
                    if h["public_ip6"]:
                        cmds.append("route add 2001:db8::/64 via %s dev eth1" % r["inside_ip6"])
            per_ns[ns] = cmds
        routers = {}
        for r in lab["routers"].values():
            i = r["index"]
            root.append(
                "link add i%dr netns %s type veth peer name wan0 netns %s"
                % (i, lab["fabric_netns"], r["netns"])
            )
            fabric += ["link set i%dr master inet" % i, "link set i%dr up" % i]
            cmds = [
                "link set lo up",
                "link add in0 type bridge",
                "link set in0 addrgenmode none",
                "addr add %s/24 dev in0" % r["inside_ip"],
                "addr add %s/24 dev wan0" % r["public_ip"],
            ]
            if r["inside_ip6"]:
                cmds += [
                    "addr add %s/64 dev in0 nodad" % r["inside_ip6"],
                    "addr add %s/64 dev wan0 nodad" % r["public_ip6"],
                ]
            cmds += ["link set in0 up", "link set wan0 up"]
            routers[r["netns"]] = cmds
        _ip_batch(root, what="root namespace links")
        fcntl.flock(global_lock, fcntl.LOCK_UN)  # the management network is claimed now
        _ip_batch(fabric, netns=lab["fabric_netns"])
        for ns, cmds in routers.items():
            _ip_batch(cmds + per_ns.pop(ns, []), netns=ns)
        for ns, cmds in per_ns.items():
            _ip_batch(cmds, netns=ns)
        for r in lab["routers"].values():
            _in_netns(
                r["netns"],
                [
                    "sh",
                    "-c",
                    "echo 1 > /proc/sys/net/ipv4/ip_forward; "
                    "echo 1 > /proc/sys/net/ipv6/conf/all/forwarding",
                ],
            )
            _in_netns(r["netns"], ["nft", "-f", "-"], input=nat_ruleset(p, r.get("kind", "plain")))
        self._start_keepers(lab, timeout)

    def _make_keys(self, lab):
        sshdir = self.path("ssh")
        os.makedirs(sshdir, exist_ok=True)
        key = os.path.join(sshdir, "id_ed25519")
        if not os.path.exists(key):
            _run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "kilo-lab-%s" % self.prefix,
                    "-f",
                    key,
                ],
                what="ssh-keygen (client key)",
            )
        shutil.copyfile(key + ".pub", os.path.join(sshdir, "authorized_keys"))
        password_hash = None
        if lab.get("become_password"):
            password_hash = _run(
                ["openssl", "passwd", "-6", "-stdin"],
                input=lab["become_password"] + "\n",
                what="openssl passwd (the lab's sudo password)",
            ).stdout.strip()
        for h in lab["hosts"].values():
            hdir = self.path("hosts", h["name"])
            for d in OVERLAY_DIRS:
                os.makedirs(os.path.join(hdir, "upper", d), exist_ok=True)
                os.makedirs(os.path.join(hdir, "work", d), exist_ok=True)
            # The host's own identity files, seen through its /etc overlay.
            with open(os.path.join(hdir, "upper", "etc", "hostname"), "w") as f:
                f.write(h["name"] + "\n")
            with open(os.path.join(hdir, "upper", "etc", "hosts"), "w") as f:
                f.write(
                    "127.0.0.1 localhost\n127.0.1.1 %s\n::1 localhost ip6-localhost ip6-loopback\n"
                    % h["name"]
                )
            hk = os.path.join(hdir, "ssh_host_ed25519_key")
            if not os.path.exists(hk):
                _run(
                    [
                        "ssh-keygen",
                        "-q",
                        "-t",
                        "ed25519",
                        "-N",
                        "",
                        "-C",
                        "root@%s" % h["name"],
                        "-f",
                        hk,
                    ],
                    what="ssh-keygen (host key of %s)" % h["name"],
                )
            user = lab.get("user")
            if user:
                logins = USER_LOGIN.format(user=user)
                login = LOGIN_SCRIPT.format(
                    user=user,
                    sudo=h["sudo"],
                    hash=shlex.quote(password_hash if h["sudo"] == "password" else "*"),
                    tag="NOPASSWD: " if h["sudo"] == "nopasswd" else "",
                )
            else:
                logins = ROOT_LOGIN.format(authorized_keys=os.path.join(sshdir, "authorized_keys"))
                login = ""
            with open(os.path.join(hdir, "sshd_config"), "w") as f:
                f.write(
                    SSHD_CONFIG.format(
                        name=h["name"], mgmt_ip=h["mgmt_ip"], hdir=hdir, logins=logins
                    )
                )
            # 0700: with a login user it holds the hash of the lab's sudo password
            fd = os.open(
                os.path.join(hdir, "init.sh"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700
            )
            with os.fdopen(fd, "w") as f:
                f.write(
                    INIT_SCRIPT.format(
                        name=h["name"],
                        hdir=shlex.quote(hdir),
                        sdir=shlex.quote(self.state_dir),
                        rdir=shlex.quote(REPO),
                        overlay_dirs=" ".join(OVERLAY_DIRS),
                        login=login,
                    )
                )
            try:
                os.unlink(os.path.join(hdir, "ready"))
            except OSError:
                pass

    def _start_keepers(self, lab, timeout):
        env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8"}
        for h in lab["hosts"].values():
            hdir = self.path("hosts", h["name"])
            log = open(os.path.join(hdir, "keeper.log"), "w")
            argv = [
                "nsenter",
                "--net=/run/netns/%s" % h["netns"],
                "--",
                "unshare",
                "--uts",
                "--mount",
                "--pid",
                "--fork",
                "--kill-child=SIGKILL",
                "--mount-proc",
                "--propagation",
                "private",
                "--",
                "/bin/bash",
                os.path.join(hdir, "init.sh"),
            ]
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd="/",
                env=env,
                start_new_session=True,
                close_fds=True,
            )
            log.close()
            self._procs[h["name"]] = proc
            h["keeper_pid"] = proc.pid
            h["keeper_start"] = process_starttime(proc.pid)
            h["pid"] = None
        self._save(lab)
        deadline = time.monotonic() + timeout
        pending = dict(lab["hosts"])
        while pending:
            for name, h in list(pending.items()):
                proc = self._procs[name]
                if proc.poll() is not None:
                    with open(self.path("hosts", name, "keeper.log")) as f:
                        log = f.read().strip()
                    raise LabError(
                        "host %s: keeper exited with %s: %s" % (name, proc.returncode, log)
                    )
                if h["pid"] is None:
                    try:
                        with open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)) as f:
                            kids = f.read().split()
                    except OSError:
                        kids = []
                    if kids:
                        h["pid"] = int(kids[0])
                        h["pid_start"] = process_starttime(h["pid"])
                        self._save(lab)
                if (
                    h["pid"] is not None
                    and os.path.exists(self.path("hosts", name, "ready"))
                    and self._port_open(h["mgmt_ip"], 22)
                ):
                    del pending[name]
            if pending:
                if time.monotonic() > deadline:
                    raise LabError(
                        "hosts %s: sshd not reachable within %ss"
                        % (", ".join(sorted(pending)), timeout)
                    )
                time.sleep(0.02)

    @staticmethod
    def _port_open(ip, port):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(0.5)
        try:
            s.connect((ip, port))
            return True
        except OSError:
            return False
        finally:
            s.close()

    def _write_outputs(self, lab):
        hosts = lab["hosts"]
        keydir = self.path("ssh")
        cp = self.path("cp")
        os.makedirs(cp, exist_ok=True)
        lines = [
            "# lab %s, written by lab/lab.py; use: ssh -F %s HOST" % (self.prefix, self.ssh_config)
        ]
        for h in hosts.values():
            lines += ["Host %s" % h["name"], "  HostName %s" % h["mgmt_ip"]]
        lines += [
            "Host *",
            "  User %s" % (lab.get("user") or "root"),
            "  IdentityFile %s" % os.path.join(keydir, "id_ed25519"),
            "  IdentitiesOnly yes",
            "  UserKnownHostsFile %s" % self.known_hosts,
            "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes",
            "  PasswordAuthentication no",
            "  BatchMode yes",
            "  ConnectTimeout 10",
            # A host that vanishes under a live ControlMaster connection must fail
            # fast (unreachable), not hang on TCP retransmits.
            "  ServerAliveInterval 3",
            "  ServerAliveCountMax 3",
            "  LogLevel ERROR",
            "",
        ]
        with open(self.ssh_config, "w") as f:
            f.write("\n".join(lines))
        known = []
        for h in hosts.values():
            with open(self.path("hosts", h["name"], "ssh_host_ed25519_key.pub")) as f:
                pub = " ".join(f.read().split()[:2])
            known.append("%s,%s %s" % (h["name"], h["mgmt_ip"], pub))
        with open(self.known_hosts, "w") as f:
            f.write("\n".join(known) + "\n")
        # A ControlPath of our own: masters of a previous lab with the same addresses can
        # never be reused by mistake, and `down` removes the sockets with the state dir.
        common = "-F %s -o ControlPath=%s/%%C" % (self.ssh_config, cp)
        inv = [
            "# lab %s, written by lab/lab.py" % self.prefix,
            "all:",
            "  children:",
            "    kilo:",
            "      vars:",
            "        kilo_encapsulate: never",
            "        kilo_discovery_ignore_interfaces: [mgmt0]",
            "        kilo_lab_prefix: %s" % _yaml_scalar(self.prefix),
            "      children:",
        ]
        for loc in lab["locations"]:
            inv += [
                "        %s:" % loc,
                "          vars:",
                "            kilo_location: %s" % _yaml_scalar(loc),
            ]
            if loc in lab["routers"]:
                # Behind NAT: keepalives let the other leaders learn the translated endpoint,
                # and Kilo only uses such a discovered endpoint when keepalive is on.
                inv.append("            kilo_persistent_keepalive: 25")
            inv.append("          hosts:")
            for h in hosts.values():
                if h["location"] != loc:
                    continue
                hv = [
                    ("ansible_host", h["mgmt_ip"]),
                    ("ansible_ssh_common_args", common),
                    ("ansible_user", lab.get("user") or "root"),
                    ("ansible_python_interpreter", "/usr/bin/python3"),
                ]
                if h.get("sudo"):
                    hv.append(("ansible_become", True))
                if h.get("sudo") == "password":
                    hv.append(("ansible_become_password", lab["become_password"]))
                hv.append(("kilo_lab_public", h["public"]))
                if h["lan_ip"]:
                    hv.append(("kilo_lab_lan_ip", h["lan_ip"]))
                if h["public_ip"]:
                    hv.append(("kilo_lab_public_ip", h["public_ip"]))
                if h["lan_ip6"]:
                    hv.append(("kilo_lab_lan_ip6", h["lan_ip6"]))
                if h["public_ip6"]:
                    hv.append(("kilo_lab_public_ip6", h["public_ip6"]))
                if h["nat"]:
                    hv += [("kilo_lab_nat", True), ("kilo_lab_nat_ip", h["nat_ip"])]
                    if h["nat_ip6"]:
                        hv.append(("kilo_lab_nat_ip6", h["nat_ip6"]))
                inv.append("            %s:" % h["name"])
                inv += ["              %s: %s" % (k, _yaml_scalar(v)) for k, v in hv]
        with open(self.inventory, "w") as f:
            f.write("\n".join(inv) + "\n")
        summary = {}
        for h in hosts.values():
            summary[h["name"]] = {
                k: h[k]
                for k in (
                    "netns",
                    "pid",
                    "mgmt_ip",
                    "lan_ip",
                    "public_ip",
                    "location",
                    "nat",
                    "nat_ip",
                    "lan_ip6",
                    "public_ip6",
                    "public",
                    "sudo",
                )
            }
        with open(self.path("hosts.json"), "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)

    # -- down ------------------------------------------------------------------------
    def _leftovers(self):
        """Everything of this lab that exists on the machine (for `up` refusal and tests)."""
        found = ["netns %s" % n for n in list_netns() if n.startswith(self.prefix + "-")]
        found += ["link %s" % n for n in _root_links() if self._is_root_link(n)]
        if (
            _run(["nft", "list", "table", "inet", "%s_guard" % self.prefix], check=False).returncode
            == 0
        ):
            found.append("nft table inet %s_guard" % self.prefix)
        lab = self.load()
        for h in (lab or {}).get("hosts", {}).values():
            for key, start in (("pid", "pid_start"), ("keeper_pid", "keeper_start")):
                if h.get(key) and process_alive(h[key], h.get(start)):
                    found.append("process %d (%s)" % (h[key], h["name"]))
        return found

    def _is_root_link(self, name):
        return (
            name == self.prefix + "mgmt"
            or re.fullmatch(re.escape(self.prefix) + r"m\d+h\d+", name) is not None
        )

    def down(self):
        fd = self._lock()
        try:
            self._teardown(self.load())
            # A per-prefix state dir that holds nothing but its lock goes too (never .lab/).
            if self.state_dir != default_state_dir(DEFAULT_PREFIX) and os.listdir(
                self.state_dir
            ) == [".lock"]:
                os.unlink(self.path(".lock"))
                os.rmdir(self.state_dir)
        finally:
            os.close(fd)

    def _wait_gone(self, victims, timeout, zombies_ok=False):
        deadline = time.monotonic() + timeout
        while True:
            for name, proc in list(self._procs.items()):  # keepers we started: reap them
                if proc.poll() is not None:
                    del self._procs[name]
            for pid, _ in victims:
                try:
                    os.waitpid(pid, os.WNOHANG)  # ours (e.g. after a crash in up): reap
                except OSError:
                    pass
            # Orphans' zombies are reaped by the machine's PID 1, which may take a moment.
            check = process_alive if zombies_ok else _exists
            if not any(check(pid, start) for pid, start in victims) or time.monotonic() > deadline:
                return
            time.sleep(0.02)

    def _teardown(self, lab):
        # 1. Kill each host's PID namespace by killing its init (the kernel then kills
        #    everything inside); verified by start time so a reused PID is never hit. The
        #    keeper (unshare) above it then reaps it and exits by itself.
        hosts = list((lab or {}).get("hosts", {}).values())
        victims = []
        for h in hosts:
            if h.get("pid") and process_alive(h["pid"], h.get("pid_start")):
                os.kill(h["pid"], signal.SIGKILL)
            for key, start in (("pid", "pid_start"), ("keeper_pid", "keeper_start")):
                if h.get(key) and _exists(h[key], h.get(start)):
                    victims.append((h[key], h.get(start)))
        self._wait_gone(victims, 3, zombies_ok=True)
        # 2. Anything still inside our network namespaces (a keeper whose init never came
        #    up, or state lost after a crash): kill it by PID.
        mine = [n for n in list_netns() if n.startswith(self.prefix + "-")]
        for ns in mine:
            for pid in _run(["ip", "netns", "pids", ns], check=False).stdout.split():
                start = process_starttime(int(pid))
                if start is not None:
                    victims.append((int(pid), start))
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
        self._wait_gone(victims, 15, zombies_ok=True)
        # 3. Namespaces (their veths go with them), then what is left in the root namespace.
        if mine:
            _ip_batch(["netns del %s" % n for n in mine], what="deleting namespaces")
        for link in _root_links():
            if self._is_root_link(link):
                _run(["ip", "link", "del", link], check=False)
        _run(["nft", "delete", "table", "inet", "%s_guard" % self.prefix], check=False)
        # 4. State files (only our own entries: another lab's state dir may be nested here).
        #    Meanwhile the machine's PID 1 reaps our orphaned keepers; wait for that last.
        for entry in STATE_ENTRIES:
            p = self.path(entry)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            elif os.path.lexists(p):
                os.unlink(p)
        self._wait_gone(victims, 15)
        left = self._leftovers()
        deadline = time.monotonic() + 10
        while left and time.monotonic() < deadline:  # the kernel frees namespaces lazily
            time.sleep(0.1)
            for link in _root_links():
                if self._is_root_link(link):
                    _run(["ip", "link", "del", link], check=False)
            left = self._leftovers()
        if left:
            raise LabError("lab %s: tear-down left %s" % (self.prefix, ", ".join(left)))

    # -- status and exec -------------------------------------------------------------
    def status(self):
        lab = self.load()
        out = {"prefix": self.prefix, "state_dir": self.state_dir, "hosts": {}}
        if not lab:
            out["status"] = "down"
            out["leftovers"] = self._leftovers()
            return out
        for name, h in lab["hosts"].items():
            out["hosts"][name] = dict(
                h, alive=bool(h.get("pid")) and process_alive(h["pid"], h.get("pid_start"))
            )
        alive = [h["alive"] for h in out["hosts"].values()]
        out["status"] = (
            lab.get("status", "?") if all(alive) else ("degraded" if any(alive) else "dead")
        )
        out["mgmt_net"] = lab["mgmt_net"]
        out["routers"] = dict(
            (loc, r.get("kind", "plain")) for loc, r in lab.get("routers", {}).items()
        )
        return out

    def nsenter_argv(self, host, argv):
        h = self.hosts.get(host)
        if not h:
            raise LabError(
                "host %r: not in lab %s (hosts: %s)"
                % (host, self.prefix, ", ".join(sorted(self.hosts)) or "none; is the lab up?")
            )
        if not h.get("pid") or not process_alive(h["pid"], h.get("pid_start")):
            raise LabError("host %s: keeper process is not running" % host)
        return ["nsenter", "-t", str(h["pid"]), "-m", "-u", "-n", "-p", "-w", "--"] + list(argv)

    def run(self, host, argv, check=False, timeout=60, **kwargs):
        """Run argv inside a lab host; returns subprocess.CompletedProcess (text mode)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.nsenter_argv(host, argv), check=check, timeout=timeout, **kwargs)

    # -- NAT and faults ----------------------------------------------------------------
    def router(self, location):
        """The NAT router of ``location`` (name or 1-based index): its description."""
        lab = self.load() or {}
        routers = lab.get("routers", {})
        if isinstance(location, int):
            location = location_name(location)
        if location not in routers:
            raise LabError(
                "location %r: no NAT router (NAT'd: %s)"
                % (location, ", ".join(sorted(routers)) or "none")
            )
        return routers[location]

    def run_router(self, location, argv):
        """Run argv in ``location``'s NAT router namespace (network namespace only)."""
        return _in_netns(self.router(location)["netns"], list(argv), check=False)

    def remap(self, location):
        """Give ``location``'s NAT router its other public address: every mapping it held is gone
        (masquerade forgets the translations of an address taken away) and the next packet out
        of each inside host gets a new one, as a router restarted with a new address does. The
        lab's files (inventory ``kilo_lab_nat_ip``, hosts.json) follow. Returns the new address."""
        fd = self._lock()
        try:
            lab = self.load()
            if isinstance(location, int):
                location = location_name(location)
            if not lab or location not in lab.get("routers", {}):
                raise LabError("location %r: no NAT router" % (location,))
            r = lab["routers"][location]
            old = r["public_ip"]
            choices = r.get("addresses") or [
                "203.0.113.%d" % (10 * r["index"]),
                "203.0.113.%d" % (10 * r["index"] + 9),
            ]
            new = choices[1] if old == choices[0] else choices[0]
            # delete first: deleting a primary address deletes the secondaries of its subnet
            _ip_batch(
                ["addr del %s/24 dev wan0" % old, "addr add %s/24 dev wan0" % new],
                netns=r["netns"],
                what="re-addressing NAT router %s" % r["netns"],
            )
            # the kernel drops masqueraded entries of a removed address; flush the rest as well
            # (established entries of the old address' inbound side), when conntrack is there
            if shutil.which("conntrack"):
                _in_netns(r["netns"], ["conntrack", "-F"], check=False)
            r["public_ip"] = new
            for h in lab["hosts"].values():
                if h["nat"] and h["location"] == location:
                    h["nat_ip"] = new
            self._save(lab)
            self._write_outputs(lab)
            return new
        finally:
            os.close(fd)

    def dark(self, host, keep_management=False):
        """Make ``host`` (a lab host or a NAT router's location as ``nat-LOCATION``) drop every
        packet it would receive, send or forward: table ``inet P_dark`` in its network namespace
        (``keep_management``: SSH over mgmt0 still passes). ``light`` undoes it."""
        rules = ['iifname "mgmt0" accept', 'oifname "mgmt0" accept'] if keep_management else []
        chains = []
        for chain, hook in (("input", "input"), ("output", "output"), ("forward", "forward")):
            body = [
                r
                for r in rules
                if (r.startswith("iif") and hook != "output")
                or (r.startswith("oif") and hook == "output")
            ]
            chains.append(
                "  chain %s {\n    type filter hook %s priority -300; policy drop;\n%s  }\n"
                % (chain, hook, "".join("    %s\n" % r for r in body))
            )
        text = "table inet %s_dark {\n%s}\n" % (self.prefix, "".join(chains))
        _in_netns(self._netns_of(host), ["nft", "-f", "-"], input=text)

    def light(self, host):
        """Undo ``dark``: the host's traffic passes again (a no-op when it was not dark)."""
        ns = self._netns_of(host)
        if (
            _in_netns(
                ns, ["nft", "list", "table", "inet", "%s_dark" % self.prefix], check=False
            ).returncode
            == 0
        ):
            _in_netns(ns, ["nft", "delete", "table", "inet", "%s_dark" % self.prefix])

    def _netns_of(self, host):
        lab = self.load() or {}
        if host.startswith("nat-") and host[4:] in lab.get("routers", {}):
            return lab["routers"][host[4:]]["netns"]
        h = lab.get("hosts", {}).get(host)
        if not h:
            raise LabError("host %r: not in lab %s" % (host, self.prefix))
        return h["netns"]


def _nat_kind_arg(values):
    """--nat-kind values -> plan_lab's nat_kind: None, one kind, or {index: kind}."""
    if not values:
        return None
    if len(values) == 1 and "=" not in values[0]:
        return values[0]
    out = {}
    for v in values:
        index, sep, kind = v.partition("=")
        if not sep or not index.isdigit():
            raise LabError(
                "--nat-kind %r: KIND alone, or LOCATION_INDEX=KIND for each of several" % v
            )
        out[int(index)] = kind
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="lab.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix", default=None, help="name prefix (env KILO_LAB_PREFIX, default kl)")
    ap.add_argument("--state-dir", default=None, help="state dir (default .lab or .lab/PREFIX)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="create the lab")
    up.add_argument("locations", type=int)
    up.add_argument("hosts_per_location", type=int)
    up.add_argument("public_per_location", type=int, nargs="?", default=1)
    up.add_argument(
        "--nat",
        type=int,
        action="append",
        metavar="LOCATION_INDEX",
        help="put this location's public hosts behind a masquerading router (repeatable)",
    )
    up.add_argument(
        "--nat-kind",
        action="append",
        metavar="KIND|LOCATION_INDEX=KIND",
        default=None,
        help="how the NAT routers map: plain (default: masquerade, no filter), eim (source port kept,"
        " no unsolicited inbound) or symmetric (a random port per destination); KIND for every"
        " router, INDEX=KIND for one (repeatable)",
    )
    up.add_argument("--ipv6", action="store_true", help="IPv6 too on every LAN and internet link")
    up.add_argument(
        "--ipv6-only",
        type=int,
        action="append",
        metavar="LOCATION_INDEX",
        help="this location's LAN and internet links carry IPv6 only (repeatable; implies --ipv6)",
    )
    up.add_argument(
        "--mgmt-net", default=None, help="management /20 (default: first free in 198.18.0.0/15)"
    )
    up.add_argument(
        "--user",
        default=None,
        metavar="NAME",
        help="log in as this non-root user with sudo on every host (root cannot log in)",
    )
    up.add_argument(
        "--sudo-password",
        choices=SUDO_PASSWORD,
        default="some",
        help="with --user: the hosts whose sudo asks for a password (default: some, half of them)",
    )
    sub.add_parser("down", help="remove everything `up` made (safe to repeat)")
    st = sub.add_parser("status", help="show the lab")
    st.add_argument("--json", action="store_true")
    ex = sub.add_parser("exec", help="run a command in a host: exec HOST -- CMD...")
    ex.add_argument("host")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    for p in (up, sub.choices["down"], st, ex):  # accept the global options after the verb too
        p.add_argument("--prefix", dest="prefix_sub", default=None, help=argparse.SUPPRESS)
        p.add_argument("--state-dir", dest="state_dir_sub", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        lab = Lab(args.prefix_sub or args.prefix, args.state_dir_sub or args.state_dir)
        if args.cmd == "up":
            t = time.monotonic()
            desc = lab.up(
                args.locations,
                args.hosts_per_location,
                args.public_per_location,
                args.nat,
                args.ipv6,
                args.mgmt_net,
                ipv6_only=args.ipv6_only,
                user=args.user,
                sudo_password=args.sudo_password,
                nat_kind=_nat_kind_arg(args.nat_kind),
            )
            print(
                "lab %s up: %d hosts in %d locations, mgmt %s, %.1fs; inventory %s"
                % (
                    lab.prefix,
                    len(desc["hosts"]),
                    len(desc["locations"]),
                    desc["mgmt_net"],
                    time.monotonic() - t,
                    lab.inventory,
                )
            )
        elif args.cmd == "down":
            lab.down()
            print("lab %s down" % lab.prefix)
        elif args.cmd == "status":
            st = lab.status()
            if args.json:
                print(json.dumps(st, indent=1, sort_keys=True))
            elif st["status"] == "down":
                print(
                    "lab %s: down%s"
                    % (
                        lab.prefix,
                        (" (leftovers: %s)" % ", ".join(st["leftovers"]))
                        if st["leftovers"]
                        else "",
                    )
                )
            else:
                print(
                    "lab %s: %s, mgmt %s, state %s"
                    % (lab.prefix, st["status"], st["mgmt_net"], lab.state_dir)
                )
                for name, h in st["hosts"].items():
                    print(
                        "  %-10s %-5s pid=%-7s mgmt=%-13s lan=%-13s public=%s%s%s"
                        % (
                            name,
                            "up" if h["alive"] else "DEAD",
                            h.get("pid"),
                            h["mgmt_ip"],
                            h["lan_ip"] or h["lan_ip6"],
                            h["public_ip"] or h["public_ip6"] or "-",
                            " nat=%s (%s)" % (h["nat_ip"], st["routers"][h["location"]])
                            if h["nat"]
                            else "",
                            " sudo=%s" % h["sudo"] if h.get("sudo") else "",
                        )
                    )
            return 0 if st["status"] in ("up", "down") else 1
        elif args.cmd == "exec":
            cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
            if not cmd:
                raise LabError("exec: no command given (usage: exec HOST -- CMD...)")
            argv2 = lab.nsenter_argv(args.host, cmd)
            os.execvp(argv2[0], argv2)
        return 0
    except LabError as e:
        print("lab.py: error: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
