"""The Setting values the policy is checked against: never older than the command they judge.

A cached value serves a command only when its read started at or after the command was made (and
within the cache's lifetime); a command dated ahead of the actuator's clock is served by a read
started from now on, not by one from before; a value past its lifetime is read again."""

from __future__ import annotations

from typing import Any

from corral_actuator.api import Answered
from corral_actuator.settings import SettingValues


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class _Api:
    """Answers each GET of the Setting with the next value, and counts the reads."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.reads = 0

    async def get(self, path: str) -> Answered:
        self.reads += 1
        self.clock.now += 0.01  # a read takes time: it started before it returns
        return Answered(200, b'{"value": "v%d"}' % self.reads)


MONOTONIC = _Clock(0.0)


def _settings(now: float = 1000.0) -> tuple[SettingValues, _Api, _Clock]:
    wall = _Clock(now)
    api: Any = _Api(wall)
    MONOTONIC.now = 0.0
    return SettingValues(api, ttl=2.0, clock=MONOTONIC, wall_clock=wall), api, wall


async def test_a_command_made_before_the_read_is_served_from_it() -> None:
    settings, api, wall = _settings()
    assert await settings.value("ns", "s", not_before=wall.now - 1) == "v1"
    assert await settings.value("ns", "s", not_before=wall.now - 5) == "v1"
    assert api.reads == 1


async def test_a_command_made_after_the_read_reads_again() -> None:
    settings, api, wall = _settings()
    assert await settings.value("ns", "s", not_before=wall.now) == "v1"
    assert await settings.value("ns", "s", not_before=wall.now + 0.001) == "v2"
    assert api.reads == 2


async def test_a_command_dated_ahead_of_the_clock_is_judged_on_a_read_from_now_on() -> None:
    settings, api, wall = _settings()
    assert await settings.value("ns", "s", not_before=wall.now - 1) == "v1"
    ahead = wall.now + 60  # the issuer's clock runs a minute ahead
    assert await settings.value("ns", "s", not_before=ahead) == "v2"  # not the read from before
    assert api.reads == 2


async def test_a_value_past_its_lifetime_is_read_again() -> None:
    settings, api, wall = _settings()
    assert await settings.value("ns", "s", not_before=wall.now - 1) == "v1"
    MONOTONIC.now += 2.5  # past the cache's lifetime
    assert await settings.value("ns", "s", not_before=wall.now - 100) == "v2"
    assert api.reads == 2
