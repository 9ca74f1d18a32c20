# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""WireGuard key handling on the host.

The private key is made here, on the host, stored 0600 under a 0700 directory and never
returned: callers get the public key only. Keys are base64 of 32 raw bytes, as `wg genkey`.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import os

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, parse_key
from ansible_collections.kilo.mesh.plugins.module_utils.options import DEFAULT_KEY_PATH


class KeyFileError(KiloError):
    """A key file that cannot be read, written or holds no key (the message never holds a key)."""


def _x25519():
    # Imported lazily so that parsing helpers work where cryptography is missing.
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    return X25519PrivateKey


def validate_key(value, subject=None, field="key"):
    """The 32 raw bytes of a base64 WireGuard key; KiloError (from common.parse_key) otherwise."""
    return base64.b64decode(parse_key(value, subject, field))


def generate_private_key():
    """A fresh private key, base64 (clamped by the X25519 implementation when used)."""
    raw = _raw_private(_x25519().generate())
    return base64.b64encode(raw).decode("ascii")


def _raw_private(key):
    from cryptography.hazmat.primitives import serialization
    return key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())


def public_key(private_b64):
    """Public key (base64) of a base64 private key."""
    raw = validate_key(private_b64, field="private key")
    from cryptography.hazmat.primitives import serialization
    pub = _x25519().from_private_bytes(raw).public_key()
    return base64.b64encode(pub.public_bytes(serialization.Encoding.Raw,
                                             serialization.PublicFormat.Raw)).decode("ascii")


def _subject(path):
    return "private key file %s" % path


def read_private_key(path=DEFAULT_KEY_PATH):
    """Read and validate the private key at path (for backends that must hand it to WireGuard)."""
    try:
        with open(path, "r") as f:
            text = f.read().strip()
    except (IOError, OSError) as e:
        raise KeyFileError(e.strerror or str(e), _subject(path))
    try:
        return parse_key(text, field="content")
    except KiloError as e:
        raise KeyFileError(e.message, _subject(path), e.field)


def ensure_key(path=DEFAULT_KEY_PATH, check_mode=False):
    """Make sure a private key exists at path; return {'public_key', 'changed', 'msg'}.

    An existing valid key is kept (its file mode is tightened to 0600 if looser). An existing
    invalid file is an error rather than silently replaced: it may be someone's real key.
    In check mode nothing is written; a key that would be created is stood in for by an
    unsaved one (``pending``), so plans can still be computed. Failures are KeyFileError.
    """
    try:
        return _ensure_key(path, check_mode)
    except (IOError, OSError) as e:
        raise KeyFileError(e.strerror or str(e), _subject(path))


def _ensure_key(path, check_mode):
    if os.path.exists(path):
        priv = read_private_key(path)
        changed = False
        mode = os.stat(path).st_mode & 0o777
        if mode & 0o077:
            changed = True
            if not check_mode:
                os.chmod(path, 0o600)
        return {"public_key": public_key(priv), "changed": changed,
                "msg": ("would tighten mode of %s to 0600" if check_mode and changed else
                        "tightened mode of %s to 0600" if changed else "key %s exists") % path}
    if check_mode:
        # A stand-in public key, never written anywhere, lets the controller compute honest
        # plans for a host that has not run yet; `pending` marks it as such.
        return {"public_key": public_key(generate_private_key()), "pending": True, "changed": True,
                "msg": "would create key %s" % path}
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o700)
        os.chmod(directory, 0o700)  # makedirs' mode is filtered by the umask
    priv = generate_private_key()
    # Write to a 0600 temp file in the same directory, then rename: no moment where the key
    # is world-readable or half-written.
    tmp = os.path.join(directory, ".%s.tmp%d" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (priv + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    return {"public_key": public_key(priv), "changed": True, "msg": "created key %s" % path}
