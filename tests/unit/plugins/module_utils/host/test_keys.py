"""keys.py: key creation on disk, permissions, validation."""

import base64
import os
import stat

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.host import keys
from ansible_collections.kilo.mesh.plugins.module_utils.common import KiloError


def test_creates_key_0600_in_new_0700_dir(tmp_path):
    path = tmp_path / "kilo" / "key"
    old = os.umask(0o022)
    try:
        res = keys.ensure_key(str(path))
    finally:
        os.umask(old)
    assert res["changed"] is True
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(str(path.parent)).st_mode) == 0o700
    priv = path.read_text().strip()
    assert len(base64.b64decode(priv)) == 32 and priv.endswith("=")
    assert res["public_key"] == keys.public_key(priv)
    assert priv not in repr(res)
    # no temp file left behind
    assert os.listdir(str(path.parent)) == ["key"]


def test_existing_key_is_kept_and_idempotent(tmp_path):
    path = str(tmp_path / "key")
    first = keys.ensure_key(path)
    content = open(path).read()
    second = keys.ensure_key(path)
    assert second == {
        "public_key": first["public_key"],
        "changed": False,
        "msg": "key %s exists" % path,
    }
    assert open(path).read() == content


def test_loose_mode_is_tightened(tmp_path):
    path = str(tmp_path / "key")
    keys.ensure_key(path)
    os.chmod(path, 0o644)
    assert keys.ensure_key(path, check_mode=True)["changed"] is True
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # check mode touched nothing
    assert keys.ensure_key(path)["changed"] is True
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_check_mode_creates_nothing(tmp_path):
    path = tmp_path / "sub" / "key"
    res = keys.ensure_key(str(path), check_mode=True)
    # A stand-in public key lets the controller compute plans; nothing is written.
    assert res["pending"] is True and res["changed"] is True
    assert res["msg"] == "would create key %s" % path
    keys.validate_key(res["public_key"])
    assert not path.parent.exists()


def test_public_key_matches_known_vector():
    # RFC 7748 section 6.1: Alice's private and public key
    priv = bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    pub = bytes.fromhex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
    assert keys.public_key(base64.b64encode(priv).decode()) == base64.b64encode(pub).decode()


@pytest.mark.parametrize(
    "bad, needle",
    [
        ("", "missing"),
        ("abc", "not valid base64"),
        ("!" * 43 + "=", "not valid base64"),
        (base64.b64encode(b"x" * 31).decode(), "decodes to 31 bytes"),
        (12, "not a base64 WireGuard key"),
    ],
)
def test_validate_key_errors_name_the_field(bad, needle):
    with pytest.raises(KiloError) as e:
        keys.validate_key(bad, "peer 'p1'", "public_key")
    assert str(e.value).startswith("peer 'p1': public_key: ") and needle in str(e.value)


def test_validate_key_returns_raw_bytes():
    assert keys.validate_key(base64.b64encode(b"\x05" * 32).decode()) == b"\x05" * 32


def test_invalid_key_file_is_an_error_not_replaced(tmp_path):
    path = tmp_path / "key"
    path.write_text("not a key\n")
    with pytest.raises(keys.KeyFileError) as e:
        keys.ensure_key(str(path))
    assert isinstance(e.value, KiloError)
    assert str(path) in str(e.value) and "not a key" not in str(e.value)
    assert path.read_text() == "not a key\n"


def test_unreadable_or_unwritable_key_path_is_a_key_file_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    # the key's directory cannot be made: a file is in the way
    with pytest.raises(keys.KeyFileError) as e:
        keys.ensure_key(str(blocker / "sub" / "key"))
    assert str(blocker / "sub" / "key") in str(e.value)
    with pytest.raises(keys.KeyFileError) as e:
        keys.read_private_key(str(tmp_path / "missing"))
    assert "private key file %s" % (tmp_path / "missing") in str(e.value)


def test_key_file_error_never_shows_the_key(tmp_path):
    path = tmp_path / "key"
    short = base64.b64encode(b"s" * 31).decode()
    path.write_text(short + "\n")
    with pytest.raises(keys.KeyFileError) as e:
        keys.read_private_key(str(path))
    assert short not in str(e.value) and "decodes to 31 bytes" in str(e.value)


def test_x25519_matches_the_rfc_scalar_multiplication_vector():
    # RFC 7748 section 5.2, first vector: an arbitrary point, not the base point
    scalar = bytes.fromhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4")
    u = int.from_bytes(
        bytes.fromhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c"), "little"
    )
    out = bytes.fromhex("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552")
    assert keys._x25519(scalar, u) == out


def test_public_keys_agree_with_the_cryptography_library():
    # the controller's venv has cryptography; the host no longer needs it for keys
    x25519 = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.x25519")
    serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    for dummy in range(200):
        priv = keys.generate_private_key()
        raw = base64.b64decode(priv)
        assert raw[0] & 7 == 0 and raw[31] & 0xC0 == 0x40  # clamped, as wg genkey
        theirs = (
            x25519.X25519PrivateKey.from_private_bytes(raw)
            .public_key()
            .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        )
        assert keys.public_key(priv) == base64.b64encode(theirs).decode()
    unclamped = base64.b64encode(b"\xff" * 32).decode()  # a key file from elsewhere: clamped on use
    theirs = (
        x25519.X25519PrivateKey.from_private_bytes(b"\xff" * 32)
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    assert keys.public_key(unclamped) == base64.b64encode(theirs).decode()
