"""Service configuration from environment variables, typed by a msgspec Struct.

Services are deployed as containers whose only configuration channel is the environment, so every
setting is a field of a Struct and `CORRAL_<FIELD>` (upper case) sets it. Values arrive as strings;
msgspec's lax conversion turns them into ints, floats, bools and durations, and collections are read
as JSON (`[...]`/`{...}`) or, for lists and sets, as comma-separated items. Every problem names the
variable that caused it, and all problems are reported at once so an operator fixes them in one go.
A `CORRAL_*` variable that sets nothing (`CORRAL_MODEE=auto`) would otherwise be silently ignored,
so `unknown_variables` names each one with the setting it most resembles, for a warning at start.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

import msgspec

DEFAULT_NAMESPACE = "longhorn-system"

READ_ELSEWHERE = frozenset(
    {
        "CORRAL_KUBECONFIG",  # the kube client of the watcher and actuator
        "CORRAL_CRD_DIR",  # the sandbox emulator
        "CORRAL_NATS_CREDS",  # the CLI's read-only access
        "CORRAL_NATS_TOKEN",
        "CORRAL_PORT_FORWARD",
    }
)
"""`CORRAL_*` variables read by something other than a service's configuration Struct."""
READ_ELSEWHERE_PREFIXES = (
    "CORRAL_NATS_PASSWORD_",  # nats-server's own, one per user (corral_bus.permissions)
    "CORRAL_SANDBOX_",  # the sandbox and compose's
)

LogLevel = Literal["debug", "info", "warning", "error", "critical"]


class ServiceConfig(msgspec.Struct, kw_only=True, frozen=True):
    """What every corral service reads; services subclass it to add their own fields."""

    service: str = ""
    """Service name; the harness fills it from the name it runs when the environment leaves it empty."""
    instance: str = ""
    """This replica's identity as a lease holder; defaults to hostname-pid (the pod name in Kubernetes)."""
    nats_url: str = "nats://127.0.0.1:4222"
    """One server, or a cluster's servers comma-separated (`nats://a:4222,nats://b:4222`). Never with
    credentials in it (refused at start): those come from the nats_user/password fields below."""
    nats_replicas: Annotated[int, msgspec.Meta(ge=1, le=5)] = 1
    """Copies of each stream and of the lease bucket: 1 on one NATS server, 3 on a 3-server cluster
    (docs/nats-cluster.md). Every service of a deployment must be given the same value."""
    nats_ping_interval_s: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    """A NATS server that stops answering (frozen, partitioned) is left for another one of the
    cluster after three unanswered pings, so after about 3x this; shorter on a cluster."""
    nats_user: str = ""
    """This service's NATS user (corral_bus.permissions); empty: anonymous, for an open server."""
    nats_password_file: str = ""
    """A file holding the password (a mounted Secret); wins over `nats_password`."""
    nats_password: str = ""
    nats_tls_ca: str = ""
    """A CA bundle to verify the NATS server's certificate with (TLS on)."""
    nats_tls_cert: str = ""
    nats_tls_key: str = ""
    """A client certificate and its key, for a server that verifies clients."""
    namespace: str = DEFAULT_NAMESPACE
    health_host: str = "0.0.0.0"
    """Probes come from the kubelet, not from loopback, so listen on every interface by default."""
    health_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8080
    """Port of /livez, /readyz and /metrics; 0 picks a free one (tests, several services on one host)."""
    log_level: LogLevel = "info"
    lease_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    """A dead leader's lease expires after this long, so a standby takes over within it."""
    shutdown_grace_s: Annotated[float, msgspec.Meta(ge=0)] = 20.0
    """How long in-flight work may take to finish after SIGTERM before it is cancelled."""
    upgrade_gate: bool = True
    """Run the upgrade-path gate at start-up (services that declare one). Off only for tests and
    replays that feed a service a hand-made bus; the gate's own bypass is `upgrade_version_check`."""
    upgrade_version_check: bool = True
    """Longhorn's `--upgrade-version-check`: false skips the version rules (only from >= v1.4.0)."""
    upgrade_gate_wait_s: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    """How long the gate waits for a complete view of the version setting and engine images."""


ConfigT = TypeVar("ConfigT", bound=msgspec.Struct)


class ConfigError(ValueError):
    """The environment does not describe a valid configuration; `problems` lists each one."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))


def env_name(field: str, prefix: str = "CORRAL_") -> str:
    """The environment variable that sets `field`."""
    return f"{prefix}{field.upper()}"


def load_config(
    cls: type[ConfigT], prefix: str = "CORRAL_", environ: Mapping[str, str] | None = None
) -> ConfigT:
    """Build `cls` from `<prefix><FIELD>` variables, raising ConfigError naming every bad variable."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    problems: list[str] = []
    for field in msgspec.structs.fields(cls):
        var = env_name(field.name, prefix)
        if var not in env:
            if field.required:
                problems.append(f"{var} is required ({_describe(field.type)})")
            continue
        raw = env[var]
        try:
            values[field.name] = msgspec.convert(_parse(raw, field.type), field.type, strict=False)
        except (msgspec.ValidationError, ValueError) as exc:
            problems.append(f"{var}={raw!r}: {_strip_path(str(exc))}{_choices(field.type)}")
    if problems:
        raise ConfigError(problems)
    try:
        return msgspec.convert(values, cls, strict=False)
    except msgspec.ValidationError as exc:
        # Cross-field checks in __post_init__ land here; name the variable when msgspec knows it.
        raise ConfigError([_name_variable(str(exc), prefix)]) from exc


def unknown_variables(
    cls: type[msgspec.Struct], prefix: str = "CORRAL_", environ: Mapping[str, str] | None = None
) -> list[str]:
    """One message per `<prefix>*` variable that sets none of `cls`'s fields, naming the closest
    known one when there is one (a misspelling), else saying it is ignored."""
    env = os.environ if environ is None else environ
    known = {env_name(f.name, prefix) for f in msgspec.structs.fields(cls)}
    messages = []
    for var in sorted(env):
        if not var.startswith(prefix) or var in known or var in READ_ELSEWHERE:
            continue
        if var.startswith(READ_ELSEWHERE_PREFIXES):
            continue
        close = difflib.get_close_matches(var, sorted(known | READ_ELSEWHERE), n=1, cutoff=0.75)
        hint = f"did you mean {close[0]}?" if close else "it sets nothing here and is ignored"
        messages.append(f"{var} is not a setting of this service: {hint}")
    return messages


def _parse(raw: str, annotation: Any) -> Any:
    """Turn the raw string into the shape msgspec.convert expects for `annotation`."""
    shape = _shape(msgspec.inspect.type_info(annotation))
    text = raw.strip()
    if shape == "scalar":
        return raw
    if text.startswith(("[", "{")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from exc
    if shape == "sequence":
        return [item.strip() for item in text.split(",") if item.strip()]
    raise ValueError("expected a JSON object")


def _shape(info: msgspec.inspect.Type) -> str:
    if isinstance(info, msgspec.inspect.Metadata):
        return _shape(info.type)
    if isinstance(
        info,
        msgspec.inspect.ListType
        | msgspec.inspect.SetType
        | msgspec.inspect.FrozenSetType
        | msgspec.inspect.VarTupleType
        | msgspec.inspect.TupleType,
    ):
        return "sequence"
    if isinstance(
        info, msgspec.inspect.DictType | msgspec.inspect.StructType | msgspec.inspect.TypedDictType
    ):
        return "mapping"
    if isinstance(info, msgspec.inspect.UnionType):
        shapes = {_shape(t) for t in info.types if not isinstance(t, msgspec.inspect.NoneType)}
        return shapes.pop() if len(shapes) == 1 else "scalar"
    return "scalar"


def _choices(annotation: Any) -> str:
    info = msgspec.inspect.type_info(annotation)
    if isinstance(info, msgspec.inspect.LiteralType):
        return " (one of: " + ", ".join(str(v) for v in info.values) + ")"
    return ""


def _describe(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation)


def _strip_path(message: str) -> str:
    # The variable already says where; msgspec's "- at `$`" suffix would only confuse.
    return message.split(" - at `$`")[0]


def _name_variable(message: str, prefix: str) -> str:
    marker = " - at `$."
    if marker in message:
        text, _, path = message.partition(marker)
        field = path.rstrip("`").split(".")[0].split("[")[0]
        return f"{env_name(field, prefix)}: {text}"
    return message
