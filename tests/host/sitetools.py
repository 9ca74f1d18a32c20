"""Running playbooks/site.yml against a lab from host tests, and reading Ansible's recap."""
import contextlib
import os
import re
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def playbook(inventory, name, *extra, **kw):
    """Run playbooks/NAME over real SSH; asserts the exit code (expect_rc, default 0); returns
    the output. ``timeout`` (seconds, default none) bounds the run."""
    expect_rc = kw.pop("expect_rc", 0)
    argv = [os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "-i", inventory,
            os.path.join(REPO, "playbooks", name)] + list(extra)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"))
    proc = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False, timeout=kw.pop("timeout", None))
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


# What site.yml leaves beside a lab's inventory.
RUN_FILES = ("kilo-registry.json", "kilo-registry.json.lock", "kilo-topology.dot")


@contextlib.contextmanager
def fresh_lab(prefix, *shape, **options):
    """A lab made anew (a leftover of the same prefix torn down first) and always torn down,
    without the files an earlier run of site.yml left in its state dir (so no host keeps a place
    in the mesh from another test). ``shape`` and ``options`` are Lab.up's."""
    from lab.lab import Lab  # pylint: disable=import-outside-toplevel
    lab = Lab(prefix)

    def clean():
        for name in RUN_FILES:
            if os.path.exists(lab.path(name)):
                os.remove(lab.path(name))
        lab.down()
    clean()
    try:
        lab.up(*shape, **options)
        yield lab
    finally:
        clean()
