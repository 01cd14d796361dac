"""Calls retried with tenacity that leave no reference cycle behind.

A tenacity ``AsyncRetrying`` keeps the actions of its last step, bound methods of itself, in
its per-thread state, so a retry object made for one call stays in a reference cycle, with
the callbacks it was given and all they hold (a run's sessions, a job's payload), until a
full garbage collection; and a full collection holds the GIL, so it stalls the ack thread
too (``infra.gc_pacing``). ``retried`` runs the call through tenacity and then clears that
state, so the retry object and what it holds are freed as the call returns.

Example::

    result = await retried(
        AsyncRetrying(stop=stop_after_attempt(3), reraise=True), fetch, url
    )
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from tenacity import AsyncRetrying

__all__ = ["retried"]

P = ParamSpec("P")
T = TypeVar("T")


async def retried(
    retrying: AsyncRetrying, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs
) -> T:
    """``fn(*args, **kwargs)`` as ``retrying`` retries it; its last failure as it raises it."""

    # tenacity awaits what it calls only when it recognises a coroutine function; a callable
    # that returns an awaitable otherwise (a lambda, a nested partial) would come back
    # unawaited, as its result.
    async def attempt() -> T:
        return await fn(*args, **kwargs)

    try:
        return await retrying(attempt)
    finally:
        retrying.iter_state.reset()
