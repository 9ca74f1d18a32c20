# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Plans computed once per run and handed to each host on the controller; and what the run's
check step read of the hosts outside the play, handed to the topology step of the same play.

A run-once ``kilo.mesh.topology`` (``save_plans``) computes the mesh one time and writes each
play host's plan to its own file; each host's ``kilo.mesh.join`` reads only its file. Only the
directory's path travels in task variables, so no worker receives the whole mesh and a host's
controller work follows the size of its own plan (no O(N^2) per run).

The directory lives in Ansible's per-run local temporary directory (0700, removed when
ansible-playbook exits); files are 0600 because plans carry preshared keys until ``join``
moves them into a no_log module option.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

from ansible import constants as C

from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import write_atomic


def _file(directory, name, prefix=""):
    # host names may hold any character; a digest makes a safe, fixed-length file name
    return os.path.join(
        directory, prefix + hashlib.sha256(name.encode("utf-8")).hexdigest() + ".json"
    )


def _run_tmp():
    """Ansible's temporary directory of this run (one per ansible-playbook; workers share it)."""
    return C.DEFAULT_LOCAL_TMP if os.path.isdir(C.DEFAULT_LOCAL_TMP or "") else None


def save(plans):
    """Write ``plans`` ((host, plan) pairs, taken one at a time: the engine renders each plan when
    asked, so no more than one is held here) to a new private directory; returns its path."""
    directory = tempfile.mkdtemp(prefix="kilo-plans-", dir=_run_tmp())
    for host, plan in plans:
        fd = os.open(_file(directory, host), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(plan, f, separators=(",", ":"))
    return directory


def load(directory, host):
    """This host's plan out of ``directory``, or None when the mesh step made none for it."""
    try:
        with open(_file(directory, host)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


# --- what kilo.mesh.validate read of the hosts outside the play ------------------------------
# Computing a host's variables is what a run-once step pays per host (Ansible's hostvars), and
# validate and topology both need every host of the mesh. Within one play the variables of a
# host outside it do not change (no task runs there), so validate's reading serves the topology
# step; hosts of the play are always read again (they registered kilo.mesh.key's result since).


def _reading_file(key):
    directory = _run_tmp()
    if directory is None:  # no per-run directory: nothing to hand over safely
        return None
    return _file(directory, key, prefix="kilo-reading-")


def save_reading(key, inputs):
    """Keep ``inputs`` (host -> plain dict of its variables) under ``key`` for this run."""
    path = _reading_file(key)
    if path is None:
        return
    write_atomic(path, json.dumps(inputs, separators=(",", ":"), default=str), 0o600)


def load_reading(key):
    """What ``save_reading`` kept under ``key`` in this run, or {}."""
    path = _reading_file(key)
    if path is None:
        return {}
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return {}
