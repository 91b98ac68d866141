"""`corral bus init` and `corral bus config`: the setup step of a locked-down NATS, and its config.

Where NATS enforces corral's users and permissions (corral_bus.permissions), no service may create
a stream, so `corral bus init` makes the contract's streams and the lease bucket as the `admin` user
before the services start (a Helm hook Job, a compose one-shot service; `corral run` does it itself).
It is idempotent and brings existing streams up to the contract, LH_HISTORY's age and size
included (`--history-max-age`, `--history-max-bytes`: the one place they are set). Credentials come from
`CORRAL_NATS_USER` / `CORRAL_NATS_PASSWORD_FILE` (corral_bus.auth), never from the URL.

`corral bus config` prints the nats-server configuration rendered from the permissions table: with
passwords read by nats-server from `CORRAL_NATS_PASSWORD_<USER>` environment variables (what a
Secret provides), so the output holds no secret; `deploy/nats/nats-server.conf` is its output.

`corral bus passwords DIR` writes the passwords of docker-compose.yml (corral_cli.compose_secrets);
`corral bus passwords --kube-secret NAME` makes them as a Kubernetes Secret (the chart's bus-init
Job; corral_cli.kube_passwords), keeping every password already there.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corral_bus.streams import StreamSettings

DEFAULT_NATS = "nats://127.0.0.1:4222"
DEFAULT_HISTORY_AGE = "7d"
DEFAULT_HISTORY_SIZE = "1Gi"
"""corral_bus.history's defaults, spelt for the command line (a unit test keeps them equal)."""
_SPAN = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZE = re.compile(r"^(\d+)([KMGT]i?)?B?$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def duration(text: str) -> float:
    """Seconds from `7d`, `36h`, `90m`, `600s` or `600`."""
    found = _SPAN.match(text.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"not a duration (e.g. 7d, 36h, 600s): {text!r}")
    return float(found.group(1)) * _SECONDS[found.group(2)]


def size(text: str) -> int:
    """Bytes from `1Gi`, `512Mi`, `2G` (binary units, as Kubernetes quantities) or a plain number."""
    found = _SIZE.match(text.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"not a size (e.g. 1Gi, 512Mi, 1073741824): {text!r}")
    unit = 1 << (10 * _POWERS[(found.group(2) or "")[:1].lower()])
    return int(found.group(1)) * unit


async def _init(url: str, timeout_s: float, settings: StreamSettings) -> None:
    from corral_bus import connect
    from corral_bus.auth import NatsAuth
    from corral_bus.setup import prepare_bus

    async with asyncio.timeout(timeout_s):
        bus = await connect(url, "corral-bus-init", auth=NatsAuth.from_env())
    try:
        await prepare_bus(bus, settings, attempts=20)
    finally:
        await bus.close()


def init(args: argparse.Namespace) -> int:
    from corral_bus.auth import redact_url
    from corral_bus.streams import StreamSettings

    try:
        settings = StreamSettings(
            replicas=args.replicas,
            history_max_age=args.history_max_age,
            history_max_bytes=args.history_max_bytes,
        )
        asyncio.run(_init(args.nats, args.timeout, settings))
    except TimeoutError:
        print(
            f"corral bus init: NATS at {redact_url(args.nats)} did not answer in {args.timeout:g}s",
            file=sys.stderr,
        )
        return 1
    except Exception as error:
        print(f"corral bus init: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(f"corral bus init: streams and lease bucket ready on {redact_url(args.nats)}")
    return 0


def config(args: argparse.Namespace) -> int:
    from corral_bus.permissions import ServerOptions, render_server_config

    options = ServerOptions(
        port=args.port,
        monitor_port=args.monitor_port,
        store_dir=args.store_dir,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_ca=args.tls_ca,
    )
    sys.stdout.write(render_server_config(options))
    return 0


async def _kube_secret(namespace: str, name: str, labels: dict[str, str]) -> list[str]:
    from corral_cli.kube_passwords import ensure_password_secret
    from corral_kube.client import connected

    async with connected() as api:
        return await ensure_password_secret(api, namespace, name, labels)


def passwords(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.kube_secret:
        labels = dict(label.split("=", 1) for label in args.label)
        try:
            made = asyncio.run(_kube_secret(args.namespace, args.kube_secret, labels))
        except Exception as error:
            print(f"corral bus passwords: {type(error).__name__}: {error}", file=sys.stderr)
            return 1
        kept = "kept the others" if made else "every user's password was there"
        print(
            f"corral bus passwords: Secret {args.namespace}/{args.kube_secret}:"
            f" made {', '.join(made) or 'none'}; {kept}"
        )
        return 0
    if not args.directory:
        print("corral bus passwords: give a DIRECTORY or --kube-secret NAME", file=sys.stderr)
        return 2

    from corral_cli.compose_secrets import SERVER_ENV, write_compose_secrets

    users = write_compose_secrets(Path(args.directory))
    print(f"corral bus passwords: {len(users)} users in {args.directory} (nats-server's: {SERVER_ENV})")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("bus", help="set up a locked-down NATS: streams, server configuration")
    commands = parser.add_subparsers(dest="bus_command", required=True, metavar="SUBCOMMAND")
    setup = commands.add_parser("init", help="create or update the streams and the lease bucket (as admin)")
    setup.add_argument("--nats", default=DEFAULT_NATS, help="NATS URL, without credentials")
    setup.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for NATS")
    setup.add_argument(
        "--replicas",
        type=int,
        default=int(os.environ.get("CORRAL_NATS_REPLICAS") or 1),
        help="copies of each stream: 3 on a JetStream cluster, as the services' CORRAL_NATS_REPLICAS",
    )
    setup.add_argument(
        "--history-max-age",
        type=duration,
        default=duration(os.environ.get("CORRAL_HISTORY_MAX_AGE") or DEFAULT_HISTORY_AGE),
        metavar="AGE",
        help="how long LH_HISTORY keeps events, commands and results (CORRAL_HISTORY_MAX_AGE; default 7d)",
    )
    setup.add_argument(
        "--history-max-bytes",
        type=size,
        default=size(os.environ.get("CORRAL_HISTORY_MAX_BYTES") or DEFAULT_HISTORY_SIZE),
        metavar="SIZE",
        help="how large LH_HISTORY may grow, oldest first out (CORRAL_HISTORY_MAX_BYTES; default 1Gi)",
    )
    setup.set_defaults(func=init)
    render = commands.add_parser("config", help="print the nats-server configuration with corral's users")
    render.add_argument("--port", type=int, default=4222)
    render.add_argument("--monitor-port", type=int, default=8222, help="on 127.0.0.1; 0: none")
    render.add_argument("--store-dir", default="/data")
    render.add_argument("--tls-cert", default="", help="server certificate (TLS on)")
    render.add_argument("--tls-key", default="")
    render.add_argument("--tls-ca", default="", help="CA that client certificates must be signed by")
    render.set_defaults(func=config)
    secrets = commands.add_parser("passwords", help="write every NATS user's password for docker compose")
    secrets.add_argument(
        "directory", nargs="?", default="", help="where: one file per user and nats.env (never commit it)"
    )
    secrets.add_argument(
        "--kube-secret", default="", metavar="NAME", help="instead: a Kubernetes Secret, a key per user"
    )
    secrets.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "default"))
    secrets.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="on the Secret")
    secrets.set_defaults(func=passwords)
