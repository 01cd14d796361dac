"""What serving any chat app (``opsbot slack``, ``opsbot teams``, both under ``opsbot serve``)
does the same way: durable runs from the settings, the account-link callback, pruning of
processed deliveries, and background tasks that end with the app."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from assistant.types import AssistantPort, ChatUser
    from infra.observability.health import SchemaWatch
    from infra.settings import Settings

log = logging.getLogger(__name__)
PRUNE_EVERY_SECONDS = 3600


class _Prunable(Protocol):
    async def prune(self, older_than: timedelta) -> int: ...


async def open_jobs_engine(settings: Settings) -> tuple[AsyncEngine, SchemaWatch]:
    """The engine of the app's job runner and chat records, sized by ``OPSBOT_POOLS__JOBS``
    (its connections named ``jobs``), and the watch on its schema. Not migrated: said now,
    once, and the app serves unready (``/readyz`` 503) until ``opsbot migrate`` has run; it
    never migrates on its own (nor crashes for it)."""
    from infra.observability.health import SchemaWatch
    from infra.storage import create_engine

    jobs = settings.pools.jobs
    engine = create_engine(
        settings.resolved_database_url, pool_name="jobs", pool_size=jobs, max_overflow=jobs
    )
    schema = SchemaWatch(engine)
    with contextlib.suppress(Exception):
        await schema.check()
    return engine, schema


def durable_run_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of a platform's ``open_durable_*bot``: run limits, lease, poll."""
    from infra.jobs import RunLimits

    runs = settings.runs
    return {
        "limits": RunLimits(runs.global_runs, runs.per_user_runs),
        "lease": timedelta(seconds=runs.lease_seconds),
        "poll_seconds": runs.poll_seconds,
    }


def link_callback(
    assistant: AssistantPort, linked: Callable[[ChatUser, str], Awaitable[None]], platform: str
) -> Callable[[str, str, str | None], Awaitable[str]]:
    """Finish an account link (``/oauth/callback``, with the RFC 9207 ``iss`` when the IdP
    sends one) and tell the chat side (``linked``: its Connect prompt and home are updated)."""

    async def complete(state: str, code: str, iss: str | None) -> str:
        result = await assistant.complete_link(state, code, iss=iss)
        try:
            await linked(result.chat_user, result.who)
        except Exception:  # the link itself is done; a stale prompt is only cosmetic
            log.warning("could not update %s after linking", platform, exc_info=True)
        return result.who

    return complete


async def prune_forever(store: _Prunable, keep: timedelta, what: str) -> None:
    """Drop ``what`` (processed delivery ids) older than ``keep``, once an hour."""
    while True:
        try:
            removed = await store.prune(keep)
            log.info("pruned %d %s", removed, what)
        except Exception as exc:
            # A database error (down, or not migrated: /readyz says which) is one line; a
            # bug keeps its traceback.
            from sqlalchemy.exc import DBAPIError

            log.warning(
                "pruning %s failed: %s",
                what,
                type(exc).__name__,
                exc_info=not isinstance(exc, DBAPIError),
            )
        await asyncio.sleep(PRUNE_EVERY_SECONDS)


@contextlib.asynccontextmanager
async def running(*work: Coroutine[Any, Any, Any]) -> AsyncIterator[None]:
    """Each of ``work`` as a task while the block runs; all cancelled and awaited after it."""
    tasks = [asyncio.create_task(w) for w in work]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
