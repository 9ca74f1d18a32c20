# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The agent's supervisor where PID 1 is not systemd (``python3 APP --supervise --config PATH``).

It runs the agent (``python3 APP --config PATH``) as its child and starts it again when it
exits, whatever the reason (a crash, SIGKILL, the OOM killer): after RESTART_DELAY seconds,
doubling up to MAX_DELAY while the agent keeps dying within STABLE seconds of its start.
SIGTERM or SIGINT stop it: the agent gets SIGTERM, then SIGKILL after STOP_TIMEOUT seconds.
``service.Supervisor`` starts it in a session of its own and keeps its PID.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal
import subprocess
import sys
import time

RESTART_DELAY = 1.0
MAX_DELAY = 30.0
STABLE = 60.0
STOP_TIMEOUT = 10.0


def log(message):
    sys.stderr.write(
        "%s kilo-mesh-agent supervisor: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), message)
    )
    sys.stderr.flush()


class Supervise(object):
    def __init__(self, argv, clock=time.monotonic):
        self.argv = argv
        self.clock = clock
        self.child = None
        self.stopping = False

    def stop(self, signum=None, _frame=None):
        self.stopping = True
        child = self.child
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    def pause(self, seconds):
        """Sleep, but end early when asked to stop."""
        deadline = self.clock() + seconds
        while not self.stopping and self.clock() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - self.clock())))

    def run(self):
        delay = RESTART_DELAY
        while not self.stopping:
            started = self.clock()
            try:
                self.child = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, close_fds=True)
            except OSError as e:
                log("cannot start the agent: %s" % e)
                self.pause(delay)
                delay = min(MAX_DELAY, delay * 2)
                continue
            log("agent started (pid %d)" % self.child.pid)
            if self.stopping:  # a signal between the check and Popen
                self.child.send_signal(signal.SIGTERM)
            self.wait_child()
            if self.stopping:
                break
            ran = self.clock() - started
            delay = RESTART_DELAY if ran >= STABLE else delay
            log(
                "agent exited (rc %s) after %.0f s; starting it again in %.0f s"
                % (self.child.returncode, ran, delay)
            )
            self.pause(delay)
            delay = RESTART_DELAY if ran >= STABLE else min(MAX_DELAY, delay * 2)
        log("stopped")
        return 0

    def wait_child(self):
        """Wait for the agent; once stopping, SIGKILL it after STOP_TIMEOUT seconds."""
        child = self.child
        stop_seen = None
        while child.poll() is None:
            if self.stopping and stop_seen is None:
                stop_seen = self.clock()
            if stop_seen is not None and self.clock() - stop_seen > STOP_TIMEOUT:
                log("agent still running %d s after SIGTERM: SIGKILL" % STOP_TIMEOUT)
                child.kill()
                child.wait()
                return
            try:
                child.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass


def main(argv, app):
    """Supervise ``python3 app ARGV`` (ARGV: the agent's arguments, such as --config PATH)."""
    supervise = Supervise([sys.executable, app] + list(argv))
    signal.signal(signal.SIGTERM, supervise.stop)
    signal.signal(signal.SIGINT, supervise.stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return supervise.run()
