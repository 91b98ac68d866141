"""The actuator's policy: which service may write which fields of which kinds, and nothing else.

Decision services hold no API credentials; the actuator writes for them, so it is where a buggy or
compromised decider is stopped. The policy is one declarative file (deploy/policy/
actuator-policy.yaml) read into typed Structs; `Policy.check` is pure: a command (plus the live
values of the settings a rule refers to) in, a verdict out. The RBAC rules of the actuator's
ServiceAccount are derived from the same file (`Policy.grants`), so the two cannot drift apart.

A rule says what may be written (kind, verbs, fields, and for objects known by name, which ones),
what the object must hold for the rule to apply at all (`require`, checked atomically on the
object), and which preconditions a command must carry (`preconditions`): a decider that leaves out
the test its decision rested on would turn a stale decision into a write, so such a command is
refused before anything is sent.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from corral_actuator.event_guard import event_refusal
from corral_actuator.kinds import KindInfo, resolve_kind
from corral_kube.patching import PointerError, describe_mismatch, first_not_holding, json_equal, tokens
from corral_model.envelopes import Command, FieldValue, Verb

POLICY_SCHEMA = "corral.actuator-policy/v2"

# Kinds whose writable objects a rule must name: workloads run privileged pods (and the actuator
# itself is a Deployment), so "any DaemonSet" is never a grant a decider needs.
NAMED_KINDS = frozenset({"daemonset", "deployment"})
# corral's own workloads (Deployments `corral-<service>`): no rule may name them.
OWN_PREFIX = "corral-"
# A workload rule that cannot name its objects (Longhorn names engine-image DaemonSets after an
# image hash) may instead give a `namePrefix`, but then only set these integer leaves of a probe
# and the pod template's scheduling fields that Longhorn's setting controller manages on every
# DaemonSet it labels `longhorn.io/managed-by` (§3.3 group A), never anything that could carry a
# command (`exec`), an image or a volume.
PROBE_LEAVES = frozenset({"periodSeconds", "timeoutSeconds", "failureThreshold"})
PREFIX_TEMPLATE_FIELDS = frozenset(
    {
        ("spec", "template", "spec", "tolerations"),
        ("spec", "template", "metadata", "annotations", "longhorn.io/last-applied-tolerations"),
        ("spec", "template", "spec", "priorityClassName"),
        ("spec", "template", "spec", "nodeSelector"),
    }
)


class PolicyError(ValueError):
    """The policy file itself is wrong: the actuator refuses to start rather than guess."""


class FieldRule(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    path: str
    # The new value must equal this Longhorn Setting's current value (read live by the actuator).
    value_from_setting: str | None = None
    # The new value must be a non-negative integer (a probe's seconds or threshold).
    integer: bool = False
    # The new value must be the one the command's own precondition on this path tests (a path the
    # rule requires a precondition on, so the write holds only while the object holds that value):
    # engine-upgrade's rollback sets spec.image only to the status.currentImage it tests.
    value_from_precondition: str | None = None
    # The change may only remove the field (a null value): engine-upgrade's upgrade of a volume it
    # once rolled back ends the hold the rollback set (its `rolled-back` annotation).
    remove_only: bool = False


class RequiredPrecondition(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """A precondition a command must carry: on `path`, with `value` when one is given."""

    path: str
    value: Any = msgspec.UNSET
    # A command may leave this precondition out only for an object whose field holds this value
    # (then enforced like `require`): engine-upgrade tests the owner node only when there is one.
    if_omitted: Any = msgspec.UNSET
    # The precondition's value must not be this Longhorn Setting's current value (read live):
    # v2-upgrade deletes an instance manager on the image it replaces, never on the one it installs.
    not_from_setting: str | None = None


class Rule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    kind: str
    verbs: tuple[Verb, ...]
    # The objects (by name) the rule covers; empty: any object of the kind. Also the RBAC's
    # resourceNames.
    names: tuple[str, ...] = ()
    # Instead of names, where the objects cannot be known in advance (see PROBE_LEAVES): the
    # target's name must start with this. RBAC cannot limit by prefix, so this grants by kind.
    name_prefix: str = msgspec.field(default="", name="namePrefix")
    fields: tuple[FieldRule, ...] = ()
    require: tuple[FieldValue, ...] = ()
    preconditions: tuple[RequiredPrecondition, ...] = ()


class ServicePolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # Refuse this service's commands without a lease term (term 0); see fencing.py.
    fenced: bool = False
    # Whether the document's `common` rules apply to this service as well; false for one whose own
    # rules say more narrowly what it may do there (v2-upgrade: Events about its own CRs only).
    common: bool = True
    rules: tuple[Rule, ...] = ()


class Read(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Something the actuator reads for itself (RBAC only; commands never ask for reads)."""

    kind: str
    verbs: tuple[Literal["get", "list", "watch"], ...]


class PolicyDocument(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    schema: str
    namespaces: tuple[str, ...]
    common: tuple[Rule, ...] = ()
    reads: tuple[Read, ...] = ()
    services: dict[str, ServicePolicy] = {}


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    allowed: bool
    reason: str = ""
    # Fields the object must hold for the write to apply (the matched rule's `require`).
    guards: tuple[FieldValue, ...] = ()
    kind: KindInfo | None = None


def _deny(reason: str) -> Verdict:
    return Verdict(allowed=False, reason=reason)


def _covers(rule_parts: tuple[str, ...], change_parts: tuple[str, ...]) -> bool:
    if len(change_parts) < len(rule_parts):
        return False
    if "*" not in rule_parts:  # most rules: a plain prefix, compared without a generator
        return change_parts[: len(rule_parts)] == rule_parts
    return all(r in ("*", c) for r, c in zip(rule_parts, change_parts, strict=False))


Tested = Mapping[tuple[str, ...], list[FieldValue]]
"""A command's preconditions by the path they test (its tokens), in the command's order."""


class _CompiledRule:
    """A rule with its pointers split once, when the policy is loaded, not once per command."""

    __slots__ = ("fields", "info", "preconditions", "rule")

    def __init__(self, rule: Rule, info: KindInfo) -> None:
        self.rule = rule
        self.info = info
        self.fields = [(tokens(f.path), f) for f in rule.fields]
        self.preconditions: list[tuple[tuple[str, ...], RequiredPrecondition]] = []


class Policy:
    """A checked policy document, indexed by (service, kind token)."""

    def __init__(self, document: PolicyDocument) -> None:
        if document.schema != POLICY_SCHEMA:
            raise PolicyError(f"policy schema {document.schema!r} is not {POLICY_SCHEMA}")
        if not document.namespaces:
            raise PolicyError("policy names no namespace the actuator may write in")
        self.document = document
        self.namespaces = frozenset(document.namespaces)
        for read in document.reads:
            info = resolve_kind(read.kind)
            if info is None or info.token != read.kind:
                raise PolicyError(f"reads: unknown kind token {read.kind!r}")
        self._rules: dict[str, dict[str, list[_CompiledRule]]] = {}
        for service, service_policy in document.services.items():
            index: dict[str, list[_CompiledRule]] = {}
            common = document.common if service_policy.common else ()
            for rule in (*common, *service_policy.rules):
                compiled = self._compile(service, rule)
                index.setdefault(compiled.info.token, []).append(compiled)
            self._rules[service] = index
        # The rules a (service, kind as the target names it, verb) may match: found once each.
        self._matching: dict[tuple[str, str, Verb], tuple[KindInfo | None, list[_CompiledRule]]] = {}
        # The kinds each service writes besides Events: the objects its Events may be about.
        self._commanded_kinds = {
            service: frozenset(rules[0].info.kind for rules in index.values()) - {"Event"}
            for service, index in self._rules.items()
        }

    @staticmethod
    def _compile(service: str, rule: Rule) -> _CompiledRule:
        where = f"service {service!r}, kind {rule.kind!r}"
        info = resolve_kind(rule.kind)
        if info is None or info.token != rule.kind:
            raise PolicyError(f"{where}: unknown kind token")
        if not rule.verbs:
            raise PolicyError(f"{where}: no verbs")
        try:
            compiled = _CompiledRule(rule, info)
            for path in (r.path for r in rule.require):
                tokens(path)
            compiled.preconditions = [(tokens(r.path), r) for r in rule.preconditions]
        except PointerError as e:
            raise PolicyError(f"{where}: {e}") from e
        required_paths = {tokens(r.path) for r in rule.preconditions if r.if_omitted is msgspec.UNSET}
        for _, field in compiled.fields:
            source = field.value_from_precondition
            if source is not None and _safe_tokens(source) not in required_paths:
                raise PolicyError(f"{where}: {field.path}: valueFromPrecondition {source} is not required")
        for required in rule.preconditions:
            if required.value is not msgspec.UNSET and required.if_omitted is not msgspec.UNSET:
                raise PolicyError(f"{where}: {required.path}: a required value cannot also be omitted")
        if rule.names and rule.name_prefix:
            raise PolicyError(f"{where}: a rule names its objects or gives a namePrefix, not both")
        if info.token in NAMED_KINDS and not rule.names:
            if not rule.name_prefix:
                raise PolicyError(f"{where}: a {info.kind} rule must name the objects it covers")
            _check_prefix_rule(where, rule, compiled)
        own = [n for n in rule.names if n.startswith(OWN_PREFIX)]
        if own:
            raise PolicyError(f"{where}: {own[0]!r} is one of corral's own workloads")
        if rule.names and Verb.CREATE in rule.verbs:
            raise PolicyError(f"{where}: RBAC cannot limit create by name; a create rule names no objects")
        writes_fields = {Verb.PATCH, Verb.PATCH_STATUS} & set(rule.verbs)
        if writes_fields and not rule.fields:
            raise PolicyError(f"{where}: a patch rule must list the fields it may set")
        for parts, field in compiled.fields:
            if not parts:
                raise PolicyError(f"{where}: field path must not be the whole object")
            is_status = parts[0] == "status"
            if is_status and Verb.PATCH_STATUS not in rule.verbs:
                raise PolicyError(f"{where}: {field.path} is a status field but patch-status is not allowed")
            if not is_status and Verb.PATCH not in rule.verbs:
                raise PolicyError(f"{where}: {field.path} is a spec field but patch is not allowed")
        return compiled

    @classmethod
    def from_yaml(cls, text: str | bytes) -> Policy:
        try:
            document = msgspec.yaml.decode(text, type=PolicyDocument)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise PolicyError(f"invalid policy: {e}") from e
        return cls(document)

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        return cls.from_yaml(Path(path).read_bytes())

    @property
    def services(self) -> frozenset[str]:
        return frozenset(self._rules)

    def fenced(self, service: str) -> bool:
        """Whether the service's commands must carry a lease term (an unknown service: no)."""
        found = self.document.services.get(service)
        return found is not None and found.fenced

    def grants(self) -> Iterator[tuple[str, KindInfo, Verb, tuple[str, ...]]]:
        """Every (service, kind, verb, names) the policy allows: what the actuator's RBAC must grant
        (names empty: any object of the kind)."""
        for service, index in self._rules.items():
            for compiled in (c for rules in index.values() for c in rules):
                for verb in compiled.rule.verbs:
                    yield service, compiled.info, verb, compiled.rule.names

    def reads(self) -> Iterator[tuple[KindInfo, str]]:
        """Every (kind, read verb) the actuator needs for itself (the `reads` section)."""
        for read in self.document.reads:
            info = resolve_kind(read.kind)
            assert info is not None  # checked in __init__
            for verb in read.verbs:
                yield info, verb

    def setting_reads(self) -> frozenset[str]:
        """The Settings the actuator reads to check commands (valueFromSetting)."""
        compiled = [c for index in self._rules.values() for rules in index.values() for c in rules]
        return frozenset(
            {f.value_from_setting for c in compiled for _, f in c.fields if f.value_from_setting}
            | {p.not_from_setting for c in compiled for p in c.rule.preconditions if p.not_from_setting}
        )

    def _candidates(self, command: Command) -> tuple[KindInfo | None, list[_CompiledRule]]:
        key = (command.service, command.target.kind, command.verb)
        found = self._matching.get(key)
        if found is None:
            info = resolve_kind(command.target.kind)
            index = self._rules.get(command.service, {})
            verb = command.verb
            rules = [] if info is None else [c for c in index.get(info.token, ()) if verb in c.rule.verbs]
            # Bounded (the policy's services, the kinds the actuator knows by two names each, the
            # verbs): an unknown service or kind, which the check refuses, is not remembered.
            found = (info, rules)
            if info is not None and command.service in self._rules:
                self._matching[key] = found
        return found

    def settings_needed(self, command: Command) -> frozenset[str]:
        """The Settings whose live values `check` needs for this command (usually none)."""
        return self._settings_needed(
            command.service, command.target.kind, command.verb, tuple(c.path for c in command.changes)
        )

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one Policy per process, kept for its lifetime
    def _settings_needed(self, service: str, kind: str, verb: Verb, paths: tuple[str, ...]) -> frozenset[str]:
        info = resolve_kind(kind)
        rules = [] if info is None else self._rules.get(service, {}).get(info.token, [])
        rules = [c for c in rules if verb in c.rule.verbs]
        if not rules:
            return frozenset()
        needed: set[str] = set()
        for compiled in rules:
            for parts, field in compiled.fields:
                if field.value_from_setting and any(_safe_covers(parts, p) for p in paths):
                    needed.add(field.value_from_setting)
            needed.update(p.not_from_setting for p in compiled.rule.preconditions if p.not_from_setting)
        return frozenset(needed)

    def check(self, command: Command, settings: Mapping[str, str | None] | None = None) -> Verdict:
        """Whether `command` may be applied; `settings` holds the live values `settings_needed` named
        (None for a Setting that does not exist)."""
        if command.service not in self._rules:
            return _deny(f"service {command.service!r} has no policy")
        target = command.target
        info, rules = self._candidates(command)
        if info is None:
            return _deny(f"unknown kind {target.kind!r}")
        if not target.name:
            return _deny("the target names no object")
        if info.namespaced and target.namespace not in self.namespaces:
            return _deny(f"namespace {target.namespace!r} is outside the actuator's namespaces")
        if not rules:
            return _deny(f"service {command.service!r} may not {command.verb} {info.kind}")
        tested: dict[tuple[str, ...], list[FieldValue]] = {}
        for p in command.preconditions:
            try:
                parts = tokens(p.path)
            except PointerError as e:
                return _deny(f"precondition: {e}")
            carried = tested.get(parts)
            if carried is None:
                tested[parts] = [p]
            else:
                carried.append(p)
        first: Verdict | None = None
        for compiled in rules:
            verdict = _check_rule(command, compiled, settings or {}, tested)
            if verdict.allowed:
                if info.kind == "Event":  # in its sender's name, about its kinds (event_guard.py)
                    refusal = event_refusal(command, self.services, self._commanded_kinds)
                    if refusal is not None:
                        return _deny(refusal)
                return verdict
            first = first or verdict
        assert first is not None
        return first


def _check_prefix_rule(where: str, rule: Rule, compiled: _CompiledRule) -> None:
    """A workload rule known only by a name prefix: patch only, a required label, and nothing but
    integer probe leaves and the template's group A scheduling fields."""
    if set(rule.verbs) != {Verb.PATCH}:
        raise PolicyError(f"{where}: a namePrefix rule may only patch")
    if not any(r.path.startswith("/metadata/labels/") for r in rule.require):
        raise PolicyError(f"{where}: a namePrefix rule must require a label on the object")
    for parts, field in compiled.fields:
        if tuple(parts) in PREFIX_TEMPLATE_FIELDS and not field.integer and field.value_from_setting is None:
            continue
        if not field.integer or parts[-1] not in PROBE_LEAVES or parts[-2:-1] != ("livenessProbe",):
            raise PolicyError(
                f"{where}: {field.path}: a namePrefix rule may only set integer probe leaves"
                f" ({', '.join(sorted(PROBE_LEAVES))}) and the pod template's tolerations (with their"
                " last-applied annotation), priority class and node selector"
            )


def _safe_covers(rule_parts: tuple[str, ...], path: str) -> bool:
    try:
        return _covers(rule_parts, tokens(path))
    except PointerError:
        return False


def _check_rule(
    command: Command, compiled: _CompiledRule, settings: Mapping[str, str | None], tested: Tested
) -> Verdict:
    info = compiled.info
    verb = command.verb
    if verb in (Verb.PATCH, Verb.PATCH_STATUS):
        if command.body is not None:
            return _deny(f"a {verb} carries no body")
        if not command.changes:
            return _deny(f"a {verb} must change at least one field")
        for change in command.changes:
            verdict = _check_change(change, verb, info, compiled, settings, tested)
            if verdict is not None:
                return verdict
    elif verb is Verb.DELETE:
        if command.changes or command.body is not None:
            return _deny("a delete carries no changes and no body")
    elif verb is Verb.CREATE:
        verdict = _check_body(command, info)
        if verdict is not None:
            return verdict
        # The object is the body: what the rule requires of it can be checked here, before anything
        # is sent (the actuator checks it on the body again as it creates it).
        body = command.body
        broken = first_not_holding(body, compiled.rule.require)
        if broken is not None:
            return _deny(
                f"the {info.kind} to create is outside the policy:"
                f" {describe_mismatch(body, broken, expected_is_public=True)}"
            )
    names, prefix = compiled.rule.names, compiled.rule.name_prefix
    if prefix and not command.target.name.startswith(prefix):
        return _deny(
            f"{info.kind} {command.target.name!r} is not one {command.service} may {verb} (only {prefix}*)"
        )
    if names and command.target.name not in names:
        return _deny(
            f"{info.kind} {command.target.name!r} is not one {command.service} may {verb}"
            f" (only {', '.join(names)})"
        )
    omitted = _check_preconditions(command, info, compiled.preconditions, settings, tested)
    if isinstance(omitted, Verdict):
        return omitted
    return Verdict(allowed=True, guards=(*compiled.rule.require, *omitted), kind=info)


def _check_preconditions(
    command: Command,
    info: KindInfo,
    required: list[tuple[tuple[str, ...], RequiredPrecondition]],
    settings: Mapping[str, str | None],
    tested: Tested,
) -> Verdict | tuple[FieldValue, ...]:
    """The rule's required preconditions are all carried (with the required values); returns the
    guards standing in for those left out where the rule allows it (`ifOmitted`)."""
    guards: list[FieldValue] = []
    for parts, want in required:
        carried = tested.get(parts, ())
        if not carried:
            if want.if_omitted is not msgspec.UNSET:
                guards.append(FieldValue(path=want.path, value=want.if_omitted))
                continue
            return _deny(
                f"a {info.kind} {command.verb} by {command.service} must carry a precondition on"
                f" {want.path}" + ("" if want.value is msgspec.UNSET else f" == {want.value!r}")
            )
        if want.value is not msgspec.UNSET and not any(json_equal(p.value, want.value) for p in carried):
            return _deny(
                f"a {info.kind} {command.verb} by {command.service} must carry the precondition"
                f" {want.path} == {want.value!r}, not {carried[0].value!r}"
            )
        if want.not_from_setting:
            current = settings.get(want.not_from_setting)
            if current is None:
                return _deny(f"{want.path}: setting {want.not_from_setting} is not set")
            if any(json_equal(p.value, current) for p in carried):
                return _deny(
                    f"a {info.kind} {command.verb} by {command.service} may not be on {want.path} =="
                    f" {current!r}, the {want.not_from_setting} setting's value"
                )
    return tuple(guards)


def _check_change(
    change: FieldValue,
    verb: Verb,
    info: KindInfo,
    compiled: _CompiledRule,
    settings: Mapping[str, str | None],
    tested: Tested,
) -> Verdict | None:
    try:
        parts = tokens(change.path)
    except PointerError as e:
        return _deny(f"change: {e}")
    if not parts:
        return _deny("a change may not replace the whole object")
    if (parts[0] == "status") != (verb is Verb.PATCH_STATUS):
        return _deny(f"{change.path}: status fields are written with patch-status, all others with patch")
    for rule_parts, field in compiled.fields:
        if not _covers(rule_parts, parts):
            continue
        if field.integer and (
            not isinstance(change.value, int) or isinstance(change.value, bool) or change.value < 0
        ):
            return _deny(f"{change.path} may only be set to a non-negative integer, not {change.value!r}")
        if field.value_from_setting:
            wanted = settings.get(field.value_from_setting)
            if wanted is None:
                return _deny(f"{change.path}: setting {field.value_from_setting} is not set")
            if change.value != wanted:
                return _deny(
                    f"{change.path} may only be set to the {field.value_from_setting} "
                    f"setting's value {wanted!r}, not {change.value!r}"
                )
        if field.remove_only and change.value is not None:
            return _deny(f"{change.path} may only be removed, not set to {change.value!r}")
        if field.value_from_precondition:
            return _check_from_precondition(change, field.value_from_precondition, tested)
        return None
    return _deny(f"{info.kind} field {change.path} is not writable by this service")


def _check_from_precondition(change: FieldValue, source: str, preconditions: Tested) -> Verdict | None:
    """`change` sets the value the command tests on `source` (and the write holds only while the
    object holds it there)."""
    tested = [p.value for p in preconditions.get(tokens(source), ())]
    if not tested:
        return _deny(f"{change.path} is set from the precondition on {source}, which the command lacks")
    if not all(json_equal(value, change.value) for value in tested):
        return _deny(
            f"{change.path} may only be set to the value the command tests on {source}"
            f" ({tested[0]!r}), not {change.value!r}"
        )
    return None


def _safe_tokens(path: str) -> tuple[str, ...] | None:
    try:
        return tokens(path)
    except PointerError:
        return None


def _check_body(command: Command, info: KindInfo) -> Verdict | None:
    body: Any = command.body
    if command.changes:
        return _deny("a create carries a body, not changes")
    if not isinstance(body, dict):
        return _deny("a create needs the object as its body")
    if body.get("kind", info.kind) != info.kind:
        return _deny(f"body kind {body.get('kind')!r} is not {info.kind}")
    if body.get("apiVersion", info.api_version) != info.api_version:
        return _deny(f"body apiVersion {body.get('apiVersion')!r} is not {info.api_version}")
    metadata = body.get("metadata")
    if not isinstance(metadata, dict):
        return _deny("the body has no metadata")
    # A fixed name (not generateName) is what makes a redelivered create detectable as done.
    if metadata.get("name") != command.target.name:
        return _deny(f"body name {metadata.get('name')!r} is not the target's {command.target.name!r}")
    if metadata.get("namespace", command.target.namespace) != command.target.namespace:
        return _deny(f"body namespace {metadata.get('namespace')!r} is not the target's")
    return None
