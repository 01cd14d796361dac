"""App Home work once at a time per key: a burst of changes to one approval (or one user's
Home) is one or two rounds of work, never one per change and never two at once."""

from __future__ import annotations

import asyncio

import pytest

from bot.slack.once import OnceAtATime


async def test_a_burst_for_one_key_runs_at_most_twice_and_never_at_once() -> None:
    runs = OnceAtATime[str]()
    started: list[str] = []
    running = 0
    most = 0
    release = asyncio.Event()

    async def work(key: str) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        started.append(key)
        await release.wait()
        running -= 1

    first = asyncio.create_task(runs.run("a1", work))
    await asyncio.sleep(0)
    burst = [asyncio.create_task(runs.run("a1", work)) for _ in range(5)]
    await asyncio.gather(*burst)  # they only mark "once more": the first run does it
    other = asyncio.create_task(runs.run("a2", work))  # another key is not held back
    await asyncio.sleep(0)
    assert started == ["a1", "a2"]
    release.set()
    await asyncio.gather(first, other)
    assert started == ["a1", "a2", "a1"]  # once more for the burst, after the first
    assert most == 2  # a1 and a2 side by side; never two runs of a1


async def test_a_failing_run_lets_the_next_ask_run_again() -> None:
    runs = OnceAtATime[str]()
    calls: list[str] = []

    async def broken(key: str) -> None:
        calls.append(key)
        raise RuntimeError("slack is down")

    for _ in range(2):
        with pytest.raises(RuntimeError):
            await runs.run("u1", broken)
    assert calls == ["u1", "u1"]
