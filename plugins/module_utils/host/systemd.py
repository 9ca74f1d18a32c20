# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""systemd on a host: whether it is PID 1, and systemctl. One place for the boot restore's unit,
the agent's unit and the userspace WireGuard daemon's unit. Standard library only."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import update_file
from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    run_checked,
    run_command,
)

UNIT_DIR = "/etc/systemd/system"
# units that must not outlive a boot (the userspace daemon's: the boot restore starts it again)
RUNTIME_UNIT_DIR = "/run/systemd/system"


def systemd_running():
    """Whether PID 1 is systemd (sd_booted(3)'s test)."""
    return os.path.isdir("/run/systemd/system")


def systemctl(*args):
    """(rc, output) of systemctl."""
    rc, out, err = run_command(["systemctl"] + list(args))
    return rc, out.strip() + err.strip()


def systemctl_checked(*args, **kwargs):
    """systemctl's output; ``error`` (a KiloError class) raised when it fails."""
    _rc, out, err = run_checked(["systemctl"] + list(args), kwargs.get("error", KiloError))
    return out.strip() + err.strip()


def is_enabled(unit):
    return systemctl("is-enabled", unit)[1] == "enabled"


def install_unit(path, text):
    """Write the unit file ``path`` when its text differs (daemon-reload where systemd runs);
    whether it changed."""
    if not update_file(path, text, 0o644, make_dirs=0o755):
        return False
    if systemd_running():
        systemctl("daemon-reload")
    return True


def remove_unit(path):
    """Stop and disable the unit of file ``path`` and remove the file; whether there was one."""
    if not os.path.lexists(path):
        return False
    if systemd_running():
        systemctl("disable", "--now", os.path.basename(path))
    os.unlink(path)
    if systemd_running():
        systemctl("daemon-reload")
    return True
