"""What a replica does between becoming leader and its first decision, so that a service's limits
(engine-upgrade's per-node limit, one v2 node at a time…) hold across a change of leader.

The predecessor's commands that the cluster does not show yet live only in its memory (its
expectations). Every replica follows the service's commands and adopts them as they come
(runner.py, command_feed.py), but a standby's view may lag the view the leader decided on, so an
adoption judged on it ("already shown", "precondition moved", an object not seen yet) may be
wrong. Deciding on such a view could break a limit. So a new leader decides only once it has caught up
with the bus, not after a guessed delay:

* its readers have reached the ends LH_OBJECTS (its kinds) and LH_RESULTS (its results) had when it
  took over, and the commands still queued in LH_COMMANDS are read (`CommandFeed.scan`);
* every write the actuator reported (an `applied` result with a resourceVersion, kept for
  `applied_ttl_s`) is visible in its view: this covers a command the actuator finished while this
  replica was not subscribed, and a view that lags because the watcher is down.

Then its view is at least as fresh as the one every pending command was decided on, so it adopts
them all once more and those verdicts now mean what they say, never "not seen yet".
`handover_timeout_s` bounds the wait for a bus that cannot be read to the end (it then goes on and
says so); the wait for reported writes has no such bound (a view known to lag the cluster must not
decide), only the writes' own `applied_ttl_s`, the decider's bound on view lag. `handover_delay_s`
is an optional extra pause, 0 by default. A takeover is abandoned as soon as the service stops or
this replica's leadership term ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable

from prometheus_client import Histogram

from corral_bus import BootstrapReader, Bus
from corral_decision.command_feed import CommandFeed, stream_end
from corral_decision.decider import Runnable
from corral_decision.seen import SeenCommands
from corral_decision.time_source import LIVE, TimeSource
from corral_model.envelopes import Command, CommandResult
from corral_runtime.logs import Logger

Adopt = Callable[[Command, CommandResult | None], None]
"""Count one seen command (with its `applied` result, if any) as in flight, as the runner does
for a command seen live."""
PruneSeen = Callable[[bool], None]
"""Forget seen commands and writes too old to matter; True prunes now, False at most once a second."""
StillLeading = Callable[[], bool]
"""True while the leadership term the takeover started in lasts."""

REPORT_EVERY_S = 10.0


@dataclasses.dataclass
class Takeover:
    """The catch-up of one replica; `run` once per leadership term, before the first decision."""

    bus: Bus
    decider: Runnable
    _: dataclasses.KW_ONLY
    objects: BootstrapReader
    results: BootstrapReader
    commands: CommandFeed
    seen: SeenCommands
    adopt: Adopt
    prune_seen: PruneSeen
    wake: asyncio.Event  # set by the readers whenever they apply something
    log: Logger
    seconds: Histogram
    timeout_s: float
    delay_s: float
    timing: TimeSource = LIVE
    """The runner's clocks and sleeper (time_source.py)."""

    def lagging_writes(self) -> list[str]:
        """Objects the actuator reported writing that the view shows at an older resourceVersion."""
        lagging = []
        self.prune_seen(False)
        for result in self.seen.writes():
            target = result.target
            seen_rv = self.decider.observed_version(target)
            with contextlib.suppress(ValueError):
                if seen_rv is not None and seen_rv < int(result.resource_version):
                    lagging.append(f"{target.kind}/{target.namespace}/{target.name}")
        return lagging

    def adopt_all_seen(self) -> None:
        """Adopt every command seen recently, judged on the view as it is now."""
        self.prune_seen(True)
        for command, result in self.seen.adoptable():
            self.adopt(command, result)

    async def run(self, stop: asyncio.Event, still_leading: StillLeading) -> bool:
        """Catch up with the bus, adopt what was seen, and let every target be judged again.
        False when leadership was lost or the service stops meanwhile."""
        started = self.timing.monotonic()
        objects_end = await stream_end(self.bus, self.objects.stream, self.objects.filter_subjects)
        results_end = await stream_end(self.bus, self.results.stream, self.results.filter_subjects)
        queued = await self.commands.scan()
        deadline, next_report = started + self.timeout_s, started + REPORT_EVERY_S
        reads_waived = False
        while True:
            if stop.is_set() or not still_leading():
                return False
            behind = []
            if not reads_waived and self.objects.last_seq < objects_end:
                behind.append(f"LH_OBJECTS at {self.objects.last_seq} of {objects_end}")
            if not reads_waived and self.results.last_seq < results_end:
                behind.append(f"LH_RESULTS at {self.results.last_seq} of {results_end}")
            lagging = self.lagging_writes()
            if not (behind or lagging):
                break
            now = self.timing.monotonic()
            if behind and now > deadline:
                self.log.warning("reading the bus to its end takes too long; going on", behind=behind)
                reads_waived = True
            if lagging and now > next_report:
                # The watcher is down or far behind: deciding now could exceed the limit.
                self.log.warning(
                    "waiting for the view to show writes the actuator reported", objects=lagging[:5]
                )
                next_report = now + REPORT_EVERY_S
            await self.timing.wait(self.wake, 0.05)
            self.wake.clear()
        self.adopt_all_seen()
        if self.delay_s:
            await self.timing.wait(stop, self.delay_s)
            if stop.is_set() or not still_leading():
                return False
        self.decider.reconsider_all()
        took = self.timing.monotonic() - started
        self.seconds.observe(took)
        self.log.info(
            "took over",
            seconds=round(took, 3),
            queued_commands=queued,
            in_flight=sum(1 for _ in self.decider.expectations()),
        )
        return True
