"""kilo.mesh.prepare on real nftables, inside a network namespace this test creates; the
action's choice of port through ansible-playbook in check mode (touching no firewall here); and
the role kilo.mesh.wireguard run by ansible-playbook inside a namespace (bug 6: a host with a
forced endpoint gets that endpoint's port opened, not kilo_port's).

KILO_WIREGUARD_ROLE=DIR runs the role test against another copy of the role, e.g. the shell
version before kilo.mesh.prepare (it opens 51820 and fails the test)."""

import json
import os
import subprocess
import sys
import re
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".collections")
HOST_PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
BIN = os.path.dirname(sys.executable)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")

# Runs prepare() in the namespace with sysctls in a temp dir; prints the result as JSON.
DRIVER = r"""
import json, shutil, sys
sys.path.insert(0, %(collections)r)
from ansible_collections.kilo.mesh.plugins.module_utils.host import prepare as P
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError
req = json.load(sys.stdin)
try:
    # firewalld and ufw are reached over D-Bus or files, outside the namespace: never here
    which = lambda c: None if c in ("firewall-cmd", "ufw") else shutil.which(c)
    out = P.prepare(req["params"], req["check"], which=which, proc_sys=req["proc_sys"], sysctl_file=req["sysctl_file"])
except KiloError as exc:
    out = {"error": str(exc)}
print(json.dumps(out))
"""


def sh(*args, **kw):
    return subprocess.run(
        args,
        check=kw.pop("check", True),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        **kw,
    )


@pytest.fixture
def netns():
    ns = "kprep-%d" % os.getpid()
    sh("ip", "netns", "del", ns, check=False)
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "netns", "exec", ns, "nft", "add", "table", "inet", "filter")
        sh(
            "ip",
            "netns",
            "exec",
            ns,
            "nft",
            "add",
            "chain",
            "inet",
            "filter",
            "input",
            "{ type filter hook input priority 0; policy accept; }",
        )
        yield ns
    finally:
        sh("ip", "netns", "del", ns, check=False)


def run_prepare(ns, tmp_path, port, check):
    proc_sys = tmp_path / "proc"
    (proc_sys / "net" / "ipv4").mkdir(parents=True, exist_ok=True)
    if not (proc_sys / "net" / "ipv4" / "ip_forward").exists():
        (proc_sys / "net" / "ipv4" / "ip_forward").write_text("0\n")
    req = {
        "params": {
            "install_packages": False,
            "open_port": True,
            "backend": "auto",
            "port": port,
            "sysctls": {"net.ipv4.ip_forward": 1},
        },
        "check": check,
        "proc_sys": str(proc_sys),
        "sysctl_file": str(tmp_path / "90-kilo-mesh.conf"),
    }
    proc = sh(
        "ip",
        "netns",
        "exec",
        ns,
        HOST_PY,
        "-c",
        DRIVER % {"collections": COLLECTIONS},
        input=json.dumps(req),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "error" not in out, out["error"]
    return out


def rules(ns):
    listing = sh(
        "ip", "netns", "exec", ns, "nft", "list", "chain", "inet", "filter", "input"
    ).stdout
    return [line.strip() for line in listing.splitlines() if "dport" in line]


def test_nftables_port(netns, tmp_path):
    ours = 'udp dport %d accept comment "kilo.mesh"'
    check = run_prepare(netns, tmp_path, 51820, check=True)
    assert check["firewall"] == "nftables" and check["missing"] == [] and check["port"] == 51820
    assert "nftables: open port 51820/udp" in check["changes"]
    assert rules(netns) == []
    assert not (tmp_path / "90-kilo-mesh.conf").exists()
    assert (tmp_path / "proc" / "net" / "ipv4" / "ip_forward").read_text() == "0\n"

    real = run_prepare(netns, tmp_path, 51820, check=False)
    assert real["changes"] == check["changes"]
    assert rules(netns) == [ours % 51820]
    assert (tmp_path / "90-kilo-mesh.conf").read_text() == "net.ipv4.ip_forward = 1\n"
    assert (tmp_path / "proc" / "net" / "ipv4" / "ip_forward").read_text().strip() == "1"

    again = run_prepare(netns, tmp_path, 51820, check=False)
    assert again["changes"] == [] and not again["changed"]
    assert rules(netns) == [ours % 51820]

    # another port: ours is replaced, a foreign rule stays
    sh(
        "ip",
        "netns",
        "exec",
        netns,
        "nft",
        "add",
        "rule",
        "inet",
        "filter",
        "input",
        "tcp",
        "dport",
        "22",
        "accept",
    )
    moved = run_prepare(netns, tmp_path, 40000, check=False)
    assert "nftables: open port 40000/udp" in moved["changes"]
    assert any(c.startswith("nftables: delete stale rule handle") for c in moved["changes"])
    assert sorted(rules(netns)) == sorted([ours % 40000, "tcp dport 22 accept"])
    assert run_prepare(netns, tmp_path, 40000, check=False)["changes"] == []


PLAYBOOK = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Prepare in check mode
      kilo.mesh.prepare:
      register: probe
    - name: Show the port
      ansible.builtin.debug:
        msg: "PORT={{ probe.port }}"
"""


@pytest.mark.parametrize(
    "extra, port",
    [
        ("kilo_force_endpoint=203.0.113.5:40000 kilo_port=40001", 40000),
        ("kilo_port=40001", 40001),
        ("kilo_force_endpoint=''", 51820),
    ],
)
def test_action_port_choice(tmp_path, extra, port):
    inventory = tmp_path / "hosts"
    inventory.write_text(
        textwrap.dedent(
            """\
        [all]
        localhost ansible_connection=local ansible_python_interpreter=%s wireguard_open_port=false \
wireguard_install_packages=false wireguard_sysctls="{}" %s
        """
            % (HOST_PY, extra)
        )
    )
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
        ANSIBLE_NOCOLOR="1",
    )
    proc = subprocess.run(
        [os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), "--check", str(playbook)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        universal_newlines=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
    assert "PORT=%d" % port in proc.stdout, proc.stdout


def test_action_bad_force_endpoint_names_the_variable(tmp_path):
    inventory = tmp_path / "hosts"
    inventory.write_text(
        "localhost ansible_connection=local ansible_python_interpreter=%s wireguard_open_port=false"
        " wireguard_install_packages=false kilo_force_endpoint=203.0.113.5\n" % HOST_PY
    )
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
        ANSIBLE_NOCOLOR="1",
    )
    proc = subprocess.run(
        [os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), "--check", str(playbook)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        universal_newlines=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode != 0
    assert "kilo_force_endpoint" in proc.stdout and "host 'localhost'" in proc.stdout, proc.stdout


def test_action_reads_the_host_own_variables(tmp_path):
    # prepare is per host: a host outside the mesh group does not borrow the group's first host's variables
    inventory = tmp_path / "hosts"
    inventory.write_text(
        textwrap.dedent(
            """\
        [kilo]
        other wireguard_sysctls=not-a-dict kilo_port=1

        [local]
        localhost ansible_connection=local ansible_python_interpreter=%s wireguard_open_port=false \
wireguard_install_packages=false wireguard_sysctls="{}" kilo_port=40002
        """
            % HOST_PY
        )
    )
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
        ANSIBLE_NOCOLOR="1",
    )
    proc = subprocess.run(
        [os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), "--check", str(playbook)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        universal_newlines=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
    assert "PORT=40002" in proc.stdout, proc.stdout


# --- the role, run by ansible-playbook inside the namespace -------------------------------------

ROLE = os.environ.get("KILO_WIREGUARD_ROLE") or os.path.join(ROOT, "roles", "wireguard")
ROLE_INVENTORY = """\
all:
  hosts:
    localhost:
      ansible_connection: local
      ansible_python_interpreter: %s
      wireguard_install_packages: false
      wireguard_sysctls: {net.ipv4.ip_forward: 1}
      kilo_port: 51821
      kilo_force_endpoint: 203.0.113.5:40000
"""


def run_role(ns, tmp_path, *extra):
    """ansible-playbook with the role on localhost, inside ``ns`` and a mount namespace where
    /etc/sysctl.d is a temp dir: nft and /proc/sys/net act on the namespace, the boot file lands
    in the temp dir. Returns (output, recap counts of localhost)."""
    sysctl_d = tmp_path / "sysctl.d"
    sysctl_d.mkdir(exist_ok=True)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(ROLE_INVENTORY % HOST_PY)
    playbook = tmp_path / "role.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: %s\n" % ROLE
    )
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
        ANSIBLE_NOCOLOR="1",
    )
    argv = [
        "ip",
        "netns",
        "exec",
        ns,
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        'mount --bind "$0" /etc/sysctl.d && exec "$@"',
        str(sysctl_d),
        os.path.join(BIN, "ansible-playbook"),
        "-i",
        str(inventory),
        str(playbook),
    ] + list(extra)
    proc = subprocess.run(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        universal_newlines=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
    recap = re.search(r"^localhost\s+:\s+(ok=.*)$", proc.stdout, re.M)
    assert recap, proc.stdout
    return proc.stdout, dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1)))


def test_role_opens_the_port_of_the_forced_endpoint(netns, tmp_path):
    # bug 6: the old role opened kilo_port (51820 by default), not the port WireGuard listens on
    conf = tmp_path / "sysctl.d" / "90-kilo-mesh.conf"

    out, counts = run_role(netns, tmp_path, "--check")
    assert counts["changed"] == 1 and counts["failed"] == 0, out
    assert rules(netns) == [] and not conf.exists()
    assert (
        sh("ip", "netns", "exec", netns, "cat", "/proc/sys/net/ipv4/ip_forward").stdout.strip()
        == "0"
    )

    out, counts = run_role(netns, tmp_path)
    assert counts["changed"] == 1 and counts["failed"] == 0, out
    assert rules(netns) == ['udp dport 40000 accept comment "kilo.mesh"'], out
    assert conf.read_text() == "net.ipv4.ip_forward = 1\n"
    assert (
        sh("ip", "netns", "exec", netns, "cat", "/proc/sys/net/ipv4/ip_forward").stdout.strip()
        == "1"
    )

    out, counts = run_role(netns, tmp_path)
    assert counts["changed"] == 0 and counts["failed"] == 0, out
    assert rules(netns) == ['udp dport 40000 accept comment "kilo.mesh"']
