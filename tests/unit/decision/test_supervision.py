"""The runner's supervision: a follower task that ends takes the service down, loudly."""

from __future__ import annotations

import asyncio

import pytest

from corral_decision.supervision import TaskEnded, supervise


async def _forever() -> None:
    await asyncio.Event().wait()


async def _fail() -> None:
    raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")


async def _return() -> None:
    return None


@pytest.mark.parametrize(("body", "how"), [(_fail, "failed: UnicodeDecodeError"), (_return, "returned")])
async def test_a_follower_that_ends_cancels_the_loop_and_names_itself(body: object, how: str) -> None:
    main = asyncio.create_task(_forever(), name="toy-decisions")
    follower = asyncio.create_task(body(), name="toy-objects")  # type: ignore[operator]
    with pytest.raises(TaskEnded, match=f"task toy-objects {how}") as raised:
        await supervise(main, [follower], asyncio.Event())
    assert main.cancelled()
    assert raised.value.task_name == "toy-objects"


async def test_a_follower_killed_from_outside_is_reported_as_cancelled() -> None:
    main = asyncio.create_task(_forever(), name="toy-decisions")
    follower = asyncio.create_task(_forever(), name="toy-results")
    asyncio.get_running_loop().call_soon(follower.cancel)
    with pytest.raises(TaskEnded, match="task toy-results was cancelled"):
        await supervise(main, [follower], asyncio.Event())


async def test_followers_ending_after_the_stop_are_expected() -> None:
    stop = asyncio.Event()

    async def loop() -> str:
        await stop.wait()
        await asyncio.sleep(0)
        return "stopped"

    async def follower() -> None:
        await stop.wait()

    main = asyncio.create_task(loop())
    watched = asyncio.create_task(follower())
    asyncio.get_running_loop().call_soon(stop.set)
    assert await supervise(main, [watched], stop) == "stopped"


async def test_the_loops_own_failure_is_raised_as_it_is() -> None:
    async def broken() -> None:
        raise ValueError("decider bug")

    with pytest.raises(ValueError, match="decider bug"):
        await supervise(asyncio.create_task(broken()), [asyncio.create_task(_forever())], asyncio.Event())
