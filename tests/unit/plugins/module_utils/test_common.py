"""The helpers both sides share: one answer per question, on the controller and on the host."""

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.common import (
    KiloError,
    check_interface_name,
    format_endpoint,
    is_public,
    parse_key,
    to_bool,
    to_int,
)
from ansible_collections.kilo.mesh.plugins.module_utils.nodes import split_endpoint

KEY = "pH6kVJ4JzgnvbgXDd9OHnNAL6dXoHc8R8zZGtmLx4ls="


def test_error_names_subject_and_field():
    e = KiloError("not a boolean", "host 'a'", "kilo_leader")
    assert str(e) == "host 'a': kilo_leader: not a boolean"
    assert str(KiloError("boom", field="x").about("host 'b'")) == "host 'b': x: boom"
    assert KiloError("boom", "node 'c'").about("host 'b'").subject == "node 'c'"


@pytest.mark.parametrize(
    "value, expected",
    [
        (True, True),
        ("yes", True),
        ("On", True),
        (1, True),
        ("1", True),
        (False, False),
        ("no", False),
        ("off", False),
        (0, False),
        ("0", False),
        (None, False),
        ("", False),
        ("  ", False),
    ],
)
def test_booleans(value, expected):
    assert to_bool(value) is expected


def test_empty_boolean_takes_the_callers_default_and_junk_is_named():
    assert to_bool("", default=True) is True and to_bool(None, default=True) is True
    with pytest.raises(KiloError, match="host 'a': kilo_leader: 'maybe' is not a boolean"):
        to_bool("maybe", "host 'a'", "kilo_leader")


def test_integers():
    assert (
        to_int("25") == 25 and to_int(3.0) == 3 and to_int("") == 0 and to_int(None, default=7) == 7
    )
    for bad in (True, "x", 2.5):
        with pytest.raises(KiloError):
            to_int(bad)
    with pytest.raises(KiloError, match="70000 out of range 1-65535"):
        to_int(70000, low=1, high=65535)


@pytest.mark.parametrize("name", ["kilo%0", "a/b", "a:b", "a b", "", ".", "..", "x" * 16, None])
def test_interface_names_the_kernel_refuses(name):
    # one check for both sides: the controller used to accept kilo%, the host refused it
    with pytest.raises(KiloError):
        check_interface_name(name)


def test_interface_names_accepted():
    for name in ("kilo0", "wg-mesh.1", "x" * 15):
        assert check_interface_name(name) == name


def test_endpoints():
    assert split_endpoint("203.0.113.1:51820") == ("203.0.113.1", 51820)
    assert split_endpoint(" [2001:db8::1]:1 ") == ("2001:db8::1", 1)
    assert split_endpoint("edge.example:9") == ("edge.example", 9)
    for bad, why in (
        ("2001:db8::1:51820", "not host:port"),
        ("[::1]51820", "not \\[IPv6\\]:port"),
        ("a:0", "out of range"),
        ("a:x", "not a number"),
        (None, "not host:port"),
    ):
        with pytest.raises(KiloError, match=why):
            split_endpoint(bad)
    assert format_endpoint("2001:db8::1", 5) == "[2001:db8::1]:5"
    assert format_endpoint("[2001:db8::1]", 5) == "[2001:db8::1]:5"
    assert format_endpoint("203.0.113.1", 5) == "203.0.113.1:5"
    assert format_endpoint("edge.example", 5) == "edge.example:5"


def test_keys_are_canonical():
    assert parse_key(" %s " % KEY) == KEY
    assert parse_key(None, required=False) is None
    for bad, why in (
        (None, "missing"),
        ("abc", "not valid base64"),
        ("QUJD", "decodes to 3 bytes"),
    ):
        with pytest.raises(KiloError, match=why):
            parse_key(bad)


@pytest.mark.parametrize(
    "ip, public",
    [
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("172.31.255.1", False),
        ("172.32.0.1", True),
        ("192.168.1.1", False),
        ("198.18.0.1", True),
        ("100.64.0.1", True),
        ("127.0.0.1", True),
        ("fd00::1", False),
        ("fd01::1", True),
        ("fc00::1", True),
        ("2001:db8::1", True),
        (None, False),
    ],
)
def test_public_is_kilos_test(ip, public):
    # Kilo's own rule, loopback and 198.18/15 included (its discovery counts them as public)
    assert is_public(ip) is public


def test_one_command_runner_for_text_bytes_missing_commands_and_timeouts():
    from ansible_collections.kilo.mesh.plugins.module_utils.common import run_checked, run_command

    assert run_command(["cat"], "a\n") == (0, "a\n", "")
    assert run_command(["cat"], b"\x00\xff", text=False) == (0, b"\x00\xff", b"")
    assert run_command(["cat"]) == (0, "", "")  # no input: /dev/null, never the caller's stdin
    rc, out, err = run_command(["/nonexistent/kilo-tool"])
    assert rc == 127 and out == "" and "kilo-tool" in err
    rc, out, err = run_command(["sleep", "5"], timeout=0.2, text=False)
    assert rc == 124 and out == b"" and b"still running after 0.2 s" in err
    with pytest.raises(KiloError) as e:
        run_checked(["sh", "-c", "echo no >&2; exit 3"], field="f")
    assert str(e.value) == "f: sh -c echo no >&2; exit 3 failed (rc 3): no"
    with pytest.raises(KiloError, match="cannot run /nonexistent/kilo-tool: .*is it installed"):
        run_checked(["/nonexistent/kilo-tool"])
    assert run_checked(["sh", "-c", "exit 1"], ok_codes=(0, 1))[0] == 1
