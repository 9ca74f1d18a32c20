"""Running playbooks/site.yml against a lab from host tests, and reading Ansible's recap."""

import contextlib
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The Ansible under test: the one installed beside the Python running the tests (.venv, or the
# venv of an ansible-core stage of scripts/test.sh, such as .venv-core-2.17).
ANSIBLE_BIN = os.path.dirname(os.path.abspath(sys.executable))


def playbook(inventory, name, *extra, **kw):
    """Run playbooks/NAME over real SSH; asserts the exit code (expect_rc, default 0); returns
    the output. ``timeout`` (seconds, default none) bounds the run."""
    expect_rc = kw.pop("expect_rc", 0)
    argv = [
        os.path.join(ANSIBLE_BIN, "ansible-playbook"),
        "-i",
        inventory,
        os.path.join(REPO, "playbooks", name),
    ] + list(extra)
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"),
    )
    proc = subprocess.run(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
        timeout=kw.pop("timeout", None),
    )
    assert proc.returncode == expect_rc, proc.stdout[-6000:]
    return proc.stdout


def site(inventory, *extra, **kw):
    """Run site.yml (see playbook)."""
    return playbook(inventory, "site.yml", *extra, **kw)


def recap(output):
    """host -> {ok, changed, unreachable, failed, ...} from the PLAY RECAP."""
    out = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        out[host] = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", counts))
    return out


# The non-root login user of the labs that reach their hosts as most fleets do (lab.py up --user):
# sudo without a password on half of the hosts, with one (ansible_become_password) on the others.
LOGIN_USER = "kilodeploy"

# What site.yml leaves beside a lab's inventory.
RUN_FILES = ("kilo-registry.json", "kilo-registry.json.lock", "kilo-topology.dot")


@contextlib.contextmanager
def fresh_lab(prefix, *shape, **options):
    """A lab made anew (a leftover of the same prefix torn down first) and always torn down,
    without the files an earlier run of site.yml left in its state dir (so no host keeps a place
    in the mesh from another test). ``shape`` and ``options`` are Lab.up's, but for
    ``lab_keepalive=False``: the lab's SSH without keepalives of its own (without_keepalive)."""
    from lab.lab import Lab  # pylint: disable=import-outside-toplevel

    lab = Lab(prefix)

    def clean():
        for name in RUN_FILES:
            if os.path.exists(lab.path(name)):
                os.remove(lab.path(name))
        lab.down()

    lab_keepalive = options.pop("lab_keepalive", True)
    clean()
    try:
        lab.up(*shape, **options)
        if not lab_keepalive:
            without_keepalive(lab)
        yield lab
    finally:
        clean()


def without_keepalive(lab):
    """Take the lab's own SSH keepalive (ServerAlive* in its ssh_config) away, so the lab's SSH
    is as a user's machine has it: OpenSSH's defaults (no probe, or one every 300 s with
    Debian's BatchMode), so a connection to a host gone silent ends after TCP's 15 minutes. What
    bounds a dark host there is what the collection sets itself (plugin_utils/keepalive.py)."""
    with open(lab.ssh_config) as f:
        lines = f.read().splitlines()
    with open(lab.ssh_config, "w") as f:
        f.write("\n".join(line for line in lines if "serveralive" not in line.lower()) + "\n")


def close_masters(directory):
    """Close the SSH master connections whose sockets are in ``directory`` (a lab's ControlPath
    directory): the next command to a host opens a new one, with that run's options."""
    for name in os.listdir(directory) if os.path.isdir(directory) else []:
        subprocess.run(
            ["ssh", "-o", "ControlPath=%s" % os.path.join(directory, name), "-O", "exit", "x"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
            timeout=30,
        )


# What a reboot takes away on a lab host (the files stay): the WireGuard interface and its daemon,
# our routes and rules, our nftables table, /run's content.
WIPE = (
    "pid=$(head -n1 /run/kilo/{iface}.pid 2>/dev/null) && kill $pid; sleep 0.3;"
    " ip link del {iface} 2>/dev/null; ip route flush table all proto 107;"
    " ip -6 route flush table all proto 107;"
    " while ip rule del table 1107 2>/dev/null; do :; done;"
    " nft delete table inet kilo_mesh 2>/dev/null; rm -rf /run/kilo /run/wireguard/*; true"
)


def wipe(lab, host, iface="kilo0"):
    """What a reboot wipes, wiped on ``host`` (the boot restore's lab test, the agent's)."""
    lab.run(host, ["sh", "-c", WIPE.format(iface=iface)], timeout=60)
