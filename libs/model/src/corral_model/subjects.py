"""Subject and stream names of the bus contract (DESIGN.md), and the escaping of names in them.

NATS subject tokens cannot contain '.', '*', '>' or whitespace, but Kubernetes names can contain
dots (node names are often FQDNs). Names are escaped reversibly so that one object is always one
subject, which deliver-last-per-subject and the per-subject history limit rely on.
"""

from __future__ import annotations

OBJECTS_STREAM = "LH_OBJECTS"
COMMANDS_STREAM = "LH_COMMANDS"
"""The commands as one whole, as bundles, the CLI and the documents name them. On the bus each
sender's commands have a work-queue stream of their own (`command_stream`): JetStream deduplicates
by `Nats-Msg-Id` per stream, so in one shared stream a service could suppress another's command by
publishing first under its id, and read every other service's queued commands."""
RESULTS_STREAM = "LH_RESULTS"
DEAD_STREAM = "LH_DEAD"
ADVISORIES_STREAM = "LH_ADVISORIES"
"""JetStream's max-deliveries advisories, kept: a message no consumer finished is parked even when
no replica was listening as the advisory went out."""
GATE_SERVICE = "upgrade-gate"
"""The service name every component's start-up gate asks for its Kubernetes Events under: the gate
runs before a decision service leads, so its Events carry no lease term; under a name of their own
they leave every decision service's own commands fenced (deploy/policy/actuator-policy.yaml)."""
DECISION_SERVICES = ("engine-upgrade", "setting-sync", "im-restart", "v2-upgrade")
"""The decision services the bus contract has a user and a command stream for. A literal, not read
from the `corral.deciders` entry points: the streams and users are the deployment's, whatever one
process has installed; tests/unit/test_service_registry.py checks the two agree."""
COMMAND_SENDERS = (*DECISION_SERVICES, GATE_SERVICE)
"""Every name commands are sent under, each with its own command stream."""


def command_stream(service: str) -> str:
    """The work-queue stream of `service`'s commands (`LH_COMMANDS_ENGINE_UPGRADE` ...)."""
    return f"{COMMANDS_STREAM}_{service.upper().replace('-', '_')}"


COMMAND_STREAMS = tuple(command_stream(service) for service in COMMAND_SENDERS)
STREAMS = (OBJECTS_STREAM, *COMMAND_STREAMS, RESULTS_STREAM, DEAD_STREAM)
"""The streams of the bus contract."""
HISTORY_STREAM = "LH_HISTORY"
"""Every object event, command and result for days, copied from the streams above by JetStream
itself (corral_bus.history): what `corral replay --since` replays."""

OBJECTS_PREFIX = "lh.obj"
COMMANDS_PREFIX = "lh.cmd"
RESULTS_PREFIX = "lh.res"
DEAD_PREFIX = "lh.dead"
HISTORY_PREFIX = "lh.hist"
"""A work-queue stream's messages as it republishes them into LH_HISTORY: `lh.hist.<subject>`."""
MAX_DELIVERIES_ADVISORY_PREFIX = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"

_ESCAPES = {"%": "%25", ".": "%2E", "*": "%2A", ">": "%3E", " ": "%20", "\t": "%09"}


def escape_token(text: str) -> str:
    if not text:
        return "_"
    if not any(c in text for c in _ESCAPES):
        return text
    return "".join(_ESCAPES.get(c, c) for c in text)


def unescape_token(token: str) -> str:
    if token == "_":
        return ""
    if "%" not in token:
        return token
    out = token
    for raw, esc in _ESCAPES.items():
        if raw != "%":
            out = out.replace(esc, raw)
    return out.replace("%25", "%")


def object_subject(kind_token: str, namespace: str, name: str) -> str:
    return f"{OBJECTS_PREFIX}.{kind_token}.{escape_token(namespace)}.{escape_token(name)}"


def resync_subject(kind_token: str, namespace: str) -> str:
    """RESYNCED markers get their own subject per kind, so the last one per kind survives."""
    return f"{OBJECTS_PREFIX}.{kind_token}.{escape_token(namespace)}._resync"


def command_subject(service: str, kind_token: str, namespace: str, name: str) -> str:
    return f"{COMMANDS_PREFIX}.{service}.{kind_token}.{escape_token(namespace)}.{escape_token(name)}"


def result_subject(service: str, kind_token: str, namespace: str, name: str) -> str:
    return f"{RESULTS_PREFIX}.{service}.{kind_token}.{escape_token(namespace)}.{escape_token(name)}"


def dead_subject(stream: str, reason_class: str) -> str:
    return f"{DEAD_PREFIX}.{stream.lower()}.{escape_token(reason_class)}"


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching (`*` one token, `>` the rest), as the server filters a consumer."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)
