"""The CNI backend on a temporary directory: Kilo's conflist written when absent, only the
IPAM subnet changed in a conflist named kilo, any other file left alone with a warning,
check mode, diff, idempotence, state absent; the engine puts the pod CIDR and --cni in plans.
(The real CNI plugins run on this file in tests/host/test_cni.py.)"""

import json
import os
import stat

from ansible_collections.kilo.mesh.plugins.module_utils.host import cni
from ansible_collections.kilo.mesh.plugins.module_utils.host.converge import (
    backends_for,
    converge,
    host_settings,
)
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import build_plans

PLAN = {
    "name": "a",
    "leader": True,
    "segment": "location:x",
    "listen_port": 51820,
    "pod_cidr": "10.244.1.0/24",
    "cni": True,
}


def run(path, plan=None, check=False, state="present"):
    settings = host_settings({"cni_path": str(path), "state": state})
    return converge(
        (plan or PLAN) if state == "present" else None,
        settings,
        check_mode=check,
        backends=[cni.CNIBackend(settings)],
    )


def load(path):
    with open(str(path)) as f:
        return json.load(f)


def test_backends_for_has_cni_last_before_the_stored_plan():
    names = [b.name for b in backends_for(host_settings({}))]
    assert (
        names[-2:] == ["cni", "boot"]
        and host_settings({})["cni_path"] == "/etc/cni/net.d/10-kilo.conflist"
    )


def test_absent_file_written_as_kilo_does(tmp_path):
    path = tmp_path / "net.d" / "10-kilo.conflist"
    out = run(path, check=True)
    assert out["changed"] and out["changes"]["cni"] == ["write %s (subnet 10.244.1.0/24)" % path]
    assert not path.parent.exists(), "check mode wrote"
    assert out["diff"]["before"]["cni"]["conflist"] is None
    assert out["diff"]["after"]["cni"]["conflist"]["plugins"][0]["ipam"]["ranges"] == [
        [{"subnet": "10.244.1.0/24"}]
    ]

    out = run(path)
    assert out["changed"]
    data = load(path)
    assert data["name"] == "kilo" and data["cniVersion"] == "0.4.0"
    bridge, portmap = data["plugins"]
    assert bridge == {
        "name": "kubernetes",
        "type": "bridge",
        "bridge": "kube-bridge",
        "isDefaultGateway": True,
        "forceAddress": True,
        "mtu": 1420,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.1.0/24"}]]},
    }
    assert portmap == {"type": "portmap", "snat": True, "capabilities": {"portMappings": True}}
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o644
    assert os.listdir(str(path.parent)) == ["10-kilo.conflist"], "temporary file left behind"

    again = run(path)
    assert not again["changed"] and again["changes"] == {} and "warnings" not in again


def test_subnet_updated_in_place_rest_kept(tmp_path):
    path = tmp_path / "10-kilo.conflist"
    mine = cni.kilo_conflist("10.244.9.0/24")
    mine["plugins"][0]["mtu"] = 1380  # local tuning survives, as with Kilo
    mine["plugins"][0]["ipam"]["subnet"] = "10.244.9.0/24"  # legacy form: dropped (beyond Kilo)
    mine["plugins"].append({"type": "bandwidth", "capabilities": {"bandwidth": True}})
    path.write_text(json.dumps(mine))
    os.chmod(str(path), 0o600)

    out = run(path, check=True)
    assert out["changes"]["cni"] == ["set subnet 10.244.1.0/24 in %s (was 10.244.9.0/24)" % path]
    assert load(path) == mine
    run(path)
    data = load(path)
    assert data["plugins"][0]["ipam"] == {
        "type": "host-local",
        "ranges": [[{"subnet": "10.244.1.0/24"}]],
    }
    assert data["plugins"][0]["mtu"] == 1380 and data["plugins"][2]["type"] == "bandwidth"
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o644
    assert not run(path)["changed"]


def test_same_first_subnet_is_left_as_is(tmp_path):
    """Kilo compares the first subnet only: extra range fields of the same subnet stay."""
    path = tmp_path / "10-kilo.conflist"
    mine = cni.kilo_conflist("10.244.1.0/24")
    mine["plugins"][0]["ipam"]["ranges"] = [
        [{"subnet": "10.244.1.0/24", "rangeStart": "10.244.1.10"}]
    ]
    path.write_text(json.dumps(mine))
    assert not run(path)["changed"]
    assert load(path) == mine


def test_foreign_files_left_alone_with_a_warning(tmp_path):
    cases = {
        "other network": json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": "cbr0",
                "plugins": [{"type": "flannel", "delegate": {"hairpinMode": True}}],
            }
        ),
        "not json": "{ nope",
        "kilo without ipam": json.dumps(
            {"cniVersion": "0.4.0", "name": "kilo", "plugins": [{"type": "portmap"}]}
        ),
    }
    for what, text in cases.items():
        path = tmp_path / ("%s.conflist" % what.replace(" ", "-"))
        path.write_text(text)
        for check in (True, False):
            out = run(path, check=check)
            assert not out["changed"], what
            assert len(out["warnings"]) == 1 and out["warnings"][0].startswith(
                "cni_path: %s " % path
            ), what
            assert out["warnings"][0].endswith("; left alone")
        assert path.read_text() == text, what
    absent = run(tmp_path / "other-network.conflist", state="absent")
    assert not absent["changed"] and (tmp_path / "other-network.conflist").exists()
    # ours by name, even without ipam: state absent removes it
    assert run(tmp_path / "kilo-without-ipam.conflist", state="absent")["changed"]
    assert not (tmp_path / "kilo-without-ipam.conflist").exists()


def test_no_pod_cidr_or_cni_off_writes_nothing(tmp_path):
    path = tmp_path / "10-kilo.conflist"
    for plan in (dict(PLAN, pod_cidr=None), dict(PLAN, cni=False), dict(PLAN, cni=None)):
        out = run(path, plan=plan)
        assert not out["changed"] and not path.exists()
    # a file we wrote earlier stays when cni is turned off (Kilo leaves it too)
    run(path)
    text = path.read_text()
    assert not run(path, plan=dict(PLAN, cni=False, pod_cidr="10.244.7.0/24"))["changed"]
    assert path.read_text() == text


def test_state_absent_removes_only_ours(tmp_path):
    path = tmp_path / "10-kilo.conflist"
    run(path)
    out = run(path, check=True, state="absent")
    assert out["changes"] == {"cni": ["remove cni"]} and path.exists()
    assert out["diff"]["after"]["cni"]["conflist"] is None
    assert run(path, state="absent")["changed"] and not path.exists()
    assert not run(path, state="absent")["changed"]


def test_ipv6_pod_cidr(tmp_path):
    path = tmp_path / "10-kilo.conflist"
    run(path, plan=dict(PLAN, pod_cidr="fd00:10:244:1::/64"))
    assert cni.first_subnet(load(path)) == "fd00:10:244:1::/64"
    assert not run(path, plan=dict(PLAN, pod_cidr="fd00:10:244:1:0::/64"))["changed"]


def test_engine_plans_carry_pod_cidr_and_cni():
    nodes = [
        {
            "name": n,
            "location": "x",
            "endpoint": "203.0.113.%d:51820" % i,
            "internal_ip": "172.16.0.%d/24" % i,
            "pod_cidr": pod,
            "public_key": key,
        }
        for i, (n, pod, key) in enumerate(
            [
                ("a", "10.244.1.0/24", "GhR8Qy3nKTtDRHWXGBSPXtlqw9zNW4Uo0W0aKdIuV2c="),
                ("b", None, "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="),
            ],
            start=1,
        )
    ]
    plans = build_plans(nodes, [], {})["plans"]
    assert (plans["a"]["pod_cidr"], plans["a"]["cni"]) == ("10.244.1.0/24", True)
    assert plans["b"]["pod_cidr"] is None
    assert build_plans(nodes, [], {"cni": False})["plans"]["a"]["cni"] is False


def test_a_dual_stack_node_gets_one_range_set_per_family(tmp_path):
    """Beyond Kilo: pod ranges of both families (a dual-stack mesh) give host-local one range set
    each, the first range of each family in the plan's order, so every pod gets an address of both;
    an existing Kilo conflist of one range is updated in place (local tuning kept); idempotent."""
    path = tmp_path / "10-kilo.conflist"
    dual = dict(PLAN, pod_cidr=["10.244.1.0/24", "10.245.1.0/24", "fd10:244:1::/64"])
    want = [[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd10:244:1::/64"}]]
    out = run(path, plan=dual)
    assert out["changes"]["cni"] == ["write %s (subnet 10.244.1.0/24, fd10:244:1::/64)" % path]
    assert load(path)["plugins"][0]["ipam"] == {"type": "host-local", "ranges": want}
    assert not run(path, plan=dual)["changed"]

    mine = cni.kilo_conflist("10.244.1.0/24")
    mine["plugins"][0]["mtu"] = 1380
    path.write_text(json.dumps(mine))
    looked = run(path, plan=dual, check=True)
    assert looked["changes"]["cni"] == [
        "set subnet 10.244.1.0/24, fd10:244:1::/64 in %s (was 10.244.1.0/24)" % path
    ]
    assert load(path) == mine, "check mode wrote"
    run(path, plan=dual)
    data = load(path)
    assert data["plugins"][0]["ipam"]["ranges"] == want and data["plugins"][0]["mtu"] == 1380
    assert not run(path, plan=dual)["changed"]
    # a single-family plan again (the mesh back to one family) follows Kilo's rule: the file is
    # rewritten only when its first subnet differs, so the second range set stays until it does
    assert not run(path, plan=dict(PLAN, pod_cidr=["10.244.1.0/24", "10.245.1.0/24"]))["changed"]
    run(path, plan=dict(PLAN, pod_cidr="10.244.7.0/24"))
    assert load(path)["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.244.7.0/24"}]]
