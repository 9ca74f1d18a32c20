# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""SSH keepalives on Ansible's control connection: how long a dark host holds the run.

A host that goes dark (every packet dropped) while Ansible's SSH master connection to it is
open leaves the remote call waiting on TCP, which gives up only after about 15 minutes: the
task timeout (kilo_task_timeout, 300 s) ends it first, and meanwhile the run waits. Ansible
sends no keepalives by default (OpenSSH's ServerAliveInterval is 0; 300 with Debian's
BatchMode). With ``ServerAliveInterval=5`` and ``ServerAliveCountMax=5`` the master gives up
after 30 s without a word from the host; the call then fails as unreachable (after Ansible's
connect timeout, 10 s by default, for its attempt at a new connection), the host leaves the
play and the run goes on. A slow remote step (a first package install) is not cut: sshd
answers the probes while it runs. The task timeout stays the bound of a host that answers
but whose call hangs.

Whose value counts: a ServerAliveInterval in Ansible's own SSH options (ssh_args,
ssh_common_args, ssh_extra_args: ansible.cfg, the ANSIBLE_SSH_* variables, the
ansible_ssh_* inventory variables, the command line) is the user's choice and is never
touched. Otherwise the effective OpenSSH configuration (``ssh -G`` with those options:
~/.ssh/config, /etc/ssh/ssh_config, a ``-F`` file) is kept when it gives up on a silent
host within BOUND; else the collection's options are added to ssh_extra_args for the
collection's own remote calls.

Only a new master connection takes the options: one that an earlier command of the user's
opened (ControlPersist) keeps its own, and a dark host under it is bounded by the task
timeout alone.
"""

from __future__ import annotations

import shlex

from ansible_collections.kilo.mesh.plugins.module_utils.common import run_command

INTERVAL = 5
COUNT_MAX = 5
# seconds without a word from the host until the master connection gives up
BOUND = INTERVAL * (COUNT_MAX + 1)
ARGS = "-o ServerAliveInterval=%d -o ServerAliveCountMax=%d" % (INTERVAL, COUNT_MAX)

# Ansible's SSH options that carry ssh's own command-line arguments
ANSIBLE_OPTIONS = ("ssh_args", "ssh_common_args", "ssh_extra_args")


def _option(connection, name):
    try:
        return connection.get_option(name)
    except KeyError:
        return None


def given_by_ansible(connection):
    """Does one of Ansible's SSH options set ServerAliveInterval?"""
    text = " ".join(_option(connection, name) or "" for name in ANSIBLE_OPTIONS)
    return "serveraliveinterval" in text.lower()


def gives_up_after(settings):
    """Seconds until ssh gives up on a silent host, from ``ssh -G`` output; None: never."""
    values = {}
    for line in settings.splitlines():
        key, dummy, value = line.partition(" ")
        values[key.lower()] = value.strip()
    try:
        interval = int(values.get("serveraliveinterval", "0"))
        count = int(values.get("serveralivecountmax", "3"))
    except ValueError:
        return None
    return interval * (count + 1) if interval > 0 else None


def effective_settings(connection):
    """``ssh -G`` for this connection's host with Ansible's SSH options, or None if ssh cannot
    tell (an ssh without -G, an unreadable configuration)."""
    argv = [_option(connection, "ssh_executable") or "ssh", "-G"]
    for name in ANSIBLE_OPTIONS:
        argv += shlex.split(_option(connection, name) or "")
    port, user = _option(connection, "port"), _option(connection, "remote_user")
    if port:
        argv += ["-p", str(port)]
    if user:
        argv += ["-l", str(user)]
    argv.append(str(_option(connection, "host") or "localhost"))
    rc, out, _err = run_command(argv, timeout=10)
    return out if rc == 0 else None


def needed(connection, settings=None):
    """Should the collection add its keepalive options to this connection?"""
    if getattr(connection, "transport", None) != "ssh" or given_by_ansible(connection):
        return False
    settings = effective_settings(connection) if settings is None else settings
    after = gives_up_after(settings) if settings else None
    return after is None or after > BOUND


def apply(connection):
    """Add ARGS to an ssh connection's ssh_extra_args unless the user's setup (see the module's
    doc) has its own; returns True when added."""
    if not needed(connection):
        return False
    extra = _option(connection, "ssh_extra_args") or ""
    connection.set_option("ssh_extra_args", (extra + " " + ARGS).strip())
    return True
