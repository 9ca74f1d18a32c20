"""kilo.mesh.prepare's pure parts: package choice, sysctl values and boot file, firewall plans."""

import shutil

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.host import prepare as P
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError

# `nft -a list chain inet filter input` as nft 1.0 prints it
NFT_LISTING = """table inet filter {
\tchain input { # handle 1
\t\ttype filter hook input priority filter; policy accept;
\t\tudp dport 51820 accept comment "kilo.mesh" # handle 3
\t\ttcp dport 22 accept # handle 2
\t\tudp dport 4000 accept comment "kilo.mesh" # handle 4
\t\tudp dport 9999 accept comment "other" # handle 5
\t}
}
"""


# --- packages -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "which, expected",
    [({"apt-get", "dnf"}, "apt"), ({"dnf"}, "dnf"), ({"pacman"}, "pacman"), (set(), None)],
)
def test_package_manager_first_found(which, expected):
    assert P.package_manager(lambda c: "/usr/bin/" + c if c in which else None) == expected


@pytest.mark.parametrize(
    "backend, kmod, userspace",
    [
        ("auto", True, False),
        ("auto", False, True),
        ("kernel", False, False),
        ("kernel", True, False),
        ("userspace", True, True),
        ("userspace", False, True),
    ],
)
@pytest.mark.parametrize("pkg_mgr", sorted(P.PACKAGES))
def test_wanted_packages(pkg_mgr, backend, kmod, userspace):
    want = P.wanted_packages(pkg_mgr, backend, kmod)
    assert want[: len(P.PACKAGES[pkg_mgr]["base"])] == P.PACKAGES[pkg_mgr]["base"]
    assert ("wireguard-go" in want) == userspace


def test_package_names_per_manager():
    assert "python3-pyroute2" in P.wanted_packages("apt", "kernel", True)
    assert "iproute" in P.wanted_packages("dnf", "kernel", True)
    assert "python-pyroute2" in P.wanted_packages("pacman", "kernel", True)
    assert not any(
        "cryptography" in p for p in P.wanted_packages("apt", "kernel", True)
    )  # keys need none
    assert P.wanted_packages(None, "userspace", False) == []


def test_installed_checks_per_manager():
    """One command per manager; the outputs as rpm and pacman print them (not on this machine)."""
    calls = []
    outputs = {
        "rpm": "nftables\npackage wireguard-go is not installed\n",
        "pacman": "wireguard-go\n",
    }

    def runner(argv):
        calls.append(argv)
        return 1, outputs[argv[0]], ""

    for pm in ("dnf", "pacman"):
        assert P.missing_packages(pm, ["nftables", "wireguard-go"], runner) == ["wireguard-go"]
    assert [c[0] for c in calls] == ["rpm", "pacman"]
    assert P.missing_packages("apt", [], runner) == [] and len(calls) == 2


@pytest.mark.skipif(not shutil.which("dpkg-query"), reason="needs dpkg")
def test_missing_packages_asks_dpkg_once(monkeypatch):
    """This machine's real dpkg: dpkg itself is installed, a made-up name is not."""
    from ansible_collections.kilo.mesh.plugins.module_utils.common import run_command

    calls = []

    def counted(argv):
        calls.append(argv)
        return run_command(argv)

    assert P.missing_packages(
        "apt", ["dpkg", "kilo-mesh-no-such-package", "coreutils"], counted
    ) == ["kilo-mesh-no-such-package"]
    assert len(calls) == 1


def nothing(dummy):
    return None


def test_no_package_manager_fails_only_when_installing(tmp_path):
    params = {
        "install_packages": True,
        "open_port": False,
        "sysctls": {},
        "backend": "auto",
        "port": 51820,
    }
    with pytest.raises(KiloError) as e:
        P.prepare(
            params,
            True,
            which=nothing,
            proc_sys=str(tmp_path),
            sysctl_file=str(tmp_path / "f.conf"),
        )
    assert e.value.field == "install_packages"
    assert "no supported package manager (apt, dnf, pacman) found" in str(e.value)
    params["install_packages"] = False
    result = P.prepare(
        params, True, which=nothing, proc_sys=str(tmp_path), sysctl_file=str(tmp_path / "f.conf")
    )
    assert result["missing"] == [] and result["pkg_mgr"] is None and result["changes"] == []


# --- sysctls --------------------------------------------------------------------------------


def test_sysctl_values_and_paths(tmp_path):
    assert P.sysctl_value("a", True) == "1" and P.sysctl_value("a", False) == "0"
    assert P.sysctl_value("a", 1) == "1" and P.sysctl_value("a", " 32768 60999 ") == "32768 60999"
    for bad in ([1], {"a": 1}, "", "1\n2", None):
        with pytest.raises(KiloError):
            P.sysctl_value("a", bad)
    assert P.sysctl_path("net.ipv4.ip_forward", "/p") == "/p/net/ipv4/ip_forward"
    assert (
        P.sysctl_path("net/ipv4/conf/eth0.100/rp_filter", "/p")
        == "/p/net/ipv4/conf/eth0.100/rp_filter"
    )
    for bad in ("../etc/passwd", "/net/ipv4", "net..ipv4", "net.ipv4 x", ""):
        with pytest.raises(KiloError) as e:
            P.sysctl_path(bad)
        assert e.value.field == "sysctls"


def test_sysctl_comparison_is_textual_and_whitespace_blind():
    assert P.same_value("1", "1")
    assert P.same_value("32768\t60999", "32768 60999")
    assert not P.same_value("0", "1")
    assert not P.same_value(None, "1")
    assert not P.same_value("01", "1")  # compared as strings, as sysctl -n prints them


def test_sysctl_file_text():
    assert (
        P.sysctl_file_text({"net.ipv4.ip_forward": "1", "net.ipv6.conf.all.forwarding": "1"})
        == "net.ipv4.ip_forward = 1\nnet.ipv6.conf.all.forwarding = 1\n"
    )
    assert P.sysctl_file_text({}) == ""


def _proc(tmp_path, values):
    proc = tmp_path / "proc"
    for key, value in values.items():
        path = proc.joinpath(*key.split("."))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
    return proc


def test_sysctls_check_then_apply_then_idempotent(tmp_path):
    proc = _proc(tmp_path, {"net.ipv4.ip_forward": "0", "net.ipv6.conf.all.forwarding": "1"})
    conf = tmp_path / "etc" / "sysctl.d" / "90-kilo-mesh.conf"
    params = {
        "install_packages": False,
        "open_port": False,
        "backend": "auto",
        "port": 51820,
        "sysctls": {"net.ipv4.ip_forward": 1, "net.ipv6.conf.all.forwarding": True},
    }
    kw = dict(which=nothing, proc_sys=str(proc), sysctl_file=str(conf))

    check = P.prepare(params, True, **kw)
    assert check["changes"] == ["write %s" % conf, "sysctl net.ipv4.ip_forward = 1"]
    assert check["diff"]["before"]["sysctls"] == {
        "net.ipv4.ip_forward": "0",
        "net.ipv6.conf.all.forwarding": "1",
    }
    assert (
        check["diff"]["after"]["sysctl_file"]
        == "net.ipv4.ip_forward = 1\nnet.ipv6.conf.all.forwarding = 1\n"
    )
    assert not conf.exists() and (proc / "net" / "ipv4" / "ip_forward").read_text() == "0\n"

    real = P.prepare(params, False, **kw)
    assert real["changes"] == check["changes"] and real["changed"]
    assert conf.read_text() == "net.ipv4.ip_forward = 1\nnet.ipv6.conf.all.forwarding = 1\n"
    assert (proc / "net" / "ipv4" / "ip_forward").read_text().strip() == "1"

    again = P.prepare(params, False, **kw)
    assert again["changes"] == [] and not again["changed"]

    # a sysctl this kernel lacks: boot file only, reported, never "changed" forever
    params["sysctls"]["net.ipv6.conf.all.disable_policy"] = 0
    missing = P.prepare(params, False, **kw)
    assert missing["unknown_sysctls"] == ["net.ipv6.conf.all.disable_policy"]
    assert missing["changes"] == ["write %s" % conf]
    assert P.prepare(params, False, **kw)["changes"] == []

    # no sysctls wanted: our boot file goes
    params["sysctls"] = {}
    assert P.prepare(params, False, **kw)["changes"] == ["remove %s" % conf]
    assert not conf.exists()
    assert P.prepare(params, False, **kw)["changes"] == []


# --- firewall -------------------------------------------------------------------------------


def test_nft_rule_parsing():
    assert P.nft_our_rules(NFT_LISTING) == [(51820, 3), (4000, 4)]
    assert P.nft_port_plan(NFT_LISTING, 51820) == (False, [4])
    assert P.nft_port_plan(NFT_LISTING, 4000) == (False, [3])
    assert P.nft_port_plan(NFT_LISTING, 40000) == (True, [3, 4])
    assert P.nft_port_plan("table inet filter {\n}\n", 51820) == (True, [])
    # a duplicate of our rule goes too; a hand-edited rule of ours is stale
    dup = (
        NFT_LISTING
        + '\t\tudp dport 51820 accept comment "kilo.mesh" # handle 7\n'
        + '\t\tudp dport 51820 counter accept comment "kilo.mesh" # handle 8\n'
    )
    assert P.nft_port_plan(dup, 51820) == (False, [4, 7, 8])


def _fake(outputs, which=("firewall-cmd", "ufw", "nft")):
    calls = []

    def runner(argv):
        calls.append(argv)
        return outputs.get(" ".join(argv), (1, "", "not here"))

    return runner, (lambda c: "/usr/sbin/" + c if c in which else None), calls


def test_detect_firewall_order():
    runner, which, dummy = _fake(
        {
            "firewall-cmd --state": (0, "running", ""),
            "ufw status": (0, "Status: active", ""),
            "nft list chain inet filter input": (0, "", ""),
        }
    )
    assert P.detect_firewall(runner, which) == "firewalld"
    runner, which, dummy = _fake(
        {"ufw status": (0, "Status: active\n", ""), "nft list chain inet filter input": (0, "", "")}
    )
    assert P.detect_firewall(runner, which) == "ufw"
    runner, which, dummy = _fake(
        {
            "ufw status": (0, "Status: inactive\n", ""),
            "nft list chain inet filter input": (0, "", ""),
        }
    )
    assert P.detect_firewall(runner, which) == "nftables"
    runner, which, dummy = _fake({})
    assert P.detect_firewall(runner, which) is None
    runner, which, dummy = _fake({"nft list chain inet filter input": (0, "", "")}, which=())
    assert P.detect_firewall(runner, which) is None


def test_port_plans():
    runner, dummy, dummy2 = _fake({"firewall-cmd -q --query-port=51820/udp": (0, "", "")})
    assert P.port_plan("firewalld", 51820, runner) == (True, [], [])
    opened, changes, commands = P.port_plan("firewalld", 4000, runner)
    assert not opened and changes == ["firewalld: open port 4000/udp"]
    assert commands == [
        ["firewall-cmd", "-q", "--add-port=4000/udp"],
        ["firewall-cmd", "-q", "--permanent", "--add-port=4000/udp"],
    ]

    status = "Status: active\n\nTo                         Action      From\n--\n51820/udp                  ALLOW       Anywhere\n"
    runner, dummy, dummy2 = _fake({"ufw status": (0, status, "")})
    assert P.port_plan("ufw", 51820, runner) == (True, [], [])
    assert P.port_plan("ufw", 5182, runner) == (
        False,
        ["ufw: open port 5182/udp"],
        [["ufw", "allow", "5182/udp"]],
    )

    runner, dummy, dummy2 = _fake({"nft -a list chain inet filter input": (0, NFT_LISTING, "")})
    opened, changes, commands = P.port_plan("nftables", 40000, runner)
    assert not opened
    assert changes == [
        "nftables: open port 40000/udp",
        "nftables: delete stale rule handle 3",
        "nftables: delete stale rule handle 4",
    ]
    assert commands[0] == [
        "nft",
        "insert",
        "rule",
        "inet",
        "filter",
        "input",
        "udp",
        "dport",
        "40000",
        "accept",
        "comment",
        '"kilo.mesh"',
    ]
    assert commands[1:] == [
        ["nft", "delete", "rule", "inet", "filter", "input", "handle", "3"],
        ["nft", "delete", "rule", "inet", "filter", "input", "handle", "4"],
    ]
    assert P.port_plan(None, 51820, runner) == (None, [], [])


def test_open_port_false_touches_no_firewall(tmp_path):
    runner, which, calls = _fake(
        {
            "nft list chain inet filter input": (0, "", ""),
            "nft -a list chain inet filter input": (0, "", ""),
        }
    )
    params = {
        "install_packages": False,
        "open_port": False,
        "sysctls": {},
        "backend": "auto",
        "port": 51820,
    }
    result = P.prepare(
        params,
        False,
        runner=runner,
        which=which,
        proc_sys=str(tmp_path),
        sysctl_file=str(tmp_path / "f.conf"),
    )
    assert result["firewall"] == "nftables" and result["changes"] == []
    assert all(c[:2] != ["nft", "insert"] and "-a" not in c for c in calls)
