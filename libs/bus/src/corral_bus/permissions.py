"""Who may publish and subscribe to what on the bus: the one source of truth, per NATS user.

The issue-19 probe showed why: on an open NATS, anyone could publish a command under any service's
name, or an object event the decision services believe. Here every corral component is a NATS user
whose permissions allow exactly its job, and everything else is denied by the server:

* `watcher`: publishes object events (`lh.obj.>`) and the dead letters of objects it cannot decode
  (`lh.dead.lh_objects.>`); reads LH_OBJECTS (what it published before a restart).
* a decision service `<s>`: publishes its own commands (`lh.cmd.<s>.>`) and its own lease key
  (`$KV.corral-leases.<s>`); reads LH_OBJECTS and LH_RESULTS (consumers, and message get for a
  takeover's catch-up), LH_COMMANDS by message get (the backlog of its own commands), and
  subscribes to its own command subjects (the live feed).
* `actuator`: consumes LH_COMMANDS through its durable consumer (acks, message get and delete to
  park a message that exhausted its deliveries), and the max-deliveries advisories of it; publishes
  results (`lh.res.>`) and dead letters (`lh.dead.>`), and its own lease key.
* each lease user (the decision services, the actuator) also answers on its replicas' liveness
  subjects and asks them (`corral.lease.<itself>.*`, corral_bus.liveness): a standby finds out that
  the holder's connection is gone without waiting for the TTL. The answer goes to the asking
  replica's inbox, `_INBOX.<itself>.>`: the same user, so a replica may reach its siblings' inboxes
  but never another user's (it could write their shared lease key anyway).
* `reader` (the CLI's `progress`, `events`, `replay`; the demo): reads every stream, LH_HISTORY
  included, creates consumers only where that takes nothing away (never on the work queue
  LH_COMMANDS) and only under its own few names (`consumer_names`: at most `READER_CONSUMERS` per
  stream), never acks, never publishes a message anywhere.
* `admin`: everything: the setup step (`corral bus init`) that creates the streams and the lease
  bucket. No service runs as admin, so no service can create, change or delete a stream.

LH_HISTORY (corral_bus.history) has no subjects: JetStream fills it from the other streams, so no
user can publish into it, and only `admin` may update, purge, delete it or a message of it.

Every component's start-up gate asks the actuator for its Kubernetes Events under one unfenced
service name, `upgrade-gate` (`lh.cmd.upgrade-gate.event.>`): the gate runs before a decision
service holds its lease, so its Events carry no lease term, and a separate name lets the policy fence
every decision service's own commands (deploy/policy/actuator-policy.yaml). That subject can only
ever create an Event.

JetStream is driven through subjects too, so the allow-lists name its API exactly: each user may
reach `$JS.API.*` only for the streams and operations above (`$JS.API.CONSUMER.CREATE.<stream>`,
`$JS.API.STREAM.INFO.<stream>`, `$JS.API.DIRECT.GET.<stream>`, `$JS.ACK.<stream>.>` …), and its
replies come to its own inbox prefix (`_INBOX.<user>.>`, corral_bus.auth), the only inbox it may
subscribe to.

`render_server_config` turns this table into a nats-server configuration (`deploy/nats/` holds it
rendered with passwords from the environment, for the chart and compose; `corral run` and the tests
render it with generated passwords).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from corral_bus.auth import inbox_prefix
from corral_bus.liveness import LIVENESS_PREFIX
from corral_model import subjects

ADMIN = "admin"
READER = "reader"
WATCHER = "watcher"
ACTUATOR = "actuator"
DECISION_SERVICES = subjects.DECISION_SERVICES
USERS = (ADMIN, WATCHER, *DECISION_SERVICES, ACTUATOR, READER)
"""Every NATS user corral knows, one per component."""

READER_CONSUMERS = 8
"""Consumers the reader may hold at once per stream: a few CLI commands side by side (each holds
one or two while it reads), never thousands."""

GATE_SERVICE = subjects.GATE_SERVICE
LEASE_BUCKET = "corral-leases"
ACTUATOR_DURABLE = "actuator"
"""The actuator's durable consumer on LH_COMMANDS (corral_actuator.runner)."""
ADVISORY_PREFIX = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"

_API = "$JS.API"
_READ_STREAMS = (
    subjects.OBJECTS_STREAM,
    subjects.RESULTS_STREAM,
    subjects.DEAD_STREAM,
    subjects.HISTORY_STREAM,
)
"""Streams a reader may put consumers on (limits retention: a consumer takes nothing away)."""


@dataclass(frozen=True, slots=True)
class Permissions:
    """What one NATS user may publish and subscribe to (allow-lists; anything else is denied)."""

    user: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]

    def server_block(self) -> dict[str, object]:
        return {"publish": {"allow": list(self.publish)}, "subscribe": {"allow": list(self.subscribe)}}


def _stream_info(*streams: str) -> list[str]:
    return [f"{_API}.STREAM.INFO.{s}" for s in streams]


def _message_get(stream: str) -> list[str]:
    """Read single messages (or batches) by sequence or subject, without a consumer."""
    return [f"{_API}.STREAM.MSG.GET.{stream}", f"{_API}.DIRECT.GET.{stream}", f"{_API}.DIRECT.GET.{stream}.>"]


def _ephemeral_reads(stream: str) -> list[str]:
    """An unacknowledged ephemeral pull consumer (BootstrapReader, the CLI's readers): create it, pull,
    ask whether it still exists, delete it. Its name is random, so any consumer name is allowed."""
    return [
        f"{_API}.CONSUMER.CREATE.{stream}",
        f"{_API}.CONSUMER.CREATE.{stream}.>",
        f"{_API}.CONSUMER.MSG.NEXT.{stream}.*",
        f"{_API}.CONSUMER.INFO.{stream}.*",
        f"{_API}.CONSUMER.DELETE.{stream}.*",
    ]


def _named_reads(stream: str, names: Iterable[str]) -> list[str]:
    """The same, only under the consumer names given (corral_bus.read_consumers): at most that many
    such consumers can exist on the stream, whatever the client does."""
    out = []
    for name in names:
        out += [
            f"{_API}.CONSUMER.CREATE.{stream}.{name}",
            f"{_API}.CONSUMER.CREATE.{stream}.{name}.>",
            f"{_API}.CONSUMER.MSG.NEXT.{stream}.{name}",
            f"{_API}.CONSUMER.INFO.{stream}.{name}",
            f"{_API}.CONSUMER.DELETE.{stream}.{name}",
        ]
    return out


def consumer_names(user: str) -> tuple[str, ...] | None:
    """The only names `user` may give its consumers, or None where the server names them (the
    services: their consumers are few and their own code makes them). The reader is every
    operator's CLI credential: bounded, so no client holding it can pile up consumers."""
    if user == READER:
        return tuple(f"{READER}-{i}" for i in range(READER_CONSUMERS))
    return None


_READER_NAMES = consumer_names(READER) or ()


def _lease(service: str) -> tuple[list[str], list[str]]:
    """Hold the lease `service` (publish, subscribe): read the bucket, write only its own key; answer
    on its replicas' liveness subjects and ask them, the answers going to its own inbox."""
    kv_stream = f"KV_{LEASE_BUCKET}"
    liveness = f"{LIVENESS_PREFIX}.{subjects.escape_token(service)}.*"
    publish = [
        f"{_API}.STREAM.MSG.GET.{kv_stream}",
        f"{_API}.DIRECT.GET.{kv_stream}.$KV.{LEASE_BUCKET}.{service}",
        f"$KV.{LEASE_BUCKET}.{service}",
        liveness,
        f"{inbox_prefix(service)}.>",
    ]
    return publish, [liveness]


def _gate_events() -> list[str]:
    return [f"{subjects.COMMANDS_PREFIX}.{GATE_SERVICE}.event.>"]


def _common(user: str) -> tuple[list[str], list[str]]:
    """Every user: JetStream's account info, the streams' info (the start-up check that they are as
    the contract says, corral_bus.streams.check_streams), and its own inbox (the replies to its
    requests)."""
    streams = (*subjects.STREAMS, subjects.ADVISORIES_STREAM, subjects.HISTORY_STREAM, f"KV_{LEASE_BUCKET}")
    return [f"{_API}.INFO", *_stream_info(*streams)], [f"{inbox_prefix(user)}.>"]


def _watcher() -> Permissions:
    publish, subscribe = _common(WATCHER)
    publish += [
        f"{subjects.OBJECTS_PREFIX}.>",
        f"{subjects.DEAD_PREFIX}.{subjects.OBJECTS_STREAM.lower()}.>",
        *_gate_events(),
        *_ephemeral_reads(subjects.OBJECTS_STREAM),
        # The last message of one object's subject, from the stream leader: how the publisher
        # settles a "wrong last sequence" refusal (corral_watcher.conflicts).
        f"{_API}.STREAM.MSG.GET.{subjects.OBJECTS_STREAM}",
    ]
    return Permissions(WATCHER, tuple(publish), tuple(subscribe))


def _decision(service: str) -> Permissions:
    publish, subscribe = _common(service)
    own_commands = f"{subjects.COMMANDS_PREFIX}.{subjects.escape_token(service)}.>"
    lease_publish, lease_subscribe = _lease(service)
    publish += [
        own_commands,
        *_gate_events(),
        *lease_publish,
        *_ephemeral_reads(subjects.OBJECTS_STREAM),
        *_ephemeral_reads(subjects.RESULTS_STREAM),
        # Its own command stream only: it can neither read another sender's queued commands nor
        # touch their deduplication (subjects.COMMANDS_STREAM).
        *_message_get(subjects.command_stream(service)),
        # A takeover's catch-up: where LH_OBJECTS and its own results end (last message per subject).
        *_message_get(subjects.OBJECTS_STREAM),
        *_message_get(subjects.RESULTS_STREAM),
    ]
    subscribe += [own_commands, *lease_subscribe]
    return Permissions(service, tuple(publish), tuple(subscribe))


def _actuator() -> Permissions:
    publish, subscribe = _common(ACTUATOR)
    lease_publish, lease_subscribe = _lease(ACTUATOR)
    publish += [
        f"{subjects.RESULTS_PREFIX}.>",
        f"{subjects.DEAD_PREFIX}.>",
        *_gate_events(),
        *lease_publish,
    ]
    subscribe += lease_subscribe
    for commands in subjects.COMMAND_STREAMS:
        publish += _work_queue_consumer(commands)
        subscribe.append(f"{ADVISORY_PREFIX}.{commands}.{ACTUATOR_DURABLE}")
    return Permissions(ACTUATOR, tuple(publish), tuple(subscribe))


def _work_queue_consumer(commands: str) -> list[str]:
    """The actuator's durable consumer on one command stream: create/update, pull, acks, and
    parking a message that exhausted its deliveries (read it, dead-letter it, delete it from the
    queue); and the durable record of that consumer's max-deliveries advisories."""
    durable = ACTUATOR_DURABLE
    advisories = subjects.ADVISORIES_STREAM
    advisory_durable = advisory_consumer(commands, durable)
    return [
        f"{_API}.CONSUMER.CREATE.{commands}.{durable}",
        f"{_API}.CONSUMER.CREATE.{commands}.{durable}.>",
        f"{_API}.CONSUMER.DURABLE.CREATE.{commands}.{durable}",
        f"{_API}.CONSUMER.MSG.NEXT.{commands}.{durable}",
        f"{_API}.CONSUMER.INFO.{commands}.{durable}",
        f"$JS.ACK.{commands}.{durable}.>",
        *_message_get(commands),
        f"{_API}.STREAM.MSG.DELETE.{commands}",
        f"{_API}.CONSUMER.CREATE.{advisories}.{advisory_durable}",
        f"{_API}.CONSUMER.CREATE.{advisories}.{advisory_durable}.>",
        f"{_API}.CONSUMER.DURABLE.CREATE.{advisories}.{advisory_durable}",
        f"{_API}.CONSUMER.MSG.NEXT.{advisories}.{advisory_durable}",
        f"{_API}.CONSUMER.INFO.{advisories}.{advisory_durable}",
        f"$JS.ACK.{advisories}.{advisory_durable}.>",
    ]


def advisory_consumer(stream: str, durable: str) -> str:
    """The durable consumer on LH_ADVISORIES that keeps `durable`'s advisories on `stream`: one
    per consumed stream, since the actuator's consumers share one name across its streams."""
    return f"{durable}_{stream}"


def _reader() -> Permissions:
    publish, subscribe = _common(READER)
    publish += [
        *(subject for stream in _READ_STREAMS for subject in _named_reads(stream, _READER_NAMES)),
        *(
            subject
            for stream in (*subjects.STREAMS, subjects.HISTORY_STREAM)
            for subject in _message_get(stream)
        ),
    ]
    # `events --follow` records commands whole from core NATS, and `events tail` watches everything.
    subscribe.append("lh.>")
    return Permissions(READER, tuple(publish), tuple(subscribe))


def _admin() -> Permissions:
    return Permissions(ADMIN, (">",), (">",))


def permissions_for(user: str) -> Permissions:
    """The permissions of `user` (one of USERS); ValueError for a user corral does not know."""
    if user == ADMIN:
        return _admin()
    if user == WATCHER:
        return _watcher()
    if user == ACTUATOR:
        return _actuator()
    if user == READER:
        return _reader()
    if user in DECISION_SERVICES:
        return _decision(user)
    raise ValueError(f"no NATS user {user!r}; corral's users are {', '.join(USERS)}")


def all_permissions(users: Iterable[str] = USERS) -> list[Permissions]:
    return [permissions_for(user) for user in users]


def env_password_variable(user: str) -> str:
    """The environment variable the rendered deploy config reads `user`'s password from."""
    return "CORRAL_NATS_PASSWORD_" + user.upper().replace("-", "_")


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """The parts of a nats-server configuration besides the users."""

    host: str = "0.0.0.0"
    port: int = 4222
    monitor_port: int = 8222
    """0: no monitoring endpoint at all. Otherwise bound to 127.0.0.1, never the public interface."""
    store_dir: str = "/data"
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    """With a CA, clients must present a certificate signed by it (mutual TLS)."""
    server_name: str = ""


def _value(value: object) -> str:
    """A value in nats-server's config syntax: JSON strings and lists are valid there."""
    return json.dumps(value)


def render_server_config(
    options: ServerOptions,
    passwords: Mapping[str, str] | None = None,
    users: Iterable[str] = USERS,
) -> str:
    """A nats-server configuration with JetStream, TLS when `options` has a certificate, the
    monitoring port on loopback only, and one user per component with its permissions.

    `passwords` maps users to their passwords; without it, each password is read by nats-server from
    the environment variable `env_password_variable(user)` (what a Secret provides), so the file
    itself holds no secret."""
    lines = [
        "# Rendered by corral_bus.permissions.render_server_config: edit that module, not this file.",
        f"listen: {_value(f'{options.host}:{options.port}')}",
    ]
    if options.server_name:
        lines.append(f"server_name: {_value(options.server_name)}")
    if options.monitor_port:
        lines.append(f"http: {_value(f'127.0.0.1:{options.monitor_port}')}")
    lines.append(f"jetstream {{ store_dir: {_value(options.store_dir)} }}")
    if options.tls_cert:
        tls = [f"  cert_file: {_value(options.tls_cert)}", f"  key_file: {_value(options.tls_key)}"]
        if options.tls_ca:
            tls += [f"  ca_file: {_value(options.tls_ca)}", "  verify: true"]
        lines += ["tls {", *tls, "}"]
    lines.append("authorization {")
    lines.append("  users: [")
    for permissions in all_permissions(users):
        if passwords is None:
            password = f"${env_password_variable(permissions.user)}"
        else:
            password = _value(passwords[permissions.user])
        block = permissions.server_block()
        lines.append(
            f"    {{user: {_value(permissions.user)}, password: {password},"
            f" permissions: {json.dumps(block, indent=None)}}}"
        )
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"
