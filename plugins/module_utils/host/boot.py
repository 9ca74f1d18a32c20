# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Boot restore: a host brought back to its last converged plan by the same converge.

In push mode everything a converge sets is runtime state (netlink, nftables, a daemon) and a
reboot wipes it. So after a converge the ``boot`` backend (the last of ``converge.backends_for``)
keeps on the host's own disk:

* the stored plan (``PLAN_PATH``, 0600): the plan and the host settings the converge ran with
  (``TRANSIENT`` left out); no key of any kind in it;
* the preshared keys (``PSK_PATH``, 0600), only when the plan has some;
* when the module ships it (``app``): the collection's zip application (``APP_PATH``, a copy of
  its own beside the agent's) and the unit ``kilo-mesh.service``, enabled where PID 1 is systemd,
  whose ``ExecStart`` is ``python3 APP --restore PLAN_PATH``.

``restore(path)`` (``--restore``) reads the stored plan, checks it and runs ``converge.converge``
on it: the interface, its peers, addresses, routes, rules, firewall and CNI file come back by
difference. A missing, unreadable or invalid file raises ``RestoreError`` naming the file before
anything changes; the unit then fails and the machine boots on. The agent keeps its plan in the
same file (it converges with this backend too, without ``app``) and restores it before it asks
the API server anything.

Standard library only; /usr/bin/python3 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shlex
import sys
import time

from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import (
    file_digest,
    install_verified,
    read_text,
    write_atomic,
)
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import (
    Backend,
    Busy,
    backends_for,
    converge,
    converge_lock,
    host_settings,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.systemd import (
    UNIT_DIR,
    install_unit,
    is_enabled,
    remove_unit,
    systemctl_checked,
    systemd_running,
)
from ansible_collections.kilo.mesh.plugins.module_utils.options import (
    DEFAULT_BOOT_APP,
    DEFAULT_INTERFACE,
)

STORE_DIR = "/var/lib/kilo"
APP_PATH = DEFAULT_BOOT_APP
PLAN_PATH = STORE_DIR + "/mesh-plan.json"
PSK_PATH = STORE_DIR + "/mesh-preshared-keys.json"
UNIT_NAME = "kilo-mesh.service"
PYTHON = "/usr/bin/python3"
# The stored plan's format: a restore refuses any other (a file written by a later collection).
FORMAT = 1
# How long the unit may take at boot (wireguard-go's start is bounded at 15 s): past it systemd
# fails the unit and the boot goes on.
START_TIMEOUT = 90
# Settings a restore must not take from the file: one run's requests, never a host's state.
# route_conflict too: a run told to take foreign routes over (-e kilo_route_conflict=replace, after
# Kilo's agent crashed) must not leave that permission to every later boot, nor make the next plain
# run report a change for putting "fail" back; a restore takes no foreign route over.
TRANSIENT = ("state", "pending_public_key", "route_conflict")
# How long a restarted userspace daemon's restore waits for a converge in progress (the unit's
# ExecStartPost has systemd's 90 s)
AFTER_RESTART_WAIT = 75.0


class RestoreError(KiloError):
    """The stored plan cannot be restored."""


def unit_path():
    return os.path.join(UNIT_DIR, UNIT_NAME)


def stored_text(plan, settings):
    """The stored plan's text: sorted keys, so the same plan and settings are the same bytes."""
    kept = dict((k, v) for k, v in sorted(settings.items()) if k not in TRANSIENT)
    return (
        json.dumps({"format": FORMAT, "plan": plan, "settings": kept}, sort_keys=True, indent=1)
        + "\n"
    )


def comparable(text):
    """The stored plan's text with what changes without any host change left out: the endpoint of
    a roaming peer (the address other hosts saw it at; WireGuard keeps the one it learned anyway)."""
    try:
        data = json.loads(text)
        for peer in data["plan"].get("peers") or ():
            if peer.get("roaming"):
                peer["endpoint"] = None
    except (ValueError, TypeError, KeyError, AttributeError):
        return text
    return json.dumps(data, sort_keys=True)


def psk_text(preshared_keys):
    return json.dumps(preshared_keys, sort_keys=True, indent=1) + "\n" if preshared_keys else None


def unit_text(app, plan_path=PLAN_PATH, python=PYTHON):
    """The boot unit: once at boot, after the network, before kubelet; never holds the boot."""
    return "\n".join(
        [
            "# Written by the Ansible module kilo.mesh.converge; changes here are undone by its next run.",
            "[Unit]",
            "Description=kilo.mesh: this host's WireGuard mesh as its last converge left it",
            "Documentation=https://github.com/squat/kilo",
            "Wants=network-online.target",
            "After=network-online.target",
            "Before=kubelet.service",
            "",
            "[Service]",
            "Type=oneshot",
            "RemainAfterExit=yes",
            "ExecStart=%s %s --restore %s" % (python, app, plan_path),
            "TimeoutStartSec=%d" % START_TIMEOUT,
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


# --- the restore ---------------------------------------------------------------------------------


def read_store(path, psk_path=None):
    """(plan, settings, preshared keys) of the stored plan at ``path``; RestoreError names the file."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except (IOError, OSError) as e:
        raise RestoreError("cannot read the stored plan: %s" % (e.strerror or e), path)
    except (ValueError, UnicodeError) as e:
        raise RestoreError("not a stored plan (invalid JSON: %s)" % e, path)
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("plan"), dict)
        or not isinstance(data.get("settings"), dict)
    ):
        raise RestoreError(
            "not a stored plan (an object with 'plan' and 'settings' expected)", path
        )
    if data.get("format") != FORMAT:
        raise RestoreError(
            "stored in format %r, this restore reads format %d: run the collection again"
            % (data.get("format"), FORMAT),
            path,
        )
    keys = {}
    psk_path = psk_path or os.path.join(os.path.dirname(path), os.path.basename(PSK_PATH))
    if os.path.exists(psk_path):
        try:
            with open(psk_path, "rb") as f:
                keys = json.loads(f.read().decode("utf-8"))
        except (IOError, OSError, ValueError, UnicodeError) as e:
            raise RestoreError("cannot read the preshared keys: %s" % e, psk_path)
        if not isinstance(keys, dict):
            raise RestoreError("not a map of preshared keys", psk_path)
    return data["plan"], data["settings"], keys


def after_restart_command(app, path=PLAN_PATH, python=PYTHON):
    """The userspace daemon unit's ExecStartPost (``wireguard.daemon``): after systemd restarted a
    daemon that died, its interface is empty; this fills it from the stored plan.

    A shell checks that the app is there: the first converge starts the daemon (the WireGuard
    backend) before the boot backend installs the app, and python3 would log "can't open file"
    for a restore that has nothing to do yet. No "$" in it: systemd expands those."""
    return [
        "/bin/sh",
        "-c",
        "test -e %s || exit 0; exec %s %s --restore %s --after-restart"
        % tuple(shlex.quote(a) for a in (app, python, app, path)),
    ]


def restore(path=PLAN_PATH, check_mode=False, backends=None, locked=False):
    """Converge this host to the plan stored at ``path``; the converge's result.

    The file is read and the plan checked before any backend reads the host, so a stored plan
    this host cannot take changes nothing (RestoreError, naming the file). A peer whose endpoint
    does not resolve (DNS not up yet at boot) is configured without one, with a warning, rather
    than keeping the whole host out of the mesh."""
    from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan

    plan, settings, keys = read_store(path)
    # every host option, the stored values over the defaults: a setting left out of the file (one
    # run's request such as route_conflict, or an option added since) takes its default
    settings = host_settings(dict(settings, state="present"))
    try:
        check_plan(plan, settings["interface"])
    except KiloError as e:
        raise RestoreError("%s" % e, path)
    own = backends is None
    if own:
        backends = backends_for(settings, keys)
        for backend in backends:
            backend.lenient_endpoints = True
    if not own or check_mode or locked:
        return converge(
            plan, settings, check_mode=check_mode, preshared_keys=keys, backends=backends
        )
    with converge_lock():
        return converge(plan, settings, preshared_keys=keys, backends=backends)


def _wait_for_socket(path, timeout=15.0):
    """After a restart, until the daemon's UAPI socket of the stored plan's interface answers."""
    from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.uapi import (
        socket_path,
        wait_for_socket,
    )

    plan, settings, _keys = read_store(path)
    wait_for_socket(
        socket_path(settings.get("interface") or plan.get("interface") or DEFAULT_INTERFACE),
        timeout,
    )


def main(argv, out=None):
    """``APP --restore [PATH] [--after-restart]``: exit 0 when the host is at its stored plan, 1
    otherwise. ``--after-restart`` (the userspace daemon's unit): nothing to do when no plan is
    stored; it waits for a converge in progress (which may have started the daemon) and then
    converges the plan that converge stored, which is then in place: nothing to do."""
    out = out or sys.stderr
    argv = list(argv)
    after_restart = "--after-restart" in argv
    if after_restart:
        argv.remove("--after-restart")
    path = argv[0] if argv else PLAN_PATH
    start = time.time()
    if after_restart:
        if not os.path.exists(path):
            return 0
        try:
            with converge_lock(timeout=AFTER_RESTART_WAIT):
                _wait_for_socket(path)
                return _report(path, start, out, locked=True)
        except Busy as e:
            out.write("kilo-mesh restore: %s; left to it\n" % e)
            return 0
    return _report(path, start, out)


def _report(path, start, out, locked=False):
    try:
        result = restore(path, locked=locked)
    except RestoreError as e:
        out.write("kilo-mesh restore: %s; nothing changed\n" % e)
        return 1
    except KiloError as e:
        out.write("kilo-mesh restore: %s: %s\n" % (path, e))
        return 1
    except Exception as e:  # pylint: disable=broad-exception-caught
        # a half-applied restore says which step broke; the unit fails and the boot goes on
        out.write("kilo-mesh restore: %s: %s: %s\n" % (path, type(e).__name__, e))
        return 1
    changes = result.get("changes") or {}
    count = sum(len(v) for v in changes.values())
    out.write(
        "kilo-mesh restore: %s: %s in %.2f s%s\n"
        % (
            path,
            "%d changes" % count if count else "already in place",
            time.time() - start,
            "".join(
                "\n  %s: %s" % (name, "; ".join(items)) for name, items in sorted(changes.items())
            ),
        )
    )
    for warning in result.get("warnings") or ():
        out.write("kilo-mesh restore: warning: %s\n" % warning)
    return 0


# --- the backend -----------------------------------------------------------------------------------


class BootBackend(Backend):
    """The stored plan, the preshared keys, and (``app`` given) the app and the boot unit.

    ``app``: {"digest": sha256 of the zip, "src": a file holding it on the host, or None}; None
    when the caller ships no app (the agent, a restore), which keeps only the stored plan.
    ``need`` names what the caller must send before anything can change ("app")."""

    name = "boot"

    def __init__(
        self,
        settings,
        preshared_keys=None,
        app=None,
        plan_path=PLAN_PATH,
        psk_path=PSK_PATH,
        app_path=APP_PATH,
    ):
        super(BootBackend, self).__init__(settings, preshared_keys)
        self.preshared_keys = preshared_keys or {}
        self.app = app
        self.plan_path = plan_path
        self.psk_path = psk_path
        self.app_path = app_path
        self.systemd = systemd_running()
        self.need = []
        self.warnings = []

    def current(self, plan):
        unit = read_text(unit_path())
        return {
            "plan": read_text(self.plan_path),
            "psk": read_text(self.psk_path),
            "unit": unit,
            "enabled": is_enabled(UNIT_NAME) if self.systemd and unit is not None else False,
            "app": file_digest(self.app_path),
        }

    def desired(self, plan, current):
        if not self.settings.get("boot_restore", True):
            return {"plan": None, "psk": None, "unit": None, "enabled": False, "app": None}
        text = stored_text(plan, self.settings)
        if current["plan"] is not None and comparable(current["plan"]) == comparable(text):
            text = current["plan"]  # only a roaming peer's endpoint moved: nothing to keep anew
        want = {
            "plan": text,
            "psk": psk_text(self.preshared_keys),
            "unit": current["unit"],
            "enabled": current["enabled"],
            "app": current["app"],
        }
        if self.app is not None:
            want["unit"] = unit_text(self.app_path, self.plan_path)
            want["enabled"] = self.systemd
            if not self.systemd and current["unit"] is None:
                # said once, when the files are first written: re-runs stay quiet
                self.warnings = [
                    "boot_restore: this host does not run systemd, so nothing restores %s "
                    "at boot; have its init system run '%s %s --restore' after the network "
                    "is up" % (self.plan_path, PYTHON, self.app_path)
                ]
            want["app"] = self.app["digest"]
            if current["app"] != self.app["digest"] and not self.app.get("src"):
                self.need = ["app"]
        return want

    def changes(self, current, desired):
        out = []
        if current["app"] != desired["app"]:
            out.append(
                "write %s" % self.app_path if desired["app"] else "remove %s" % self.app_path
            )
        for key, path in (("plan", self.plan_path), ("psk", self.psk_path), ("unit", unit_path())):
            if current[key] != desired[key]:
                out.append(
                    ("write %s" % path) if desired[key] is not None else ("remove %s" % path)
                )
        if current["enabled"] != desired["enabled"]:
            out.append("%s %s" % ("enable" if desired["enabled"] else "disable", UNIT_NAME))
        return out

    def apply(self, current, desired):
        if current["app"] != desired["app"] and desired["app"]:
            try:
                install_verified(self.app_path, self.app["src"], desired["app"])
            except ValueError as e:
                raise KiloError("%s" % e, None, "app_src")
        for key, path in (("plan", self.plan_path), ("psk", self.psk_path)):
            if current[key] != desired[key]:
                if desired[key] is None:
                    os.unlink(path)
                else:
                    write_atomic(path, desired[key], 0o600, make_dirs=0o700)
        if desired["unit"] is None:
            remove_unit(unit_path())
        else:
            install_unit(unit_path(), desired["unit"])
            if desired["enabled"] and not current["enabled"]:
                # enabled, not started: this converge has just done what the unit would do
                systemctl_checked("enable", UNIT_NAME)
        if current["app"] and not desired["app"]:
            os.unlink(self.app_path)
            try:
                os.rmdir(os.path.dirname(self.app_path))  # only when empty (the agent's app stays)
            except OSError:
                pass

    def diff(self, current, desired):
        def shown(state):
            if state is None:
                return None
            try:
                stored = json.loads(state["plan"]) if state["plan"] else None
            except ValueError:
                stored = state["plan"]
            keys = json.loads(state["psk"]) if state["psk"] else {}
            return {
                "stored_plan": stored,
                "preshared_keys": "%d (not shown)" % len(keys) if keys else None,
                "unit": state["unit"],
                "enabled": state["enabled"],
                "app": state["app"],
            }

        return shown(current), shown(desired)

    def owns(self, current):
        return any(current[k] for k in ("plan", "psk", "unit", "enabled", "app"))

    def remove(self, current):
        self.apply(
            current, {"plan": None, "psk": None, "unit": None, "enabled": False, "app": None}
        )
