"""The pure parts of `corral events`: which stream holds a subject, the facts of a delivery, the
times `--since` takes, and tail's one-line summaries."""

from __future__ import annotations

import argparse
import time
from typing import Any

import pytest

from corral_cli.commands.events import parse_moment
from corral_cli.events.streams import DEFAULT_SUBJECTS, delivery_facts, filters_by_stream, stream_of
from corral_cli.events.summary import tail_line
from corral_decision.bundle import entry
from corral_model import codec
from corral_model.envelopes import CommandResult, EventType, ObjectEvent, Outcome, Target

T0 = 1_795_588_228_109_157_260


def test_subjects_go_to_the_stream_that_stores_them() -> None:
    assert filters_by_stream(["lh.res.engine-upgrade.>", *DEFAULT_SUBJECTS, "lh.obj.>"]) == {
        "LH_OBJECTS": ["lh.obj.>"],
        "LH_COMMANDS": ["lh.cmd.>"],
        "LH_RESULTS": ["lh.res.engine-upgrade.>", "lh.res.>"],
    }
    assert stream_of("lh.dead.>") == "LH_DEAD"
    for wrong in ("lh.>", "kv.x", "lh.objects.x"):
        with pytest.raises(ValueError):
            stream_of(wrong)


def test_a_delivery_says_its_sequence_time_and_what_is_pending() -> None:
    assert delivery_facts(f"$JS.ACK.LH_OBJECTS.c.1.42.7.{T0}.3") == (42, T0, 3)
    assert delivery_facts(f"$JS.ACK.domain.hash.LH_OBJECTS.c.1.42.7.{T0}.3.rnd") == (42, T0, 3)
    with pytest.raises(ValueError):
        delivery_facts("_INBOX.x")


def test_times_are_rfc3339_epoch_or_a_duration_ago() -> None:
    assert parse_moment("2026-11-25T06:30:28.109157260Z") == T0
    assert parse_moment("1795588228.5") == 1_795_588_228_500_000_000
    assert parse_moment("2026-11-25T06:30:28") == T0 - 109_157_260  # no zone: UTC
    before = time.time_ns()
    moment = parse_moment("15m")
    assert before - 15 * 60 * 10**9 <= moment <= time.time_ns() - 15 * 60 * 10**9
    with pytest.raises(argparse.ArgumentTypeError):
        parse_moment("last tuesday")


def test_tail_says_what_each_message_is() -> None:
    event: ObjectEvent[Any] = ObjectEvent(
        type=EventType.DELETED, kind="volume", namespace="ns", name="v", resource_version="9"
    )
    line = tail_line(entry("LH_OBJECTS", 1, T0, "lh.obj.volume.ns.v", {}, codec.encode(event)))
    assert line == "06:30:28.109 LH_OBJECTS lh.obj.volume.ns.v DELETED Volume ns/v rv 9"
    result = CommandResult(
        command_id="x-1",
        service="x",
        target=Target(kind="Volume", namespace="ns", name="v"),
        outcome=Outcome.PRECONDITION_FAILED,
        detail="spec.image moved",
    )
    line = tail_line(entry("LH_RESULTS", 2, T0, "lh.res.x.volume.ns.v", {}, codec.encode(result)))
    assert line.endswith("precondition-failed Volume ns/v id x-1 (spec.image moved)")
    line = tail_line(entry("LH_RESULTS", 3, T0, "lh.res.x", {}, b"\xff"))
    assert " unreadable: " in line
