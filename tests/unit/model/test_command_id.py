"""command_id: the Nats-Msg-Id that makes a republished decision a duplicate JetStream drops.

Same service + verb + target + changes + preconditions → same id, in any process; anything
different → a different id; always `<service>-<32 hex>`."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from corral_model.envelopes import (
    FieldValue,
    Target,
    Verb,
    as_attempt,
    command_id,
    first_attempt_id,
    new_command,
)

TARGET = Target(kind="Volume", namespace="longhorn-system", name="pvc-1")
IMAGE = FieldValue(path="/spec/image", value="longhornio/longhorn-engine:v1.10.0")
OLD = FieldValue(path="/spec/image", value="longhornio/longhorn-engine:v1.9.3")
# Pinned: ids must not depend on the process (hash seeds, dict order) nor silently change.
PINNED = "engine-upgrade-f8bfd4c1ff9ad8bc3b71252fb3ea7097"


def _id(**overrides: Any) -> str:
    args: dict[str, Any] = {
        "service": "engine-upgrade",
        "verb": Verb.PATCH,
        "target": TARGET,
        "changes": (IMAGE,),
        "preconditions": (OLD,),
    } | overrides
    return command_id(**args)


def test_the_id_is_pinned_and_has_the_service_prefixed_shape() -> None:
    assert re.fullmatch(r"engine-upgrade-[0-9a-f]{32}", _id())
    assert _id() == PINNED


def test_another_process_computes_the_same_id() -> None:
    code = (
        "from corral_model.envelopes import FieldValue, Target, Verb, command_id;"
        "print(command_id('engine-upgrade', Verb.PATCH,"
        " Target(kind='Volume', namespace='longhorn-system', name='pvc-1'),"
        " (FieldValue(path='/spec/image', value='longhornio/longhorn-engine:v1.10.0'),),"
        " (FieldValue(path='/spec/image', value='longhornio/longhorn-engine:v1.9.3'),)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == PINNED


def test_every_part_of_the_decision_changes_the_id() -> None:
    variants = [
        _id(),
        _id(service="setting-sync"),
        _id(verb=Verb.PATCH_STATUS),
        _id(target=Target(kind="Volume", namespace="longhorn-system", name="pvc-2")),
        _id(target=Target(kind="Volume", namespace="other", name="pvc-1")),
        _id(target=Target(kind="Volume", namespace="longhorn-system", name="pvc-1", uid="u")),
        _id(changes=(FieldValue(path="/spec/image", value="longhornio/longhorn-engine:v1.11.0"),)),
        _id(preconditions=()),
        _id(preconditions=(OLD, FieldValue(path="/status/state", value="attached"))),
        # the same fields, moved between changes and preconditions
        _id(changes=(IMAGE, OLD), preconditions=()),
        _id(changes=(), preconditions=(IMAGE, OLD)),
        # a value of another JSON type that prints alike
        _id(preconditions=(FieldValue(path="/spec/image", value=1),)),
        _id(preconditions=(FieldValue(path="/spec/image", value="1"),)),
    ]
    assert len(set(variants)) == len(variants)


def test_dict_values_are_canonical_whatever_their_insertion_order() -> None:
    a = _id(changes=(FieldValue(path="/metadata/labels", value={"a": "1", "b": "2"}),))
    b = _id(changes=(FieldValue(path="/metadata/labels", value={"b": "2", "a": "1"}),))
    assert a == b


_text = st.text(max_size=12)


@given(
    names=st.tuples(_text, _text),
    values=st.tuples(st.lists(_text, max_size=3), st.lists(_text, max_size=3)),
)
def test_different_decisions_get_different_ids(
    names: tuple[str, str], values: tuple[list[str], list[str]]
) -> None:
    """Names and values with separators, quotes and escapes in them cannot run together."""

    def decision(name: str, tests: list[str]) -> str:
        return _id(
            target=Target(kind="Volume", namespace="ns", name=name),
            preconditions=tuple(FieldValue(path="/p", value=v) for v in tests),
        )

    same = names[0] == names[1] and values[0] == values[1]
    assert (decision(names[0], values[0]) == decision(names[1], values[1])) == same


def test_a_retry_has_an_id_of_its_own_and_the_first_attempt_keeps_the_pinned_one() -> None:
    """Attempt 0 hashes as before (ids in flight across an upgrade of corral stay the same); each
    retry of the decision is another id, the same for the same attempt in any process."""
    assert _id(attempt=0) == PINNED
    retries = [_id(attempt=n) for n in (1, 2, 3)]
    assert len({PINNED, *retries}) == 4
    assert retries == [_id(attempt=n) for n in (1, 2, 3)]
    assert all(re.fullmatch(r"engine-upgrade-[0-9a-f]{32}", r) for r in retries)


def test_as_attempt_restamps_the_id_and_first_attempt_id_finds_the_first() -> None:
    first = new_command(
        service="engine-upgrade", verb=Verb.PATCH, target=TARGET, changes=(IMAGE,), preconditions=(OLD,)
    )
    assert first.id == PINNED and first.attempt == 0
    retry = as_attempt(first, 2)
    assert (retry.attempt, retry.id) == (2, _id(attempt=2))
    assert retry.changes == first.changes and retry.preconditions == first.preconditions
    assert first_attempt_id(retry) == first_attempt_id(first) == PINNED
