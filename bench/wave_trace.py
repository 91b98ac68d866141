"""Where a freed slot's wait goes: the bus traffic of a wave, timed as it passes.

wave_timeline.py says how long a slot stayed free (from the emulator's commits); this says which
hop held it. A core NATS subscription in the bench's process sees every volume event the watcher
publishes on LH_OBJECTS and every command engine-upgrade publishes on LH_COMMANDS at about the
moment the services see them (LH_COMMANDS is a work queue the actuator drains, so it cannot be read
back afterwards; `corral events dump` records commands from core NATS for the same reason). Each
refill then splits into four hops that add up to its idle time:

* watcher: the end's commit on the emulator → its volume event on LH_OBJECTS;
* decider: that event → the command's `createdAt` (the runner's `debounce_s`, then `decide()`);
* publish: `createdAt` → the command on LH_COMMANDS;
* actuator: the command → the spec.image patch committed on the emulator (its consumer, the rate
  limiter, the patch through the API).

The tap also tells the bench when the wave is over: every expected volume reported on the target.

The tap stamps a message when the bench's event loop gets to it. With the services in their own
processes (wave_stack.py) that loop holds only the sandbox and the tap, but the sandbox keeps it
busy, so a stamp can be late by the loop's lag: the watcher and publish hops then look longer and
the decider hop shorter (even negative: the command's `createdAt` is the service's own clock) than
they were. Their sum, the idle time, is measured on the emulator's commits and carries no such bias.

`LoopLag` measures how late a 10 ms sleep wakes in the bench's event loop, which every service and
the sandbox share here: a late wake-up delays every hop above, whichever service it falls in.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from bench.wave_timeline import Refill, summary
from corral_bus import Bus
from corral_model import longhorn as lh
from corral_model.envelopes import Command, ObjectEvent
from corral_model.subjects import COMMANDS_PREFIX, OBJECTS_PREFIX, escape_token

_volume_event = msgspec.json.Decoder(ObjectEvent[lh.Volume])
_command = msgspec.json.Decoder(Command)


@dataclass
class BusTap:
    """Volume events and engine-upgrade commands, each with the wall time it arrived."""

    image: str
    on_image: dict[str, float] = field(default_factory=dict)  # volume → first event on the image
    commands: dict[str, tuple[float, float]] = field(default_factory=dict)  # volume → (createdAt, seen)
    _subscriptions: list[Any] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self, bus: Bus, namespace: str) -> None:
        ns = escape_token(namespace)
        self._subscriptions = [
            await bus.nc.subscribe(f"{OBJECTS_PREFIX}.volume.{ns}.>", cb=self._on_volume),
            await bus.nc.subscribe(f"{COMMANDS_PREFIX}.engine-upgrade.volume.{ns}.>", cb=self._on_command),
        ]

    async def stop(self) -> None:
        for subscription in self._subscriptions:
            await subscription.unsubscribe()

    async def _on_volume(self, message: Any) -> None:
        seen = time.time()
        event = _volume_event.decode(message.data)
        volume = event.object
        on_image = volume is not None and volume.status.current_image == self.image
        if on_image and event.name not in self.on_image:
            self.on_image[event.name] = seen
            self._changed.set()

    async def _on_command(self, message: Any) -> None:
        seen = time.time()
        command = _command.decode(message.data)
        self.commands.setdefault(command.target.name, (command.created_at, seen))

    async def wait_all_on_image(self, volumes: int, within: float) -> None:
        """Until `volumes` volumes were reported on the image; TimeoutError past `within` seconds."""
        async with asyncio.timeout(within):
            while len(self.on_image) < volumes:
                await self._changed.wait()
                self._changed.clear()


@dataclass
class LoopLag:
    """How late the shared event loop runs a coroutine that asked to sleep `tick_s`."""

    tick_s: float = 0.01
    lags: list[float] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.tick_s)
            self.lags.append(time.monotonic() - before - self.tick_s)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def hops(refills: Sequence[Refill], tap: BusTap) -> dict[str, Any]:
    """The four hops of each refill (ms), summarised, for refills whose messages the tap saw."""
    parts: dict[str, list[float]] = {"watcher": [], "decider": [], "publish": [], "actuator": []}
    for refill in refills:
        seen = tap.on_image.get(refill.freed_by.volume)
        command = tap.commands.get(refill.filled_by.volume)
        if seen is None or command is None:
            continue
        created, published = command
        parts["watcher"].append(seen - refill.freed_by.end)
        parts["decider"].append(created - seen)
        parts["publish"].append(published - created)
        parts["actuator"].append(refill.filled_by.start - published)
    return {f"{name}_ms": summary(values) for name, values in parts.items()}
