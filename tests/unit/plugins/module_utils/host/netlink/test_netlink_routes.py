"""netlink.routes: the light route dump, on hand-built netlink messages (no kernel), and
netstate's use of it with its pyroute2 fallback."""

import errno
import socket
import struct

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink import routes as nr
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import backend as ns
from ansible_collections.kilo.mesh.plugins.module_utils.host.netstate import routes as nsr
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings

V4, V6 = socket.AF_INET, socket.AF_INET6
SEQ = 1


def attr(atype, data):
    out = struct.pack("=HH", 4 + len(data), atype) + data
    return out + b"\0" * (-len(out) % 4)


def u32(atype, value):
    return attr(atype, struct.pack("=I", value))


def addr(atype, family, text):
    return attr(atype, socket.inet_pton(family, text))


def route_msg(
    family,
    dst,
    dst_len,
    table=254,
    proto=186,
    rtype=1,
    flags=0,
    oif=2,
    gateway=None,
    prefsrc=None,
    priority=None,
    extra=b"",
    nlflags=2,
    seq=SEQ,
):
    """RTM_NEWROUTE as the kernel sends it: rtm_table 252 (COMPAT) above 255, RTA_TABLE always."""
    attrs = u32(nr.RTA_TABLE, table)
    if dst_len:
        attrs += addr(nr.RTA_DST, family, dst)
    attrs += extra
    if priority is not None:
        attrs += u32(nr.RTA_PRIORITY, priority)
    if prefsrc:
        attrs += addr(nr.RTA_PREFSRC, family, prefsrc)
    if gateway:
        attrs += addr(nr.RTA_GATEWAY, family, gateway)
    attrs += u32(nr.RTA_OIF, oif)
    body = (
        struct.pack(
            "=BBBBBBBBI",
            family,
            dst_len,
            0,
            0,
            table if table < 256 else 252,
            proto,
            0,
            rtype,
            flags,
        )
        + attrs
    )
    return struct.pack("=IHHII", 16 + len(body), nr.RTM_NEWROUTE, nlflags, seq, 0) + body


def done(code=0, seq=SEQ):
    return struct.pack("=IHHIIi", 20, nr.NLMSG_DONE, 2, seq, 0, code)


def error(code, seq=SEQ):
    return struct.pack("=IHHIIi", 36, nr.NLMSG_ERROR, 0, seq, 0, code) + struct.pack(
        "=IHHII", 20, 26, 0x301, seq, 0
    )


def parse(data, family=V4, keys=()):
    out = []
    buf = bytearray(data)
    result = nr.parse(
        buf, len(buf), SEQ, family, nr.key_index(family, keys) if keys is not None else None, out
    )
    return result, out


def test_request_matches_the_strict_dump_filter():
    req = nr.request(7, V4, table=1107, rtype=1)
    assert struct.unpack_from("=IHHII", req) == (len(req), 26, 0x301, 7, 0)
    # header filters: only family, protocol and type set; the table goes in RTA_TABLE (u32)
    assert struct.unpack_from("=BBBBBBBBI", req, 16) == (V4, 0, 0, 0, 0, 0, 0, 1, 0)
    assert req[28:] == u32(nr.RTA_TABLE, 1107) and len(req) == 36
    assert len(nr.request(1, V6, proto=107)) == 28  # no table: no attribute


def test_header_decides_and_only_keys_are_decoded():
    keys = {("10.1.2.0/24", 254), ("10.1.0.2/32", 1107), ("fd02::/64", 254)}
    data = b"".join(
        [route_msg(V4, "10.128.0.%d" % (i * 16), 28) for i in range(10)]  # wrong prefix length
        + [
            route_msg(V4, "10.1.3.0", 24),  # right length, other dst
            route_msg(V4, "10.1.2.0", 24, table=200),  # right dst, other table
            route_msg(
                V4,
                "10.1.2.0",
                24,
                proto=4,
                oif=3,
                gateway="10.255.0.2",
                prefsrc="10.1.0.1",
                flags=4,
                extra=attr(12, b"\1" * 16),
            ),
        ]  # an attribute not decoded
        + [done()]
    )
    (finished, interrupted), out = parse(data, keys=keys)
    assert finished and not interrupted
    assert len(out) == 1
    msg = out[0]
    assert dict(msg) == {
        "family": V4,
        "dst_len": 24,
        "src_len": 0,
        "tos": 0,
        "table": 254,
        "proto": 4,
        "scope": 0,
        "type": 1,
        "flags": 4,
    }
    assert msg.attrs == {
        "RTA_TABLE": 254,
        "RTA_DST": "10.1.2.0",
        "RTA_GATEWAY": "10.255.0.2",
        "RTA_PREFSRC": "10.1.0.1",
        "RTA_OIF": 3,
    }
    assert msg.get_attr("RTA_PRIORITY") is None


def test_table_above_255_comes_from_rta_table():
    keys = {("10.1.0.2/32", 1107)}
    data = (
        route_msg(V4, "10.1.0.2", 32, table=1107, gateway="10.1.0.2")
        + route_msg(V4, "10.1.0.2", 32, table=1108)
        + done()
    )
    (finished, dummy), out = parse(data, keys=keys)
    assert finished and [(m["table"], m.get_attr("RTA_TABLE")) for m in out] == [(252, 1107)]


def test_ipv6_and_default_route():
    keys = {("fd02::/64", 254), ("::/0", 1107), ("10.1.2.0/24", 254)}
    data = (
        route_msg(V6, "fd02::", 64, proto=3, gateway="fe80::1", priority=1024)
        + route_msg(V6, "fd02:0:0:1::", 64, priority=1024)
        + route_msg(V6, "::", 0, table=1107, priority=1024)
        + done()
    )
    (finished, dummy), out = parse(data, V6, keys)
    assert finished
    assert [
        (m.get_attr("RTA_DST"), m["dst_len"], m.get_attr("RTA_GATEWAY"), m.get_attr("RTA_PRIORITY"))
        for m in out
    ] == [("fd02::", 64, "fe80::1", 1024), (None, 0, None, 1024)]


def test_several_datagrams_until_done():
    keys = {("10.1.2.0/24", 254)}
    out = []
    index = nr.key_index(V4, keys)
    first = bytearray(route_msg(V4, "10.1.2.0", 24) + route_msg(V4, "10.1.3.0", 24))
    assert nr.parse(first, len(first), SEQ, V4, index, out) == (False, False)
    # only buf[:size] counts: a longer buffer's leftovers from an earlier datagram are ignored
    second = bytearray(done() + b"\xff" * 64)
    assert nr.parse(second, 20, SEQ, V4, index, out) == (True, False)
    assert len(out) == 1


def test_errors_raise_oserror_with_errno():
    with pytest.raises(OSError) as exc:
        parse(route_msg(V4, "10.1.2.0", 24) + error(-errno.EINVAL))
    assert exc.value.errno == errno.EINVAL
    with pytest.raises(OSError) as exc:  # a dump's own error comes in NLMSG_DONE
        parse(done(-errno.ENOENT))
    assert exc.value.errno == errno.ENOENT
    assert parse(error(0))[0] == (True, False)  # an ACK ends it too
    with pytest.raises(OSError) as exc:
        parse(route_msg(V4, "10.1.2.0", 24)[:-4])
    assert exc.value.errno == errno.EBADMSG


def test_interrupted_flag_is_reported():
    assert parse(route_msg(V4, "10.1.2.0", 24, nlflags=2 | nr.NLM_F_DUMP_INTR) + done())[0] == (
        True,
        True,
    )


class FakeSocket(object):
    """Answers each request with the next list of datagrams."""

    def __init__(self, answers, refuse=False):
        self.answers = list(answers)
        self.refuse = refuse
        self.sent, self.queue, self.closed = [], [], False

    def bind(self, address):
        pass

    def setsockopt(self, level, name, value):
        assert (level, name, value) == (270, 12, 1)
        if self.refuse:
            raise OSError(errno.ENOPROTOOPT, "Protocol not available")

    def sendall(self, data):
        self.sent.append(data)
        seq = struct.unpack_from("=I", data, 8)[0]
        self.queue = [d(seq) for d in self.answers.pop(0)]

    def recv_into(self, buf):
        data = self.queue.pop(0)
        buf[: len(data)] = data
        return len(data)

    def close(self):
        self.closed = True


def fake_socket(monkeypatch, sock):
    monkeypatch.setattr(nr.socket, "socket", lambda *args: sock)
    return sock


def test_dump_routes_reads_until_done_and_retries_an_interrupted_dump(monkeypatch):
    keys = {("10.1.2.0/24", 254)}
    intr = [
        lambda seq: route_msg(V4, "10.1.2.0", 24, seq=seq, nlflags=2 | nr.NLM_F_DUMP_INTR),
        lambda seq: done(seq=seq),
    ]
    good = [
        lambda seq: route_msg(V4, "10.1.2.0", 24, seq=seq) + route_msg(V4, "10.1.9.0", 24, seq=seq),
        lambda seq: route_msg(V4, "10.1.2.0", 24, table=254, proto=4, seq=seq) + done(seq=seq),
    ]
    sock = fake_socket(monkeypatch, FakeSocket([intr, good]))
    out = nr.dump_routes(V4, keys, table=254, rtype=1)
    assert [m["proto"] for m in out] == [186, 4] and len(sock.sent) == 2 and sock.closed
    sock = fake_socket(monkeypatch, FakeSocket([intr] * nr.RETRIES))
    with pytest.raises(OSError) as exc:
        nr.dump_routes(V4, keys, table=254)
    assert exc.value.errno == errno.EINTR and sock.closed


def test_dump_routes_missing_table_and_refused_strict_checking(monkeypatch):
    fake_socket(monkeypatch, FakeSocket([[lambda seq: done(-errno.ENOENT, seq=seq)]]))
    assert nr.dump_routes(V4, {("10.1.0.2/32", 1107)}, table=1107) == []
    fake_socket(monkeypatch, FakeSocket([[lambda seq: done(-errno.ENOENT, seq=seq)]]))
    with pytest.raises(OSError):
        nr.dump_routes(V4, (), proto=107)  # no table asked: ENOENT is an error
    sock = fake_socket(monkeypatch, FakeSocket([], refuse=True))
    with pytest.raises(nr.StrictCheckUnsupported) as exc:
        nr.dump_routes(V4, ())
    assert exc.value.errno == errno.ENOPROTOOPT and sock.closed and isinstance(exc.value, OSError)


# ---------------------------------------------------------------- netstate's use of it
class Msg(dict):
    def __init__(self, attrs, **fields):
        super(Msg, self).__init__(fields)
        self.attrs = attrs

    def get_attr(self, name):
        return self.attrs.get(name)


class FakeIPRoute(object):
    """Strict dumps: ours none; table 254 holds a foreign route at a plan destination."""

    status = {}

    def __init__(self, **kw):
        self.dumps = []

    def nlm_request(self, msg, msg_type, msg_flags):
        table = dict(msg["attrs"]).get("RTA_TABLE", 0)
        self.dumps.append((msg["family"], table, msg["proto"]))
        if msg["proto"] or table != 254 or msg["family"] != V4:
            return []
        return [
            Msg(
                {"RTA_DST": "10.1.2.0", "RTA_TABLE": 254, "RTA_OIF": 2},
                type=1,
                proto=4,
                dst_len=24,
                flags=0,
                family=V4,
            )
        ]


LINKS = {2: {"name": "eth1", "up": True, "mtu": 1500}}
WATCH = {("10.1.2.0/24", 254), ("10.1.0.2/32", 1107)}
FOREIGN = [
    {
        "family": 4,
        "dst": "10.1.2.0/24",
        "table": 254,
        "gateway": None,
        "device": "eth1",
        "source": None,
        "onlink": False,
        "priority": None,
        "proto": 4,
    }
]


def backend():
    b = ns.NetStateBackend(host_settings({"interface": "wgk0"}))
    b._ipr_class = FakeIPRoute  # as if FakeIPRoute were pyroute2's IPRoute
    return b


def test_the_reader_reads_ours_by_protocol_and_foreign_only_at_the_keys(monkeypatch):
    """NetlinkReader's route dumps: ours by protocol (every message decoded), a table's foreign
    routes decoding only the messages at the plan's keys (netlink.routes.dump_routes)."""
    from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink import links as nl

    asked = []

    def light(family, keys, table=0, proto=0, rtype=0):
        asked.append((family, table, proto, rtype, sorted(keys) if keys is not None else None))
        if table != 254:
            return []
        return [
            nr.RouteMessage(
                {"family": V4, "dst_len": 24, "table": 254, "proto": 4, "type": 1, "flags": 0},
                {"RTA_DST": "10.1.2.0", "RTA_TABLE": 254, "RTA_OIF": 2},
            )
        ]

    monkeypatch.setattr(nl, "dump_routes", light)
    ours, foreign = nsr.read(nl.NetlinkReader(strict=False), True, LINKS, WATCH)
    assert ours == [] and foreign == FOREIGN
    assert asked == [
        (V4, 0, 107, 0, None),
        (V6, 0, 107, 0, None),
        (V4, 254, 0, 1, sorted(WATCH)),
        (V4, 1107, 0, 1, sorted(WATCH)),
    ]
    assert nsr.foreign_str(foreign[0]) == "10.1.2.0/24 dev eth1 proto 4"


def test_without_strict_checking_the_backend_reads_through_pyroute2(monkeypatch):
    from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink import links as nl

    def refused():
        raise nr.StrictCheckUnsupported(errno.ENOPROTOOPT, "refused")

    monkeypatch.setattr(nl, "open_strict", refused)
    b = backend()
    ipr, strict = b._reader()
    assert isinstance(ipr, FakeIPRoute) and strict is False


def test_foreign_scan_keeps_pyroute2_for_another_ipr():
    ipr = FakeIPRoute()
    assert nsr.read(ipr, True, LINKS, WATCH) == ([], FOREIGN)
    assert len(ipr.dumps) == 4


def test_multipath_next_hops_give_their_devices():
    hops = (
        struct.pack("=HBBi", 16, 0, 0, 7)
        + addr(nr.RTA_GATEWAY, V4, "10.1.0.1")
        + struct.pack("=HBBi", 8, 0, 0, 9)
    )
    msg = route_msg(V4, "0.0.0.0", 0, extra=attr(nr.RTA_MULTIPATH, hops))
    (done_, dummy), out = parse(msg + done(), keys=[("0.0.0.0/0", 254)])
    assert done_ and out[0].get_attr("RTA_MULTIPATH") == [{"oif": 7}, {"oif": 9}]


def test_links_and_addresses_decode_from_kernel_messages():
    from ansible_collections.kilo.mesh.plugins.module_utils.host.netlink import links as nl

    info = attr(1, b"wireguard\0")
    body = (
        struct.pack("=BBHiII", 0, 0, 65534, 5, 0x1 | 0x40, 0)
        + attr(3, b"kilo0\0")
        + u32(4, 1420)
        + attr(18 | 0x8000, info)
    )
    msg = struct.pack("=IHHII", 16 + len(body), nl.RTM_NEWLINK, 2, SEQ, 0) + body
    buf = bytearray(msg + done())
    got, finished = nl.messages(buf, len(buf), SEQ)
    # the DONE message is listed too, with its flags: the kernel may mark it interrupted
    assert finished and [m[0] for m in got] == [nl.RTM_NEWLINK, nr.NLMSG_DONE]
    assert nl.decode_link(buf, *got[1][:3]) is None
    link = nl.decode_link(buf, *got[0][:3])
    assert (
        link["index"],
        link["flags"],
        link.get_attr("IFLA_IFNAME"),
        link.get_attr("IFLA_MTU"),
    ) == (5, 0x41, "kilo0", 1420)
    assert link.get_attr("IFLA_LINKINFO").get_attr("IFLA_INFO_KIND") == "wireguard"
    body = struct.pack("=BBBBI", V6, 64, 0, 0, 3) + addr(1, V6, "fd00:5::5") + attr(3, b"eth2\0")
    msg = struct.pack("=IHHII", 16 + len(body), nl.RTM_NEWADDR, 2, SEQ, 0) + body
    buf = bytearray(msg)
    address = nl.decode_address(buf, *nl.messages(buf, len(buf), SEQ)[0][0][:3])
    assert (address["family"], address["prefixlen"], address["index"]) == (V6, 64, 3)
    assert (
        address.get_attr("IFA_ADDRESS"),
        address.get_attr("IFA_LOCAL"),
        address.get_attr("IFA_LABEL"),
    ) == ("fd00:5::5", None, "eth2")
    body = (
        struct.pack("=BBBBBBBBI", V4, 0, 24, 0, 0, 0, 0, 1, 0)
        + addr(2, V4, "10.4.0.0")
        + u32(6, 32000)
        + u32(15, 1107)
        + attr(3, b"kilo0\0")
    )
    msg = struct.pack("=IHHII", 16 + len(body), nl.RTM_NEWRULE, 2, SEQ, 0) + body
    buf = bytearray(msg)
    rule = nl.decode_rule(buf, *nl.messages(buf, len(buf), SEQ)[0][0][:3])
    assert (
        rule["src_len"],
        rule["table"],
        rule.get_attr("FRA_SRC"),
        rule.get_attr("FRA_PRIORITY"),
        rule.get_attr("FRA_TABLE"),
        rule.get_attr("FRA_IIFNAME"),
        rule.get_attr("FRA_DST"),
    ) == (24, 0, "10.4.0.0", 32000, 1107, "kilo0", None)
    with pytest.raises(OSError) as e:
        buf = bytearray(error(-errno.EPERM))
        nl.messages(buf, len(buf), SEQ)
    assert e.value.errno == errno.EPERM


def test_a_route_of_another_family_is_left_out():
    """A kernel without IPv6 answers an IPv6 dump with every family's routes."""
    v4 = route_msg(V4, "10.2.1.0", 24, proto=107)
    (finished, dummy), out = parse(v4 + done(), family=V6, keys=None)
    assert finished and out == []
