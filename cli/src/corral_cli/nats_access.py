"""How the commands that read a corral bus (`progress`, `events`, `replay --nats`) reach it from an
operator's desk, the `kubectl corral` plugin's way in: a NATS URL, credentials of a read-only NATS
user, or a `kubectl port-forward` the command runs itself. One set of options and one way of
connecting (`open_reader`) for all of them, so they take the same credentials and fail the same way:
once, saying why (NATS refusing the credentials is not retried: the same ones cannot succeed).

* `--nats-url URL` (`CORRAL_NATS_URL`; `--nats` is the same option).
* Credentials: `--nats-creds FILE` (`CORRAL_NATS_CREDS`, a NATS `.creds` file: JWT + nkey seed),
  or `--nats-user`/`--nats-password` (`CORRAL_NATS_USER`/`CORRAL_NATS_PASSWORD`, or the password
  from `--nats-password-file`/`CORRAL_NATS_PASSWORD_FILE`, a mounted Secret), or
  `--nats-token` (`CORRAL_NATS_TOKEN`). The CLI needs only a user that may read the streams
  (the read-only user of the chart's NATS configuration); it publishes nothing.
* `--port-forward [NAMESPACE/]SERVICE` (`CORRAL_PORT_FORWARD`): run `kubectl port-forward
  svc/SERVICE :4222` (local port chosen by kubectl), connect through it, stop it on exit. For a
  cluster whose NATS is not reachable from the desk; the operator's kubeconfig decides access.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
NATS_PORT = 4222
PORT_FORWARD_TIMEOUT_S = 30.0
_FORWARDING = re.compile(rb"Forwarding from (?:127\.0\.0\.1|\[::1\]|localhost):(\d+) ->")


class AccessError(Exception):
    """The bus cannot be reached the way the options say (printed to the operator as is)."""


_FROM_ENV = "from the environment"


def add_nats_options(parser: argparse.ArgumentParser, *, url_default: str | None = _FROM_ENV) -> None:
    """The options every bus-reading command takes. `url_default=None`: no URL unless given (a
    command that reads a bus only when asked, `replay`)."""
    env = os.environ.get
    default = env("CORRAL_NATS_URL", DEFAULT_NATS_URL) if url_default == _FROM_ENV else url_default
    parser.add_argument(
        "--nats-url",
        "--nats",
        dest="nats",
        default=default,
        metavar="URL",
        help=f"NATS URL (CORRAL_NATS_URL; e.g. {DEFAULT_NATS_URL})",
    )
    parser.add_argument(
        "--nats-creds",
        default=env("CORRAL_NATS_CREDS", ""),
        metavar="FILE",
        help="a read-only NATS user's credentials file (CORRAL_NATS_CREDS)",
    )
    parser.add_argument("--nats-user", default=env("CORRAL_NATS_USER", ""), help="(CORRAL_NATS_USER)")
    parser.add_argument(
        "--nats-password", default=env("CORRAL_NATS_PASSWORD", ""), help="(CORRAL_NATS_PASSWORD)"
    )
    parser.add_argument(
        "--nats-password-file",
        default=env("CORRAL_NATS_PASSWORD_FILE", ""),
        metavar="FILE",
        help="the password from a file, e.g. a mounted Secret (CORRAL_NATS_PASSWORD_FILE)",
    )
    parser.add_argument("--nats-token", default=env("CORRAL_NATS_TOKEN", ""), help="(CORRAL_NATS_TOKEN)")
    parser.add_argument(
        "--port-forward",
        default=env("CORRAL_PORT_FORWARD", ""),
        metavar="[NAMESPACE/]SERVICE",
        help="reach NATS through `kubectl port-forward svc/SERVICE` (CORRAL_PORT_FORWARD)",
    )


@dataclass(frozen=True)
class NatsAccess:
    url: str
    creds: str = ""
    port_forward: str = ""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> NatsAccess:
        """From `add_nats_options`' options; a parser that has only `--nats` gives a plain URL."""

        def option(name: str) -> str:
            return str(getattr(args, name, "") or "")

        password = option("nats_password")
        if not password and option("nats_password_file"):
            try:
                password = Path(option("nats_password_file")).read_text().strip()
            except OSError as error:
                raise AccessError(f"cannot read the NATS password file: {error}") from None
        url = with_userinfo(args.nats, option("nats_user"), password, option("nats_token"))
        creds = option("nats_creds")
        if creds and not Path(creds).is_file():
            raise AccessError(f"no NATS credentials file at {creds}")
        return cls(url=url, creds=creds, port_forward=option("port_forward"))

    @property
    def shown(self) -> str:
        """The URL without its secrets, for messages."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def auth_of(access: NatsAccess) -> Any:
    """The `corral_bus.auth.NatsAuth` (TLS from CORRAL_NATS_TLS_*) of the URL's user and password,
    for a command that connects through corral_bus itself (`demo`)."""
    from corral_bus.auth import NatsAuth

    parts = urlsplit(access.url)
    auth = NatsAuth.from_settings(
        tls_ca=os.environ.get("CORRAL_NATS_TLS_CA", ""),
        tls_cert=os.environ.get("CORRAL_NATS_TLS_CERT", ""),
        tls_key=os.environ.get("CORRAL_NATS_TLS_KEY", ""),
    )
    if parts.username:
        auth = dataclasses.replace(auth, user=unquote(parts.username), password=unquote(parts.password or ""))
    return auth


def access_shown(args: argparse.Namespace) -> str:
    """The URL the options name, without secrets (for a message before any connection)."""
    return NatsAccess(url=args.nats).shown


def with_userinfo(url: str, user: str, password: str, token: str) -> str:
    """`url` carrying the user and password (or the token) the NATS client sends on connect."""
    if not (user or token):
        return url
    parts = urlsplit(url)
    secret = (
        quote(token, safe="")
        if token
        else quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
    )
    host = parts.hostname or "127.0.0.1"
    netloc = f"{secret}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme or "nats", netloc, parts.path, parts.query, parts.fragment))


def forwarded(url: str, port: int) -> str:
    """`url` pointed at the local end of a port-forward (its credentials kept)."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = (f"{userinfo}@" if userinfo else "") + f"127.0.0.1:{port}"
    return urlunsplit((parts.scheme or "nats", netloc, parts.path, parts.query, parts.fragment))


@contextlib.asynccontextmanager
async def port_forward(target: str) -> AsyncIterator[int]:
    """Run `kubectl port-forward` to `[NAMESPACE/]SERVICE`'s NATS port; yields the local port."""
    kubectl = shutil.which(os.environ.get("KUBECTL", "kubectl"))
    if kubectl is None:
        raise AccessError("--port-forward needs kubectl on PATH (or KUBECTL)")
    namespace, _, service = target.rpartition("/")
    argv = [kubectl, "port-forward", f"svc/{service}", f":{NATS_PORT}"]
    if namespace:
        argv[1:1] = ["--namespace", namespace]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        port = await _local_port(proc, target)
        yield port
    finally:
        if proc.returncode is None:
            proc.terminate()
            with contextlib.suppress(TimeoutError, ProcessLookupError):
                async with asyncio.timeout(5):
                    await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def _local_port(proc: asyncio.subprocess.Process, target: str) -> int:
    assert proc.stdout is not None and proc.stderr is not None
    try:
        async with asyncio.timeout(PORT_FORWARD_TIMEOUT_S):
            while line := await proc.stdout.readline():
                found = _FORWARDING.search(line)
                if found:
                    return int(found.group(1))
    except TimeoutError:
        raise AccessError(
            f"kubectl port-forward to {target} did not start in {PORT_FORWARD_TIMEOUT_S:g} s"
        ) from None
    error = (await proc.stderr.read()).decode(errors="replace").strip()
    raise AccessError(f"kubectl port-forward to {target} failed: {error or 'it exited'}")


async def open_reader(
    stack: contextlib.AsyncExitStack[Any], access: NatsAccess, name: str, timeout_s: float
) -> tuple[Any, str]:
    """`reader` entered on `stack` within `timeout_s`; every way it can fail is one AccessError
    whose message says what happened and what to do."""
    from corral_bus import NotAuthorized

    try:
        async with asyncio.timeout(timeout_s):
            opened: tuple[Any, str] = await stack.enter_async_context(reader(access, name))
            return opened
    except NotAuthorized as error:
        raise AccessError(refused(access, error)) from None
    except TimeoutError:
        raise AccessError(f"cannot reach NATS at {access.shown}: no answer in {timeout_s:g} s") from None
    except OSError as error:
        raise AccessError(f"cannot reach NATS at {access.shown}: {error}") from None


def refused(access: NatsAccess, error: Exception) -> str:
    """What to say when NATS refuses the credentials."""
    user = unquote(urlsplit(access.url).username or "")
    given = (
        f"the credentials file {access.creds}"
        if access.creds
        else f"user {user!r}"
        if user
        else "no credentials"
    )
    return (
        f"NATS at {access.shown} refused {given} ({error.__cause__ or error}). Give a read-only user's:"
        " --nats-user reader --nats-password … (CORRAL_NATS_USER, CORRAL_NATS_PASSWORD), or --nats-creds FILE"
    )


async def connect_reader(access: NatsAccess, name: str, **options: Any) -> Any:
    """A `corral_bus.Bus` for reading, with the credentials file when one is given. A user and
    password connect as that NATS user (corral_bus.auth: its own reply inbox, which is all the
    read-only user may subscribe to besides the streams, and TLS from CORRAL_NATS_TLS_*)."""
    from corral_bus import connect
    from corral_bus.auth import NatsAuth

    if not access.creds:
        parts = urlsplit(access.url)
        if parts.username and parts.password is not None:
            auth = dataclasses.replace(
                NatsAuth.from_env(), user=unquote(parts.username), password=unquote(parts.password)
            )
            return await connect(access.shown, name, auth=auth, refused_is_final=True, **options)
        return await connect(access.url, name, refused_is_final=True, **options)
    import nats

    from corral_bus import Bus, NotAuthorized

    connected = False

    async def on_error(error: Exception) -> None:
        if not connected and "authorization violation" in str(error).lower():
            raise NotAuthorized(str(error)) from error  # ends nats-py's first-connect loop

    nc = await nats.connect(
        servers=[access.url],
        name=name,
        user_credentials=access.creds,
        error_cb=on_error,
        allow_reconnect=True,
        max_reconnect_attempts=options.get("max_reconnect_attempts", -1),
    )
    connected = True
    bus = Bus(nc=nc, js=nc.jetstream(), name=name)
    bus.connected.set()
    return bus


@contextlib.asynccontextmanager
async def reader(access: NatsAccess, name: str) -> AsyncIterator[tuple[Any, str]]:
    """Connect as `access` says (through a port-forward when asked); yields (bus, URL shown)."""
    async with contextlib.AsyncExitStack() as stack:
        if access.port_forward:
            port = await stack.enter_async_context(port_forward(access.port_forward))
            access = NatsAccess(url=forwarded(access.url, port), creds=access.creds)
        bus = await connect_reader(access, name, max_reconnect_attempts=-1)
        stack.push_async_callback(bus.close)
        yield bus, access.shown
