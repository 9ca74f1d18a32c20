"""UAPI message building/parsing, kernel genl message encoding (both pyroute2 versions), and
the backend's difference logic on hand-made states (no netlink, no daemon)."""
import base64
import json
import os
import subprocess

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils import keys
from ansible_collections.kilo.mesh.plugins.module_utils import wireguard_uapi as uapi
from ansible_collections.kilo.mesh.plugins.module_utils.wireguard import (
    WireGuardBackend, WireGuardError, normalize_cidrs, split_endpoint)

K1 = base64.b64encode(b"\x01" * 32).decode()
K2 = base64.b64encode(b"\x02" * 32).decode()
K3 = base64.b64encode(b"\x03" * 32).decode()
H1 = "01" * 32
H2 = "02" * 32
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---------------------------------------------------------------- UAPI text

def test_build_set_is_peer_by_peer_with_hex_keys():
    text = uapi.build_set(private_key=K1, listen_port=51820, peers=[
        {"public_key": K2, "remove": True},
        {"public_key": K3, "update_only": True, "replace_allowed_ips": True,
         "allowed_ips": ["10.2.0.0/24", "fd00::/64"], "persistent_keepalive": 25,
         "endpoint": "[2001:db8::1]:51820", "preshared_key": ""},
    ])
    assert text == ("set=1\nprivate_key=%s\nlisten_port=51820\n"
                    "public_key=%s\nremove=true\n"
                    "public_key=%s\nupdate_only=true\npreshared_key=%s\nendpoint=[2001:db8::1]:51820\n"
                    "persistent_keepalive_interval=25\nreplace_allowed_ips=true\n"
                    "allowed_ip=10.2.0.0/24\nallowed_ip=fd00::/64\n\n") % (H1, H2, "03" * 32, "0" * 64)
    assert "replace_peers" not in text


def test_build_set_new_peer_has_no_update_only_or_replace():
    text = uapi.build_set(peers=[{"public_key": K2, "allowed_ips": ["10.1.0.0/16"],
                                  "endpoint": "203.0.113.2:51820", "persistent_keepalive": 0}])
    assert text == ("set=1\npublic_key=%s\nendpoint=203.0.113.2:51820\npersistent_keepalive_interval=0\n"
                    "allowed_ip=10.1.0.0/16\n\n") % H2


def test_parse_get():
    text = ("private_key=%s\nlisten_port=51820\nfwmark=0\n"
            "public_key=%s\npreshared_key=%s\nprotocol_version=1\nendpoint=203.0.113.2:51820\n"
            "last_handshake_time_sec=1700000000\nlast_handshake_time_nsec=12\ntx_bytes=10\nrx_bytes=20\n"
            "persistent_keepalive_interval=25\nallowed_ip=10.2.0.0/24\nallowed_ip=10.4.0.2/32\n"
            "public_key=%s\npreshared_key=%s\nlast_handshake_time_sec=0\ntx_bytes=0\nrx_bytes=0\n"
            "persistent_keepalive_interval=0\nerrno=0\n\n") % (H1, H2, "0" * 64, "03" * 32, "ab" * 32)
    dev = uapi.parse_get(text)
    assert dev["private_key_hex"] == H1 and dev["listen_port"] == 51820
    p2, p3 = dev["peers"]
    assert p2 == {"public_key": K2, "preshared_key_hex": None, "endpoint": "203.0.113.2:51820",
                  "persistent_keepalive": 25, "last_handshake": 1700000000, "rx_bytes": 20,
                  "tx_bytes": 10, "allowed_ips": ["10.2.0.0/24", "10.4.0.2/32"]}
    assert p3["public_key"] == K3 and p3["preshared_key_hex"] == "ab" * 32
    assert p3["endpoint"] is None and p3["allowed_ips"] == []


@pytest.mark.parametrize("text, needle", [
    ("listen_port=1\n\n", "without errno"),
    ("errno=2\n\n", "errno=2"),
    ("garbage\nerrno=0\n\n", "malformed"),
    ("public_key=zz\nerrno=0\n\n", ""),
])
def test_parse_get_errors(text, needle):
    with pytest.raises(Exception) as e:
        uapi.parse_get(text)
    assert needle in str(e.value)


def test_hex_b64_roundtrip_and_length():
    assert uapi.hex_to_b64(uapi.b64_to_hex(K2)) == K2
    with pytest.raises(uapi.UAPIError):
        uapi.b64_to_hex(base64.b64encode(b"x" * 31).decode())


def test_format_endpoint():
    assert uapi.format_endpoint("203.0.113.1", 51820) == "203.0.113.1:51820"
    assert uapi.format_endpoint("2001:db8::1", 1) == "[2001:db8::1]:1"


# ---------------------------------------------------------------- kernel genl messages

KERNEL_CHECK = r'''
import sys, json, base64
sys.path.insert(0, %r)
from ansible_collections.kilo.mesh.plugins.module_utils import wireguard_kernel as wk
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
'''


@pytest.mark.parametrize("python", ["/usr/bin/python3", os.path.join(ROOT, ".venv", "bin", "python")])
def test_kernel_messages_carry_kernel_flag_values(python):
    """0.7.2 (host) and 0.9.x (venv) must put the kernel's flag values on the wire."""
    if not os.path.exists(python):
        pytest.skip("no " + python)
    code = KERNEL_CHECK % os.path.join(ROOT, ".collections")
    r = subprocess.run([python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False,
                       universal_newlines=True)
    if r.returncode != 0 and "No module named 'pyroute2'" in r.stderr:
        pytest.skip("no pyroute2 for " + python)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    dev_msg, update, add, remove = out["set"]
    assert dev_msg == {"port": 51820, "priv": True, "peers": []}
    # UPDATE_ONLY (4) | REPLACE_ALLOWEDIPS (2)
    assert update["peers"] == [{"flags": 6, "ep": ["203.0.113.5", 51820], "aips": ["10.1.0.0/16", "fd00::/64"]}]
    assert add["peers"] == [{"flags": 0, "ep": None, "aips": ["10.9.0.0/24"]}]
    assert remove["peers"] == [{"flags": 1, "ep": None, "aips": []}]
    assert out["dev"]["peers"] == [{"public_key": K2, "preshared_key_b64": None, "endpoint": "203.0.113.5:51820",
                                    "persistent_keepalive": 25, "last_handshake": 1700000000, "rx_bytes": 10,
                                    "tx_bytes": 20, "allowed_ips": ["10.1.0.0/16", "fd00::/64"]}]


# ---------------------------------------------------------------- difference logic

@pytest.fixture
def backend(tmp_path, monkeypatch):
    path = str(tmp_path / "key")
    keys.ensure_key(path)
    be = WireGuardBackend({"key_path": path, "backend": "userspace", "mtu": 1400})
    monkeypatch.setattr(be, "_link", lambda: None)
    be.own = keys.public_key(open(path).read().strip())
    return be


def live(be, peers, up=True, mtu=1400, port=51820):
    return {"interface": "kilo0", "backend": "userspace", "present": True, "up": up, "mtu": mtu,
            "listen_port": port, "fwmark": 0, "public_key": be.own, "peers": peers}


def live_peer(key, allowed, endpoint=None, ka=0, hs=0):
    return {"public_key": key, "endpoint": endpoint, "allowed_ips": allowed, "persistent_keepalive": ka,
            "preshared_key": False, "preshared_key_digest": None, "latest_handshake": hs,
            "rx_bytes": 0, "tx_bytes": 0}


def plan(peers, leader=True):
    return {"name": "a", "leader": leader, "listen_port": 51820, "peers": peers}


def test_converged_state_has_no_changes(backend):
    des = backend.desired(plan([{"name": "b", "public_key": K2, "endpoint": "203.0.113.2:51820",
                                 "allowed_ips": ["10.2.0.0/24", "10.4.0.2/32"]}]))
    cur = live(backend, [live_peer(K2, ["10.2.0.0/24", "10.4.0.2/32"], "203.0.113.2:51820")])
    assert backend.changes(cur, des) == []


def test_only_the_changed_peer_is_touched(backend):
    des = backend.desired(plan([
        {"name": "b", "public_key": K2, "endpoint": "203.0.113.2:51820", "allowed_ips": ["10.2.0.0/24", "10.5.0.0/24"]},
        {"name": "c", "public_key": K3, "endpoint": "203.0.113.3:51820", "allowed_ips": ["10.3.0.0/24"]}]))
    cur = live(backend, [live_peer(K2, ["10.2.0.0/24"], "203.0.113.2:51820"),
                         live_peer(K3, ["10.3.0.0/24"], "203.0.113.3:51820")])
    ops = backend._ops(cur, des)
    assert [pair[0] for pair in ops] == ["update peer b (%s): allowed_ips +10.5.0.0/24" % K2[:8]]
    assert ops[0][1] == ("peer", {"public_key": K2, "update_only": True, "replace_allowed_ips": True,
                                  "allowed_ips": ["10.2.0.0/24", "10.5.0.0/24"]})


def test_learned_endpoint_is_not_flipped_back(backend):
    des = backend.desired(plan([{"name": "b", "public_key": K2, "endpoint": None, "allowed_ips": ["10.2.0.0/24"]}]))
    cur = live(backend, [live_peer(K2, ["10.2.0.0/24"], "198.51.100.7:40000", hs=1)])
    assert backend.changes(cur, des) == []


def test_dns_endpoint_resolved_before_comparing(backend):
    des = backend.desired(plan([{"name": "b", "public_key": K2, "endpoint": "localhost:51820",
                                 "allowed_ips": ["10.2.0.0/24"]}]))
    cur = live(backend, [live_peer(K2, ["10.2.0.0/24"], "127.0.0.1:51820")])
    assert backend.changes(cur, des) == []
    cur = live(backend, [live_peer(K2, ["10.2.0.0/24"], "203.0.113.9:51820")])
    (msg, (dummy, op)), = backend._ops(cur, des)
    assert op["endpoint"] in ("127.0.0.1:51820", "[::1]:51820") and "localhost" in msg


def test_unresolvable_endpoint_names_the_peer(backend):
    des = backend.desired(plan([{"name": "b", "public_key": K2, "endpoint": "no-such-host.invalid:51820",
                                 "allowed_ips": ["10.2.0.0/24"]}]))
    with pytest.raises(WireGuardError) as e:
        backend.changes(live(backend, []), des)
    assert "peer b" in str(e.value) and "no-such-host.invalid" in str(e.value)


def test_removal_and_addition_and_link(backend):
    des = backend.desired(plan([{"name": "c", "public_key": K3, "allowed_ips": ["10.3.0.0/24"],
                                 "preshared_key": K1}], leader=False))
    cur = live(backend, [live_peer(K2, ["10.2.0.0/24"])], mtu=1420)
    msgs = backend.changes(cur, des)
    assert msgs == ["remove peer %s" % K2, "add peer c (%s) allowed_ips 10.3.0.0/24" % K3[:8],
                    "set mtu 1400 (was 1420)", "set link down (not the leader)"]
    assert K1 not in json.dumps(backend.render(des)) and K1 not in json.dumps(des)
    assert backend.render(des)["peers"][0]["preshared_key"] == "(set)"
    add = backend._ops(cur, des)[1][1][1]
    assert add["preshared_key"] == K1 and "update_only" not in add


def test_absent_plan_means_remove(backend):
    des = backend.desired(None)
    assert backend.changes(live(backend, []), des) == ["remove WireGuard interface kilo0 (userspace)"]
    assert backend.changes(dict(live(backend, []), present=False), des) == []


@pytest.mark.parametrize("peer, needle", [
    ({"name": "b", "public_key": "short", "allowed_ips": ["10.0.0.0/8"]}, "host a, peer b: public_key"),
    ({"name": "b", "public_key": K2, "allowed_ips": ["10.0.0.300/8"]}, "host a, peer b: allowed_ips"),
    ({"name": "b", "public_key": K2, "allowed_ips": ["10.0.0.0/8"], "endpoint": "203.0.113.1"},
     "host a, peer b: endpoint"),
    ({"name": "b", "public_key": K2, "allowed_ips": ["10.0.0.0/8"], "endpoint": "203.0.113.1:0"},
     "no valid port"),
    ({"name": "b", "public_key": K2, "allowed_ips": ["10.0.0.0/8"], "persistent_keepalive": -1},
     "host a, peer b: persistent_keepalive"),
    ({"name": "b", "public_key": K2, "allowed_ips": ["10.0.0.0/8"], "preshared_key": "x"},
     "host a, peer b: preshared_key"),
])
def test_bad_plan_input_names_host_peer_and_field(backend, peer, needle):
    with pytest.raises(WireGuardError) as e:
        backend.desired(plan([peer]))
    assert needle in str(e.value)


def test_duplicate_and_own_key(backend):
    with pytest.raises(WireGuardError) as e:
        backend.desired(plan([{"name": "b", "public_key": K2, "allowed_ips": []},
                              {"name": "c", "public_key": K2, "allowed_ips": []}]))
    assert "peer c" in str(e.value) and "peer b" in str(e.value)
    with pytest.raises(WireGuardError) as e:
        backend.desired(plan([{"name": "me", "public_key": backend.own, "allowed_ips": []}]))
    assert "own key" in str(e.value)


def test_missing_key_file_is_listed_in_check_mode_and_refused_on_apply(tmp_path, monkeypatch):
    be = WireGuardBackend({"key_path": str(tmp_path / "nope"), "backend": "userspace"})
    monkeypatch.setattr(be, "_link", lambda: None)
    desired = be.desired(plan([]))
    assert desired["public_key"] == "(key to be created)"
    absent = be.desired(None)
    assert be.changes(absent, desired)  # check mode can still say what would happen
    with pytest.raises(WireGuardError) as e:
        be.apply(absent, desired)
    assert "nope" in str(e.value) and "kilo.mesh.key" in str(e.value)
    assert not (tmp_path / "nope").exists()


def test_helpers():
    assert split_endpoint("[2001:db8::1]:51820") == ("2001:db8::1", 51820)
    assert split_endpoint("kilo.example.com:1") == ("kilo.example.com", 1)
    assert normalize_cidrs(["10.1.2.3/16", "fd00::1/64", "10.1.0.0/16", "9.0.0.0/8"]) == \
        ["9.0.0.0/8", "10.1.0.0/16", "fd00::/64"]
