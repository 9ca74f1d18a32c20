"""The collection's SSH keepalive on Ansible's control connection (plugin_utils/keepalive.py):
added for the collection's remote calls unless the user's own SSH setup gives up on a silent
host as soon; never over a value given in Ansible's own SSH options."""

import subprocess

import pytest

from ansible_collections.kilo.mesh.plugins.plugin_utils import keepalive

BATCH_MODE = "serveraliveinterval 300\nserveralivecountmax 3\n"  # Debian's BatchMode default
NONE = "serveraliveinterval 0\nserveralivecountmax 3\n"


class FakeConnection(object):
    """What the ssh connection plugin offers an action: transport, get_option, set_option."""

    transport = "ssh"

    def __init__(self, **options):
        self.options = dict(
            dict(
                ssh_args="-C -o ControlMaster=auto -o ControlPersist=60s",
                ssh_common_args="",
                ssh_extra_args="",
                host="198.51.100.7",
                port=None,
                remote_user="root",
                ssh_executable="ssh",
            ),
            **options,
        )

    def get_option(self, name):
        return self.options[name]

    def set_option(self, name, value):
        self.options[name] = value


def test_the_bound_ends_a_dark_hosts_part_within_a_minute():
    # the master gives up after BOUND; Ansible's try at a new connection waits its connect
    # timeout (10 s by default) before the host is unreachable
    assert keepalive.BOUND == keepalive.INTERVAL * (keepalive.COUNT_MAX + 1)
    assert keepalive.BOUND + 10 < 60


@pytest.mark.parametrize(
    "settings,after",
    [
        (NONE, None),
        (BATCH_MODE, 1200),
        ("serveraliveinterval 3\n", 12),
        ("serveraliveinterval 5\nserveralivecountmax 2\n", 15),
        ("", None),
        ("serveraliveinterval x\n", None),
    ],
)
def test_gives_up_after(settings, after):
    assert keepalive.gives_up_after(settings) == after


@pytest.mark.parametrize("settings", [NONE, BATCH_MODE, None])
def test_added_when_the_users_ssh_would_wait_longer_or_cannot_tell(monkeypatch, settings):
    monkeypatch.setattr(keepalive, "effective_settings", lambda connection: settings)
    connection = FakeConnection(ssh_extra_args="-o IdentitiesOnly=yes")
    assert keepalive.apply(connection) is True
    # after the user's own extra arguments (ssh takes the first value of an option)
    assert connection.options["ssh_extra_args"] == "-o IdentitiesOnly=yes " + keepalive.ARGS


def test_a_users_ssh_config_that_gives_up_as_soon_is_kept(monkeypatch):
    monkeypatch.setattr(
        keepalive, "effective_settings", lambda connection: "serveraliveinterval 3\n"
    )
    connection = FakeConnection()
    assert keepalive.apply(connection) is False and connection.options["ssh_extra_args"] == ""


@pytest.mark.parametrize("option", ["ssh_args", "ssh_common_args", "ssh_extra_args"])
def test_a_value_in_ansibles_own_ssh_options_is_never_touched(monkeypatch, option):
    monkeypatch.setattr(
        keepalive, "effective_settings", lambda connection: pytest.fail("ssh -G asked")
    )
    connection = FakeConnection(**{option: "-o serveraliveinterval=0"})  # off, on purpose
    before = dict(connection.options)
    assert keepalive.apply(connection) is False and connection.options == before


def test_other_connections_are_left_alone():
    for transport in ("local", "paramiko_ssh", None):
        connection = FakeConnection()
        connection.transport = transport
        assert keepalive.apply(connection) is False
    assert keepalive.apply(None) is False


def test_effective_settings_are_what_ssh_itself_reads(tmp_path):
    # the real ssh, a -F file of the user's in ssh_common_args, a Host block matching the host
    config = tmp_path / "ssh_config"
    config.write_text("Host 198.51.100.7\n  ServerAliveInterval 4\n  ServerAliveCountMax 2\n")
    try:
        subprocess.run(["ssh", "-V"], capture_output=True, check=True)
    except OSError:
        pytest.skip("no ssh client")
    connection = FakeConnection(ssh_common_args="-F %s" % config)
    assert keepalive.gives_up_after(keepalive.effective_settings(connection)) == 12
    assert keepalive.needed(connection) is False
    other = FakeConnection(ssh_common_args="-F %s" % config, host="198.51.100.8", port=2222)
    assert keepalive.needed(other) is True
    # an option on Ansible's command line beats the file, as it does for ssh
    assert (
        keepalive.gives_up_after(
            keepalive.effective_settings(
                FakeConnection(ssh_common_args="-F %s -o ServerAliveInterval=20" % config)
            )
        )
        == 60
    )
