# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The agent on its host: its files, its service, and whether to keep its credentials.

What the ``kilo.mesh.agent`` module does, without Ansible (the VM test drives it directly):

* the zip application (``app``), the JSON configuration (0600) and the kubeconfig (0600), each
  replaced atomically and only when it differs;
* under systemd (PID 1 is systemd) the unit ``kilo-mesh-agent.service`` (``unit_text``):
  ``Restart=always``, only CAP_NET_ADMIN and CAP_NET_RAW, the system read-only except the
  paths the backends write; reloaded only when the unit changed, restarted only when the app,
  the configuration or the kubeconfig changed;
* without systemd (a container, the netns lab) a supervisor in a session of its own
  (``supervise.py``, ``python3 APP --supervise``) that starts the agent again when it dies; its
  PID in ``/run/kilo/kilo-mesh-agent.pid`` (``process.OwnedProcess``), and only a process
  running our app is signalled;
* the kubeconfig's token is kept while the server, CA and identity are the same and it is not
  past a third of its life (``token_fresh``, from the JWT's own claims, not verified here: the
  API server verifies it).

Standard library only; /usr/bin/python3 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import json
import os
import signal
import time

from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import (
    file_digest,
    install_verified,
    read_bytes,
    write_atomic,
)
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import Backend, run
from ansible_collections.kilo.mesh.plugins.module_utils.host.boot import (
    STORE_DIR,
    UNIT_NAME as BOOT_UNIT,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.systemd import (
    RUNTIME_UNIT_DIR,
    install_unit,
    is_enabled,
    remove_unit,
    systemctl,
    systemctl_checked,
    systemd_running,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.process import (
    RUN_DIR,
    OwnedProcess,
    alive,
    cmdline,
)
from ansible_collections.kilo.mesh.plugins.module_utils.options import (
    DEFAULT_AGENT_APP,
    DEFAULT_AGENT_CONFIG,
    DEFAULT_AGENT_KUBECONFIG,
    DEFAULT_KEY_PATH,
)

UNIT_NAME = "kilo-mesh-agent.service"
UNIT_PATH = "/etc/systemd/system/" + UNIT_NAME
PYTHON = "/usr/bin/python3"
# The supervisor (no systemd): its PID file and the agent's output, NAME.pid and NAME.log in RUN_DIR.
NAME = "kilo-mesh-agent"
STOP_TIMEOUT = 15.0
# A token is renewed once this share of its life has passed.
TOKEN_RENEW_AT = 1.0 / 3
# What the backends write besides the key and CNI directories (from the configuration):
# daemons' PID files, wireguard-go's UAPI sockets. "-": a missing path is no error.
WRITABLE = ("/run/kilo", "/run/wireguard")
# nft, ip and netlink need CAP_NET_ADMIN; iptables (legacy) opens a raw socket: CAP_NET_RAW.
# wireguard-go needs CAP_NET_ADMIN for /dev/net/tun. Nothing else: no module loading, no
# ptrace, no file access past the owner's modes (CAP_DAC_OVERRIDE) - the agent runs as root
# and every file it touches is root's.
CAPABILITIES = ("CAP_NET_ADMIN", "CAP_NET_RAW")


class AgentError(KiloError):
    """The agent could not be installed, started or stopped as asked."""


# --- files -----------------------------------------------------------------------------------


def config_text(config):
    """The configuration file's text: sorted keys, so equal configurations are equal bytes."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


# --- the kubeconfig and its token --------------------------------------------------------------


def jwt_claims(token):
    """The claims of a JWT (its middle part), unverified; None when it is not one."""
    parts = (token or "").split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload.encode("ascii")).decode("utf-8"))
    except (ValueError, TypeError, UnicodeError):
        return None
    return claims if isinstance(claims, dict) else None


def token_fresh(claims, now=None):
    """Whether a token with these claims is within the first third of its life (iat..exp)."""
    if not claims:
        return False
    iat, exp = claims.get("iat"), claims.get("exp")
    if not isinstance(iat, (int, float)) or not isinstance(exp, (int, float)) or exp <= iat:
        return False
    now = time.time() if now is None else now
    return now < iat + (exp - iat) * TOKEN_RENEW_AT


def token_identity(claims):
    """(subject, service account UID) a Kubernetes service account token names."""
    account = ((claims or {}).get("kubernetes.io") or {}).get("serviceaccount") or {}
    return (claims or {}).get("sub"), account.get("uid")


def kubeconfig_cluster(wanted):
    """The cluster entry for ``wanted`` (server, ca_data (base64 PEM) or insecure)."""
    cluster = {"server": wanted["server"]}
    if wanted.get("ca_data"):
        cluster["certificate-authority-data"] = wanted["ca_data"]
    elif wanted.get("insecure"):
        cluster["insecure-skip-tls-verify"] = True
    return cluster


def kubeconfig_text(wanted, token):
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "kilo-mesh-agent",
        "clusters": [{"name": "kilo-mesh", "cluster": kubeconfig_cluster(wanted)}],
        "users": [{"name": "kilo-mesh-agent", "user": {"token": token}}],
        "contexts": [
            {
                "name": "kilo-mesh-agent",
                "context": {"cluster": "kilo-mesh", "user": "kilo-mesh-agent"},
            }
        ],
    }
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def read_kubeconfig(path):
    """(cluster entry, token) of a kubeconfig written by ``kubeconfig_text``; (None, None) otherwise."""
    data = read_bytes(path)
    try:
        config = json.loads(data.decode("utf-8")) if data is not None else None
        cluster = config["clusters"][0]["cluster"]
        token = config["users"][0]["user"]["token"]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, UnicodeError):
        return None, None
    return cluster, token


def kubeconfig_verdict(path, wanted, now=None):
    """Why the kubeconfig at ``path`` must be written for ``wanted`` (server, ca_data/insecure,
    subject, uid), or None to keep it."""
    cluster, token = read_kubeconfig(path)
    if cluster is None:
        return "missing" if read_bytes(path) is None else "not ours"
    if cluster != kubeconfig_cluster(wanted):
        return "API server or CA differ"
    claims = jwt_claims(token)
    subject, uid = token_identity(claims)
    if subject != wanted["subject"] or (wanted.get("uid") and uid != wanted["uid"]):
        return "identity differs"
    if not token_fresh(claims, now):
        return "token past a third of its life"
    return None


def kubeconfig_shown(path):
    """The kubeconfig as a diff shows it: no token, only what it names and when it expires."""
    cluster, token = read_kubeconfig(path)
    if cluster is None:
        return None
    claims = jwt_claims(token) or {}
    shown = dict(cluster)
    if "certificate-authority-data" in shown:
        shown["certificate-authority-data"] = (
            "sha256:"
            + hashlib.sha256(shown["certificate-authority-data"].encode()).hexdigest()[:16]
        )
    shown["subject"], shown["uid"] = token_identity(claims)
    shown["token_expires"] = claims.get("exp")
    return shown


# --- the systemd unit ----------------------------------------------------------------------------


def writable_paths(config):
    """What the agent writes: the key's and the CNI configuration's directories, the run dirs."""
    settings, key = config.get("settings") or {}, config.get("key") or {}
    paths = []
    for path in (key.get("key_path") or settings.get("key_path"), settings.get("cni_path")):
        if path:
            paths.append(os.path.dirname(os.path.abspath(path)))
    paths.append(STORE_DIR)  # the stored plan the boot restore reads (host/boot.py)
    paths.extend(WRITABLE)
    # the userspace daemon's unit (wireguard.daemon); never a RuntimeDirectory= of ours
    paths.append(RUNTIME_UNIT_DIR)
    out = []
    for path in paths:
        if path not in out:
            out.append(path)
    return out


def unit_text(app, config_path, config, python=PYTHON):
    """The systemd unit of the agent."""
    rw = " ".join("-" + p for p in writable_paths(config))
    caps = " ".join(CAPABILITIES)
    return "\n".join(
        [
            "# Written by the Ansible module kilo.mesh.agent; changes here are undone by its next run.",
            "[Unit]",
            "Description=kilo.mesh agent: keeps this node in the WireGuard mesh",
            "Documentation=https://github.com/squat/kilo",
            "Wants=network-online.target",
            # after the boot restore where push runs left one: one converge at a time either way
            "After=network-online.target %s" % BOOT_UNIT,
            "",
            "[Service]",
            "Type=simple",
            "ExecStart=%s %s --config %s" % (python, app, config_path),
            "Restart=always",
            "RestartSec=2",
            "KillMode=mixed",
            "TimeoutStopSec=%d" % int(STOP_TIMEOUT),
            "CapabilityBoundingSet=%s" % caps,
            "AmbientCapabilities=%s" % caps,
            "NoNewPrivileges=yes",
            "SecureBits=noroot-locked",
            "ProtectSystem=strict",
            "ReadWritePaths=%s" % rw,
            # /run is a tmpfs: after a reboot /run/kilo and /run/wireguard are gone, and under
            # ProtectSystem=strict the agent could not make them (the plan file, wireguard-go's socket)
            "RuntimeDirectory=%s" % " ".join(os.path.relpath(p, "/run") for p in WRITABLE),
            "RuntimeDirectoryPreserve=yes",
            "ProtectHome=yes",
            "PrivateTmp=yes",
            "ProtectKernelLogs=yes",
            "ProtectControlGroups=yes",
            "ProtectClock=yes",
            "ProtectHostname=yes",
            "DevicePolicy=closed",
            "DeviceAllow=/dev/net/tun rw",
            "RestrictAddressFamilies=AF_UNIX AF_NETLINK AF_INET AF_INET6",
            "RestrictNamespaces=yes",
            "RestrictRealtime=yes",
            "RestrictSUIDSGID=yes",
            "LockPersonality=yes",
            "SystemCallArchitectures=native",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def unit_state():
    """(active, enabled, main PID) of the unit."""
    active = systemctl("is-active", UNIT_NAME)[1] == "active"
    enabled = is_enabled(UNIT_NAME)
    pid = systemctl("show", "-p", "MainPID", "--value", UNIT_NAME)[1]
    return active, enabled, int(pid) if pid.isdigit() and int(pid) > 0 else None


# --- the supervisor (no systemd) ------------------------------------------------------------------


class Supervisor(object):
    """The supervisor of ``app`` started by us, found by its PID file and its command line."""

    def __init__(self, app, config_path, python=PYTHON, run_dir=None):
        self.app = app
        self.config_path = config_path
        self.python = python
        self.run_dir = run_dir or RUN_DIR
        self.process = OwnedProcess(
            NAME, lambda args: self.runs_app(args) and b"--supervise" in args, self.run_dir
        )

    @property
    def pidfile(self):
        return self.process.pidfile

    @property
    def logfile(self):
        return self.process.logfile

    def argv(self):
        return [self.python, self.app, "--supervise", "--config", self.config_path]

    def runs_app(self, args):
        """Whether a command line (bytes arguments) runs our app (the supervisor or the agent)."""
        return self.app.encode() in args

    def _agent(self, pid):
        """Whether ``pid`` runs our app (an agent the supervisor started)."""
        args = cmdline(pid)
        return bool(args) and alive(pid) and self.runs_app(args)

    def pid(self):
        """The supervisor's PID when it runs, else None."""
        return self.process.pid()

    def agent_pid(self):
        """The PID of the agent the supervisor runs now, else None."""
        sup = self.pid()
        if sup is None:
            return None
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            stat = read_bytes("/proc/%s/stat" % name)
            try:
                ppid = int(stat.rsplit(b")", 1)[1].split()[1])
            except (AttributeError, IndexError, ValueError):
                continue
            if ppid == sup and self._agent(int(name)):
                return int(name)
        return None

    def start(self):
        try:
            proc = self.process.spawn(self.argv(), cwd="/", append=True)
        except OSError as e:
            raise AgentError("cannot start %s: %s" % (self.python, e))
        # a supervisor that cannot even start (bad interpreter, broken app) fails the task
        deadline = time.time() + 2.0
        while time.time() < deadline:
            if proc.poll() is not None:
                self.process.forget(log=False)
                raise AgentError(
                    "the agent's supervisor exited at once (rc %s): %s"
                    % (proc.returncode, self.process.log_tail(600))
                )
            time.sleep(0.1)
        return proc.pid

    def stop(self):
        """Stop the supervisor (it stops the agent) and whatever of its session stays; True when one ran."""
        pid = self.pid()
        if pid is not None:
            self.process.terminate(pid, STOP_TIMEOUT + 2)
            # an agent left behind by a supervisor that was killed: its session, our app only
            for name in os.listdir("/proc"):
                if name.isdigit() and int(name) != os.getpid() and self._in_session(int(name), pid):
                    os.kill(int(name), signal.SIGKILL)
        self.process.forget(log=False)
        return pid is not None

    def _in_session(self, pid, session):
        stat = read_bytes("/proc/%d/stat" % pid)
        try:
            sid = int(stat.rsplit(b")", 1)[1].split()[4])
        except (AttributeError, IndexError, ValueError):
            return False
        return sid == session and self._agent(pid)


# --- present and absent ---------------------------------------------------------------------------


def paths_of(params):
    return dict(
        app=params.get("app_path") or DEFAULT_AGENT_APP,
        config=params.get("config_path") or DEFAULT_AGENT_CONFIG,
        kubeconfig=params.get("kubeconfig_path") or DEFAULT_AGENT_KUBECONFIG,
    )


def use_systemd(manager):
    if manager == "auto":
        return systemd_running()
    return manager == "systemd"


class AgentBackend(Backend):
    """The agent on this host, in converge's ``Backend`` shape: its app, configuration and
    kubeconfig, under systemd its unit (enabled, and the paths it writes made), else its
    supervisor; running, and restarted when a file changed. The plan it is handed is
    ``wanted(params)`` (None when removing). ``need`` names what the caller must send before
    anything can change ("app", "token"); ``pid`` and ``restarted`` say what ``apply`` left."""

    name = "agent"

    def __init__(self, params, now=None):
        super(AgentBackend, self).__init__({})
        self.paths = paths_of(params)
        self.python = params.get("python") or PYTHON
        self.now = now
        self.sup = Supervisor(self.paths["app"], self.paths["config"], self.python)
        self.systemd = False
        self.need = []
        self.pid = None
        self.restarted = False

    def current(self, plan):
        paths = self.paths
        if plan is None:  # removing
            files = [
                p
                for p in (paths["app"], paths["kubeconfig"], self.sup.logfile, self.sup.pidfile)
                + (paths["config"],)
                if os.path.exists(p)
            ]
            return {
                "unit": os.path.exists(UNIT_PATH),
                "supervisor": self.sup.pid(),
                "files": files,
                "kubeconfig": kubeconfig_shown(paths["kubeconfig"]),
            }
        self.systemd = use_systemd(plan["service_manager"])
        config = read_bytes(paths["config"])
        unit = read_bytes(UNIT_PATH) if self.systemd else None
        current = {
            "app": file_digest(paths["app"]),
            "config": (config or b"").decode("utf-8", "replace") or None,
            "kubeconfig": kubeconfig_shown(paths["kubeconfig"]),
            "unit": (unit or b"").decode("utf-8", "replace") or None if self.systemd else None,
        }
        if self.systemd:
            active, enabled, pid = unit_state() if unit is not None else (False, False, None)
            current.update(running=active, enabled=enabled, pid=pid)
        else:
            pid = self.sup.pid()
            current.update(running=pid is not None, enabled=True, pid=pid)
        self.pid = pid
        return current

    def desired(self, plan, current):
        paths, config = self.paths, plan["config"]
        desired = {
            "app": plan["app_digest"],
            "config": config_text(config),
            # why the kubeconfig must be written (None: kept)
            "kubeconfig": kubeconfig_verdict(paths["kubeconfig"], plan["kubeconfig"], self.now),
            "unit": unit_text(paths["app"], paths["config"], config, self.python)
            if self.systemd
            else None,
            # a writable path must exist when the unit starts, or it stays read-only for the agent
            "dirs": [p for p in writable_paths(config) if not os.path.isdir(p)]
            if self.systemd
            else [],
            # what apply writes: the app's source, the kubeconfig's token (never in the diff)
            "plan": plan,
        }
        self.need = []
        if desired["app"] != current["app"] and not plan.get("app_src"):
            self.need.append("app")
        if desired["kubeconfig"] and not plan.get("token"):
            self.need.append("token")
        return desired

    def _files_changed(self, current, desired):
        return (
            desired["app"] != current["app"]
            or desired["config"] != (current["config"] or "")
            or bool(desired["kubeconfig"])
        )

    def _unit_changed(self, current, desired):
        return self.systemd and (current["unit"] or "") != desired["unit"]

    def changes(self, current, desired):
        paths = self.paths
        changes = []
        if desired["app"] != current["app"]:
            changes.append("write %s" % paths["app"])
        if desired["config"] != (current["config"] or ""):
            changes.append("write %s" % paths["config"])
        if desired["kubeconfig"]:
            changes.append("write %s (%s)" % (paths["kubeconfig"], desired["kubeconfig"]))
        if self._unit_changed(current, desired):
            changes.append("write %s" % UNIT_PATH)
        if not current["running"]:
            changes.append("start the agent")
        elif self._files_changed(current, desired) or self._unit_changed(current, desired):
            changes.append("restart the agent")
        if self.systemd and not current["enabled"]:
            changes.append("enable %s" % UNIT_NAME)
        changes.extend("create directory %s" % p for p in desired["dirs"])
        return changes

    def apply(self, current, desired):
        paths, want = self.paths, desired["plan"]
        files_changed = self._files_changed(current, desired)
        if desired["app"] != current["app"]:
            try:
                install_verified(paths["app"], want["app_src"], want["app_digest"])
            except ValueError as e:
                raise AgentError(str(e))
        if desired["config"] != (current["config"] or ""):
            write_atomic(paths["config"], desired["config"], 0o600, make_dirs=0o700)
        if desired["kubeconfig"]:
            text = kubeconfig_text(want["kubeconfig"], want["token"])
            write_atomic(paths["kubeconfig"], text, 0o600, make_dirs=0o700)
        if not self.systemd:
            if current["running"] and files_changed:
                self.sup.stop()
                self.restarted = True
            if not current["running"] or files_changed:
                self.sup.start()
            self.pid = self.sup.pid()
            return
        key_path = (want["config"].get("key") or {}).get("key_path") or DEFAULT_KEY_PATH
        key_dir = os.path.dirname(os.path.abspath(key_path))
        for path in desired["dirs"]:
            os.makedirs(path, 0o700 if path in (key_dir, STORE_DIR) else 0o755)
        if self._unit_changed(current, desired):
            install_unit(UNIT_PATH, desired["unit"])
        if not current["enabled"]:
            systemctl_checked("enable", UNIT_NAME, error=AgentError)
        if not current["running"]:
            systemctl_checked("start", UNIT_NAME, error=AgentError)
        elif files_changed or self._unit_changed(current, desired):
            systemctl_checked("restart", UNIT_NAME, error=AgentError)
            self.restarted = True
        self.pid = unit_state()[2]

    def diff(self, current, desired):
        if desired is None:
            before = dict(installed=self.owns(current), kubeconfig=current["kubeconfig"])
            return before, dict(installed=False, kubeconfig=None)
        before = dict(
            app=current["app"],
            config=current["config"],
            kubeconfig=current["kubeconfig"],
            running=current["running"],
        )
        after = dict(
            app=desired["app"],
            config=desired["config"],
            running=True,
            # the new token's claims are known once it is written (present() reads them then)
            kubeconfig=dict(current["kubeconfig"] or {}, note="a new token")
            if desired["kubeconfig"]
            else current["kubeconfig"],
        )
        if self.systemd:
            before["unit"], after["unit"] = current["unit"], desired["unit"]
        return before, after

    def owns(self, current):
        return bool(self.removal(current))

    def removal(self, current):
        changes = []
        if current["unit"]:
            changes.append("stop and disable %s" % UNIT_NAME)
        if current["supervisor"] is not None:
            changes.append("stop the agent's supervisor")
        files = current["files"] + ([UNIT_PATH] if current["unit"] else [])
        return changes + ["remove %s" % p for p in files]

    def remove(self, current):
        if current["unit"]:
            remove_unit(UNIT_PATH)
        self.sup.stop()
        for path in current["files"]:
            if os.path.exists(path):
                os.unlink(path)
        for directory in (
            os.path.dirname(self.paths["app"]),
            os.path.dirname(self.paths["config"]),
        ):
            try:
                os.rmdir(directory)  # only when empty
            except OSError:
                pass


def wanted(params):
    """What ``present`` is asked for, as ``AgentBackend`` takes it: the configuration with its
    ``kubernetes.kubeconfig`` set here."""
    config = dict(params["config"])
    config["kubernetes"] = {"kubeconfig": paths_of(params)["kubeconfig"]}
    return dict(
        app_digest=params["app_digest"],
        app_src=params.get("app_src"),
        config=config,
        kubeconfig=params["kubeconfig"],
        token=params.get("token"),
        service_manager=params.get("service_manager") or "auto",
    )


def present(params, check_mode=False, now=None):
    """Install, configure and start the agent (``AgentBackend``).

    ``params``: app_digest (sha256 of the zip), app_src (a file holding it, when the host needs
    it), config (dict; its ``kubernetes.kubeconfig`` is set here), kubeconfig (server, ca_data or
    insecure, subject, uid), token (only when the host needs one), python, service_manager,
    app_path, config_path, kubeconfig_path.

    Returns a dict: ``need`` (what the caller must send: "app", "token"; nothing was changed),
    or changed, changes, service, pid, restarted and diff (before, after; no token).
    """
    backend = AgentBackend(params, now)
    step = run([backend], wanted(params), check_mode)[0]
    if backend.need and not check_mode:
        return {"need": backend.need, "changed": False}
    if step.changes and not check_mode:
        step.after["kubeconfig"] = kubeconfig_shown(backend.paths["kubeconfig"])
    return dict(
        changed=bool(step.changes),
        changes=step.changes,
        service="systemd" if backend.systemd else "supervisor",
        pid=backend.pid,
        restarted=backend.restarted,
        need=[],
        diff=dict(before=step.before, after=step.after),
    )


def installed(params=None):
    """Whether anything of the agent is on this host (its configuration, unit or supervisor)."""
    paths = paths_of(params or {})
    return any(
        os.path.exists(p)
        for p in (paths["config"], UNIT_PATH, os.path.join(RUN_DIR, NAME + ".pid"))
    )


def absent(params, check_mode=False):
    """Stop the agent and remove its files (``AgentBackend``); the mesh stays as the agent left it."""
    step = run([AgentBackend(params)], None, check_mode, absent=True)[0]
    return dict(
        changed=bool(step.changes),
        changes=step.changes,
        need=[],
        pid=None,
        restarted=False,
        diff=dict(before=step.before, after=step.after),
    )
