# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Host preparation for kilo.mesh.prepare: probe, packages wanted, sysctls and the firewall port.

Everything is read first (package manager, installed packages, kernel module, sysctls, the
active firewall and its rules), compared with what is wanted, and only then, outside check
mode, written. Package installation itself is left to ``ansible.builtin.package`` (the role's
second task), which gets the ``missing`` list from here.

No Ansible imports: the host tests drive ``prepare()`` directly inside a network namespace.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shutil

from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import write_atomic
from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    kernel_module_available,
    run_checked,
    run_command,
    to_bool,
    to_int,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import (
    Backend,
    carry_out,
    compare,
    run,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.firewall import COMMENT as NFT_COMMENT
from ansible_collections.kilo.mesh.plugins.module_utils.options import (
    DEFAULT_AGENT_CONFIG as AGENT_CONFIG,
    DEFAULT_PORT,
    bounds,
)

# Where sysctls are read and written at runtime, and the file that sets them at boot.
PROC_SYS = "/proc/sys"
SYSCTL_FILE = "/etc/sysctl.d/90-kilo-mesh.conf"

# The comment that marks our nftables rule in the "inet filter" input chain.
NFT_CHAIN = ("inet", "filter", "input")

# Package names by package manager: tools, userspace implementation, Python libraries.
PACKAGES = {
    "apt": {
        "base": ["wireguard-tools", "python3-pyroute2", "nftables", "iproute2"],
        "userspace": ["wireguard-go"],
        "agent": ["python3-kubernetes", "python3-prometheus-client"],
    },
    "dnf": {
        "base": ["wireguard-tools", "python3-pyroute2", "nftables", "iproute"],
        "userspace": ["wireguard-go"],
        "agent": ["python3-kubernetes", "python3-prometheus_client"],
    },
    "pacman": {
        "base": ["wireguard-tools", "python-pyroute2", "nftables", "iproute2"],
        "userspace": ["wireguard-go"],
        "agent": ["python-kubernetes", "python-prometheus_client"],
    },
}

# Extra arguments of the package task per package manager: apt would also pull in Recommends
# (wireguard-tools recommends a Debian kernel image, unwanted on a custom or cloud kernel).
PACKAGE_ARGS = {"apt": {"install_recommends": False}}

# package manager -> the command whose presence says it is there (first found wins)
PACKAGE_MANAGERS = (("apt", "apt-get"), ("dnf", "dnf"), ("pacman", "pacman"))


class PrepareError(KiloError):
    """The host cannot be prepared as asked (no package manager, a sysctl or rule not written)."""


# --- packages -------------------------------------------------------------------------------


def package_manager(which=shutil.which):
    """apt, dnf or pacman (the first present), or None."""
    for name, command in PACKAGE_MANAGERS:
        if which(command):
            return name
    return None


def wanted_packages(pkg_mgr, backend, kernel_module, agent=False):
    """The packages the host needs: base, plus the userspace implementation when WireGuard
    runs in userspace (asked for, or auto and the kernel module does not load), plus the
    agent's libraries in agent mode."""
    names = PACKAGES.get(pkg_mgr)
    if names is None:
        return []
    want = list(names["base"])
    if backend == "userspace" or (backend == "auto" and not kernel_module):
        want.extend(names["userspace"])
    if agent:
        want.extend(names["agent"])
    return want


def missing_packages(pkg_mgr, wanted, runner=run_command):
    """The packages of ``wanted`` that are not installed, asked in one command (each command
    costs the key call a process start)."""
    wanted = list(wanted)
    if not wanted:
        return []
    installed = set()
    if pkg_mgr == "apt":
        # one line per known package; "deinstall ok config-files" is a removed one
        out = runner(["dpkg-query", "-W", "-f=${Package} ${Status}\n"] + wanted)[1]
        installed = set(
            line.split(" ", 1)[0] for line in out.splitlines() if line.endswith(" ok installed")
        )
    elif pkg_mgr == "dnf":
        # a name per installed package, "package X is not installed" for the others
        out = runner(["rpm", "-q", "--qf", "%{NAME}\n"] + wanted)[1]
        installed = set(line.strip() for line in out.splitlines())
    elif pkg_mgr == "pacman":
        # -T prints exactly the names nothing installed satisfies (a provider such as
        # nftables-git counts, as it did for `pacman -Q name`'s return code)
        out = runner(["pacman", "-T"] + wanted)[1]
        unsatisfied = set(out.split())
        return [name for name in wanted if name in unsatisfied]
    return [name for name in wanted if name not in installed]


# --- sysctls --------------------------------------------------------------------------------

_SYSCTL_KEY = re.compile(r"^[A-Za-z0-9_\-]+([./][A-Za-z0-9_\-]+)*$")


def sysctl_value(key, value):
    """The text a sysctl is written as: booleans as 1/0, numbers and strings as they are."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float, str)):
        text = str(value).strip()
        if "\n" not in text and text:
            return text
    raise PrepareError("%s: %r is not a sysctl value" % (key, value), field="sysctls")


def sysctl_path(key, proc_sys=None):
    """/proc/sys path of a dotted (or slashed) sysctl name."""
    if not isinstance(key, str) or not _SYSCTL_KEY.match(key):
        raise PrepareError("%r is not a sysctl name" % (key,), field="sysctls")
    relative = key if "/" in key else key.replace(".", "/")
    return os.path.join(PROC_SYS if proc_sys is None else proc_sys, relative)


def same_value(current, wanted):
    """Compare as strings, whitespace-insensitive (the kernel prints tabs between numbers)."""
    return current is not None and current.split() == str(wanted).split()


def read_sysctl(key, proc_sys=None):
    """The current value as text, or None when the sysctl does not exist here."""
    try:
        with open(sysctl_path(key, proc_sys)) as f:
            return f.read().strip()
    except (IOError, OSError):
        return None


def write_sysctl(key, value, proc_sys=None):
    try:
        with open(sysctl_path(key, proc_sys), "w") as f:
            f.write(value + "\n")
    except (IOError, OSError) as e:
        raise PrepareError("cannot set %s = %s: %s" % (key, value, e), field="sysctls")


def sysctl_file_text(sysctls):
    """The boot file: one "key = value" line per sysctl, in the order given."""
    return "".join("%s = %s\n" % (key, value) for key, value in sysctls.items())


def read_file(path):
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return None


def write_file(path, text):
    try:
        write_atomic(path, text, 0o644, make_dirs=0o777)
    except (IOError, OSError) as e:
        raise PrepareError("cannot write %s: %s" % (path, e), field="sysctls")


def sysctl_values(sysctls, proc_sys=None):
    """The wanted text by sysctl name, values then names checked before anything is read."""
    values = dict((key, sysctl_value(key, value)) for key, value in (sysctls or {}).items())
    for key in values:
        sysctl_path(key, proc_sys)
    return values


# --- firewall -------------------------------------------------------------------------------


def detect_firewall(runner=run_command, which=shutil.which):
    """firewalld, ufw or nftables (the first active one), or None."""
    if which("firewall-cmd") and runner(["firewall-cmd", "--state"])[0] == 0:
        return "firewalld"
    if which("ufw"):
        rc, out, dummy = runner(["ufw", "status"])
        if rc == 0 and "Status: active" in out:
            return "ufw"
    if which("nft") and runner(["nft", "list", "chain"] + list(NFT_CHAIN))[0] == 0:
        return "nftables"
    return None


_NFT_OURS = re.compile(r'\budp dport (\d+) accept comment "%s"' % re.escape(NFT_COMMENT))
_NFT_HANDLE = re.compile(r"# handle (\d+)\s*$")


def nft_our_rules(listing):
    """[(port or None, handle)] of the rules carrying our comment in ``nft -a list chain`` text;
    port is None for a rule of ours that is not the plain UDP accept (edited by hand)."""
    rules = []
    for line in listing.splitlines():
        if 'comment "%s"' % NFT_COMMENT not in line:
            continue
        handle = _NFT_HANDLE.search(line)
        if not handle:
            continue
        match = _NFT_OURS.search(line)
        rules.append((int(match.group(1)) if match else None, int(handle.group(1))))
    return rules


def nft_port_plan(listing, port):
    """(add: bool, delete: [handle]) to leave exactly one rule of ours, for ``port``."""
    keep = None
    delete = []
    for rule_port, handle in nft_our_rules(listing):
        if rule_port == port and keep is None:
            keep = handle
        else:
            delete.append(handle)
    return keep is None, delete


def ufw_port_open(status, port):
    return re.search(r"^%d/udp\b" % port, status, re.MULTILINE) is not None


def port_plan(firewall, port, runner=run_command):
    """(open before, changes, commands) to open ``port``/udp in ``firewall``."""
    spec = "%d/udp" % port
    if firewall == "firewalld":
        if runner(["firewall-cmd", "-q", "--query-port=" + spec])[0] == 0:
            return True, [], []
        return (
            False,
            ["firewalld: open port %s" % spec],
            [
                ["firewall-cmd", "-q", "--add-port=" + spec],
                ["firewall-cmd", "-q", "--permanent", "--add-port=" + spec],
            ],
        )
    if firewall == "ufw":
        rc, out, err = runner(["ufw", "status"])
        if rc != 0:
            raise PrepareError("ufw status failed: %s" % (err or out).strip(), field="open_port")
        if ufw_port_open(out, port):
            return True, [], []
        return False, ["ufw: open port %s" % spec], [["ufw", "allow", spec]]
    if firewall == "nftables":
        rc, out, err = runner(["nft", "-a", "list", "chain"] + list(NFT_CHAIN))
        if rc != 0:
            raise PrepareError(
                "nft list chain %s failed: %s" % (" ".join(NFT_CHAIN), err.strip()),
                field="open_port",
            )
        add, delete = nft_port_plan(out, port)
        changes, commands = [], []
        if add:
            changes.append("nftables: open port %s" % spec)
            commands.append(
                ["nft", "insert", "rule"]
                + list(NFT_CHAIN)
                + ["udp", "dport", str(port), "accept", "comment", '"%s"' % NFT_COMMENT]
            )
        for handle in delete:
            changes.append("nftables: delete stale rule handle %d" % handle)
            commands.append(["nft", "delete", "rule"] + list(NFT_CHAIN) + ["handle", str(handle)])
        return not add, changes, commands
    return None, [], []


# --- all together: the install step as a Backend ---------------------------------------------


def install_settings(params):
    """The install step's checked options: install, open_port, backend, port, sysctls, agent."""
    backend = params.get("backend") or "auto"
    if backend not in ("auto", "kernel", "userspace"):
        raise PrepareError("%r is not auto, kernel or userspace" % (backend,), field="backend")
    settings = {
        "install": to_bool(params.get("install_packages"), field="install_packages", default=True),
        "open_port": to_bool(params.get("open_port"), field="open_port", default=True),
        "backend": backend,
        "port": to_int(params.get("port"), None, "port", *bounds("port"), default=DEFAULT_PORT),
        "sysctls": params.get("sysctls"),
    }
    if settings["sysctls"] is not None and not isinstance(settings["sysctls"], dict):
        raise PrepareError("must be a dict of sysctl name to value", field="sysctls")
    if settings["install"]:
        settings["agent"] = to_bool(params.get("agent"), field="agent", default=False)
    return settings


class InstallBackend(Backend):
    """What the install step wants of the host (packages, sysctls and their boot file, the port
    open in the active firewall), in converge's ``Backend`` shape. The plan it is handed is
    ``install_settings``' (None when removing).

    Packages are only probed: installing them is left to ``ansible.builtin.package`` (the
    ``missing`` of the reading). Removing takes what is ours: the boot file of the sysctls and
    the nftables rules carrying our comment in the ``inet filter`` input chain. Left alone, and
    said so in the module's documentation: the sysctls' runtime values (forwarding may be what the
    host's other software needs, a kubelet or a container runtime; the boot file gone, the next
    boot takes the system's own), a port opened in firewalld or ufw (neither marks who opened
    it), and the packages.
    """

    name = "prepare"

    def __init__(self, runner=run_command, which=shutil.which, proc_sys=None, sysctl_file=None):
        super(InstallBackend, self).__init__({})
        self.runner = runner
        self.which = which
        self.proc_sys = proc_sys
        self.sysctl_file = SYSCTL_FILE if sysctl_file is None else sysctl_file

    def current(self, plan):
        if plan is None:  # removing: what is ours
            rules = []
            if self.which("nft"):
                rc, out, dummy = self.runner(["nft", "-a", "list", "chain"] + list(NFT_CHAIN))
                if rc == 0:  # no such chain: no rule of ours
                    rules = nft_our_rules(out)
            return {"sysctl_file": read_file(self.sysctl_file), "nft_rules": rules}
        pkg_mgr = package_manager(self.which)
        kernel_module = kernel_module_available("wireguard")
        missing = []
        if plan["install"]:
            if pkg_mgr is None:
                raise PrepareError(
                    "no supported package manager (apt, dnf, pacman) found",
                    field="install_packages",
                )
            wanted = wanted_packages(pkg_mgr, plan["backend"], kernel_module, plan["agent"])
            missing = missing_packages(pkg_mgr, wanted, self.runner)
        values = sysctl_values(plan["sysctls"], self.proc_sys)
        return {
            "pkg_mgr": pkg_mgr,
            "kernel_module": kernel_module,
            "missing": missing,
            "sysctls": dict((key, read_sysctl(key, self.proc_sys)) for key in values),
            "sysctl_file": read_file(self.sysctl_file),
            "firewall": detect_firewall(self.runner, self.which),
        }

    def desired(self, plan, current):
        values = sysctl_values(plan["sysctls"], self.proc_sys)
        port_open, port_changes, port_commands = (None, [], [])
        if plan["open_port"]:
            port_open, port_changes, port_commands = port_plan(
                current["firewall"], plan["port"], self.runner
            )
        return {
            "sysctls": values,
            "sysctl_file": sysctl_file_text(values) if values else None,
            "port": plan["port"] if plan["open_port"] else None,
            "port_open": port_open,
            "port_changes": port_changes,
            "port_commands": port_commands,
        }

    def _file_changed(self, current, desired):
        before, after = current["sysctl_file"], desired["sysctl_file"]
        return (before or "") != (after or "") or (after is None and before is not None)

    def _to_set(self, current, desired):
        values, now = desired["sysctls"], current["sysctls"]
        return [k for k in values if now[k] is not None and not same_value(now[k], values[k])]

    def changes(self, current, desired):
        changes = []
        if self._file_changed(current, desired):
            verb = "write %s" if desired["sysctl_file"] is not None else "remove %s"
            changes.append(verb % self.sysctl_file)
        changes.extend(
            "sysctl %s = %s" % (key, desired["sysctls"][key])
            for key in self._to_set(current, desired)
        )
        return changes + desired["port_changes"]

    def apply(self, current, desired):
        if self._file_changed(current, desired):
            if desired["sysctl_file"] is None:
                try:
                    os.unlink(self.sysctl_file)
                except OSError as e:
                    raise PrepareError(
                        "cannot remove %s: %s" % (self.sysctl_file, e), field="sysctls"
                    )
            else:
                write_file(self.sysctl_file, desired["sysctl_file"])
        for key in self._to_set(current, desired):
            write_sysctl(key, desired["sysctls"][key], self.proc_sys)
        for argv in desired["port_commands"]:
            run_checked(argv, PrepareError, "open_port", runner=self.runner)

    def diff(self, current, desired):
        if desired is None:
            before = {
                "sysctl_file": current["sysctl_file"],
                "nftables_ports": [port for port, dummy in current["nft_rules"]],
            }
            return before, {"sysctl_file": None, "nftables_ports": []}
        now, values = current["sysctls"], desired["sysctls"]
        before = {"sysctls": dict(now), "sysctl_file": current["sysctl_file"]}
        after = {
            "sysctls": dict((k, values[k] if now[k] is not None else None) for k in values),
            "sysctl_file": desired["sysctl_file"],
        }
        if desired["port"] is not None and current["firewall"]:
            port = {"firewall": current["firewall"], "port": desired["port"]}
            before["port"] = dict(port, open=bool(desired["port_open"]))
            after["port"] = dict(port, open=True)
        return before, after

    def owns(self, current):
        return current["sysctl_file"] is not None or bool(current.get("nft_rules"))

    def removal(self, current):
        out = ["remove %s" % self.sysctl_file] if current["sysctl_file"] is not None else []
        out.extend(
            "nftables: delete rule handle %d (%s)"
            % (handle, "port %d/udp" % port if port else "edited")
            for port, handle in current["nft_rules"]
        )
        return out

    def remove(self, current):
        if current["sysctl_file"] is not None:
            try:
                os.unlink(self.sysctl_file)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise PrepareError("cannot remove %s: %s" % (self.sysctl_file, e), field="state")
        for dummy, handle in current["nft_rules"]:
            run_checked(
                ["nft", "delete", "rule"] + list(NFT_CHAIN) + ["handle", str(handle)],
                PrepareError,
                "state",
                runner=self.runner,
            )


def compare_install(
    params, runner=run_command, which=shutil.which, proc_sys=None, sysctl_file=None
):
    """The install step's one ``Step``: read and compared, nothing changed."""
    return compare(
        [InstallBackend(runner, which, proc_sys, sysctl_file)], install_settings(params)
    )[0]


def install_result(step):
    """What the install step did (or would), as kilo.mesh.prepare returns it: pkg_mgr,
    kernel_module, firewall, port, missing, unknown_sysctls, changes and diff (before, after)."""
    current = step.current
    return {
        "pkg_mgr": current["pkg_mgr"],
        "kernel_module": current["kernel_module"],
        "firewall": current["firewall"],
        "port": step.plan["port"],
        "missing": current["missing"],
        # site.yml removes an agent left on a host whose kilo_agent is now false
        "agent_installed": os.path.exists(AGENT_CONFIG),
        "package_args": dict(PACKAGE_ARGS.get(current["pkg_mgr"], {})),
        "unknown_sysctls": [k for k, v in current["sysctls"].items() if v is None],
        "changed": bool(step.changes),
        "changes": step.changes,
        "diff": {"before": step.before, "after": step.after},
    }


def prepare(
    params, check_mode, runner=run_command, which=shutil.which, proc_sys=None, sysctl_file=None
):
    """Probe and prepare the host (``InstallBackend``); write nothing in check mode.

    ``params``: install_packages, open_port, sysctls, backend, port. Returns what
    ``install_result`` says."""
    step = compare_install(params, runner, which, proc_sys, sysctl_file)
    if not check_mode:
        carry_out([step])
    return install_result(step)


def unprepare(check_mode, runner=run_command, which=shutil.which, sysctl_file=None):
    """``state: absent``: remove what ``prepare`` wrote that is ours (``InstallBackend``); nothing
    in check mode. Returns changed, changes and diff (before, after)."""
    backend = InstallBackend(runner, which, sysctl_file=sysctl_file)
    step = run([backend], None, check_mode, absent=True)[0]
    return {
        "changed": bool(step.changes),
        "changes": step.changes,
        "diff": {"before": step.before, "after": step.after},
    }


# --- for the modules that run it (kilo.mesh.prepare, kilo.mesh.key with prepare) ----------------


def prepare_module_host(module):
    """prepare() with an AnsibleModule's options and check mode: a KiloError fails the module,
    an unknown sysctl warns, and the diff stays only in diff mode."""
    try:
        if module.params.get("state") == "absent":
            result = unprepare(check_mode=module.check_mode)
        else:
            result = prepare(module.params, check_mode=module.check_mode)
    except KiloError as e:
        module.fail_json(msg=str(e))
    return module_view(module, result)


def module_view(module, result):
    """An install step's result as a module returns it: an unknown sysctl warns, and the diff
    stays only in diff mode."""
    for key in result.get("unknown_sysctls", ()):
        module.warn("sysctl %s does not exist on this kernel: written to the boot file only" % key)
    if not module._diff:
        result.pop("diff")
    return result


def diff_of(result):
    """{"diff": ...} taken out of a prepare() result, or {} when it has none."""
    diff = result.pop("diff", None)
    return {"diff": diff} if diff else {}
