# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""systemd on a host: whether it is PID 1, and systemctl. One place for the boot restore's unit,
the agent's unit and the userspace WireGuard daemon's unit. Standard library only."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError

UNIT_DIR = "/etc/systemd/system"


def systemd_running():
    """Whether PID 1 is systemd (sd_booted(3)'s test)."""
    return os.path.isdir("/run/systemd/system")


def systemctl(*args):
    """(rc, output) of systemctl."""
    proc = subprocess.run(["systemctl"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False)
    return proc.returncode, proc.stdout.strip() + proc.stderr.strip()


def systemctl_checked(*args, **kwargs):
    """systemctl's output; ``error`` (a KiloError class) raised when it fails."""
    rc, out = systemctl(*args)
    if rc != 0:
        raise kwargs.get("error", KiloError)("systemctl %s failed (rc %d): %s" % (" ".join(args), rc, out))
    return out


def is_enabled(unit):
    return systemctl("is-enabled", unit)[1] == "enabled"
