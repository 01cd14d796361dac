"""``infra.retries.retried``: tenacity's retries, and nothing left for the garbage collector.

A tenacity retry object made for one call kept itself (its last step's actions, its own
bound methods) in a reference cycle, and with it its callbacks and what they hold, such as a
run's sessions, until a full collection: one per tool call and per job outcome written.
"""

from __future__ import annotations

import weakref

import pytest
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

from infra.retries import retried


class Held:
    """Something a retry callback holds (a run's sessions, in production)."""


def retrying(held: Held, attempts: int = 3) -> AsyncRetrying:
    async def before_sleep(_: object) -> None:
        assert held is not None

    return AsyncRetrying(
        stop=stop_after_attempt(attempts),
        retry=retry_if_exception_type(ConnectionError),
        before_sleep=before_sleep,
        reraise=True,
    )


async def test_a_call_that_succeeds_at_once_leaves_nothing_behind(no_collector: None) -> None:
    held = Held()
    freed = weakref.ref(held)

    async def work(x: int) -> int:
        return x * 2

    assert await retried(retrying(held), work, 21) == 42
    del held
    assert freed() is None, "the retry object kept its callbacks alive"


async def test_a_call_retried_until_it_succeeds_leaves_nothing_behind(
    no_collector: None,
) -> None:
    held = Held()
    freed = weakref.ref(held)
    tries: list[int] = []

    async def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionError("down")
        return "up"

    assert await retried(retrying(held), flaky) == "up"
    assert len(tries) == 3
    del held
    assert freed() is None


async def test_the_last_failure_is_raised_and_other_errors_are_not_retried() -> None:
    tries: list[str] = []

    async def down() -> None:
        tries.append("down")
        raise ConnectionError(f"down {len(tries)}")

    with pytest.raises(ConnectionError, match="down 2"):
        await retried(retrying(Held(), attempts=2), down)

    async def wrong() -> None:
        tries.append("wrong")
        raise ValueError("not transient")

    with pytest.raises(ValueError, match="not transient"):
        await retried(retrying(Held()), wrong)
    assert tries == ["down", "down", "wrong"]


async def test_a_callable_that_returns_an_awaitable_is_awaited() -> None:
    async def double(x: int) -> int:
        return x * 2

    # Not a coroutine function: tenacity alone would hand back the coroutine as the result.
    assert await retried(retrying(Held()), lambda x: double(x), 21) == 42
