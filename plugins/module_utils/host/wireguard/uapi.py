# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)
"""WireGuard's cross-platform userspace API (UAPI), spoken over the daemon's unix socket.

Protocol: the client writes `get=1\\n\\n` or `set=1\\n` + `key=value` lines + `\\n`; the daemon
answers with `key=value` lines ending in `errno=N\\n\\n`. Keys are lowercase hex in UAPI (base64
everywhere else in this collection). A `public_key=` line starts a peer section.

Only peer-by-peer operations are built here: no `replace_peers`, so peers that are not named
in a `set` keep their sessions.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import os
import socket
import time

from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError

SOCKET_DIR = "/var/run/wireguard"
ZERO_KEY_HEX = "0" * 64


class UAPIError(KiloError):
    """A UAPI exchange failed or a daemon answered something we cannot read."""


def socket_path(interface, directory=SOCKET_DIR):
    return os.path.join(directory, interface + ".sock")


def b64_to_hex(b64):
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise UAPIError("key is not base64")
    if len(raw) != 32:
        raise UAPIError("key must be 32 bytes")
    return binascii.hexlify(raw).decode("ascii")


def hex_to_b64(hx):
    try:
        raw = binascii.unhexlify(hx)
    except (binascii.Error, ValueError, TypeError):
        raise UAPIError("key is not hex")
    if len(raw) != 32:
        raise UAPIError("key must be 32 bytes")
    return base64.b64encode(raw).decode("ascii")


def build_set(private_key=None, listen_port=None, fwmark=None, peers=()):
    """Build a `set=1` request.

    private_key: base64 (never logged; the caller must not log the request text).
    peers: list of operations, each a dict with public_key (base64) and optionally
      remove (bool), update_only (bool), preshared_key (base64, or '' to clear),
      endpoint ('ip:port', already resolved), persistent_keepalive (int),
      replace_allowed_ips (bool), allowed_ips (list of CIDRs).
    """
    lines = ["set=1"]
    if private_key is not None:
        lines.append("private_key=" + b64_to_hex(private_key))
    if listen_port is not None:
        lines.append("listen_port=%d" % int(listen_port))
    if fwmark is not None:
        lines.append("fwmark=%d" % int(fwmark))
    for p in peers:
        lines.append("public_key=" + b64_to_hex(p["public_key"]))
        if p.get("remove"):
            lines.append("remove=true")
            continue
        if p.get("update_only"):
            lines.append("update_only=true")
        if "preshared_key" in p:
            psk = p["preshared_key"]
            lines.append("preshared_key=" + (b64_to_hex(psk) if psk else ZERO_KEY_HEX))
        if p.get("endpoint"):
            lines.append("endpoint=" + p["endpoint"])
        if "persistent_keepalive" in p:
            lines.append("persistent_keepalive_interval=%d" % p["persistent_keepalive"])
        if p.get("replace_allowed_ips"):
            lines.append("replace_allowed_ips=true")
        for cidr in p.get("allowed_ips") or ():
            lines.append("allowed_ip=" + cidr)
    return "\n".join(lines) + "\n\n"


def parse_get(text):
    """Parse a `get=1` answer into a device dict.

    Returns {'private_key_hex': hex or None, 'listen_port', 'fwmark', 'peers': [...]}; each
    peer: public_key (base64), preshared_key_hex, endpoint, persistent_keepalive,
    last_handshake (unix seconds, 0 = never), rx_bytes, tx_bytes, allowed_ips (list).
    The caller turns the private key into its public key and drops it.
    """
    dev = {"private_key_hex": None, "listen_port": 0, "fwmark": 0, "peers": []}
    peer = None
    errno = None
    for line in text.split("\n"):
        if not line:
            continue
        if "=" not in line:
            raise UAPIError("malformed UAPI line (no '=')")
        key, value = line.split("=", 1)
        try:
            peer, errno = _parse_line(dev, peer, errno, key, value)
        except ValueError:
            raise UAPIError("malformed UAPI value of %s" % key)
    if errno is None:
        raise UAPIError("UAPI answer without errno (truncated?)")
    if errno != 0:
        raise UAPIError("UAPI get failed: errno=%d" % errno)
    return dev


def _parse_line(dev, peer, errno, key, value):
    """One `key=value` line of a `get` answer into ``dev``; returns (peer section, errno)."""
    if key == "errno":
        return peer, int(value)
    if key == "public_key":
        peer = {
            "public_key": hex_to_b64(value),
            "preshared_key_hex": None,
            "endpoint": None,
            "persistent_keepalive": 0,
            "last_handshake": 0,
            "rx_bytes": 0,
            "tx_bytes": 0,
            "allowed_ips": [],
        }
        dev["peers"].append(peer)
    elif peer is None:
        if key == "private_key":
            dev["private_key_hex"] = value
        elif key == "listen_port":
            dev["listen_port"] = int(value)
        elif key == "fwmark":
            dev["fwmark"] = int(value)
    elif key == "preshared_key":
        peer["preshared_key_hex"] = None if value == ZERO_KEY_HEX else value
    elif key == "endpoint":
        peer["endpoint"] = value or None
    elif key == "persistent_keepalive_interval":
        peer["persistent_keepalive"] = int(value)
    elif key == "last_handshake_time_sec":
        peer["last_handshake"] = int(value)
    elif key == "rx_bytes":
        peer["rx_bytes"] = int(value)
    elif key == "tx_bytes":
        peer["tx_bytes"] = int(value)
    elif key == "allowed_ip":
        peer["allowed_ips"].append(value)
    # protocol_version, last_handshake_time_nsec: not needed
    return peer, errno


def parse_errno(text):
    for line in text.split("\n"):
        if line.startswith("errno="):
            try:
                return int(line[6:])
            except ValueError:
                break
    raise UAPIError("UAPI answer without errno")


class UAPIClient(object):
    """One request per connection, as `wg` does."""

    def __init__(self, path, timeout=10.0):
        self.path = path
        self.timeout = timeout

    def _request(self, text):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
            s.sendall(text.encode("ascii"))
            chunks = []
            data = b""
            while not data.endswith(b"\n\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                data = b"".join(chunks)
            return data.decode("ascii", "replace")
        finally:
            s.close()

    def alive(self):
        try:
            self.get()
            return True
        except (OSError, socket.error, UAPIError):
            return False

    def get(self):
        return parse_get(self._request("get=1\n\n"))

    def set(self, text):
        answer = self._request(text)
        errno = parse_errno(answer)
        if errno != 0:
            # errno values are the daemon's (e.g. 22 = EINVAL for a bad line)
            raise UAPIError("UAPI set failed: errno=%d (%s)" % (errno, os.strerror(errno)))


def wait_for_socket(path, timeout, given_up=None):
    """Wait (at most ``timeout`` seconds) until a daemon answers on its UAPI socket ``path``, or
    ``given_up()`` says it never will (the daemon exited); whether it answers."""
    deadline = time.time() + timeout
    client = UAPIClient(path, timeout=2.0)
    while time.time() < deadline:
        if os.path.exists(path) and client.alive():
            return True
        if given_up is not None and given_up():
            return False
        time.sleep(0.05)
    return False
