"""The NATS server of `corral run`, locked down as in production: one user per component.

`corral run` starts nats-server from a configuration rendered by `corral_bus.permissions` (the
single source of who may publish and subscribe to what), with a password per user generated on the
first run and kept under `<run-dir>/nats-auth/` (mode 0700; one `<user>.password` file each, mode
0600), so a restarted NATS or a second run accepts the same clients. Services get their user and
password file in the environment (`CORRAL_NATS_USER`, `CORRAL_NATS_PASSWORD_FILE`), never in the URL;
the CLI's read-only commands run as `reader`; the setup step (`corral bus init`) runs as `admin`
before any service starts. The monitoring port listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

from corral_bus.auth import NatsAuth
from corral_bus.permissions import ADMIN, READER, USERS, ServerOptions, render_server_config


class RunNatsAuth:
    """The users, passwords and server configuration of one run directory."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir / "nats-auth"

    def password_file(self, user: str) -> Path:
        return self.dir / f"{user}.password"

    def passwords(self) -> dict[str, str]:
        """Every user's password, generated (and written, 0600) where missing."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        out = {}
        for user in USERS:
            path = self.password_file(user)
            if not path.is_file() or not path.read_text().strip():
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as handle:
                    handle.write(secrets.token_urlsafe(24))
            out[user] = path.read_text().strip()
        return out

    def write_config(self, options: ServerOptions) -> Path:
        config = self.dir / "nats.conf"
        text = render_server_config(options, self.passwords())
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        return config

    def env(self, user: str) -> dict[str, str]:
        """The environment a client needs to connect as `user` (nothing for a user corral lacks)."""
        if user not in USERS:
            return {}
        return {"CORRAL_NATS_USER": user, "CORRAL_NATS_PASSWORD_FILE": str(self.password_file(user))}

    def cli_env(self, user: str) -> dict[str, str]:
        """The environment of a CLI child (`corral replay`): `CORRAL_NATS_USER` and `CORRAL_NATS_PASSWORD`,
        what every CLI command reads (a child's environment, never a URL or an argument)."""
        return {"CORRAL_NATS_USER": user, "CORRAL_NATS_PASSWORD": self.passwords()[user]}

    def auth(self, user: str) -> NatsAuth:
        return NatsAuth.from_settings(user=user, password_file=str(self.password_file(user)))

    def reader_hint(self) -> str:
        return f"CORRAL_NATS_USER={READER} CORRAL_NATS_PASSWORD=$(cat {self.password_file(READER)})"

    def prepare(self, url: str) -> bool:
        """The setup step as `admin` (corral_bus.setup.prepare_bus); False while NATS cannot do it yet."""
        from corral_bus import connect
        from corral_bus.setup import prepare_bus

        async def once() -> None:
            async with asyncio.timeout(10):
                bus = await connect(url, "corral-run-setup", auth=self.auth(ADMIN), max_reconnect_attempts=0)
            try:
                await prepare_bus(bus, attempts=20)
            finally:
                await bus.close()

        try:
            asyncio.run(once())
        except Exception:
            return False
        return True
