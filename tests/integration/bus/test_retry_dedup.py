"""A decision retried after the actuator refused it (or it expired) must reach LH_COMMANDS even
inside the stream's duplicate window: the kit's `Expectations.stamp` makes it the decision's next
attempt, under an id of its own. Before, the retry had the refused command's id (the same content
hashes the same), JetStream dropped it as a duplicate, and the retry only happened once the 60 s
window had passed. A re-send of the same attempt (a reconnect) is still dropped."""

from __future__ import annotations

import pytest

from corral_bus import Bus, Publisher
from corral_decision.expectations import Expectations, TargetTrack
from corral_decision.timing import Timing
from corral_model import codec
from corral_model.envelopes import Command, CommandResult, FieldValue, Outcome, Target, Verb, new_command
from corral_model.subjects import command_subject
from tests.fixtures.nats import queued_commands

pytestmark = pytest.mark.integration

NS = "longhorn-system"
SERVICE = "setting-sync"  # a service with a command stream of its own
KEY = ("Setting", NS, "s")


def decision() -> Command:
    """The same decision each time it is taken (its content, hence its first id, does not change)."""
    return new_command(
        service=SERVICE,
        verb=Verb.PATCH,
        target=Target(kind="Setting", namespace=NS, name="s"),
        changes=(FieldValue(path="/value", value="x"),),
        preconditions=(FieldValue(path="/metadata/resourceVersion", value="7"),),
        created_at=1.0,
    )


def refused(command: Command) -> CommandResult:
    return CommandResult(
        command_id=command.id, service=SERVICE, target=command.target, outcome=Outcome.PRECONDITION_FAILED
    )


async def test_a_retry_after_a_refusal_is_stored_and_a_resend_of_one_attempt_is_not(bus: Bus) -> None:
    expected: Expectations[tuple[str, str, str]] = Expectations(Timing(retry_backoff=1.0))
    track = TargetTrack()
    publisher = Publisher(bus, window=8)
    subject = command_subject(SERVICE, "setting", NS, "s")
    sent: list[Command] = []
    for now in (1.0, 3.0, 5.0):  # decided, refused, decided again after the backoff: twice
        command = expected.stamp(decision())
        expected.issue(track, KEY, command, 7, now)
        for _ in range(2):  # each attempt sent twice (a reconnect's re-send)
            await publisher.publish(subject, codec.encode(command), msg_id=command.id)
        await publisher.flush()
        sent.append(command)
        assert expected.result(track, KEY, refused(command), now + 0.5)
    assert await queued_commands(bus) == 3, "every attempt stored, inside the duplicate window"
    assert publisher.duplicates == 3, "and each re-send of an attempt dropped"
    assert [c.attempt for c in sent] == [0, 1, 2]
    await publisher.close()


async def test_a_retry_after_an_expiry_is_stored(bus: Bus) -> None:
    expected: Expectations[tuple[str, str, str]] = Expectations(Timing(command_ttl=10.0))
    track = TargetTrack()
    publisher = Publisher(bus, window=8)
    subject = command_subject(SERVICE, "setting", NS, "s")
    first = expected.stamp(decision())
    expected.issue(track, KEY, first, 7, 1.0)
    assert list(expected.due(11.0, lambda key: track)) == [KEY]  # no answer: it expired
    again = expected.stamp(decision())
    for command in (first, again):
        await publisher.publish(subject, codec.encode(command), msg_id=command.id)
    await publisher.flush()
    assert await queued_commands(bus) == 2
    assert again.attempt == 1
    await publisher.close()
