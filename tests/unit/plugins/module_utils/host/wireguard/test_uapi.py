"""UAPI message building/parsing, kernel genl message encoding (both pyroute2 versions), the
backend's difference logic on hand-made states and daemon supervision (no netlink needed)."""

import base64
import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.host import keys
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard import backend as wireguard
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard import (
    daemon as wireguard_daemon,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard import (
    kernel as wireguard_kernel,
)
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard import uapi
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import host_settings
from ansible_collections.kilo.mesh.plugins.module_utils.plan import check_plan
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard.backend import (
    WireGuardBackend,
    WireGuardError,
    resolve_endpoint,
    sort_cidrs,
)
from checkout import ROOT

K1 = base64.b64encode(b"\x01" * 32).decode()
K2 = base64.b64encode(b"\x02" * 32).decode()
K3 = base64.b64encode(b"\x03" * 32).decode()
H1 = "01" * 32
H2 = "02" * 32


# ---------------------------------------------------------------- UAPI text


def test_build_set_is_peer_by_peer_with_hex_keys():
    text = uapi.build_set(
        private_key=K1,
        listen_port=51820,
        peers=[
            {"public_key": K2, "remove": True},
            {
                "public_key": K3,
                "update_only": True,
                "replace_allowed_ips": True,
                "allowed_ips": ["10.2.0.0/24", "fd00::/64"],
                "persistent_keepalive": 25,
                "endpoint": "[2001:db8::1]:51820",
                "preshared_key": "",
            },
        ],
    )
    assert text == (
        "set=1\nprivate_key=%s\nlisten_port=51820\n"
        "public_key=%s\nremove=true\n"
        "public_key=%s\nupdate_only=true\npreshared_key=%s\nendpoint=[2001:db8::1]:51820\n"
        "persistent_keepalive_interval=25\nreplace_allowed_ips=true\n"
        "allowed_ip=10.2.0.0/24\nallowed_ip=fd00::/64\n\n"
    ) % (H1, H2, "03" * 32, "0" * 64)
    assert "replace_peers" not in text


def test_build_set_new_peer_has_no_update_only_or_replace():
    text = uapi.build_set(
        peers=[
            {
                "public_key": K2,
                "allowed_ips": ["10.1.0.0/16"],
                "endpoint": "203.0.113.2:51820",
                "persistent_keepalive": 0,
            }
        ]
    )
    assert (
        text
        == (
            "set=1\npublic_key=%s\nendpoint=203.0.113.2:51820\npersistent_keepalive_interval=0\n"
            "allowed_ip=10.1.0.0/16\n\n"
        )
        % H2
    )


def test_parse_get():
    text = (
        "private_key=%s\nlisten_port=51820\nfwmark=0\n"
        "public_key=%s\npreshared_key=%s\nprotocol_version=1\nendpoint=203.0.113.2:51820\n"
        "last_handshake_time_sec=1700000000\nlast_handshake_time_nsec=12\ntx_bytes=10\nrx_bytes=20\n"
        "persistent_keepalive_interval=25\nallowed_ip=10.2.0.0/24\nallowed_ip=10.4.0.2/32\n"
        "public_key=%s\npreshared_key=%s\nlast_handshake_time_sec=0\ntx_bytes=0\nrx_bytes=0\n"
        "persistent_keepalive_interval=0\nerrno=0\n\n"
    ) % (H1, H2, "0" * 64, "03" * 32, "ab" * 32)
    dev = uapi.parse_get(text)
    assert dev["private_key_hex"] == H1 and dev["listen_port"] == 51820
    p2, p3 = dev["peers"]
    assert p2 == {
        "public_key": K2,
        "preshared_key_hex": None,
        "endpoint": "203.0.113.2:51820",
        "persistent_keepalive": 25,
        "last_handshake": 1700000000,
        "rx_bytes": 20,
        "tx_bytes": 10,
        "allowed_ips": ["10.2.0.0/24", "10.4.0.2/32"],
    }
    assert p3["public_key"] == K3 and p3["preshared_key_hex"] == "ab" * 32
    assert p3["endpoint"] is None and p3["allowed_ips"] == []


@pytest.mark.parametrize(
    "text, needle",
    [
        ("listen_port=1\n\n", "without errno"),
        ("errno=2\n\n", "errno=2"),
        ("garbage\nerrno=0\n\n", "malformed"),
        ("public_key=zz\nerrno=0\n\n", "not hex"),
        ("listen_port=x\nerrno=0\n\n", "malformed UAPI value of listen_port"),
        ("errno=x\n\n", "malformed UAPI value of errno"),
    ],
)
def test_parse_get_errors(text, needle):
    with pytest.raises(uapi.UAPIError) as e:
        uapi.parse_get(text)
    assert needle in str(e.value)


def test_hex_b64_roundtrip_and_length():
    assert uapi.hex_to_b64(uapi.b64_to_hex(K2)) == K2
    with pytest.raises(uapi.UAPIError):
        uapi.b64_to_hex(base64.b64encode(b"x" * 31).decode())
    with pytest.raises(uapi.UAPIError):
        uapi.b64_to_hex("not base64!")
    with pytest.raises(uapi.UAPIError):
        uapi.hex_to_b64("ab" * 31)


def test_errors_are_kilo_errors():
    for cls in (
        uapi.UAPIError,
        wireguard_kernel.KernelWGError,
        WireGuardError,
        wireguard_daemon.DaemonError,
        keys.KeyFileError,
    ):
        assert issubclass(cls, KiloError), cls
    # one endpoint formatter (common's) and splitter (the node table's), not copies
    assert not hasattr(uapi, "format_endpoint") and not hasattr(wireguard_kernel, "_split_endpoint")
    assert not hasattr(wireguard, "split_endpoint") or wireguard.split_endpoint.__module__.endswith(
        ".nodes"
    )


# ---------------------------------------------------------------- kernel genl messages

KERNEL_CHECK = r"""
import sys, json, base64
sys.path.insert(0, %r)
from ansible_collections.kilo.mesh.plugins.module_utils.host.wireguard import kernel as wk
from pyroute2.netlink.generic.wireguard import wgmsg
K1 = base64.b64encode(b"\x01"*32).decode(); K2 = base64.b64encode(b"\x02"*32).decode()
msgs = wk.build_set_messages("kilo0", private_key=K1, listen_port=51820, peers=[
  {"public_key": K2, "update_only": True, "replace_allowed_ips": True,
   "allowed_ips": ["10.1.0.0/16", "fd00::/64"], "endpoint": "203.0.113.5:51820", "persistent_keepalive": 25},
  {"public_key": K2, "allowed_ips": ["10.9.0.0/24"]},
  {"public_key": K1, "remove": True}])
out = []
for m in msgs:
    m.encode(); d = wgmsg(m.data); d.decode()
    out.append({"port": d.get_attr("WGDEVICE_A_LISTEN_PORT"),
                "priv": d.get_attr("WGDEVICE_A_PRIVATE_KEY") is not None,
                "peers": [{"flags": p.get_attr("WGPEER_A_FLAGS"),
                           "ep": (lambda e: e and [e["addr"], e["port"]])(p.get_attr("WGPEER_A_ENDPOINT")),
                           "aips": [wk._allowed_ip_text(a) for a in (p.get_attr("WGPEER_A_ALLOWEDIPS") or [])]}
                          for p in (d.get_attr("WGDEVICE_A_PEERS") or [])]})
m = wgmsg(); m["cmd"] = 0; m["version"] = 1
m["attrs"] = [["WGDEVICE_A_IFNAME", "kilo0"], ["WGDEVICE_A_PRIVATE_KEY", K1], ["WGDEVICE_A_LISTEN_PORT", 51820],
  ["WGDEVICE_A_PEERS", [{"attrs": [["WGPEER_A_PUBLIC_KEY", K2], ["WGPEER_A_PRESHARED_KEY", wk.ZERO_KEY_B64],
     ["WGPEER_A_ENDPOINT", {"addr": "203.0.113.5", "port": 51820}], ["WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL", 25],
     ["WGPEER_A_LAST_HANDSHAKE_TIME", {"tv_sec": 1700000000, "tv_nsec": 5}], ["WGPEER_A_RX_BYTES", 10],
     ["WGPEER_A_TX_BYTES", 20], ["WGPEER_A_ALLOWEDIPS", wk._allowed_ips(["10.1.0.0/16", "fd00::/64"])]]}]]]
m.encode(); d = wgmsg(m.data); d.decode()
print(json.dumps({"set": out, "dev": wk.parse_device([d])}))
"""


@pytest.mark.parametrize(
    "python", ["/usr/bin/python3", os.path.join(ROOT, ".venv", "bin", "python")]
)
def test_kernel_messages_carry_kernel_flag_values(python):
    """0.7.2 (host) and 0.9.x (venv) must put the kernel's flag values on the wire."""
    if not os.path.exists(python):
        pytest.skip("no " + python)
    code = KERNEL_CHECK % os.path.join(ROOT, ".collections")
    r = subprocess.run(
        [python, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        check=False,
        universal_newlines=True,
    )
    if r.returncode != 0 and "No module named 'pyroute2'" in r.stderr:
        pytest.skip("no pyroute2 for " + python)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    dev_msg, update, add, remove = out["set"]
    assert dev_msg == {"port": 51820, "priv": True, "peers": []}
    # UPDATE_ONLY (4) | REPLACE_ALLOWEDIPS (2)
    assert update["peers"] == [
        {"flags": 6, "ep": ["203.0.113.5", 51820], "aips": ["10.1.0.0/16", "fd00::/64"]}
    ]
    assert add["peers"] == [{"flags": 0, "ep": None, "aips": ["10.9.0.0/24"]}]
    assert remove["peers"] == [{"flags": 1, "ep": None, "aips": []}]
    assert out["dev"]["peers"] == [
        {
            "public_key": K2,
            "preshared_key_b64": None,
            "endpoint": "203.0.113.5:51820",
            "persistent_keepalive": 25,
            "last_handshake": 1700000000,
            "rx_bytes": 10,
            "tx_bytes": 20,
            "allowed_ips": ["10.1.0.0/16", "fd00::/64"],
        }
    ]


# ---------------------------------------------------------------- difference logic


@pytest.fixture
def key_path(tmp_path):
    path = str(tmp_path / "key")
    keys.ensure_key(path)
    return path


def make_backend(key_path, monkeypatch, preshared_keys=None, **settings):
    settings = dict({"key_path": key_path, "backend": "userspace", "mtu": 1400}, **settings)
    be = WireGuardBackend(host_settings(settings), preshared_keys)
    monkeypatch.setattr(be, "_link", lambda: None)
    be.own = keys.public_key(keys.read_private_key(key_path)) if os.path.exists(key_path) else None
    return be


@pytest.fixture
def backend(key_path, monkeypatch):
    return make_backend(key_path, monkeypatch)


def live(be, peers, up=True, mtu=1400, port=51820):
    return {
        "interface": "kilo0",
        "backend": "userspace",
        "present": True,
        "up": up,
        "mtu": mtu,
        "listen_port": port,
        "fwmark": 0,
        "public_key": be.own,
        "peers": peers,
    }


def absent():
    return {
        "interface": "kilo0",
        "backend": "userspace",
        "present": False,
        "up": False,
        "mtu": None,
        "listen_port": None,
        "fwmark": None,
        "public_key": None,
        "peers": [],
    }


def live_peer(key, allowed, endpoint=None, ka=0, hs=0, psk=None):
    return {
        "public_key": key,
        "endpoint": endpoint,
        "allowed_ips": allowed,
        "persistent_keepalive": ka,
        "preshared_key": bool(psk),
        "preshared_key_digest": wireguard.psk_digest(psk),
        "latest_handshake": hs,
        "rx_bytes": 0,
        "tx_bytes": 0,
    }


def plan(peers, leader=True):
    return check_plan(
        {
            "name": "a",
            "leader": leader,
            "segment": "location:a",
            "listen_port": 51820,
            "peers": peers,
        },
        "kilo0",
    )


def desired(be, peers, current, leader=True):
    return be.desired(plan(peers, leader), current)


def test_converged_state_has_no_changes(backend):
    cur = live(backend, [live_peer(K2, ["10.2.0.0/24", "10.4.0.2/32"], "203.0.113.2:51820")])
    des = desired(
        backend,
        [
            {
                "name": "b",
                "public_key": K2,
                "endpoint": "203.0.113.2:51820",
                "allowed_ips": ["10.4.0.2/32", "10.2.0.9/24"],
            }
        ],
        cur,
    )
    assert backend.changes(cur, des) == []
    before, after = backend.diff(cur, des)
    assert before == after
    json.dumps([cur, des])


def test_only_the_changed_peer_is_touched(backend):
    cur = live(
        backend,
        [
            live_peer(K2, ["10.2.0.0/24"], "203.0.113.2:51820"),
            live_peer(K3, ["10.3.0.0/24"], "203.0.113.3:51820"),
        ],
    )
    des = desired(
        backend,
        [
            {
                "name": "b",
                "public_key": K2,
                "endpoint": "203.0.113.2:51820",
                "allowed_ips": ["10.2.0.0/24", "10.5.0.0/24"],
            },
            {
                "name": "c",
                "public_key": K3,
                "endpoint": "203.0.113.3:51820",
                "allowed_ips": ["10.3.0.0/24"],
            },
        ],
        cur,
    )
    ops = backend._ops(cur, des)
    assert [pair[0] for pair in ops] == ["update peer b (%s): allowed_ips +10.5.0.0/24" % K2[:8]]
    assert ops[0][1] == (
        "peer",
        {
            "public_key": K2,
            "update_only": True,
            "replace_allowed_ips": True,
            "allowed_ips": ["10.2.0.0/24", "10.5.0.0/24"],
        },
    )
    before, after = backend.diff(cur, des)
    assert [p["allowed_ips"] for p in before["peers"]] == [["10.2.0.0/24"], ["10.3.0.0/24"]]
    assert [p["allowed_ips"] for p in after["peers"]] == [
        ["10.2.0.0/24", "10.5.0.0/24"],
        ["10.3.0.0/24"],
    ]
    assert [p["name"] for p in before["peers"]] == ["b", "c"] == [p["name"] for p in after["peers"]]


def test_learned_endpoint_is_not_flipped_back(backend):
    cur = live(backend, [live_peer(K2, ["10.2.0.0/24"], "198.51.100.7:40000", hs=1)])
    des = desired(
        backend,
        [{"name": "b", "public_key": K2, "endpoint": None, "allowed_ips": ["10.2.0.0/24"]}],
        cur,
    )
    assert backend.changes(cur, des) == []
    assert backend.diff(cur, des)[1]["peers"][0]["endpoint"] == "198.51.100.7:40000"


def test_a_rekeyed_peer_without_endpoint_keeps_the_one_learned_for_its_old_key(backend):
    """A connecting machine behind NAT rotated its own key: its new entry is given the endpoint
    WireGuard learned for the old one, so the keepalive that starts the handshake can go out."""
    cur = live(backend, [live_peer(K2, ["10.5.0.1/32"], "198.51.100.7:40000", ka=25, hs=1)])
    des = desired(
        backend,
        [
            {
                "name": "laptop",
                "public_key": K3,
                "endpoint": None,
                "allowed_ips": ["10.5.0.1/32"],
                "persistent_keepalive": 25,
            }
        ],
        cur,
    )
    ops = dict(
        (op["public_key"], op) for dummy, (kind, op) in backend._ops(cur, des) if kind == "peer"
    )
    assert ops[K2].get("remove") and ops[K3]["endpoint"] == "198.51.100.7:40000"
    assert (
        "endpoint 198.51.100.7:40000 (learned for its previous key)" in backend.changes(cur, des)[1]
    )
    # a peer that merely joins has no endpoint to inherit
    des = desired(
        backend,
        [
            {"name": "b", "public_key": K2, "endpoint": None, "allowed_ips": ["10.5.0.1/32"]},
            {"name": "new", "public_key": K3, "endpoint": None, "allowed_ips": ["10.6.0.1/32"]},
        ],
        cur,
    )
    assert (
        "endpoint"
        not in dict(
            (op["public_key"], op) for dummy, (kind, op) in backend._ops(cur, des) if kind == "peer"
        )[K3]
    )


def test_roaming_endpoint_kept_while_handshakes_are_fresh(backend):
    peer = {
        "name": "b",
        "public_key": K2,
        "endpoint": "203.0.113.2:51820",
        "allowed_ips": ["10.2.0.0/24"],
        "roaming": True,
    }
    fresh = live(
        backend,
        [live_peer(K2, ["10.2.0.0/24"], "198.51.100.7:40000", hs=int(wireguard.time.time()))],
    )
    assert backend.changes(fresh, desired(backend, [peer], fresh)) == []
    stale = live(backend, [live_peer(K2, ["10.2.0.0/24"], "198.51.100.7:40000", hs=1)])
    assert backend.changes(stale, desired(backend, [peer], stale)) == [
        "update peer b (%s): endpoint 198.51.100.7:40000 -> 203.0.113.2:51820" % K2[:8]
    ]
    # not roaming: the configured endpoint wins even with a fresh handshake
    assert backend.changes(fresh, desired(backend, [dict(peer, roaming=False)], fresh))


def test_dns_endpoint_resolved_before_comparing(backend):
    cur = live(backend, [live_peer(K2, ["10.2.0.0/24"], "127.0.0.1:51820")])
    peers = [
        {
            "name": "b",
            "public_key": K2,
            "endpoint": "localhost:51820",
            "allowed_ips": ["10.2.0.0/24"],
        }
    ]
    des = desired(backend, peers, cur)
    assert backend.changes(cur, des) == []
    before, after = backend.diff(cur, des)
    assert before == after  # the diff shows the address, not the name apply() would not set
    cur = live(backend, [live_peer(K2, ["10.2.0.0/24"], "203.0.113.9:51820")])
    ((msg, (dummy, op)),) = backend._ops(cur, des)
    assert op["endpoint"] in ("127.0.0.1:51820", "[::1]:51820") and "localhost" in msg


def test_unresolvable_endpoint_names_host_peer_and_field(backend):
    with pytest.raises(WireGuardError) as e:
        desired(
            backend,
            [
                {
                    "name": "b",
                    "public_key": K2,
                    "endpoint": "no-such-host.invalid:51820",
                    "allowed_ips": ["10.2.0.0/24"],
                }
            ],
            absent(),
        )
    assert str(e.value).startswith(
        "host 'a': plan.peers[0].endpoint: peer b: cannot resolve 'no-such-host.invalid'"
    )


def test_removal_and_addition_and_link(key_path, monkeypatch):
    be = make_backend(key_path, monkeypatch, {K3: K1})
    cur = live(be, [live_peer(K2, ["10.2.0.0/24"])], mtu=1420)
    des = desired(
        be, [{"name": "c", "public_key": K3, "allowed_ips": ["10.3.0.0/24"]}], cur, leader=False
    )
    msgs = be.changes(cur, des)
    assert msgs == [
        "remove peer %s" % K2,
        "add peer c (%s) allowed_ips 10.3.0.0/24" % K3[:8],
        "set mtu 1400 (was 1420)",
        "set link down (not the leader)",
    ]
    assert K1 not in json.dumps(be.diff(cur, des)) and K1 not in json.dumps(des)
    assert be.diff(cur, des)[1]["peers"][0]["preshared_key"] == "(set)"
    add = be._ops(cur, des)[1][1][1]
    assert add["preshared_key"] == K1 and "update_only" not in add


def test_preshared_key_change_and_removal(key_path, monkeypatch):
    peer = {"name": "b", "public_key": K2, "allowed_ips": ["10.2.0.0/24"]}
    be = make_backend(key_path, monkeypatch, {K2: K1})
    cur = live(be, [live_peer(K2, ["10.2.0.0/24"], psk=K1)])
    assert be.changes(cur, desired(be, [peer], cur)) == []
    other = make_backend(key_path, monkeypatch, {K2: K3})
    assert other.changes(cur, desired(other, [peer], cur)) == [
        "update peer b (%s): preshared_key (set)" % K2[:8]
    ]
    plain = make_backend(key_path, monkeypatch)
    des = desired(plain, [peer], cur)
    assert plain.changes(cur, des) == ["update peer b (%s): preshared_key (removed)" % K2[:8]]
    assert plain._ops(cur, des)[0][1][1]["preshared_key"] == ""
    # a desired state made with other keys cannot be applied with these: no silent wrong key
    with pytest.raises(WireGuardError) as e:
        plain._ops(cur, desired(other, [peer], cur))
    assert "preshared key" in str(e.value) and K3 not in str(e.value)


def test_preshared_keys_are_checked_and_canonical(key_path, monkeypatch):
    sloppy = " " + K2 + "\n"
    be = make_backend(key_path, monkeypatch, {sloppy: K1, K3: None})
    assert be.preshared_keys == {K2: K1}
    with pytest.raises(KiloError) as e:
        make_backend(key_path, monkeypatch, {K2: "c2hvcnQ="})
    assert "preshared_keys[%s]" % K2 in str(e.value) and "c2hvcnQ=" not in str(e.value)


def test_remove_is_reached_through_owns_and_diff(backend):
    assert backend.owns(live(backend, [])) and not backend.owns(absent())
    before, after = backend.diff(live(backend, [live_peer(K2, ["10.2.0.0/24"])]), None)
    assert before["present"] and after["present"] is False and after["peers"] == []


def test_duplicate_and_own_key(backend):
    with pytest.raises(WireGuardError) as e:
        desired(
            backend,
            [
                {"name": "b", "public_key": K2, "allowed_ips": []},
                {"name": "c", "public_key": K2, "allowed_ips": []},
            ],
            absent(),
        )
    assert (
        "plan.peers[1].public_key" in str(e.value)
        and "peer c" in str(e.value)
        and "peer b" in str(e.value)
    )
    with pytest.raises(WireGuardError) as e:
        desired(backend, [{"name": "me", "public_key": backend.own, "allowed_ips": []}], absent())
    assert "own key" in str(e.value)


def test_missing_key_file_is_listed_in_check_mode_and_refused_on_apply(tmp_path, monkeypatch):
    path = str(tmp_path / "nope")
    be = make_backend(path, monkeypatch)
    des = desired(be, [], absent())
    assert des["public_key"] == "(key to be created)"
    assert be.changes(absent(), des)  # check mode can still say what would happen
    monkeypatch.setattr(be, "_create", lambda impl: pytest.fail("created without a key"))
    with pytest.raises(WireGuardError) as e:
        be.apply(absent(), des)
    assert "nope" in str(e.value) and "kilo.mesh.key" in str(e.value)
    assert not (tmp_path / "nope").exists()


def test_apply_reads_the_key_file_and_refuses_a_changed_key(key_path, monkeypatch):
    be = make_backend(key_path, monkeypatch)
    des = desired(be, [], absent())
    assert be.own and des["public_key"] == be.own
    os.unlink(key_path)
    keys.ensure_key(key_path)  # another key since the comparison
    monkeypatch.setattr(be, "_create", lambda impl: pytest.fail("created with the wrong key"))
    with pytest.raises(WireGuardError) as e:
        be.apply(absent(), des)
    assert "changed since" in str(e.value)


def test_apply_sends_only_the_difference(key_path, monkeypatch):
    be = make_backend(key_path, monkeypatch)
    sent = []
    monkeypatch.setattr(wireguard.UAPIClient, "set", lambda client, text: sent.append(text))
    cur = live(
        be, [live_peer(K2, ["10.2.0.0/24"], "203.0.113.2:51820"), live_peer(K3, ["10.3.0.0/24"])]
    )
    des = desired(
        be,
        [
            {
                "name": "b",
                "public_key": K2,
                "endpoint": "203.0.113.2:51820",
                "allowed_ips": ["10.2.0.0/24"],
                "persistent_keepalive": 5,
            }
        ],
        cur,
    )
    assert be.apply(cur, des) is None
    assert sent == [
        "set=1\npublic_key=%s\nremove=true\npublic_key=%s\nupdate_only=true\n"
        "persistent_keepalive_interval=5\n\n" % ("03" * 32, "02" * 32)
    ]
    del sent[:]
    done = live(be, [live_peer(K2, ["10.2.0.0/24"], "203.0.113.2:51820", ka=5)])
    be.apply(done, des)
    assert sent == []


def test_implementation_choice(key_path, monkeypatch, tmp_path):
    monkeypatch.setattr(wireguard, "SOCKET_DIR", str(tmp_path))
    be = make_backend(key_path, monkeypatch, backend="auto")
    monkeypatch.setattr(wireguard, "kernel_module_available", lambda name: name == "wireguard")
    assert be.implementation(None) == "kernel"
    monkeypatch.setattr(wireguard, "kernel_module_available", lambda name: False)
    assert be.implementation(None) == "userspace"
    kernel_link = {"index": 3, "kind": "wireguard", "up": True, "mtu": 1420}
    assert be.implementation(kernel_link) == "kernel"
    user = make_backend(key_path, monkeypatch, backend="userspace")
    with pytest.raises(WireGuardError) as e:
        user.implementation(kernel_link)
    assert str(e.value).startswith("interface kilo0: backend: ")
    assert user.implementation(kernel_link, strict=False) == "kernel"  # removal takes it anyway
    (tmp_path / "kilo0.sock").write_text("")
    kern = make_backend(key_path, monkeypatch, backend="kernel")
    with pytest.raises(WireGuardError):
        kern.implementation(None)


def test_helpers():
    assert sort_cidrs(["10.1.2.3/16", "fd00::1/64", "10.1.0.0/16", "9.0.0.0/8"]) == [
        "9.0.0.0/8",
        "10.1.0.0/16",
        "fd00::/64",
    ]
    assert resolve_endpoint("[2001:db8::1]:51820") == ["[2001:db8::1]:51820"]
    assert resolve_endpoint("203.0.113.1:1") == ["203.0.113.1:1"]


# ---------------------------------------------------------------- daemon supervision


def test_daemon_paths_follow_the_module_constants(key_path, monkeypatch, tmp_path):
    be = make_backend(key_path, monkeypatch)
    monkeypatch.setattr(wireguard, "RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(wireguard, "SOCKET_DIR", str(tmp_path / "sock"))
    monkeypatch.setattr(wireguard, "START_TIMEOUT", 0.5)
    d = be._daemon()
    assert d.pidfile == str(tmp_path / "run" / "kilo0.pid") and d.socket == str(
        tmp_path / "sock" / "kilo0.sock"
    )
    assert d.start_timeout == 0.5
    assert d.argv() == ["wireguard-go", "-f", "kilo0"]
    assert wireguard_daemon.Daemon("wg1", "boringtun --foreground", "/x").argv() == [
        "boringtun",
        "--foreground",
        "wg1",
    ]
    with pytest.raises(wireguard_daemon.DaemonError) as e:
        wireguard_daemon.Daemon("wg1", " ", "/x").argv()
    assert "userspace_command" in str(e.value)


def test_daemon_that_dies_is_reported_with_its_log(tmp_path, monkeypatch):
    monkeypatch.setattr(wireguard_daemon, "systemd_running", lambda: False)
    script = tmp_path / "fake-wg"
    script.write_text("#!/bin/sh\necho cannot open tun for $1 >&2\nexit 1\n")
    script.chmod(0o755)
    d = wireguard_daemon.Daemon(
        "kwtest0",
        str(script),
        str(tmp_path / "kwtest0.sock"),
        run_dir=str(tmp_path / "run"),
        start_timeout=10,
    )
    with pytest.raises(wireguard_daemon.DaemonError) as e:
        d.start()
    assert "did not open" in str(e.value) and "cannot open tun for kwtest0" in str(e.value)
    # nothing of the failed start stays behind
    assert not os.path.exists(d.pidfile) and not os.path.exists(d.logfile)
    missing = wireguard_daemon.Daemon(
        "kwtest0",
        str(tmp_path / "missing"),
        str(tmp_path / "kwtest0.sock"),
        run_dir=str(tmp_path / "run"),
    )
    with pytest.raises(wireguard_daemon.DaemonError) as e:
        missing.start()
    assert str(e.value).startswith("cannot start %s" % (tmp_path / "missing"))
    assert os.listdir(str(tmp_path / "run")) == []


def test_daemon_pid_must_be_our_command_for_our_interface(tmp_path):
    d = wireguard_daemon.Daemon(
        "kwtest0", sys.executable, str(tmp_path / "s"), run_dir=str(tmp_path)
    )
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "kwtest0"])
    try:
        deadline = time.time() + 10
        while (
            b"kwtest0" not in open("/proc/%d/cmdline" % proc.pid, "rb").read()
            and time.time() < deadline
        ):
            time.sleep(0.01)  # until the child has exec'd
        with open(d.pidfile, "w") as f:
            f.write("%d\n\n" % proc.pid)
        assert d.pid() == proc.pid
        other = wireguard_daemon.Daemon(
            "kwtest1", sys.executable, str(tmp_path / "s"), run_dir=str(tmp_path)
        )
        with open(other.pidfile, "w") as f:
            f.write("%d\n\n" % proc.pid)
        assert other.pid() is None  # a recycled PID for another interface is never ours
        wrong = wireguard_daemon.Daemon(
            "kwtest0", "wireguard-go", str(tmp_path / "s"), run_dir=str(tmp_path)
        )
        assert wrong.pid() is None  # nor one running another command
        d.stop()
        assert proc.wait(timeout=10) is not None and not os.path.exists(d.pidfile)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
