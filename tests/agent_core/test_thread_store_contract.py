"""One contract for every ThreadStore backend: memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from agent_core.threads import (
    MemoryThreadStore,
    NewThreads,
    NotThreadOwnerError,
    PlatformRef,
    SqlThreadStore,
    ThreadNotFoundError,
    ThreadStore,
)
from infra.storage import create_engine

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
REF = PlatformRef("slack", "T1", "C1", "1712.0001")


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ThreadStore]:
    if request.param == "memory":
        yield MemoryThreadStore(clock=lambda: NOW)
        return
    url = request.getfixturevalue(f"{request.param}_url")
    engine = create_engine(url)
    yield SqlThreadStore(engine, clock=lambda: NOW)
    await engine.dispose()


async def test_creates_a_thread_owned_by_the_first_user(store: ThreadStore) -> None:
    thread = await store.get_or_create(REF, "alice")
    assert thread.owner_subject == "alice"
    assert thread.ref == REF
    assert thread.created_at == NOW
    assert await store.get(thread.thread_id) == thread


async def test_same_reference_returns_the_same_thread_and_keeps_its_owner(
    store: ThreadStore,
) -> None:
    first = await store.get_or_create(REF, "alice")
    again = await store.get_or_create(REF, "mallory")
    assert again.thread_id == first.thread_id
    assert again.owner_subject == "alice"


async def test_different_references_get_different_random_ids(store: ThreadStore) -> None:
    ids = {
        (await store.get_or_create(PlatformRef("slack", "T1", "C1", f"17.{i}"), "alice")).thread_id
        for i in range(20)
    }
    assert len(ids) == 20
    assert all(len(thread_id) >= 20 for thread_id in ids)


async def test_owner_check(store: ThreadStore) -> None:
    thread = await store.get_or_create(REF, "alice")
    assert (await store.require_owner(thread.thread_id, "alice")).thread_id == thread.thread_id
    with pytest.raises(NotThreadOwnerError):
        await store.require_owner(thread.thread_id, "bob")
    with pytest.raises(ThreadNotFoundError):
        await store.require_owner("no-such-thread", "alice")


async def test_unknown_thread_is_none(store: ThreadStore) -> None:
    assert await store.get("nope") is None


async def test_concurrent_creation_yields_one_thread(store: ThreadStore) -> None:
    users = itertools.cycle(["alice", "bob"])
    threads = await asyncio.gather(*(store.get_or_create(REF, next(users)) for _ in range(20)))
    assert len({t.thread_id for t in threads}) == 1
    assert len({t.owner_subject for t in threads}) == 1


async def test_a_created_thread_is_new_once_and_only_to_its_creator(store: ThreadStore) -> None:
    """``take_new`` tells the first caller that this store just created the thread (so it
    has no checkpoint); never twice, never for a thread it found already there."""
    thread = await store.get_or_create(REF, "alice")
    assert store.take_new(thread.thread_id)
    assert not store.take_new(thread.thread_id)
    again = await store.get_or_create(REF, "alice")  # found, not created
    assert not store.take_new(again.thread_id)
    assert not store.take_new("no-such-thread")


def test_new_threads_forget_the_oldest_past_their_limit() -> None:
    new = NewThreads(limit=2)
    for thread_id in ("a", "b", "c"):
        new.add(thread_id)
    assert [new.take(t) for t in ("a", "b", "c")] == [False, True, True]
