"""playbooks/uninstall.yml on a real lab: a mesh with a connecting machine is taken away and every
host is as it was before the first run, foreign state included.

Lab kun (KILO_TEST_PREFIX_UNINSTALL), 3 locations x 2 hosts: aws (nftables) and gcp (iptables) form
the mesh, each host with a pod range (so a CNI conflist of ours); azure-1 is a connect.yml machine
(group connect); azure-2 stays outside everything. WireGuard runs as wireguard-go (no kernel module
on this machine). Before the first run every host gets foreign state (a route in the main table
and one in table 1107 of another protocol, an ip rule, an nftables table of its own, an ``inet
filter`` input chain with a rule, where prepare adds its port, files in /etc/cni/net.d and
/etc/sysctl.d; on gcp-1 iptables rules of its own in the chains ours jump from, gcp-2 has none)
and every listing is taken: links, addresses, routes and rules of both families in every table,
the nftables ruleset, iptables-save, the processes, the files under the collection's paths.

Then site.yml and connect.yml; uninstall.yml --check (changes reported, nothing changed);
uninstall.yml: every listing as before but what the guide says stays (the key; /run/kilo, where
the converge lock lives, in tmpfs; the forwarding sysctls' runtime values; on gcp-2 the empty,
accepting built-in chains of the iptables tables iptables made), the foreign state there, the
registry gone; again (changed=0); with -e kilo_remove_keys=true (the keys and their directory
gone); again (changed=0). Tests run in file order and share the lab.
"""

import os
import re
import shutil
import time

import pytest
import yaml

from sitetools import fresh_lab, playbook, recap

from ansible_collections.kilo.mesh.plugins.module_utils.options import DEFAULT_BOOT_APP

PREFIX = os.environ.get("KILO_TEST_PREFIX_UNINSTALL", "kun")
MESH = ("aws", "gcp")
LAPTOP, BYSTANDER = "azure-1", "azure-2"
# What the collection writes on a host: the boot backend's stored plan and preshared keys
# (/var/lib/kilo), its unit and app (/etc/systemd/system, /usr/lib/kilo-mesh: the lab overlays
# /usr/lib per host), the agent's files, the key, the CNI file, the sysctl file, wireguard-go's
# socket and PID file, the converge lock.
PATHS = (
    "/etc/kilo-mesh",
    "/var/lib/kilo",
    "/var/lib/kilo-mesh",
    "/usr/lib/kilo-mesh",
    "/etc/systemd/system",
    "/etc/sysctl.d",
    "/etc/cni/net.d",
    "/run/kilo",
    "/run/wireguard",
    "/run/systemd/system",
)
# Kept, as the guide says: the key unless -e kilo_remove_keys=true; /run/kilo, a directory in
# tmpfs (gone at the next boot) where the converge lock lives, which is never removed (a lock file
# removed while another converge waits on it would let two converges run at once).
KEY_PATHS = ("/var/lib/kilo", "/var/lib/kilo/key")
RUN_PATHS = ("/run/kilo", "/run/kilo/converge.lock")
# Not restored (guide: forwarding may be what other software on the host needs)
SYSCTLS = ("net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding")

LISTINGS = {
    "links": "ip -d link",
    "addresses": "ip addr",
    "routes": "ip route show table all",
    "routes6": "ip -6 route show table all",
    "rules": "ip rule",
    "rules6": "ip -6 rule",
    "nftables": "nft list ruleset",
    "iptables": "iptables-save; ip6tables-save",
    "processes": "ps -e -o comm=",
    # contents by digest, but not the private key's (not even a digest of it in a log)
    "files": "find %s -xdev -printf '%%p %%y %%m\\n' 2>/dev/null | sort;"
    " find %s -xdev -type f ! -path /var/lib/kilo/key -exec sha256sum {} + 2>/dev/null | sort -k 2"
    % (" ".join(PATHS), " ".join(PATHS)),
}

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("wireguard-go"), reason="needs root and wireguard-go"
)


def sh(lab, host, cmd, timeout=60):
    return lab.run(host, ["sh", "-c", cmd], timeout=timeout)


def normal(name, text):
    """A listing without what moves by itself: packet counters, iptables-save's dated comments."""
    if name == "addresses":  # an address's duplicate detection may still run when the lab is new
        text = text.replace(" tentative", "")
    if name == "nftables":
        text = re.sub(r"counter packets \d+ bytes \d+", "counter", text)
    if name == "processes":  # not sshd (Ansible's SSH masters come and go), not this listing's own
        text = "\n".join(
            sorted(line for line in text.splitlines() if line not in ("ps", "sh", "sshd"))
        )
    if name == "iptables":
        text = "\n".join(
            re.sub(r"\[\d+:\d+\]", "", line)
            for line in text.splitlines()
            if not line.startswith("#")
        )
    return text


def listings(lab, hosts):
    out = {}
    for host in hosts:
        for name, cmd in LISTINGS.items():
            proc = sh(lab, host, cmd)
            assert name == "files" or proc.returncode == 0, (host, name, proc.stderr)
            out[(host, name)] = normal(name, proc.stdout)
    return out


# An iptables table with built-in chains alone, empty and accepting, as iptables leaves one it made
# (it never deletes them): documented as kept on a host where the mesh's rules were the first
EMPTY_BUILT_IN = re.compile(
    r"^\s*(\*(nat|filter)|:(PREROUTING|INPUT|OUTPUT|POSTROUTING|FORWARD) ACCEPT ?|COMMIT"
    r"|table ip6? (nat|filter) \{|chain (PREROUTING|INPUT|OUTPUT|POSTROUTING|FORWARD) \{"
    r"|type (nat|filter) hook \w+ priority \w+; policy accept;|\})$"
)


def differences(before, after, kept=(), built_in=()):
    """[(host, listing, lines only before, lines only after)] where the two differ; ``kept``
    paths are left out of the files listing (the key, documented as kept); on the ``built_in``
    hosts the firewall listings are compared without empty built-in iptables chains."""
    out = []
    for key in sorted(before):
        old, new = before[key].splitlines(), after[key].splitlines()
        if key[1] == "files":
            new = [
                line
                for line in new
                if not any(line.split(" ")[0] == p or line.split()[-1] == p for p in kept)
            ]
        if key[0] in built_in and key[1] in ("iptables", "nftables"):
            old, new = (
                [line for line in lines if not EMPTY_BUILT_IN.match(line)] for lines in (old, new)
            )
        if old != new:
            out.append(
                (key[0], key[1], [x for x in old if x not in new], [x for x in new if x not in old])
            )
    return out


def shown(found):
    """The differences as lines to read (pytest would cut the list)."""
    return "\n".join(
        "%s %s:\n  only before: %s\n  only after:  %s" % (h, name, old, new)
        for h, name, old, new in found
    )


def sysctls(lab, host):
    return sh(lab, host, "sysctl -n %s" % " ".join(SYSCTLS)).stdout.split()


def public_key(lab, host):
    return sh(lab, host, "wg pubkey < /var/lib/kilo/key").stdout.strip()


def mesh_hosts(lab):
    return sorted(h for h in lab.hosts if h.startswith(tuple(m + "-" for m in MESH)))


def write_inventory(lab):
    """aws and gcp the mesh (gcp on iptables), a pod range each, azure-1 in group connect."""
    with open(lab.inventory) as f:
        inv = yaml.safe_load(f)
    kilo = inv["all"]["children"]["kilo"]
    laptop = kilo["children"]["azure"]["hosts"][LAPTOP]
    kilo["children"] = dict((loc, kilo["children"][loc]) for loc in MESH)
    kilo["children"]["gcp"].setdefault("vars", {})["kilo_firewall"] = "iptables"
    for n, host in enumerate(mesh_hosts(lab)):
        kilo["children"][host.split("-")[0]]["hosts"][host]["kilo_pod_cidr"] = "10.2.%d.0/24" % n
    laptop.update(kilo_connect_name="laptop", kilo_connect_allowed_ip="10.5.0.1/32")
    inv["all"]["children"]["connect"] = {"hosts": {LAPTOP: laptop}}
    path = lab.path("uninstall-inventory.yml")
    with open(path, "w") as f:
        yaml.safe_dump(inv, f)
    return path


FOREIGN = """
ip route add blackhole 10.99.0.0/24 proto static
ip route add blackhole 10.98.0.0/24 table 1107 proto static
ip rule add from 10.97.0.0/24 lookup 200 pref 500
nft add table inet foreign
nft add chain inet foreign input '{ type filter hook input priority 10; policy accept; }'
nft add rule inet foreign input tcp dport 8443 accept
nft add table inet filter
nft add chain inet filter input '{ type filter hook input priority 0; policy accept; }'
nft add rule inet filter input tcp dport 22 accept
mkdir -p /etc/cni/net.d
echo '{"cniVersion": "0.4.0", "name": "foreign", "plugins": [{"type": "loopback"}]}' > /etc/cni/net.d/99-foreign.conflist
echo 'vm.swappiness = 10' > /etc/sysctl.d/99-foreign.conf
"""
FOREIGN_IPTABLES = """
iptables -t nat -N FOREIGN-NAT
iptables -t nat -A POSTROUTING -d 10.96.0.0/24 -j FOREIGN-NAT
iptables -A FORWARD -s 10.96.0.0/24 -j ACCEPT
iptables -A INPUT -p tcp --dport 8443 -j ACCEPT
"""


def still_foreign(lab, host):
    """What the foreign state looks like now (each line must be there after every run)."""
    return [
        "blackhole 10.99.0.0/24 proto static" in sh(lab, host, "ip route show").stdout,
        "blackhole 10.98.0.0/24 proto static" in sh(lab, host, "ip route show table 1107").stdout,
        "from 10.97.0.0/24 lookup 200" in sh(lab, host, "ip rule").stdout,
        "tcp dport 8443 accept" in sh(lab, host, "nft list table inet foreign").stdout,
        "tcp dport 22 accept" in sh(lab, host, "nft list chain inet filter input").stdout,
        sh(
            lab,
            host,
            "test -f /etc/cni/net.d/99-foreign.conflist && test -f /etc/sysctl.d/99-foreign.conf",
        ).returncode
        == 0,
    ]


@pytest.fixture(scope="module")
def lab():
    with fresh_lab(PREFIX, 3, 2, 1) as lab:
        lab.registry = lab.path("kilo-registry.json")
        lab.kilo_inventory = write_inventory(lab)
        lab.iptables = [h for h in mesh_hosts(lab) if h.startswith("gcp-")]
        lab.bare = lab.iptables[1:]  # no iptables rule before the mesh's: iptables makes its tables
        for host in (
            lab.hosts
        ):  # a new link's addresses (and their local routes) once duplicate detection is done
            sh(
                lab,
                host,
                'for i in $(seq 50); do [ -z "$(ip -6 addr show tentative)" ] && exit 0; sleep 0.2; done',
            )
        for host in lab.hosts:
            proc = sh(lab, host, FOREIGN + (FOREIGN_IPTABLES if host in lab.iptables[:1] else ""))
            assert proc.returncode == 0, (host, proc.stderr)
        lab.before = listings(lab, sorted(lab.hosts))
        lab.sysctls = dict((h, sysctls(lab, h)) for h in lab.hosts)
        try:
            yield lab
        finally:
            os.remove(lab.kilo_inventory)


def run(lab, name, *extra):
    start = time.monotonic()
    out = playbook(lab.kilo_inventory, name, *extra, timeout=900)
    counts = recap(out)
    print(
        "%s %s: %.1f s, changed %s"
        % (
            name,
            " ".join(extra),
            time.monotonic() - start,
            dict((h, c["changed"]) for h, c in sorted(counts.items())),
        )
    )
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), out[-6000:]
    return counts, out


def test_site_and_connect_put_the_mesh_on_every_host(lab):
    run(lab, "site.yml")
    run(lab, "connect.yml")
    for host in mesh_hosts(lab) + [LAPTOP]:
        assert sh(lab, host, "ip link show kilo0").returncode == 0, host
    for host in mesh_hosts(lab):
        # what the listings must see go: the CNI file, the sysctl file, the key, the boot backend's files
        ours = (
            "/etc/cni/net.d/10-kilo.conflist",
            "/etc/sysctl.d/90-kilo-mesh.conf",
            "/var/lib/kilo/key",
            "/var/lib/kilo/mesh-plan.json",
            "/etc/systemd/system/kilo-mesh.service",
            DEFAULT_BOOT_APP,
        )
        assert sh(lab, host, " && ".join("test -f %s" % p for p in ours)).returncode == 0, host
        assert 'comment "kilo.mesh"' in sh(lab, host, "nft list chain inet filter input").stdout, (
            host
        )
        firewall = (
            "iptables-save | grep -q KILO-NAT"
            if host in lab.iptables
            else "nft list table inet kilo_mesh"
        )
        assert sh(lab, host, firewall).returncode == 0, host
        assert all(still_foreign(lab, host)), (host, still_foreign(lab, host))
    assert os.path.exists(lab.registry)
    # the leaders reach each other and the laptop through the tunnels
    leaders = [h for h in mesh_hosts(lab) if lab.hosts[h]["public"]]
    assert sh(lab, leaders[0], "ping -c 3 -i 0.3 -W 2 -q 10.5.0.1", timeout=90).returncode == 0
    lab.converged = listings(lab, sorted(lab.hosts))
    lab.public_keys = dict((h, public_key(lab, h)) for h in mesh_hosts(lab) + [LAPTOP])


def test_check_mode_reports_every_host_and_changes_nothing(lab):
    with open(lab.registry) as f:
        registry = f.read()
    counts, out = run(lab, "uninstall.yml", "--check", "--diff")
    keys = [sh(lab, h, "cat /var/lib/kilo/key").stdout.strip() for h in mesh_hosts(lab) + [LAPTOP]]
    assert all(keys) and not any(k in out for k in keys), "a private key in the diff"
    assert set(counts) == set(mesh_hosts(lab) + [LAPTOP]), counts
    assert all(c["changed"] > 0 for c in counts.values()), counts
    found = differences(lab.converged, listings(lab, sorted(lab.hosts)))
    assert not found, shown(found)
    with open(lab.registry) as f:
        assert f.read() == registry, "check mode wrote the registry"


def test_uninstall_leaves_every_host_as_before_but_the_key(lab):
    run(lab, "uninstall.yml")
    for host in mesh_hosts(lab):
        # documented as kept: the forwarding sysctls' runtime values (the boot file is gone, so the
        # next boot has the system's own); put back here as that boot would, since forwarding
        # brings routes of its own (IPv6 subnet-router anycast) into the listings
        assert sysctls(lab, host) == ["1", "1"], host
        sh(
            lab,
            host,
            "sysctl -q %s" % " ".join("%s=%s" % kv for kv in zip(SYSCTLS, lab.sysctls[host])),
        )
    after = listings(lab, sorted(lab.hosts))
    kept = [
        line
        for line in after[("aws-1", "files")].splitlines()
        if line.split()[0] in KEY_PATHS + RUN_PATHS or line.split()[-1] in KEY_PATHS + RUN_PATHS
    ]
    print("kept on aws-1, as documented: %s" % kept)
    found = differences(lab.before, after, kept=KEY_PATHS + RUN_PATHS, built_in=lab.bare)
    assert not found, shown(found)
    for host in mesh_hosts(lab) + [LAPTOP]:
        # documented as kept: the key, the same one
        assert public_key(lab, host) == lab.public_keys[host], host
        assert all(still_foreign(lab, host)), (host, still_foreign(lab, host))
    assert not os.path.exists(lab.registry) and not os.path.exists(lab.registry + ".lock")
    assert after[(BYSTANDER, "files")] == lab.before[(BYSTANDER, "files")]
    for (
        host
    ) in lab.bare:  # what the exception above is about: tables iptables made, no rule in them
        assert (
            "*nat" in after[(host, "iptables")] and "*nat" not in lab.before[(host, "iptables")]
        ), host
        assert "KILO" not in after[(host, "iptables")] + after[(host, "nftables")], host


def test_uninstall_again_changes_nothing(lab):
    counts, _ = run(lab, "uninstall.yml")
    assert all(c["changed"] == 0 for c in counts.values()), counts
    assert not os.path.exists(lab.registry) and not os.path.exists(lab.registry + ".lock")


def test_remove_keys_then_every_listing_is_as_before(lab):
    counts, _ = run(lab, "uninstall.yml", "-e", "kilo_remove_keys=true")
    assert all(c["changed"] > 0 for c in counts.values()), counts  # the key of each
    after = listings(lab, sorted(lab.hosts))
    found = differences(lab.before, after, kept=RUN_PATHS, built_in=lab.bare)
    assert not found, shown(found)
    for host in lab.hosts:
        assert all(still_foreign(lab, host)), (host, still_foreign(lab, host))
    counts, _ = run(lab, "uninstall.yml", "-e", "kilo_remove_keys=true")
    assert all(c["changed"] == 0 for c in counts.values()), counts
    assert not os.path.exists(lab.registry) and not os.path.exists(lab.registry + ".lock")
