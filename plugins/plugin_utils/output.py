# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""Where the controller writes the files it makes for people, and writing them.

One rule for every action that writes one (kilo.mesh.graph's picture or DOT text, kilo.mesh.showconf's
configuration; playbooks/plan.yml's DOT file is kilo.mesh.graph's): a relative ``dest`` is taken
from ``kilo_output_dir`` when set, else from the directory ansible-playbook runs in, never from
the playbook's directory (an installed collection's) or the inventory's. A file inside a
directory given as inventory source is refused: Ansible would try to read it as inventory on
every later run and warn that it cannot.
"""

from __future__ import annotations

import os

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import update_file
from ansible_collections.kilo.mesh.plugins.plugin_utils.inputs import in_directory_source


def output_path(dest, output_dir=None, sources=None, field="dest"):
    """The absolute path of ``dest`` (relative: from ``output_dir``, else the current directory;
    ``~`` expanded). ``sources``: the run's inventory sources (``ansible_inventory_sources``)."""
    base = os.path.abspath(os.path.expanduser(output_dir)) if output_dir else os.getcwd()
    path = os.path.normpath(os.path.join(base, os.path.expanduser(dest)))
    if in_directory_source(os.path.dirname(path), sources):
        raise KiloError(
            "%s is inside a directory given as inventory source: Ansible would try to read it as"
            " inventory on every later run; write it elsewhere (set kilo_output_dir, or give %s"
            " outside the inventory)" % (path, field),
            "task",
            field,
        )
    return path


def write_output(path, data, check_mode=False, field="dest"):
    """Write ``data`` to ``path`` (0644, replaced atomically, only when it differs); whether it changed."""
    try:
        return update_file(path, data, 0o644, check_mode=check_mode)
    except (IOError, OSError) as e:
        raise KiloError("cannot write %s: %s" % (path, e.strerror or e), "task", field)
