"""Host I/O done one way: readers opened by netlink.links.open_reader (stdlib, else pyroute2),
files replaced by atomic_file.write_atomic (modes kept: the private key 0600)."""

import errno
import os
import socket
import stat

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils import atomic_file
from ansible_collections.kilo.mesh.plugins.module_utils.host import discovery, keys
from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink import links as nl
from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink import routes as nr


def mode_of(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def test_write_atomic_sets_the_mode_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "f.conf"
    atomic_file.write_atomic(str(path), "a\n", 0o644)
    assert path.read_text() == "a\n" and mode_of(path) == 0o644
    atomic_file.write_atomic(str(path), b"\xc3\xa9", 0o600)  # bytes as they are, and a new mode
    assert path.read_bytes() == b"\xc3\xa9" and mode_of(path) == 0o600
    assert os.listdir(str(tmp_path)) == ["f.conf"]


def test_write_atomic_makes_directories_only_when_asked(tmp_path):
    deep = tmp_path / "a" / "b" / "f"
    with pytest.raises(OSError):
        atomic_file.write_atomic(str(deep), "x", 0o644)
    atomic_file.write_atomic(str(deep), "x", 0o644, make_dirs=0o755)
    assert deep.read_text() == "x"


def test_write_atomic_keeps_the_old_file_when_the_rename_fails(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_text("old")

    def refuse(src, dst):
        raise OSError(errno.EXDEV, "refused")

    monkeypatch.setattr(atomic_file.os, "rename", refuse)
    with pytest.raises(OSError):
        atomic_file.write_atomic(str(path), "new", 0o644)
    assert path.read_text() == "old" and os.listdir(str(tmp_path)) == ["f"]


def test_a_new_private_key_is_0600_from_the_start(tmp_path, monkeypatch):
    """The temporary file is already 0600 when the key is written into it."""
    seen = []
    real = atomic_file.os.rename

    def look(src, dst):
        seen.append(mode_of(src))
        return real(src, dst)

    monkeypatch.setattr(atomic_file.os, "rename", look)
    path = tmp_path / "keys" / "private.key"
    assert keys.ensure_key(str(path))["changed"]
    assert seen == [0o600] and mode_of(path) == 0o600 and mode_of(path.parent) == 0o700


class Refused(object):
    def __init__(self, *args):
        raise nr.StrictCheckUnsupported(errno.ENOPROTOOPT, "refused")


class Whole(object):
    """pyroute2's IPRoute as a kernel without strict checking answers: every route."""

    closed = False

    def get_links(self):
        return [
            nr.RouteMessage({"index": 2, "flags": 1}, {"IFLA_IFNAME": "eth0", "IFLA_MTU": 1500})
        ]

    def get_addr(self):
        return [
            nr.RouteMessage(
                {"index": 2, "family": socket.AF_INET, "prefixlen": 24},
                {"IFA_ADDRESS": "10.1.0.5", "IFA_LOCAL": "10.1.0.5"},
            )
        ]

    def get_routes(self, family, table):
        if family != socket.AF_INET:
            return []
        return [
            nr.RouteMessage({"dst_len": 24}, {"RTA_OIF": 9}),
            nr.RouteMessage({"dst_len": 0}, {"RTA_OIF": 2}),
        ]

    def close(self):
        self.closed = True


def test_open_reader_prefers_the_standard_library(monkeypatch):
    class Strict(object):
        def close(self):
            pass

    monkeypatch.setattr(nl, "open_strict", Strict)
    reader, strict = nl.open_reader(
        lambda: pytest.fail("pyroute2 opened where strict checking works")
    )
    assert isinstance(reader, nl.NetlinkReader) and strict is True


def test_without_strict_checking_discovery_reads_through_pyroute2(monkeypatch):
    """One opening for every reader user: discovery falls back as netstate does."""
    whole = Whole()
    monkeypatch.setattr(nl, "NetlinkReader", Refused)
    assert nl.open_reader(lambda: whole) == (whole, False)
    real = nl.open_reader
    monkeypatch.setattr(discovery, "open_reader", lambda: real(lambda: whole))
    assert discovery.read_host() == {
        "links": {2: {"name": "eth0", "mtu": 1500}},
        "addrs": [{"index": 2, "ifname": "eth0", "cidr": "10.1.0.5/24"}],
        "default_index": 2,
    }
    assert whole.closed


def test_status_reads_interface_addresses_through_open_reader():
    """kilo.mesh.status reads its interface's addresses as every host reading does (loopback here)."""
    from ansible_collections.kilo.mesh.plugins.modules import status

    assert "127.0.0.1/8" in status.interface_addresses("lo")
    assert status.interface_addresses("no-such-if0") == []
