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
import time

from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import leftovers, write_atomic
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, parse_key
from ansible_collections.kilo.mesh.plugins.module_utils.options import DEFAULT_KEY_PATH


class KeyFileError(KiloError):
    """A key file that cannot be read, written or holds no key (the message never holds a key)."""


# X25519 (RFC 7748) over Curve25519's prime: what a WireGuard public key is, computed here so the
# key call needs no cryptography library (its import cost a tenth of every key and converge call).
_P = (1 << 255) - 19
_A24 = 121665
_BASE_U = 9


def _clamp(raw):
    scalar = bytearray(raw)
    scalar[0] &= 248
    scalar[31] &= 127
    scalar[31] |= 64
    return bytes(scalar)


def _x25519(scalar, u):
    """RFC 7748's X25519: the u-coordinate of ``scalar`` (32 bytes, clamped here) times the
    point ``u`` (an int below 2^255 - 19: the base point here; a peer's key would first need
    RFC 7748's decoding, which masks the top bit), as 32 little-endian bytes. Python integers are not constant-time; this
    runs on the host that owns the key, once per call, with nobody outside timing it."""
    k = int.from_bytes(_clamp(scalar), "little")
    x1, x2, z2, x3, z3, swap = u, 1, 0, u, 1, 0
    for t in range(254, -1, -1):
        bit = (k >> t) & 1
        if swap ^ bit:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b, c, d = x2 + z2, x2 - z2, x3 + z3, x3 - z3
        aa, bb = a * a % _P, b * b % _P
        e = aa - bb
        da, cb = d * a % _P, c * b % _P
        x3, z3 = (da + cb) ** 2 % _P, x1 * (da - cb) ** 2 % _P
        x2, z2 = aa * bb % _P, e * (aa + _A24 * e) % _P
    if swap:
        x2, z2 = x3, z3
    return (x2 * pow(z2, _P - 2, _P) % _P).to_bytes(32, "little")


def validate_key(value, subject=None, field="key"):
    """The 32 raw bytes of a base64 WireGuard key; KiloError (from common.parse_key) otherwise."""
    return base64.b64decode(parse_key(value, subject, field))


def generate_private_key():
    """A fresh private key, base64, clamped as `wg genkey` writes it."""
    return base64.b64encode(_clamp(os.urandom(32))).decode("ascii")


def public_key(private_b64):
    """Public key (base64) of a base64 private key."""
    raw = validate_key(private_b64, field="private key")
    return base64.b64encode(_x25519(raw, _BASE_U)).decode("ascii")


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


def key_age(path, now=None):
    """Seconds since the key at ``path`` was written (its mtime: write_atomic gives every new
    key a new file, and a chmod does not touch the mtime)."""
    return max(0, int((time.time() if now is None else now) - os.stat(path).st_mtime))


def ensure_key(path=DEFAULT_KEY_PATH, check_mode=False, rotate=False, max_age=0):
    """Make sure a private key exists at path; return {'public_key', 'changed', 'msg'} and, when
    the key is replaced, 'rotated' (why: 'requested' or 'age') and 'previous_public_key'.

    An existing valid key is kept (its file mode is tightened to 0600 if looser) unless
    ``rotate`` is true or it is older than ``max_age`` seconds (0: no limit); then a new key
    replaces it atomically (write_atomic: never half-written, 0600 from the first byte) and the
    old one is gone from the disk (the interface keeps it until the converge switches). An
    existing invalid file is an error rather than silently replaced: it may be someone's real key.
    In check mode nothing is written; a key that would be created or rotated is stood in for by
    an unsaved one (``pending``), so plans can still be computed. Failures are KeyFileError.
    """
    try:
        cut_short = _remove_cut_short_writes(path, check_mode)
        result = _ensure_key(path, check_mode, rotate, max_age)
    except (IOError, OSError) as e:
        raise KeyFileError(e.strerror or str(e), _subject(path))
    if cut_short:
        result["changed"] = True
        result["msg"] += "; %s %d temporary file(s) of a key write cut short" % (
            "would remove" if check_mode else "removed",
            cut_short,
        )
    return result


def remove_key(path=DEFAULT_KEY_PATH, check_mode=False):
    """Remove the private key at ``path`` and the temporary files of key writes cut short
    (``leftovers``), then the key's directory when that leaves it empty (``ensure_key`` made it;
    anything else in it, Kilo's or the stored plan's, keeps it). Never reads the key. Returns
    {'changed', 'msg'}; nothing is removed in check mode. Failures are KeyFileError."""
    found = ([path] if os.path.lexists(path) else []) + leftovers(path)
    if not found:
        return {"changed": False, "msg": "no key at %s" % path}
    directory = os.path.dirname(os.path.abspath(path))
    msg = "%s key %s" % ("would remove" if check_mode else "removed", path)
    if len(found) > 1 or found[0] != path:
        msg += " and %d temporary file(s) of a key write cut short" % (
            len(found) - (found[0] == path)
        )
    if check_mode:
        return {"changed": True, "msg": msg}
    try:
        for name in found:
            os.unlink(name)
    except OSError as e:
        raise KeyFileError(e.strerror or str(e), _subject(path))
    try:
        os.rmdir(directory)  # only when empty
        msg += " and its empty directory"
    except OSError:
        pass
    return {"changed": True, "msg": msg}


def _remove_cut_short_writes(path, check_mode):
    """A key write killed before its rename left a temporary file beside the key (0600, a private
    key that is no host's key): remove it, so no stray copy of a key stays on the disk. Returns
    how many there were."""
    found = leftovers(path)
    if not check_mode:
        for name in found:
            os.unlink(name)
    return len(found)


def _rotation(path, rotate, max_age):
    """Why the key at ``path`` is to be replaced now ('requested', 'age') or None."""
    if rotate:
        return "requested"
    if max_age and key_age(path) >= max_age:
        return "age"
    return None


def _ensure_key(path, check_mode, rotate, max_age):
    if os.path.exists(path):
        priv = read_private_key(path)
        why = _rotation(path, rotate, max_age)
        if why:
            old = public_key(priv)
            del priv
            verb = "would rotate" if check_mode else "rotated"
            msg = "%s key %s (%s)" % (
                verb,
                path,
                "requested" if why == "requested" else "older than kilo_key_max_age",
            )
            if check_mode:
                return {
                    "public_key": public_key(generate_private_key()),
                    "pending": True,
                    "changed": True,
                    "rotated": why,
                    "previous_public_key": old,
                    "msg": msg,
                }
            new = generate_private_key()
            write_atomic(path, new + "\n", 0o600)
            return {
                "public_key": public_key(new),
                "changed": True,
                "rotated": why,
                "previous_public_key": old,
                "msg": msg,
            }
        changed = False
        mode = os.stat(path).st_mode & 0o777
        if mode & 0o077:
            changed = True
            if not check_mode:
                os.chmod(path, 0o600)
        return {
            "public_key": public_key(priv),
            "changed": changed,
            "msg": (
                "would tighten mode of %s to 0600"
                if check_mode and changed
                else "tightened mode of %s to 0600"
                if changed
                else "key %s exists"
            )
            % path,
        }
    if check_mode:
        # A stand-in public key, never written anywhere, lets the controller compute honest
        # plans for a host that has not run yet; `pending` marks it as such.
        return {
            "public_key": public_key(generate_private_key()),
            "pending": True,
            "changed": True,
            "msg": "would create key %s" % path,
        }
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o700)
        os.chmod(directory, 0o700)  # makedirs' mode is filtered by the umask
    priv = generate_private_key()
    # 0600 from the first byte on (write_atomic): the key is never world-readable or half-written
    write_atomic(path, priv + "\n", 0o600)
    return {"public_key": public_key(priv), "changed": True, "msg": "created key %s" % path}
