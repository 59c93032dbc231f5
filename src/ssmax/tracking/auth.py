"""The tracking server's logins (`make mlflow-server`, on by default): MLflow's basic-auth app.

Its users table lives in the server's folder (basic_auth.db). The admin is made on the first
start with the password of MLFLOW_AUTH_ADMIN_PASSWORD or, when that is unset, a random one
written to <dir>/admin-password (mode 600, never printed): no server starts with a known
password. Clients log in through the environment (MLFLOW_TRACKING_USERNAME / _PASSWORD), never
through the config, which is logged and written to disk.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

ADMIN = "admin"
PASSWORD_FILE = "admin-password"
SECRET_KEY_FILE = "flask-secret-key"  # signs the UI's CSRF tokens; kept across restarts
SECRET_KEY_ENV = "MLFLOW_FLASK_SERVER_SECRET_KEY"
USERS_DB = "basic_auth.db"
CONFIG_FILE = "basic_auth.ini"
ADMIN_PASSWORD_ENV = "MLFLOW_AUTH_ADMIN_PASSWORD"  # MLflow's own setting
LEGACY_PASSWORD = "password1234"  # what older MLflow shipped; MLflow 3.17 refuses it too
MIN_PASSWORD = 12  # MLflow's rule for any user's password
# A choice: MLflow checks the password's hash (scrypt, ~0.1 s of server CPU) on every request
# unless a checked login is cached; a pipeline makes thousands of requests. 60 s is MLflow's
# own suggestion; a password changed through another worker may work that long.
LOGIN_CACHE_S = 60
PERMISSIONS = ("READ", "USE", "EDIT", "MANAGE", "NO_PERMISSIONS")


@dataclass
class Logins:
    env: dict[str, str] = field(default_factory=dict)  # for the server process only
    admin_password: str = ""  # where the admin's password is, in words (never the password)
    admin: str = ADMIN  # MLFLOW_AUTH_ADMIN_USERNAME, MLflow's setting, names another


def is_loopback(host: str) -> bool:
    """Whether only this machine reaches host (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_warning(
    host: str, port: int, remedy: str = "leave AUTH=off out to require a login"
) -> str:
    return (
        f"warning: serving without logins on {host}:{port}: whoever reaches this machine can "
        f"read, change and delete every run and model ({remedy})"
    )


def bad_admin_password() -> str | None:
    """One line when MLFLOW_AUTH_ADMIN_PASSWORD is set to what MLflow refuses, else None."""
    given = os.environ.get(ADMIN_PASSWORD_ENV)
    if given is None:
        return None
    if given == LEGACY_PASSWORD:
        return f"{ADMIN_PASSWORD_ENV}: MLflow's old default password is public; pick another"
    if len(given) < MIN_PASSWORD:
        return (f"{ADMIN_PASSWORD_ENV}: {len(given)} characters; MLflow takes "
                f"{MIN_PASSWORD} or more (or unset it: a random one is made)")  # fmt: skip
    return None


def write_secret(path: Path, text: str) -> None:
    """A new file only its owner reads (made with mode 600: never readable by others, even
    for a moment); it fails if path exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")


def kept_secret(path: Path) -> str:
    """The random secret in path, made now if there is none."""
    if not path.exists():
        write_secret(path, secrets.token_urlsafe(32))
    return path.read_text().strip()


def prepare(folder: Path, default_permission: str, login_cache_s: int = LOGIN_CACHE_S) -> Logins:
    """The server's login settings in folder: its config file (no password in it) and the
    admin's password (from MLFLOW_AUTH_ADMIN_PASSWORD, the password file, or made now)."""
    users = folder / USERS_DB
    config = folder / CONFIG_FILE
    config.write_text(
        "[mlflow]\n"
        f"default_permission = {default_permission}\n"
        f"database_uri = sqlite:///{users}\n"
        f"admin_username = {ADMIN}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        f"auth_cache_ttl_seconds = {login_cache_s}\n"
    )
    # a key of the user's own (several servers behind one name share it) or ours
    key = os.environ.get(SECRET_KEY_ENV) or kept_secret(folder / SECRET_KEY_FILE)
    logins = Logins({"MLFLOW_AUTH_CONFIG_PATH": str(config), SECRET_KEY_ENV: key})
    logins.admin = os.environ.get("MLFLOW_AUTH_ADMIN_USERNAME") or ADMIN
    secret = folder / PASSWORD_FILE
    if os.environ.get(ADMIN_PASSWORD_ENV) is not None:
        given = f"from ${ADMIN_PASSWORD_ENV}"
        logins.admin_password = "the one it was made with" if users.exists() else given
    elif secret.exists():
        logins.env[ADMIN_PASSWORD_ENV] = secret.read_text().strip()
        logins.admin_password = f"in {secret}"
    elif users.exists():  # the admin exists; MLflow reads no password for it any more
        logins.admin_password = f"the one it was made with ({secret} is gone)"
    else:
        password = secrets.token_urlsafe(24)
        write_secret(secret, password)
        logins.env[ADMIN_PASSWORD_ENV] = password
        logins.admin_password = f"in {secret} (made now, mode 600)"
    return logins
