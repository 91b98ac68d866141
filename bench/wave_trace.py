"""Where a freed slot's wait goes: the bus traffic of a wave, timed as it passes.

wave_timeline.py says how long a slot stayed free (from the emulator's commits); this says which
hop held it. The bench follows every volume event the watcher publishes on LH_OBJECTS (an ordered
JetStream consumer: each message carries the time the stream stored it, the server's clock) and
sees every command engine-upgrade publishes on LH_COMMANDS through a core NATS subscription
(LH_COMMANDS is a work queue the actuator drains, so it cannot be read back afterwards; `corral
events dump` records commands from core NATS for the same reason). Each refill then splits into
four hops that add up to its idle time:

* watcher: the end's commit on the emulator → its volume event stored on LH_OBJECTS (the
  emulator's watch, the watcher, NATS);
* decider: that event stored → the command's `createdAt` (delivery to engine-upgrade, the
  runner's `debounce_s`, then `decide()`);
* publish: `createdAt` → the command seen on LH_COMMANDS;
* actuator: the command seen → the spec.image patch committed on the emulator (its consumer, the
  rate limiter, the patch through the API).

`command_to_patch` is the last two together, from `createdAt` to the commit.

The tap also tells the bench when the wave is over: every expected volume reported on the target.

Every instant is taken where it happened (the emulator's commits, the stream's store time, the
command's `createdAt` in engine-upgrade; one host, one clock) except the command seen on
LH_COMMANDS: the tap stamps it when the bench's event loop gets to it, which the sandbox in that
loop keeps busy, so that stamp can be late by the loop's lag, and publish then looks longer and
actuator shorter than they were. `command_to_patch` carries no such bias.

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
from nats.js.api import DeliverPolicy

from bench.wave_timeline import Refill, summary
from corral_bus import Bus
from corral_model import longhorn as lh
from corral_model.envelopes import Command, ObjectEvent
from corral_model.subjects import COMMANDS_PREFIX, OBJECTS_PREFIX, OBJECTS_STREAM, escape_token

_volume_event = msgspec.json.Decoder(ObjectEvent[lh.Volume])
_command = msgspec.json.Decoder(Command)


@dataclass
class BusTap:
    """Volume events and engine-upgrade commands, each with the wall time it arrived."""

    image: str
    on_image: dict[str, float] = field(default_factory=dict)  # volume → first event on the image
    on_image_stored: dict[str, float] = field(default_factory=dict)  # … when LH_OBJECTS stored it
    commands: dict[str, tuple[float, float]] = field(default_factory=dict)  # volume → (createdAt, seen)
    _subscriptions: list[Any] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self, bus: Bus, namespace: str) -> None:
        ns = escape_token(namespace)
        self._subscriptions = [
            await bus.js.subscribe(
                f"{OBJECTS_PREFIX}.volume.{ns}.>",
                stream=OBJECTS_STREAM,
                cb=self._on_volume,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
            ),
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
            self.on_image_stored[event.name] = message.metadata.timestamp.timestamp()
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
    """The four hops of each refill (ms), summarised, for refills whose messages the tap saw, and
    `command_to_patch` (publish and actuator together, free of the tap's own delay)."""
    parts: dict[str, list[float]] = {
        "watcher": [],
        "decider": [],
        "publish": [],
        "actuator": [],
        "command_to_patch": [],
    }
    for refill in refills:
        stored = tap.on_image_stored.get(refill.freed_by.volume)
        command = tap.commands.get(refill.filled_by.volume)
        if stored is None or command is None:
            continue
        created, published = command
        parts["watcher"].append(stored - refill.freed_by.end)
        parts["decider"].append(created - stored)
        parts["publish"].append(published - created)
        parts["actuator"].append(refill.filled_by.start - published)
        parts["command_to_patch"].append(refill.filled_by.start - created)
    return {f"{name}_ms": summary(values) for name, values in parts.items()}
