"""The NATS passwords of docker-compose.yml, written once into a directory that is never committed.

Compose has no Secret generator, so `make compose-secrets` (`corral bus passwords DIR`) writes them:
one file per user (`DIR/<user>`, mounted as a compose secret into the one container that runs as
that user; readable by the containers' uid, in a directory only you may enter), and `DIR/nats.env`
with every `CORRAL_NATS_PASSWORD_<USER>` for the nats-server container (mode 0600). A password that
exists is kept, so containers already running go on connecting; a missing one is added (a new user).
Each starts with a letter: nats-server reads an environment value that looks like a number as one.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from corral_bus.permissions import USERS, env_password_variable

SERVER_ENV = "nats.env"


def _write(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    path.chmod(mode)


def write_compose_secrets(directory: Path) -> dict[str, str]:
    """Every user's password, generated where missing; returns them by user."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    passwords: dict[str, str] = {}
    for user in USERS:
        path = directory / user
        password = path.read_text().strip() if path.is_file() else ""
        if not password:
            password = "p" + secrets.token_hex(16)
        _write(path, password + "\n", 0o644)
        passwords[user] = password
    lines = [f"{env_password_variable(user)}={password}\n" for user, password in passwords.items()]
    _write(directory / SERVER_ENV, "".join(lines), 0o600)
    return passwords
