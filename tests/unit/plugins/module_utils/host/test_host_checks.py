"""Host-side checks of kilo.mesh.key and the SSH guard's client address, on this machine's /proc."""

import os
import shlex
import socket
import subprocess
import sys

from ansible_collections.kilo.mesh.plugins.module_utils.host import host_checks
from checkout import ROOT

COLLECTIONS = os.path.join(ROOT, ".collections")

HOST = {
    "links": {1: {"name": "lo"}, 2: {"name": "eth0"}, 3: {"name": "kilo0"}},
    "addrs": [
        {"ifname": "lo", "cidr": "127.0.0.1/8"},
        {"ifname": "eth0", "cidr": "10.4.7.2/24"},
        {"ifname": "kilo0", "cidr": "10.4.0.1/16"},
    ],
}


def test_subnet_overlap_names_the_interface_and_skips_ours():
    assert host_checks.subnet_conflicts(HOST["addrs"], "10.4.0.0/16", "kilo0") == [
        "10.4.7.2/24 on eth0"
    ]
    assert host_checks.subnet_conflicts(HOST["addrs"], "10.5.0.0/16", "kilo0") == []
    # a LAN that contains the whole subnet is in the way as well
    wide = [{"ifname": "eth1", "cidr": "10.0.0.5/8"}]
    assert host_checks.subnet_conflicts(wide, "10.4.0.0/16", "kilo0") == ["10.0.0.5/8 on eth1"]


def test_port_held_by_a_process_is_named_unless_our_interface_holds_it():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        holders = host_checks.port_holders(port, interface_present=False)
        assert any("(pid %d)" % os.getpid() in h for h in holders), holders
        assert host_checks.port_holders(port, interface_present=True) == []
    finally:
        sock.close()
    assert host_checks.port_holders(port, interface_present=False) == []


def test_host_problems_errors_and_warnings():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", 0))
    port = sock.getsockname()[1]
    try:
        host = dict(HOST, links={1: {"name": "lo"}, 2: {"name": "eth0"}})  # no kilo0 yet
        errors, warnings = host_checks.host_problems(
            host, "kilo0", "10.4.0.0/16", port, "10.1.0.9/24"
        )
    finally:
        sock.close()
    assert errors[0].startswith(
        "kilo_subnet: 10.4.0.0/16 overlaps a network this host is on (10.4.7.2/24 on eth0)"
    )
    assert errors[1].startswith("kilo_port: UDP port %d is already in use by " % port)
    assert warnings == ["kilo_force_internal_ip: no interface of this host has 10.1.0.9"]
    errors, warnings = host_checks.host_problems(HOST, "kilo0", "10.5.0.0/16", 51820, "10.4.7.2/24")
    assert errors == [] and warnings == []
    assert host_checks.host_problems(HOST, "kilo0", "10.5.0.0/16", 51820, "-") == ([], [])


def test_ssh_client_address_from_the_environment_or_an_ancestor():
    assert (
        host_checks.ssh_client_address({"SSH_CONNECTION": "198.18.0.1 5000 198.18.0.2 22"})
        == "198.18.0.1"
    )
    assert (
        host_checks.ssh_client_address({"SSH_CONNECTION": "::ffff:198.18.0.1 5000 ::1 22"})
        == "198.18.0.1"
    )
    assert (
        host_checks.ssh_client_address({"SSH_CONNECTION": "fe80::1%eth0 5000 fe80::2 22"})
        == "fe80::1"
    )
    assert host_checks.ssh_client_address({}, depth=0) is None


def test_ssh_client_address_of_an_ancestor_when_become_dropped_it():
    """sudo drops SSH_CONNECTION; the shell above it still has it."""
    code = (
        "import sys; sys.path.insert(0, %r); from ansible_collections.kilo.mesh.plugins.module_utils.host import "
        "host_checks; print(host_checks.ssh_client_address())" % COLLECTIONS
    )

    def run(become):
        inner = "env -u SSH_CONNECTION %s %s -c %s; true" % (
            "SUDO_USER=someone" if become else "",
            sys.executable,
            shlex.quote(code),
        )
        env = dict(
            (k, v) for k, v in os.environ.items() if k not in ("SSH_CONNECTION", "SUDO_USER")
        )
        env["SSH_CONNECTION"] = "198.18.3.4 5000 198.18.0.2 22"
        return subprocess.run(
            ["sh", "-c", inner],
            env=env,
            check=True,
            stdout=subprocess.PIPE,
            universal_newlines=True,
        ).stdout.strip()

    assert run(become=True) == "198.18.3.4"
    # without become, an ancestor's session is not this run's connection
    assert run(become=False) == "None"
