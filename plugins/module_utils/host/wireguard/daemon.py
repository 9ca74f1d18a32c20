# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Supervision of a userspace WireGuard daemon (wireguard-go, boringtun) for one interface.

Where systemd runs, the daemon is the unit ``kilo-wireguard-IFACE.service``, a file of ours in
/run/systemd/system (``unit_text``: ``Restart=on-failure``; gone with the boot, which the boot
restore starts again; /run is writable for the sandboxed agent where /etc is not), whose ``ExecStartPost`` (``after_start``) brings the interface back to the
stored plan after systemd restarted a daemon that died; elsewhere it runs in a session of its
own. Its PID is recorded in ``RUN_DIR/IFACE.pid`` and only a process that still runs the
configured command for this interface counts as ours (``process.OwnedProcess``: a recycled PID is
never signalled). Where the daemon opens its UAPI socket is the caller's business (``socket``);
it is only waited for here (``wireguard.uapi.wait_for_socket``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shlex
import shutil
import time

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.process import RUN_DIR, OwnedProcess
from ansible_collections.kilo.mesh.plugins.module_utils.host.systemd import (
    RUNTIME_UNIT_DIR,
    install_unit,
    remove_unit,
    systemctl,
    systemctl_checked,
    systemd_running,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.uapi import (
    UAPIClient,
    wait_for_socket,
)

# How long a daemon may take to open its socket. Not a module option: tests and unusual hosts
# move it (and RUN_DIR, where PID and log files go) by setting these attributes.
START_TIMEOUT = 15.0
STOP_TIMEOUT = 5.0
USERSPACE_ENV = "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD"


class DaemonError(KiloError):
    """The userspace daemon could not be started."""


class Daemon(object):
    """The daemon serving ``interface``, started from ``command`` (a shell-quoted string)."""

    def __init__(
        self, interface, command, socket, run_dir=None, start_timeout=None, after_start=None
    ):
        self.interface = interface
        self.command = command
        self.after_start = after_start
        self.socket = socket
        self.run_dir = run_dir or RUN_DIR
        self.start_timeout = float(start_timeout if start_timeout is not None else START_TIMEOUT)
        self.process = OwnedProcess(interface, self.runs_daemon, self.run_dir)

    @property
    def pidfile(self):
        return self.process.pidfile

    @property
    def logfile(self):
        return self.process.logfile

    @property
    def unit(self):
        return "kilo-wireguard-%s" % self.interface

    @property
    def unit_path(self):
        return os.path.join(RUNTIME_UNIT_DIR, self.unit + ".service")

    def unit_text(self):
        """The daemon's systemd unit: restarted when it dies, then the stored plan applied again."""
        argv = self.argv()
        # systemd wants an absolute ExecStart
        argv[0] = shutil.which(argv[0]) or argv[0]
        lines = [
            "# Written by kilo.mesh (the converge's WireGuard backend); removed with the interface.",
            "[Unit]",
            "Description=kilo.mesh userspace WireGuard (%s) for %s"
            % (os.path.basename(argv[0]), self.interface),
            "",
            "[Service]",
            "Type=simple",
            "Environment=%s=1" % USERSPACE_ENV,
            "ExecStart=%s" % " ".join(shlex.quote(a) for a in argv),
        ]
        if self.after_start:
            # "-": a failed restore leaves the daemon running (the next run repairs the rest)
            lines.append("ExecStartPost=-%s" % " ".join(shlex.quote(a) for a in self.after_start))
        lines += ["Restart=on-failure", "RestartSec=1", ""]
        return "\n".join(lines)

    def argv(self):
        argv = shlex.split(self.command or "")
        if not argv:
            raise DaemonError(
                "empty; name a userspace WireGuard such as wireguard-go", None, "userspace_command"
            )
        # wireguard-go daemonizes unless -f; we want the PID of the process that stays.
        if os.path.basename(argv[0]).startswith("wireguard-go"):
            argv.append("-f")
        return argv + [self.interface]

    def start(self):
        """Start the daemon and wait until its socket answers; DaemonError otherwise."""
        argv = self.argv()
        if not os.path.isdir(self.run_dir):
            os.makedirs(self.run_dir, 0o700)
        if os.path.exists(self.socket):
            # The daemon that owned it is gone (its socket did not answer).
            os.unlink(self.socket)
        proc = None
        systemd = systemd_running()
        if systemd:
            install_unit(self.unit_path, self.unit_text())
            systemctl("reset-failed", self.unit)
            # --no-block: the unit's ExecStartPost waits for the socket this start waits for below
            systemctl_checked("start", "--no-block", self.unit, error=DaemonError)
            pid = 0
            deadline = time.time() + self.start_timeout
            while not pid and time.time() < deadline:
                shown = systemctl("show", "-p", "MainPID", "--value", self.unit)[1]
                pid = int(shown) if shown.isdigit() else 0
                if not pid:
                    time.sleep(0.05)
            self.process.record(pid, self.unit)
        else:
            env = dict(os.environ)
            env[USERSPACE_ENV] = "1"
            try:
                proc = self.process.spawn(argv, env=env, note="")
            except OSError as e:
                raise DaemonError("cannot start %s: %s" % (argv[0], e))
        if wait_for_socket(
            self.socket,
            self.start_timeout,
            given_up=lambda: proc is not None and proc.poll() is not None,
        ):
            return
        tail = self.process.log_tail(400)
        self.stop()  # nothing of a failed start stays behind (a later run could not tell it is ours)
        raise DaemonError(
            "%s did not open %s%s" % (" ".join(argv), self.socket, ": " + tail if tail else "")
        )

    def runs_daemon(self, args):
        """Whether a command line (bytes arguments) is our userspace daemon (the configured
        command) serving our interface, not any process that merely names the interface."""
        try:
            command = os.path.basename(self.argv()[0])
        except DaemonError:
            return False
        return (
            self.interface.encode() in args
            and os.path.basename(args[0].decode(errors="replace")) == command
        )

    def pid(self):
        """PID recorded at start, if that process still runs our daemon for this interface."""
        return self.process.pid()

    def recorded(self):
        """Whether a PID, log or unit file of ours is there (a daemon started by us, maybe dead)."""
        return (
            os.path.exists(self.pidfile)
            or os.path.exists(self.logfile)
            or os.path.exists(self.unit_path)
        )

    def stop(self):
        """Stop the daemon we started (unit, then PID) and delete our files; a stale socket too."""
        if systemd_running() and os.path.exists(self.pidfile):
            systemctl("stop", self.unit)
        remove_unit(self.unit_path)
        pid = self.pid()
        if pid:
            self.process.terminate(pid, STOP_TIMEOUT)
        self.process.forget()
        if os.path.exists(self.socket) and not UAPIClient(self.socket, timeout=1.0).alive():
            os.unlink(self.socket)
