"""The admin password: scrypt hashes, policy, and an atomic mode-0600 password file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from appliance.auth.passwords import (
    DEFAULT_PARAMS,
    PasswordError,
    PasswordFileError,
    ScryptParams,
    check_password_file,
    hash_password,
    needs_rehash,
    read_password_file,
    verify_password,
    write_password_file,
)

FAST = ScryptParams(log2_n=10)  # keeps the tests quick; the default cost is checked once below


def test_default_hash_verifies_and_rejects_a_wrong_password() -> None:
    encoded = hash_password("correct horse battery")
    assert encoded.startswith("$scrypt$ln=15,r=8,p=1$")
    assert verify_password("correct horse battery", encoded)
    assert not verify_password("correct horse batterY", encoded)
    assert not needs_rehash(encoded)


def test_same_password_gets_a_new_salt_each_time() -> None:
    first, second = hash_password("same password 1", FAST), hash_password("same password 1", FAST)
    assert first != second
    assert verify_password("same password 1", first) and verify_password("same password 1", second)


def test_cheaper_old_hash_still_verifies_and_asks_for_a_rehash() -> None:
    encoded = hash_password("an older password", FAST)
    assert verify_password("an older password", encoded)
    assert needs_rehash(encoded, DEFAULT_PARAMS)


def test_password_file_is_private_and_replaced_atomically(tmp_path: Path) -> None:
    path = tmp_path / "state" / "admin-password"
    write_password_file(path, "first password!", FAST)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert check_password_file(path, "first password!")
    first_inode = path.stat().st_ino

    write_password_file(path, "second password!", FAST)
    assert path.stat().st_ino != first_inode  # a new file renamed over the old one
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert check_password_file(path, "second password!")
    assert not check_password_file(path, "first password!")
    assert [p.name for p in path.parent.iterdir()] == ["admin-password"]  # no temporary left behind
    assert "second password" not in path.read_text()


@pytest.mark.parametrize(
    ("password", "message"),
    [
        ("", "empty"),
        ("short", "has 5 characters; use at least 10"),
        (" padded password ", "starts or ends with a space"),
        ("x" * 2000, "longer than 1024"),
    ],
)
def test_weak_password_is_refused_with_the_rule(tmp_path: Path, password: str, message: str) -> None:
    with pytest.raises(PasswordError, match=message):
        write_password_file(tmp_path / "admin-password", password, FAST)
    assert not (tmp_path / "admin-password").exists()


@pytest.mark.parametrize(
    "content",
    [
        "",
        "plaintext-password",
        "$scrypt$ln=15,r=8$abc$def",
        "$scrypt$ln=99,r=8,p=1$YWJj$ZGVm",
        "$bcrypt$x$y$z",
    ],
)
def test_damaged_password_file_is_an_error_not_a_login(tmp_path: Path, content: str) -> None:
    path = tmp_path / "admin-password"
    path.write_text(content)
    with pytest.raises(PasswordFileError):
        check_password_file(path, "plaintext-password")


def test_missing_password_file_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(PasswordFileError, match="python -m provisioning set-password"):
        read_password_file(tmp_path / "admin-password")
