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
import contextlib
import os
import time

from ansible_collections.kilo.mesh.plugins.module_utils.atomic_file import leftovers, write_atomic
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError, parse_key
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import Backend, run
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


class KeyBackend(Backend):
    """The private key file at ``path``, in converge's ``Backend`` shape: made when missing,
    replaced when a rotation is asked for (``rotate``) or it is older than ``max_age`` seconds
    (0: no limit), its mode tightened to 0600, and the temporary files of key writes cut short
    (``leftovers``: each a private key that is no host's key) removed. The plan it is handed is
    {"rotate", "max_age"} (None when removing). A new key is made in ``desired`` and held in
    memory only: ``diff`` and ``changes`` name public keys and paths, never a key. An existing
    invalid file is an error rather than silently replaced: it may be someone's real key.
    """

    name = "key"

    def __init__(self, path=DEFAULT_KEY_PATH):
        super(KeyBackend, self).__init__({})
        self.path = path
        self.removed_dir = False

    def current(self, plan):
        found = leftovers(self.path)
        if plan is None:  # removing: never reads the key
            return {"key": os.path.lexists(self.path), "leftovers": found}
        current = {"key": os.path.exists(self.path), "leftovers": found}
        if current["key"]:
            current["public_key"] = public_key(read_private_key(self.path))
            current["mode"] = os.stat(self.path).st_mode & 0o777
        return current

    def desired(self, plan, current):
        why = None
        if current["key"]:
            why = _rotation(self.path, plan["rotate"], plan["max_age"])
            if not why:
                return {"public_key": current["public_key"], "rotated": None, "private": None}
        new = generate_private_key()
        return {"public_key": public_key(new), "rotated": why, "private": new}

    def changes(self, current, desired):
        if not current["key"]:
            out = ["create key %s" % self.path]
        elif desired["rotated"]:
            out = ["rotate key %s (%s)" % (self.path, desired["rotated"])]
        elif current["mode"] & 0o077:
            out = ["tighten mode of %s to 0600" % self.path]
        else:
            out = []
        return out + self._cut_short(current)

    def _cut_short(self, current):
        n = len(current["leftovers"])
        return ["remove %d temporary file(s) of a key write cut short" % n] if n else []

    def apply(self, current, desired):
        for name in current["leftovers"]:
            os.unlink(name)
        if not current["key"]:
            directory = os.path.dirname(self.path) or "."
            if not os.path.isdir(directory):
                os.makedirs(directory, 0o700)
                os.chmod(directory, 0o700)  # makedirs' mode is filtered by the umask
        if desired["private"] is not None:
            # 0600 from the first byte on (write_atomic): never world-readable or half-written
            write_atomic(self.path, desired["private"] + "\n", 0o600)
        elif current["mode"] & 0o077:
            os.chmod(self.path, 0o600)

    def diff(self, current, desired):
        before = {"public_key": current.get("public_key")}
        return before, {"public_key": desired["public_key"] if desired else None}

    def owns(self, current):
        return current["key"] or bool(current["leftovers"])

    def removal(self, current):
        if not self.owns(current):
            return []
        out = ["remove key %s" % self.path] if current["key"] else []
        return out + self._cut_short(current)

    def remove(self, current):
        for name in ([self.path] if current["key"] else []) + current["leftovers"]:
            os.unlink(name)
        try:
            os.rmdir(os.path.dirname(os.path.abspath(self.path)))  # only when empty
            self.removed_dir = True
        except OSError:
            pass


def ensure_key(path=DEFAULT_KEY_PATH, check_mode=False, rotate=False, max_age=0):
    """Make sure a private key exists at path (``KeyBackend``); return {'public_key', 'changed',
    'msg'} and, when the key is replaced, 'rotated' (why: 'requested' or 'age') and
    'previous_public_key'.

    An existing valid key is kept (its file mode is tightened to 0600 if looser) unless
    ``rotate`` is true or it is older than ``max_age`` seconds (0: no limit); then a new key
    replaces it atomically and the old one is gone from the disk (the interface keeps it until
    the converge switches). In check mode nothing is written; a key that would be created or
    rotated is stood in for by an unsaved one (``pending``), so plans can still be computed.
    Failures are KeyFileError.
    """
    with key_file_errors(path):
        step = run([KeyBackend(path)], {"rotate": rotate, "max_age": max_age}, check_mode)[0]
    return key_result(step, check_mode)


@contextlib.contextmanager
def key_file_errors(path):
    """An OSError of the key's file as a KeyFileError naming it."""
    try:
        yield
    except (IOError, OSError) as e:
        raise KeyFileError(e.strerror or str(e), _subject(path))


def key_result(step, check_mode):
    """What ``ensure_key`` returns of a KeyBackend's step (carried out unless ``check_mode``)."""
    current, desired, path = step.current, step.desired, step.backend.path
    result = {"public_key": desired["public_key"], "changed": bool(step.changes)}
    if desired["private"] is not None and check_mode:
        # A stand-in public key, never written anywhere, lets the controller compute honest
        # plans for a host that has not run yet; `pending` marks it as such.
        result["pending"] = True
    if not current["key"]:
        result["msg"] = ("would create key %s" if check_mode else "created key %s") % path
    elif desired["rotated"]:
        result["rotated"] = desired["rotated"]
        result["previous_public_key"] = current["public_key"]
        result["msg"] = "%s key %s (%s)" % (
            "would rotate" if check_mode else "rotated",
            path,
            "requested" if desired["rotated"] == "requested" else "older than kilo_key_max_age",
        )
    elif current["mode"] & 0o077:
        verb = "would tighten" if check_mode else "tightened"
        result["msg"] = "%s mode of %s to 0600" % (verb, path)
    else:
        result["msg"] = "key %s exists" % path
    if current["leftovers"]:
        result["msg"] += "; %s %d temporary file(s) of a key write cut short" % (
            "would remove" if check_mode else "removed",
            len(current["leftovers"]),
        )
    return result


def remove_key(path=DEFAULT_KEY_PATH, check_mode=False):
    """Remove the private key at ``path`` and the temporary files of key writes cut short
    (``leftovers``), then the key's directory when that leaves it empty (``ensure_key`` made it;
    anything else in it, Kilo's or the stored plan's, keeps it). Never reads the key. Returns
    {'changed', 'msg'}; nothing is removed in check mode. Failures are KeyFileError."""
    backend = KeyBackend(path)
    with key_file_errors(path):
        step = run([backend], None, check_mode, absent=True)[0]
    current = step.current
    if not step.changes:
        return {"changed": False, "msg": "no key at %s" % path}
    msg = "%s key %s" % ("would remove" if check_mode else "removed", path)
    if current["leftovers"]:
        msg += " and %d temporary file(s) of a key write cut short" % len(current["leftovers"])
    if backend.removed_dir:
        msg += " and its empty directory"
    return {"changed": True, "msg": msg}


def _rotation(path, rotate, max_age):
    """Why the key at ``path`` is to be replaced now ('requested', 'age') or None."""
    if rotate:
        return "requested"
    if max_age and key_age(path) >= max_age:
        return "age"
    return None
