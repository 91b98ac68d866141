"""One clock: the live runner and `corral replay` decide on one implementation of timing
(decision_loop.py). Change the runner's debounce, by its setting or in its code, and the replay's
decisions follow with no edit to replay.py; the live runner reads time only from the `TimeSource` it
is handed, and sleeps what that same loop says."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import msgspec
import pytest

from corral_bus import Bus
from corral_decision import DecisionConfig, DecisionRunner, DecisionService
from corral_decision.decision_loop import DecisionLoop
from corral_decision.replay import Replay
from corral_decision.time_source import LIVE, TimeSource
from corral_model.longhorn import ObjectMeta, Setting
from corral_runtime.logs import get_logger
from tests.fixtures.bus_traffic import FakeWatcher
from tests.fixtures.processes import eventually
from tests.integration.decision.toy import TOY, ToyDecider
from tests.unit.decision.test_replay_timing import FAKE, T0, Recorder, line

S = 1_000_000_000
NS = "longhorn-system"
BURST = [
    line(1, T0, resync=True),  # the view is ready
    line(2, T0 + S // 100, "a"),  # a burst: 10 ms and 20 ms after the first pass
    line(3, T0 + 2 * S // 100, "b"),
    line(4, T0 + S, "c"),  # after a quiet spell
]


async def _trailing_debounce(self: DecisionLoop) -> None:
    """A changed runner: every pass waits its whole debounce, even after a quiet spell."""
    await self.timing.sleep(self.debounce_s)


@pytest.fixture(params=["leading edge", "trailing edge"])
def debounce_rule(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The runner's debounce as written, or changed in the runner's code (decision_loop.py)."""
    if request.param == "trailing edge":
        monkeypatch.setattr(DecisionLoop, "debounce", _trailing_debounce)
    yield str(request.param)


def _passes(service: DecisionService[DecisionConfig], debounce_s: float | None = None) -> list[float]:
    """When the replay of BURST asked the decider to decide, in seconds after T0."""
    Recorder.instances.clear()
    Replay(service, debounce_s=debounce_s).feed_all(BURST)
    (decider,) = Recorder.instances
    return [round(at - T0 / S, 6) for at in decider.decided]


def _with_debounce(debounce_s: float) -> DecisionService[DecisionConfig]:
    """FAKE, its runner configured with `debounce_s` (the setting an operator changes)."""

    configured: type[DecisionConfig] = msgspec.defstruct(  # type: ignore[assignment]
        "Configured", [("debounce_s", float, debounce_s)], bases=(DecisionConfig,), kw_only=True, frozen=True
    )
    return DecisionService(
        name="fake", config=configured, reads=FAKE.reads, commands=frozenset(), new_decider=Recorder
    )


EXPECTED = {
    # at once when ready; a and b within 50 ms of it: one pass at 50 ms (b woke the loop during its
    # debounce, so one more, empty, 50 ms later); c after a quiet spell: at once
    ("leading edge", 0.05): [0.0, 0.05, 0.1, 1.0],
    ("leading edge", 0.2): [0.0, 0.2, 0.4, 1.0],
    # every pass waits the whole debounce: nothing is decided at once any more
    ("trailing edge", 0.05): [0.05, 0.1, 1.05],
    ("trailing edge", 0.2): [0.2, 0.4, 1.2],
}


@pytest.mark.parametrize("debounce_s", [0.05, 0.2])
def test_replay_follows_the_runners_debounce_setting_and_code(debounce_rule: str, debounce_s: float) -> None:
    assert _passes(_with_debounce(debounce_s)) == EXPECTED[debounce_rule, debounce_s]
    # `corral replay --debounce S` is the same setting, overridden
    assert _passes(FAKE, debounce_s=debounce_s) == EXPECTED[debounce_rule, debounce_s]


class StillTime:
    """Live sleeps and waits, on a monotonic clock that stands still, so each debounce the runner
    sleeps is exactly what its rule says (no time passes between passes); records the sleeps."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.timing = TimeSource(now=time.time, monotonic=lambda: 100.0, sleep=self._sleep, wait=LIVE.wait)

    async def _sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0)


@pytest.fixture
async def watcher(fake_bus: Bus) -> FakeWatcher:
    watcher = FakeWatcher(fake_bus, namespace=NS)
    await watcher.put(Setting(metadata=ObjectMeta(name="s0", namespace=NS), value="x"))
    await watcher.resync(["setting"])
    return watcher


@pytest.fixture
async def stopping() -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    yield stop
    stop.set()


async def test_the_live_runner_sleeps_what_the_loop_says_on_the_clock_it_is_handed(
    fake_bus: Bus, watcher: FakeWatcher, stopping: asyncio.Event, debounce_rule: str
) -> None:
    still = StillTime()
    config = msgspec.convert({"service": "toy", "instance": "unit", "debounce_s": 0.05}, DecisionConfig)
    runner = DecisionRunner(TOY, fake_bus, config, get_logger(service="toy"), timing=still.timing)
    assert isinstance(runner.decider, ToyDecider) and runner.decider.clock is still.timing.now
    task = asyncio.create_task(runner.run(stopping))
    await eventually(lambda: len(still.sleeps) >= 1, within=5, what="the first pass")
    await watcher.put(Setting(metadata=ObjectMeta(name="s1", namespace=NS), value="x"))
    await eventually(lambda: len(still.sleeps) >= 2, within=5, what="a pass after an event")
    stopping.set()
    async with asyncio.timeout(10):
        await task
    # the first pass follows a quiet spell (at once), the next one comes no time later
    wanted = {"leading edge": [0.0, 0.05], "trailing edge": [0.05, 0.05]}[debounce_rule]
    assert still.sleeps[:2] == wanted
