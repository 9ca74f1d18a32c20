# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""A given commit of this repository beside the working tree, for the engine bench and the plan
digests: ``checkout(rev)`` writes the commit's files (``git archive``) into a temporary
``ansible_collections/kilo/mesh`` and yields the directory to put first on ``sys.path`` (as the
working tree's ``.collections``). Only one tree may be on a process's path: the collection is a
namespace package, so two trees would mix module by module; each tree runs in its own process."""

import contextlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, ".collections")


def describe(rev):
    """``rev`` as its short commit id (what the figures name)."""
    return subprocess.check_output(
        ["git", "-C", ROOT, "rev-parse", "--short", rev + "^{commit}"], universal_newlines=True
    ).strip()


@contextlib.contextmanager
def checkout(rev):
    """The collections directory of commit ``rev`` (removed on leaving)."""
    top = tempfile.mkdtemp(prefix="kilo-base-")
    try:
        dest = os.path.join(top, "ansible_collections", "kilo", "mesh")
        os.makedirs(dest)
        data = subprocess.check_output(
            ["git", "-C", ROOT, "archive", "--format=tar", rev, "plugins"]
        )
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)
