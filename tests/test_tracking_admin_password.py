"""The tracking server's login settings on disk (ssmax.tracking.auth.prepare), without a server:
where the admin's password comes from on each start, files only their owner reads, no
password in the config file. The server itself: test_tracking_server, test_tracking_logins."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssmax.tracking import auth

ENV = ("MLFLOW_AUTH_ADMIN_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY", "MLFLOW_AUTH_ADMIN_USERNAME")


@pytest.fixture(autouse=True)
def _no_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def test_first_start_makes_a_random_password_only_its_owner_reads(tmp_path: Path) -> None:
    first = auth.prepare(tmp_path, "EDIT")
    secret, key = tmp_path / auth.PASSWORD_FILE, tmp_path / auth.SECRET_KEY_FILE
    password = secret.read_text().strip()
    assert len(password) >= 24 and password != auth.LEGACY_PASSWORD
    assert secret.stat().st_mode & 0o777 == 0o600 and key.stat().st_mode & 0o777 == 0o600
    assert first.env[auth.ADMIN_PASSWORD_ENV] == password
    assert first.admin_password == f"in {secret} (made now, mode 600)"
    config = (tmp_path / auth.CONFIG_FILE).read_text()
    assert "default_permission = EDIT" in config and password not in config
    assert "admin_password" not in config
    again = auth.prepare(tmp_path, "READ")  # a restart: the same password and key
    assert again.env == first.env and again.admin_password == f"in {secret}"
    assert "default_permission = READ" in (tmp_path / auth.CONFIG_FILE).read_text()
    other = tmp_path / "other"
    other.mkdir()
    assert auth.prepare(other, "EDIT").env[auth.ADMIN_PASSWORD_ENV] != password  # random


def test_a_password_of_the_users_own_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLFLOW_AUTH_ADMIN_PASSWORD (MLflow's setting): the server reads it from the
    environment it inherits; nothing on disk holds it."""
    monkeypatch.setenv(auth.ADMIN_PASSWORD_ENV, "a-password-of-my-own")
    monkeypatch.setenv("MLFLOW_AUTH_ADMIN_USERNAME", "boss")
    logins = auth.prepare(tmp_path, "EDIT")
    assert auth.ADMIN_PASSWORD_ENV not in logins.env and logins.admin == "boss"
    assert logins.admin_password == "from $MLFLOW_AUTH_ADMIN_PASSWORD"
    assert not (tmp_path / auth.PASSWORD_FILE).exists()
    assert not any(b"a-password-of-my-own" in p.read_bytes() for p in tmp_path.iterdir())
    assert auth.bad_admin_password() is None


def test_an_admin_made_before_keeps_its_password(tmp_path: Path) -> None:
    """The users table exists but the password file is gone: no new password is made (MLflow
    would not give it to the admin that exists); the banner says so."""
    (tmp_path / auth.USERS_DB).write_bytes(b"")
    logins = auth.prepare(tmp_path, "EDIT")
    assert auth.ADMIN_PASSWORD_ENV not in logins.env
    assert not (tmp_path / auth.PASSWORD_FILE).exists()
    assert logins.admin_password.startswith("the one it was made with")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "::1", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert auth.is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "node01.cluster"])
def test_other_hosts(host: str) -> None:
    assert not auth.is_loopback(host)


def test_the_banner_hides_a_store_uris_password() -> None:
    from ssmax.tracking.server import hide_password

    uri = "postgresql://ml:s3cr3t@db.example:5432/mlflow"
    assert hide_password(uri) == "postgresql://ml:***@db.example:5432/mlflow"
    assert hide_password("sqlite:////srv/mlflow.db") == "sqlite:////srv/mlflow.db"
