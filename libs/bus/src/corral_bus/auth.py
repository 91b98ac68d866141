"""Who a client is to NATS: its user, its password (from a file or the environment), TLS, its inbox.

NATS is not open (DESIGN.md, "Trust and failure"): each service connects as its own user, whose
permissions (corral_bus.permissions) say what it may publish and subscribe to. Credentials never
travel in the URL, where they would end up in logs, process lists and metrics labels; a URL that
carries a password is refused where a service starts (`check_url`, corral_runtime.service), and
every URL that is logged goes through `redact_url`.

Each user gets its own inbox prefix (`_INBOX.<user>`): JetStream answers every request (a pull, a
publish ack, a stream info) on the requester's inbox, so a user allowed to subscribe only to its
own prefix can never read another service's replies.

The environment (`CORRAL_NATS_*`, what a Kubernetes Secret or compose file provides):

* `CORRAL_NATS_USER`: the user (empty: connect anonymously, as an unauthenticated server allows);
* `CORRAL_NATS_PASSWORD_FILE`: a file holding the password (a mounted Secret), or
  `CORRAL_NATS_PASSWORD` itself;
* `CORRAL_NATS_TLS_CA`: a CA bundle to verify the server with (TLS on; `tls://` URLs turn it on too),
  `CORRAL_NATS_TLS_CERT` / `CORRAL_NATS_TLS_KEY`: a client certificate, where the server asks for one.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

INBOX_ROOT = "_INBOX"


class CredentialsError(ValueError):
    """The credentials configured cannot be used (a missing password file, a password in a URL)."""


def inbox_prefix(user: str) -> str:
    """The inbox prefix of `user`: its replies arrive under `<prefix>.>` and nowhere else."""
    return f"{INBOX_ROOT}.{user}" if user else INBOX_ROOT


def redact_url(url: str) -> str:
    """`url` without its userinfo (`nats://user:secret@host:4222` -> `nats://host:4222`), for logs."""
    out = []
    for one in url.split(","):
        parts = urlsplit(one.strip())
        if parts.username is None and parts.password is None:
            out.append(one.strip())
            continue
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        out.append(urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)))
    return ",".join(out)


def check_url(url: str) -> None:
    """Refuse a NATS URL that carries credentials: they belong in a file or the environment."""
    for one in url.split(","):
        parts = urlsplit(one.strip())
        if parts.username is not None or parts.password is not None:
            raise CredentialsError(
                f"the NATS URL {redact_url(one)!r} carries credentials; give them as CORRAL_NATS_USER and "
                "CORRAL_NATS_PASSWORD_FILE (or CORRAL_NATS_PASSWORD) instead"
            )


@dataclass(frozen=True, slots=True)
class NatsAuth:
    """How a client authenticates and encrypts. The default (all empty) is an anonymous client."""

    user: str = ""
    password: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""

    def __repr__(self) -> str:  # never print the password, whoever logs this object
        return f"NatsAuth(user={self.user!r}, tls={bool(self.tls_ca)})"

    @property
    def inbox_prefix(self) -> str:
        return inbox_prefix(self.user)

    def tls_context(self) -> ssl.SSLContext | None:
        """A context verifying the server against `tls_ca` (None when no CA is configured)."""
        if not self.tls_ca:
            return None
        context = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key or None)
        return context

    def connect_options(self) -> dict[str, object]:
        """The keyword arguments of `nats.connect` this identity adds."""
        options: dict[str, object] = {}
        if self.user:
            options.update(user=self.user, password=self.password, inbox_prefix=self.inbox_prefix)
        context = self.tls_context()
        if context is not None:
            options["tls"] = context
        return options

    @classmethod
    def from_settings(
        cls,
        *,
        user: str = "",
        password: str = "",
        password_file: str = "",
        tls_ca: str = "",
        tls_cert: str = "",
        tls_key: str = "",
    ) -> NatsAuth:
        """From the configuration's fields; a password file wins over a password given inline."""
        if password_file:
            try:
                password = Path(password_file).read_text().strip()
            except OSError as e:
                raise CredentialsError(f"cannot read the NATS password file {password_file}: {e}") from e
        if user and not password:
            raise CredentialsError(f"NATS user {user!r} has no password (CORRAL_NATS_PASSWORD_FILE)")
        return cls(user=user, password=password, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> NatsAuth:
        """From `CORRAL_NATS_*` (see the module docstring): what the CLI's commands use."""
        env = os.environ if environ is None else environ
        return cls.from_settings(
            user=env.get("CORRAL_NATS_USER", ""),
            password=env.get("CORRAL_NATS_PASSWORD", ""),
            password_file=env.get("CORRAL_NATS_PASSWORD_FILE", ""),
            tls_ca=env.get("CORRAL_NATS_TLS_CA", ""),
            tls_cert=env.get("CORRAL_NATS_TLS_CERT", ""),
            tls_key=env.get("CORRAL_NATS_TLS_KEY", ""),
        )
