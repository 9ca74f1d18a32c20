"""A WireGuard client holding a stolen private key, for the revocation tests of key rotation
(test_rotation.py: the mesh's hosts; test_connect.py: a connect.yml machine).

It lives in a namespace of its own named after the lab's prefix (so the lab's tear-down would
remove it too), with a port on the lab's internet bridge and on each location's LAN.
"""

import os
import subprocess
import time

INET = "203.0.113.250"
TUNNEL = "10.4.255.250/16"
IFACE = "atkwg0"  # inside the attacker's namespace only


def netns_of(prefix):
    return prefix + "-attacker"


def attacker_net(lab, prefix):
    """The attacker's namespace: a port on the lab's internet bridge and on each LAN."""
    netns, fabric = netns_of(prefix), lab.load()["fabric_netns"]
    subprocess.run(["ip", "netns", "add", netns], check=True)
    batch = ["link add atk0 netns %s type veth peer name atki netns %s" % (netns, fabric)]
    inside = ["link set lo up", "addr add %s/24 dev atk0" % INET, "link set atk0 up"]
    fabric_cmds = ["link set atki master inet", "link set atki up"]
    for index in sorted(set(h["location_index"] for h in lab.hosts.values())):
        batch.append(
            "link add atl%d netns %s type veth peer name atl%dx netns %s"
            % (index, netns, index, fabric)
        )
        inside += [
            "addr add 172.16.%d.250/24 dev atl%d" % (index, index),
            "link set atl%d up" % index,
        ]
        fabric_cmds += [
            "link set atl%dx master lan%d" % (index, index),
            "link set atl%dx up" % index,
        ]
    for where, cmds in ((None, batch), (netns, inside), (fabric, fabric_cmds)):
        subprocess.run(
            ["ip"] + (["-n", where] if where else []) + ["-batch", "-"],
            input="\n".join(cmds) + "\n",
            text=True,
            check=True,
        )


def remove_net(prefix):
    subprocess.run(["ip", "netns", "del", netns_of(prefix)], check=False)


class Attacker(object):
    """wireguard-go in the attacker's namespace (``attacker_net``) with a stolen private key and a
    [Peer] (with a 1 s keepalive, which starts a handshake) for each given (public key, endpoint,
    allowed IP)."""

    def __init__(self, prefix, tmp_path, private, peers):
        self.netns = netns_of(prefix)
        self.proc = subprocess.Popen(
            self.inside(["wireguard-go", "-f", IFACE]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            self.configure(tmp_path, private, peers)
        except BaseException:
            self.stop()
            raise

    def inside(self, argv):
        return ["nsenter", "--net=/run/netns/%s" % self.netns, "--"] + argv

    def run(self, argv):
        return subprocess.run(self.inside(argv), capture_output=True, text=True, timeout=30)

    def configure(self, tmp_path, private, peers):
        conf = tmp_path / "attacker.conf"
        lines = ["[Interface]", "PrivateKey = %s" % private]
        for key, endpoint, allowed in peers:
            lines += [
                "[Peer]",
                "PublicKey = %s" % key,
                "Endpoint = %s" % endpoint,
                "AllowedIPs = %s" % allowed,
                "PersistentKeepalive = 1",
            ]
        with os.fdopen(os.open(str(conf), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write("\n".join(lines) + "\n")
        deadline = time.monotonic() + 10
        while self.run(["ip", "link", "show", IFACE]).returncode != 0:
            assert self.proc.poll() is None and time.monotonic() < deadline, (
                "wireguard-go did not start"
            )
            time.sleep(0.05)
        try:
            for argv in (
                ["ip", "addr", "add", TUNNEL, "dev", IFACE],
                ["ip", "link", "set", IFACE, "up"],
                ["wg", "setconf", IFACE, str(conf)],
            ):
                proc = self.run(argv)
                assert proc.returncode == 0, (argv, proc.stderr)
        finally:
            conf.unlink()

    def route(self, destination):
        """Send to ``destination`` (outside TUNNEL, such as a connect.yml machine's address)
        through the tunnel, so that ping() makes WireGuard try a handshake for it."""
        proc = self.run(["ip", "route", "replace", destination, "dev", IFACE])
        assert proc.returncode == 0, proc.stderr

    def handshakes(self):
        """public key -> time of the latest handshake with that peer (0: none)."""
        out = self.run(["wg", "show", IFACE, "latest-handshakes"]).stdout
        return dict((key, int(ts)) for key, ts in (line.split() for line in out.splitlines()))

    def wait_for_handshakes(self, seconds=15):
        """handshakes() once every peer has one, or after ``seconds``."""
        deadline = time.monotonic() + seconds
        while not all(self.handshakes().values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.handshakes()

    def sent(self):
        """public key -> bytes sent to that peer (handshake initiations count)."""
        out = self.run(["wg", "show", IFACE, "transfer"]).stdout
        return dict((key, int(tx)) for key, rx, tx in (line.split() for line in out.splitlines()))

    def ping(self, addresses, seconds):
        procs = [
            subprocess.Popen(
                self.inside(["ping", "-c", str(seconds * 2), "-i", "0.5", "-W", "1", address]),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for address in addresses
        ]
        return [proc.wait(timeout=seconds + 20) for proc in procs]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # our own wireguard-go (nsenter execs it: the same PID)
            self.proc.wait(timeout=10)
