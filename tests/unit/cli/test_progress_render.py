"""The progress views: lines only for what changed (pipes, logs, tests), a table redrawn in place
on a terminal."""

from __future__ import annotations

import io

from corral_cli.progress.follow import StallWatch
from corral_cli.progress.render import LineView, TerminalView
from corral_decision.progress import GroupFigures
from corral_engine_upgrade.progress import ProgressModel
from tests.unit.engine_upgrade.cluster import NEW, OLD, upgraded, volume
from tests.unit.engine_upgrade.test_progress_model import Events, cluster, put, with_replicas


def wave() -> tuple[ProgressModel, Events]:
    model, events = ProgressModel(), Events()
    cluster(model, events)
    put(model, events, *with_replicas(volume("a", image=NEW, current=OLD)), *with_replicas(volume("b")))
    put(model, events, *with_replicas(volume("c", robustness="degraded")))
    return model, events


def test_lines_name_every_figure_and_repeat_only_what_changed() -> None:
    model, events = wave()
    out = io.StringIO()
    view = LineView(out)
    view.update(model, 1.0)
    first = out.getvalue().splitlines()
    assert first[0].endswith(f"engine-upgrade: default image {NEW}, limit 2 per owner node")
    assert "n1           limit 2  in flight 1  done 0  waiting 1  blocked 1 (degraded 1)" in first[1]
    assert [line.split()[1] for line in first[1:]] == ["n1", "n2", "n3", "total"]

    view.update(model, 2.0)  # nothing changed: nothing printed
    assert out.getvalue().splitlines() == first

    put(model, events, upgraded(volume("a"), done=True))
    view.update(model, 3.0)
    news = out.getvalue().splitlines()[len(first) :]
    assert [line.split()[1] for line in news] == ["n1", "total"]
    assert "in flight 0  done 1  waiting 1" in news[0]


def test_the_terminal_table_is_redrawn_in_place() -> None:
    model, events = wave()
    out = io.StringIO()
    view = TerminalView(out)
    view.update(model, 1.0)
    frame = out.getvalue()
    assert frame.startswith("\x1b[2K")  # the first frame does not move the cursor up
    assert frame.count("\n") == 2 + 3 + 1  # heading, column names, three nodes, total
    assert "1/2" in frame and "degraded 1" in frame
    put(model, events, upgraded(volume("a"), done=True))
    view.update(model, 2.0)
    second = out.getvalue()[len(frame) :]
    assert second.startswith("\x1b[6F")  # back to the top of the six lines drawn before
    assert "0/2" in second


def test_a_note_on_the_terminal_stays_above_the_table() -> None:
    model, _ = wave()
    out = io.StringIO()
    view = TerminalView(out)
    view.update(model, 1.0)
    drawn = len(out.getvalue())
    view.note("corral run: demo: something happened")
    after = out.getvalue()[drawn:]
    note, table = after.split("\n", 1)
    # over the old table: the note, then the same six lines again below it
    assert note == "\x1b[6F\x1b[2Kcorral run: demo: something happened"
    assert table.startswith("\x1b[J\x1b[2K") and table.count("\n") == 6
    noted = len(out.getvalue())
    view.update(model, 2.0)
    assert out.getvalue()[noted:].startswith("\x1b[6F")  # the next frame moves over the table only


def test_a_wave_that_stops_moving_is_said_to_be_stuck_once_per_stall() -> None:
    notes: list[str] = []
    watch = StallWatch(notes.append, after=-1.0)  # any repeat counts as a stall: no waiting in tests
    busy, other = GroupFigures("total", in_flight=2, waiting=3), GroupFigures("total", in_flight=1, done=4)
    watch.saw(busy)
    assert notes == []  # it just moved
    watch.saw(busy)
    watch.saw(busy)
    assert len(notes) == 1 and "2 in flight and 3 waiting" in notes[0]
    watch.saw(other)
    watch.saw(other)
    assert len(notes) == 2
    idle = StallWatch(notes.append, after=-1.0)
    idle.saw(GroupFigures("total", done=9))
    idle.saw(GroupFigures("total", done=9))
    assert len(notes) == 2  # nothing left to do is not a stall
