"""keys.py: key creation on disk, permissions, validation."""
import base64
import os
import stat

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils import keys


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
    assert second == {"public_key": first["public_key"], "changed": False, "msg": "key %s exists" % path}
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


@pytest.mark.parametrize("bad, needle", [
    ("", "44 base64 characters"),
    ("abc", "44 base64 characters"),
    ("!" * 43 + "=", "not valid base64"),
    (base64.b64encode(b"x" * 31).decode(), "decodes to 31 bytes"),
    (12, "expected a base64 string"),
])
def test_validate_key_errors_name_the_field(bad, needle):
    with pytest.raises(keys.KeyError_) as e:
        keys.validate_key(bad, "peer p1: public_key")
    assert "peer p1: public_key" in str(e.value) and needle in str(e.value)


def test_invalid_key_file_is_an_error_not_replaced(tmp_path):
    path = tmp_path / "key"
    path.write_text("not a key\n")
    with pytest.raises(keys.KeyError_) as e:
        keys.ensure_key(str(path))
    assert str(path) in str(e.value)
    assert path.read_text() == "not a key\n"
