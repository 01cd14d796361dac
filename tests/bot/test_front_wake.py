"""The ack front wakes its worker on the main loop once per burst, not once per message:
each wake-up is a write to the main loop's self-pipe that costs the ack thread a GIL
hand-over while agents compute."""

from __future__ import annotations

import asyncio
import threading

from bot.front import WorkerWake
from infra.loop_thread import LoopThread


class Worker:
    def __init__(self) -> None:
        self.notified = 0

    def notify(self) -> None:
        self.notified += 1


async def test_a_burst_queues_one_wake_up_and_a_later_message_another() -> None:
    worker, wake = Worker(), WorkerWake()
    blocked, release = threading.Event(), threading.Event()
    async with LoopThread("main") as main:
        queued: list[object] = []
        real = main.loop.call_soon_threadsafe

        def counting(callback: object, *args: object) -> asyncio.Handle:
            if callback == wake._woken:  # not the test's own calls (``main.run``)
                queued.append(callback)
            return real(callback, *args)  # type: ignore[arg-type]

        main.loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        # The main loop is busy (an agent step): fifty messages are stored meanwhile.
        real(lambda: (blocked.set(), release.wait(10)))
        assert await asyncio.to_thread(blocked.wait, 10)
        for _ in range(50):
            wake.wake(main.loop, worker)
        assert len(queued) == 1
        release.set()
        await main.run(asyncio.sleep(0))
        assert worker.notified == 1  # the one claim it starts sees all fifty jobs

        # Once it has run, the next message wakes the worker again.
        wake.wake(main.loop, worker)
        await main.run(asyncio.sleep(0))
        assert (len(queued), worker.notified) == (2, 2)


def test_a_wake_up_that_could_not_be_queued_is_tried_again() -> None:
    worker, wake = Worker(), WorkerWake()
    closed = asyncio.new_event_loop()
    closed.close()
    for _ in range(2):
        try:
            wake.wake(closed, worker)
        except RuntimeError:
            pass
        else:
            raise AssertionError("a closed loop refuses callbacks")
    running = asyncio.new_event_loop()
    try:
        wake.wake(running, worker)
        running.run_until_complete(asyncio.sleep(0))
        assert worker.notified == 1
    finally:
        running.close()
