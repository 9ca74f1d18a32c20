# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""A background process of ours, found again by its PID file and its command line.

What starts one (the userspace WireGuard daemon, ``wireguard.daemon.Daemon``; the agent's
supervisor, ``agent/service.Supervisor``) records its PID in ``RUN_DIR/NAME.pid`` (first line; a
note may follow) and sends its output to ``NAME.log`` beside it. Only a process that still runs
what was started (``matches``, a test of its command line) counts as ours, so a recycled PID is
never signalled. Stopping: SIGTERM, then SIGKILL after a timeout if it is still ours.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import subprocess
import time

from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import read_bytes, write_atomic

# Where PID and log files go (a tmpfs: nothing of a process outlives the boot). Not an option:
# tests and unusual hosts move it by setting the attribute of the module that uses it.
RUN_DIR = "/run/kilo"


def alive(pid):
    """Whether ``pid`` runs (a zombie does not)."""
    stat = read_bytes("/proc/%d/stat" % pid)
    try:
        return stat.rsplit(b")", 1)[1].split()[0] != b"Z"
    except (AttributeError, IndexError):
        return False


def cmdline(pid):
    """The arguments ``pid`` runs with (bytes), or [] when it is gone or a zombie."""
    data = read_bytes("/proc/%d/cmdline" % pid)
    return data.split(b"\0") if data else []


class OwnedProcess(object):
    """The process ``NAME`` of ours, started with ``spawn`` (or recorded with ``record``);
    ``matches(args)`` tells whether a command line (bytes arguments) is it."""

    def __init__(self, name, matches, run_dir=None):
        self.name = name
        self.matches = matches
        self.run_dir = run_dir or RUN_DIR

    @property
    def pidfile(self):
        return os.path.join(self.run_dir, self.name + ".pid")

    @property
    def logfile(self):
        return os.path.join(self.run_dir, self.name + ".log")

    def owns(self, pid):
        """Whether ``pid`` still runs as ours."""
        args = cmdline(pid)
        return bool(args) and alive(pid) and bool(self.matches(args))

    def pid(self):
        """The recorded PID when that process still runs as ours, else None."""
        try:
            pid = int((read_bytes(self.pidfile) or b"").split()[0])
        except (ValueError, IndexError):
            return None
        return pid if pid > 1 and self.owns(pid) else None

    def record(self, pid, note=None):
        write_atomic(self.pidfile, "%d\n%s" % (pid, note + "\n" if note is not None else ""), 0o644)

    def spawn(self, argv, env=None, cwd=None, append=False, note=None):
        """Start ``argv`` in a session of its own, output to the log (kept when ``append``, else
        replaced), and record its PID; the Popen. OSError when it cannot start (a log made for
        this start is removed then)."""
        if not os.path.isdir(self.run_dir):
            os.makedirs(self.run_dir, 0o700)
        with open(self.logfile, "ab" if append else "wb") as log:
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=env,
                    cwd=cwd,
                    close_fds=True,
                    start_new_session=True,
                )
            except OSError:
                if not append:
                    os.unlink(self.logfile)
                raise
        self.record(proc.pid, note)
        return proc

    def log_tail(self, size):
        """The last ``size`` bytes of the log, as text ("" without one)."""
        return (read_bytes(self.logfile) or b"")[-size:].decode("utf-8", "replace").strip()

    def terminate(self, pid, timeout):
        """SIGTERM to ``pid``, and SIGKILL when it still runs as ours ``timeout`` seconds later."""
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.time() + timeout
        while time.time() < deadline and alive(pid):
            time.sleep(0.05)
        if alive(pid) and self.owns(pid):
            os.kill(pid, signal.SIGKILL)

    def forget(self, log=True):
        """Remove the PID file (and the log)."""
        for path in (self.pidfile, self.logfile) if log else (self.pidfile,):
            if os.path.exists(path):
                os.unlink(path)
