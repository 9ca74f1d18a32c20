"""The pure parts of playbooks/uninstall.yml: the install step's state removed (prepare's
InstallState), the key file removed, the registry's hosts forgotten, the Node annotations a
leaving node loses. Real nftables, real hosts and a real kube-apiserver: tests/host/test_uninstall.py
and tests/kube/test_uninstall_kubernetes.py."""

import json
import os

from ansible_collections.kilo.mesh.plugins.module_utils.host import keys
from ansible_collections.kilo.mesh.plugins.module_utils.host import prepare as P
from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn
from ansible_collections.kilo.mesh.plugins.module_utils.options import STATE_SPEC
from ansible_collections.kilo.mesh.plugins.plugin_utils import inputs

# `nft -a list chain inet filter input` as nft 1.0 prints it: two rules of ours, two of others
NFT_LISTING = """table inet filter {
\tchain input { # handle 1
\t\ttype filter hook input priority filter; policy accept;
\t\tudp dport 51820 accept comment "kilo.mesh" # handle 3
\t\ttcp dport 22 accept # handle 2
\t\tudp dport 4000 counter accept comment "kilo.mesh" # handle 4
\t\tudp dport 9999 accept comment "other" # handle 5
\t}
}
"""


def fake_nft(listing, rc=0, have_nft=True):
    calls = []

    def runner(argv):
        calls.append(argv)
        if argv[:2] == ["nft", "-a"]:
            return rc, listing, "" if rc == 0 else "Error: No such file or directory"
        return 0, "", ""

    return runner, (lambda c: "/usr/sbin/nft" if have_nft and c == "nft" else None), calls


# --- prepare: state absent ---------------------------------------------------------------------


def test_absent_removes_the_boot_file_and_only_our_rules(tmp_path):
    conf = tmp_path / "90-kilo-mesh.conf"
    conf.write_text("net.ipv4.ip_forward = 1\n")
    runner, which, calls = fake_nft(NFT_LISTING)

    checked = P.unprepare(True, runner, which, str(conf))
    assert checked["changed"] and conf.exists()
    assert checked["changes"] == [
        "remove %s" % conf,
        "nftables: delete rule handle 3 (port 51820/udp)",
        "nftables: delete rule handle 4 (edited)",
    ]
    assert checked["diff"] == {
        "before": {"sysctl_file": "net.ipv4.ip_forward = 1\n", "nftables_ports": [51820, None]},
        "after": {"sysctl_file": None, "nftables_ports": []},
    }
    assert not [c for c in calls if "delete" in c], "check mode deleted a rule"

    done = P.unprepare(False, runner, which, str(conf))
    assert done["changes"] == checked["changes"] and not conf.exists()
    deleted = [c for c in calls if "delete" in c]
    assert deleted == [
        ["nft", "delete", "rule", "inet", "filter", "input", "handle", "3"],
        ["nft", "delete", "rule", "inet", "filter", "input", "handle", "4"],
    ]


def test_absent_with_nothing_of_ours_changes_nothing(tmp_path):
    conf = tmp_path / "90-kilo-mesh.conf"
    for listing, rc, have in (("table inet filter {\n}\n", 0, True), ("", 1, True), ("", 0, False)):
        runner, which, calls = fake_nft(listing, rc, have)
        out = P.unprepare(False, runner, which, str(conf))
        assert out == {
            "changed": False,
            "changes": [],
            "diff": {
                "before": {"sysctl_file": None, "nftables_ports": []},
                "after": {"sysctl_file": None, "nftables_ports": []},
            },
        }
        assert not [c for c in calls if "delete" in c]


def test_absent_is_a_task_argument_only():
    assert STATE_SPEC == {"type": "str", "choices": ["present", "absent"], "default": "present"}


# --- the key ---------------------------------------------------------------------------------


def test_remove_key_then_its_empty_directory(tmp_path):
    path = str(tmp_path / "kilo" / "key")
    keys.ensure_key(path)
    stray = os.path.join(os.path.dirname(path), ".key.abc123.tmp")  # a key write cut short
    with open(stray, "w") as f:
        f.write("not a key of anyone\n")
    checked = keys.remove_key(path, check_mode=True)
    assert checked == {
        "changed": True,
        "msg": "would remove key %s and 1 temporary file(s) of a key write cut short" % path,
    }
    assert os.path.exists(path) and os.path.exists(stray)
    done = keys.remove_key(path)
    assert done["changed"] and "empty directory" in done["msg"]
    assert not os.path.exists(os.path.dirname(path)), "the empty directory stayed"
    assert keys.remove_key(path) == {"changed": False, "msg": "no key at %s" % path}
    assert not os.path.exists(stray)


def test_remove_key_keeps_a_directory_holding_other_files(tmp_path):
    path = str(tmp_path / "key")
    keys.ensure_key(path)
    (tmp_path / "kilo-owned-by-someone-else").write_text("x")
    assert keys.remove_key(path)["changed"]
    assert not os.path.exists(path) and os.path.isdir(str(tmp_path))


# --- the registry ----------------------------------------------------------------------------


def write(path, data):
    with open(path, "w") as f:
        json.dump(data, f)


def test_forget_hosts_keeps_the_others_and_the_peers(tmp_path):
    path = str(tmp_path / "kilo-registry.json")
    write(
        path,
        {"hosts": {"a": {"public_key": "x"}, "b": {"public_key": "y"}}, "peers": {"laptop": {}}},
    )
    assert inputs.forget_registry_hosts(path, ["a", "c"], check_mode=True) == ["a"]
    assert set(inputs.read_registry(path)["hosts"]) == {"a", "b"}, "check mode wrote"
    assert inputs.forget_registry_hosts(path, ["a", "c"]) == ["a"]
    assert inputs.read_registry(path) == {
        "hosts": {"b": {"public_key": "y"}},
        "peers": {"laptop": {}},
    }
    assert inputs.forget_registry_hosts(path, ["b"]) == ["b"]
    assert inputs.read_registry(path)["peers"] == {"laptop": {}}, "the peer went with the hosts"


def test_a_registry_left_empty_is_removed_with_its_lock(tmp_path):
    path = str(tmp_path / "kilo-registry.json")
    write(path, {"hosts": {"a": {}, "b": {}}, "peers": {}})
    assert inputs.forget_registry_hosts(path, ["a"]) == ["a"]
    assert os.path.exists(path) and os.path.exists(path + ".lock")
    assert inputs.forget_registry_hosts(path, ["b"]) == ["b"]
    assert sorted(os.listdir(str(tmp_path))) == []
    # again: no registry, nothing made (not even a lock file)
    assert inputs.forget_registry_hosts(path, ["a", "b"]) == []
    assert inputs.forget_registry_hosts(path, ["a"], check_mode=True) == []
    assert sorted(os.listdir(str(tmp_path))) == []


# --- the Node's annotations ------------------------------------------------------------------


def test_a_leaving_node_loses_kilos_agent_annotations_and_ours_but_not_the_operators():
    current = {
        kn.KEY: "k",
        kn.LOCATION: "aws",
        kn.LEADER: "",
        kn.FORCE_ENDPOINT: "1.2.3.4:51820",
        kn.WIREGUARD_IPS: "10.4.0.1/16,fd04::1/64",
        kn.UNREACHABLE_LEADERS: "b",
        kn.DEPOSED_AT: "1",
        kn.NEXT_KEY: "x",
        "kilo.mesh/pod-cidrs": "10.1.0.0/24",
        "kilo.mesh/pod-cidr-source": "calico",
        "other.example/keep": "yes",
    }
    out = kn.removed_when_leaving(current)
    ours = {kn.WIREGUARD_IPS, kn.UNREACHABLE_LEADERS, kn.DEPOSED_AT, kn.NEXT_KEY}
    assert set(out) == set(kn.AGENT_ANNOTATIONS) | ours
    assert set(out.values()) == {None}
    # only what the Node has of ours is patched away; Kilo's are always named, as Kilo's CleanUp does
    assert kn.INTERNAL_IPS not in out
    assert set(kn.removed_when_leaving({})) == set(kn.AGENT_ANNOTATIONS)


def test_the_agents_annotation_names_are_the_ones_it_writes():
    from ansible_collections.kilo.mesh.plugins.module_utils.agent import health, rotation

    assert (
        health.UNREACHABLE,
        health.DEPOSED,
        rotation.NEXT_KEY,
        kn.RELAY,
        kn.PATH_STATE,
    ) == kn.OWN_AGENT_ANNOTATIONS
    assert all(name.startswith("kilo.mesh/") for name in kn.OWN_AGENT_ANNOTATIONS)
