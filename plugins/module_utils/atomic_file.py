# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""One way to replace a file: the host's private key, CNI conflist, sysctl boot file and status
text file, and the controller's files beside them (graph output). Standard library only, so it
runs on the host's /usr/bin/python3 (3.9+) and on the controller."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import tempfile

# write_atomic's temporary file beside ``path``: .NAME.<random>.tmp
_TMP_PREFIX, _TMP_SUFFIX = ".%s.", ".tmp"


def write_atomic(path, data, mode, make_dirs=None):
    """Replace ``path`` by ``data`` (text is written as UTF-8) with permission bits ``mode``.

    A reader (the CNI runtime, node_exporter, the next run) sees the old file or the new one,
    never part of one: the data goes to a temporary file in the same directory (a rename is
    atomic only inside one file system), which is synced and renamed over ``path``; the
    directory is synced too, so the rename itself survives a crash. The temporary file is made
    0600 and given ``mode`` before any byte is written, so a private key is never readable by
    others, not even for a moment. ``make_dirs``: the mode of missing parent directories (as
    os.makedirs, under the umask); None: the directory must exist.
    """
    if not isinstance(data, bytes):
        data = data.encode("utf-8")
    directory = os.path.dirname(os.path.abspath(path))
    if make_dirs is not None and not os.path.isdir(directory):
        os.makedirs(directory, make_dirs)
    fd, tmp = tempfile.mkstemp(
        dir=directory, prefix=_TMP_PREFIX % os.path.basename(path), suffix=_TMP_SUFFIX
    )
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def update_file(path, data, mode=0o644, check_mode=False, make_dirs=None):
    """``write_atomic`` when ``path`` does not hold exactly ``data`` already (a reader such as
    node_exporter or a browser never sees half a file); whether the file changes (in check
    mode: would)."""
    if not isinstance(data, bytes):
        data = data.encode("utf-8")
    if read_bytes(path) == data:
        return False
    if not check_mode:
        write_atomic(path, data, mode, make_dirs)
    return True


def leftovers(path):
    """The temporary files of writes of ``path`` that were cut short: write_atomic removes its own
    on any error, so only a process killed (SIGKILL, a crash, the host losing power) between
    making it and the rename leaves one. [] when the directory does not exist."""
    directory = os.path.dirname(os.path.abspath(path))
    prefix = _TMP_PREFIX % os.path.basename(path)
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(
        os.path.join(directory, name)
        for name in names
        if name.startswith(prefix)
        and name.endswith(_TMP_SUFFIX)
        and len(name) > len(prefix + _TMP_SUFFIX)
    )


def read_bytes(path):
    """The file's bytes, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except (IOError, OSError):
        return None


def read_text(path):
    """The file's text (UTF-8, undecodable bytes replaced), or None when it cannot be read."""
    data = read_bytes(path)
    return None if data is None else data.decode("utf-8", "replace")


def file_digest(path):
    """sha256 hex digest of the file, or None when it cannot be read."""
    data = read_bytes(path)
    return None if data is None else hashlib.sha256(data).hexdigest()


def install_verified(path, src, digest, mode=0o644):
    """Replace ``path`` by the file ``src`` (an upload) when it holds ``digest``; ValueError otherwise."""
    data = read_bytes(src)
    if data is None or hashlib.sha256(data).hexdigest() != digest:
        raise ValueError("%s does not hold the app of digest %s" % (src, digest))
    write_atomic(path, data, mode, make_dirs=0o755)
