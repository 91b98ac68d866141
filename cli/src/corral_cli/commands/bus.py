"""`corral bus init` and `corral bus config`: the setup step of a locked-down NATS, and its config.

Where NATS enforces corral's users and permissions (corral_bus.permissions), no service may create
a stream, so `corral bus init` makes the contract's streams and the lease bucket as the `admin` user
before the services start (a Helm hook Job, a compose one-shot service; `corral run` does it itself).
It is idempotent and brings existing streams up to the contract. Credentials come from
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
import sys

DEFAULT_NATS = "nats://127.0.0.1:4222"


async def _init(url: str, timeout_s: float, replicas: int) -> None:
    from corral_bus import connect
    from corral_bus.auth import NatsAuth
    from corral_bus.setup import prepare_bus
    from corral_bus.streams import StreamSettings

    async with asyncio.timeout(timeout_s):
        bus = await connect(url, "corral-bus-init", auth=NatsAuth.from_env())
    try:
        await prepare_bus(bus, StreamSettings(replicas=replicas), attempts=20)
    finally:
        await bus.close()


def init(args: argparse.Namespace) -> int:
    from corral_bus.auth import redact_url

    try:
        asyncio.run(_init(args.nats, args.timeout, args.replicas))
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
