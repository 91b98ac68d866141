"""An Event command is built by hand for speed (corral_decision.events): its id must still be the
one the actuator recomputes from its content, or every Event would be refused as forged."""

from __future__ import annotations

from corral_actuator.addressing import id_mismatch
from corral_decision.events import EventType, event_command
from corral_model.envelopes import Target, command_id

VOLUME = Target(kind="Volume", namespace="longhorn-system", name="pvc-a", uid="1234-abcd")


def test_an_event_commands_id_is_the_hash_of_its_whole_content() -> None:
    command = event_command(
        service="engine-upgrade", about=VOLUME, type_=EventType.WARNING, reason="R", message="m", now=1e9
    )
    assert id_mismatch(command) is None
    assert command.id == command_id(
        command.service, command.verb, command.target, command.changes, command.preconditions, command.body
    )
    assert command.body is not None
    assert command.body["firstTimestamp"] == command.body["lastTimestamp"] == "2001-09-09T01:46:40Z"


def test_the_same_report_in_the_same_second_is_one_command_and_a_new_second_another() -> None:
    first = event_command(
        service="engine-upgrade", about=VOLUME, type_=EventType.NORMAL, reason="R", message="m", now=1e9
    )
    again = event_command(
        service="engine-upgrade", about=VOLUME, type_=EventType.NORMAL, reason="R", message="m", now=1e9 + 0.5
    )
    later = event_command(
        service="engine-upgrade", about=VOLUME, type_=EventType.NORMAL, reason="R", message="m", now=1e9 + 1
    )
    other = event_command(
        service="engine-upgrade", about=VOLUME, type_=EventType.NORMAL, reason="R", message="n", now=1e9
    )
    assert first.id == again.id
    assert len({first.id, later.id, other.id}) == 3
    assert first.target.name == later.target.name != other.target.name
