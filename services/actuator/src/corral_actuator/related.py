"""Preconditions on the other objects a destructive decision read, checked just before the write.

A pod delete is guarded on the pod itself (uid, resourceVersion, label), but the decision to delete
an instance manager's pod was taken on the instance manager's state: idle, nothing running or
starting. Between the decision and the delete the instance manager may start an instance (a volume
attaching); the pod has not changed, so its own preconditions still hold. The command therefore
carries `related` preconditions (corral_model.envelopes.RelatedPrecondition) and the actuator reads
each related object and checks them immediately before it deletes: the window shrinks to one API
round trip. The answer names the precondition that failed, so the deciding service and an operator
can tell why nothing was deleted.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from corral_actuator.api import KubeApi
from corral_actuator.classify import Answer
from corral_actuator.kinds import resolve_kind
from corral_kube.patching import describe_mismatch, first_not_holding, resolve
from corral_model.envelopes import NoneInStates, RelatedPrecondition


def _name(related: RelatedPrecondition) -> str:
    t = related.target
    return f"{t.kind} {t.namespace}/{t.name}" if t.namespace else f"{t.kind} {t.name}"


def entries_in_states(document: Any, path: str, field: str, states: Collection[str]) -> list[tuple[str, str]]:
    """(name, state) of the entries of the map at `path` whose `field` is one of `states`, by name
    (an absent map holds none). Also the actuator's own busy-instance-manager check."""
    entries = resolve(document, path)
    if not isinstance(entries, dict):
        return []
    found = []
    for name in sorted(entries):
        state = resolve(entries[name], field)
        if isinstance(state, str) and state in states:
            found.append((name, state))
    return found


def busy_entry(document: Any, rule: NoneInStates) -> str | None:
    """The first entry of the map at `rule.path` whose `rule.field` is one of `rule.states`, said
    as "<path>/<name><field> is '<state>'"; None when there is none."""
    for name, state in entries_in_states(document, rule.path, rule.field, rule.states)[:1]:
        return f"{rule.path}/{name}{rule.field} is {state!r}"
    return None


def broken_in(document: Any, related: RelatedPrecondition) -> str | None:
    """Why `document` (the related object as read) breaks `related`, or None when it holds."""
    uid = related.target.uid
    if uid and resolve(document, "/metadata/uid") != uid:
        return f"{_name(related)} was recreated (its uid is not the one judged)"
    field = first_not_holding(document, related.holds)
    if field is not None:
        return f"{_name(related)}: {describe_mismatch(document, field)}"
    for rule in related.none_in:
        busy = busy_entry(document, rule)
        if busy is not None:
            allowed = " or ".join(rule.states)
            return f"{_name(related)}: {busy}; none may be {allowed}"
    return None


async def first_broken(api: KubeApi, related: tuple[RelatedPrecondition, ...], namespace: str) -> str | None:
    """Read each related object and say which precondition fails first; None when all hold.

    A related object that is gone, of a kind the actuator does not know, or unreadable fails its
    precondition: the decision was taken on something that can no longer be confirmed. Only
    objects in the command target's `namespace` are read: a result's detail quotes what it read,
    so a related precondition must not become a way to read objects outside the policy."""
    for one in related:
        t = one.target
        if t.namespace != namespace:
            return f"{_name(one)}: not in the target's namespace {namespace!r}; not read"
        info = resolve_kind(t.kind)
        if info is None:
            return f"{_name(one)}: the actuator knows no kind {t.kind!r}"
        answered = await api.get(info.path(t.namespace, t.name))
        if answered.answer is Answer.NOT_FOUND:
            return f"{_name(one)} is gone"
        document = answered.document() if answered.answer is Answer.OK else None
        if document is None:
            return f"{_name(one)} could not be read: HTTP {answered.status}"
        broken = broken_in(document, one)
        if broken is not None:
            return broken
    return None
