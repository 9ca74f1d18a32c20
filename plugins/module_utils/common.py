# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""The helpers both sides share: the error base class, booleans, integers, lists, interface names,
endpoints, keys, public addresses and kernel module probes.

This is the lowest layer: the controller (engine, inputs, actions) and the host (converge
backends, key, prepare) import it, and it imports nothing of ours and nothing of Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import difflib
import ipaddress
import os
import subprocess


class Subject(str):
    """Where an error is, as its message prints it (``node 'b'``, ``host 'a'``, ``options``), with
    its ``kind`` (node, peer, host, options, location, registry, task ...) and ``name`` as data,
    so that a caller maps an error to a host without reading it back out of the text."""

    def __new__(cls, kind, name=None, text=None):
        if text is None:
            text = kind if name is None else "%s %r" % (kind, name)
        self = str.__new__(cls, text)
        self.kind = kind
        self.name = name
        return self

    def __reduce__(self):
        return Subject, (self.kind, self.name, str(self))


class KiloError(Exception):
    """An expected failure: bad input or a host that cannot do what is asked.

    ``subject`` says where (``host 'a'``, ``node 'b'``, ``options``) and ``field`` what
    (``kilo_leader``, ``plan.routes[3].dst``); the message reads ``subject: field: message``.
    ``kind`` and ``name`` are the subject as data (a ``Subject``; a plain text subject is its own
    kind, without a name). Caught in one place per entry point (action plugin, module) and shown
    without a traceback.
    """

    def __init__(self, message, subject=None, field=None):
        self.subject = subject
        self.kind = getattr(subject, "kind", subject)
        self.name = getattr(subject, "name", None)
        self.field = field
        self.message = message
        super(KiloError, self).__init__(": ".join(str(p) for p in (subject, field, message) if p))

    def about(self, subject):
        """The same error, said of ``subject`` when it names no subject yet."""
        return self if self.subject else KiloError(self.message, subject, self.field)


def dedup(items):
    """``items`` in their order, each once (the first time it comes)."""
    seen = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def did_you_mean(name, known, prefixes=()):
    """'; did you mean X?' naming the one of ``known`` closest to the unknown ``name`` (difflib's
    ratio, at least 0.6), or '' when none is close. A prefix of ``prefixes`` that both names share
    (``kilo_``, an annotation's domain) is left out of the comparison: it would make any two close."""

    def tail(text):
        for prefix in prefixes:
            if text.startswith(prefix):
                return text[len(prefix) :]
        return text

    tails = {}
    for candidate in sorted(known):
        tails.setdefault(tail(candidate), candidate)
    close = difflib.get_close_matches(tail(str(name)), list(tails), n=1, cutoff=0.6)
    return "; did you mean %s?" % tails[close[0]] if close else ""


def host_subject(name):
    return Subject("host", name)


def node_subject(name):
    return Subject("node", name)


def peer_subject(name):
    return Subject("peer", name)


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def to_bool(value, subject=None, field=None, default=False):
    """Ansible's spellings of a boolean; None and "" give ``default``."""
    if isinstance(value, bool):
        return value
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    if isinstance(value, int):
        return value != 0
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise KiloError("%r is not a boolean" % (value,), subject, field)


def to_int(value, subject=None, field=None, low=None, high=None, default=0):
    """An integer (a whole float or a digit string is fine); None and "" give ``default``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    if isinstance(value, bool):
        raise KiloError("%r is not an integer" % (value,), subject, field)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise KiloError("%r is not an integer" % (value,), subject, field)
    if isinstance(value, float) and number != value:
        raise KiloError("%r is not an integer" % (value,), subject, field)
    if (low is not None and number < low) or (high is not None and number > high):
        if high is None:
            raise KiloError("%d out of range (at least %d)" % (number, low), subject, field)
        if low is None:
            raise KiloError("%d out of range (at most %d)" % (number, high), subject, field)
        raise KiloError("%d out of range %d-%d" % (number, low, high), subject, field)
    return number


def text_table(header, rows, rule=False):
    """The lines of a text table for people: columns as wide as their widest cell, two spaces
    apart, no trailing blanks; ``rule``: a line of dashes under the header."""
    rows = [[str(cell) for cell in row] for row in [header] + list(rows)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def text_list(value, subject=None, field=None, what="a list"):
    """A list given as a list or as text separated by commas (an inventory string, an annotation)
    -> its items: text items stripped, empty ones dropped; None and "" give []. Anything else
    raises KiloError saying ``what`` was expected. The items of a list are the caller's to check."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise KiloError("expected %s, got %r" % (what, value), subject, field)


def check_interface_name(name, subject=None, field="interface"):
    """Linux's rules for a link name; names also end up in paths (/run/kilo/NAME.pid)."""
    if (
        not isinstance(name, str)
        or not name
        or len(name) > 15
        or name in (".", "..")
        or any(c in name for c in "/:% \t\n\r")
    ):
        raise KiloError("%r is not a valid Linux interface name" % (name,), subject, field)
    return name


def format_endpoint(ip, port):
    """``ip:port``, IPv6 in brackets; ``ip`` is an address object or a string."""
    if not isinstance(ip, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        try:
            ip = ipaddress.ip_address(str(ip).strip("[]"))
        except ValueError:
            return "%s:%d" % (ip, port)  # a DNS name
    return "[%s]:%d" % (ip, port) if ip.version == 6 else "%s:%d" % (ip, port)


def parse_key(value, subject=None, field="public_key", required=True):
    """A base64 WireGuard key in canonical spelling (as Kilo prints keys), or None."""
    if value is None or value == "":
        if required:
            raise KiloError("missing", subject, field)
        return None
    if not isinstance(value, str):
        raise KiloError("not a base64 WireGuard key", subject, field)
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise KiloError("not valid base64", subject, field)
    if len(raw) != 32:
        raise KiloError("decodes to %d bytes, a WireGuard key has 32" % len(raw), subject, field)
    return base64.b64encode(raw).decode("ascii")


def is_public(ip):
    """Kilo's test, exactly: IPv4 outside 10/8, 172.16/12 and 192.168/16; IPv6 outside fd00::/16.

    ``ip`` is an address object or text; None (a DNS endpoint, no IP known) is not public.
    """
    if ip is None:
        return False
    if not isinstance(ip, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        ip = ipaddress.ip_address(str(ip).partition("/")[0])
    packed = ip.packed
    if ip.version == 4:
        return not (
            packed[0] == 10
            or (packed[0] == 172 and packed[1] & 0xF0 == 0x10)
            or (packed[0] == 192 and packed[1] == 168)
        )
    return not (packed[0] == 0xFD and packed[1] == 0x00)


def kernel_module_available(name):
    """Whether kernel module ``name`` is loaded or loadable; ``modprobe -n`` loads nothing."""
    if os.path.isdir(os.path.join("/sys/module", name)):
        return True
    return run_command(["modprobe", "-n", "-q", name])[0] == 0


def run_command(argv, stdin=None, timeout=None, text=True):
    """(returncode, stdout, stderr) of ``argv``, as text (bytes when not ``text``, ``stdin`` too;
    without ``stdin`` it reads /dev/null). A command that cannot run gives 127, one still running
    after ``timeout`` seconds is killed and gives 124 (as timeout(1)); stderr says why."""
    given = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    try:
        proc = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=text,
            timeout=timeout,
            check=False,
            **given,
        )
    except subprocess.TimeoutExpired:
        why, rc = "still running after %s s" % timeout, 124
    except (OSError, ValueError) as e:
        why, rc = str(e), 127
    else:
        return proc.returncode, proc.stdout, proc.stderr
    return (rc, "", why) if text else (rc, b"", why.encode("utf-8"))


def run_checked(argv, error=KiloError, field=None, stdin=None, ok_codes=(0,), runner=run_command):
    """``runner``'s (returncode, stdout, stderr) of ``argv``; ``error`` (a KiloError class, naming
    ``field``) when the command is missing or exits with a code not in ``ok_codes``."""
    rc, out, err = runner(argv) if stdin is None else runner(argv, stdin)
    if rc == 127 and not out:
        raise error("cannot run %s: %s (is it installed?)" % (argv[0], err.strip()), None, field)
    if rc not in ok_codes:
        raise error(
            "%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()), None, field
        )
    return rc, out, err
