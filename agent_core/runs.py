"""Runs that can be stopped from anywhere: a row per run, read before each step.

A run may execute on another instance than the one that receives Stop (durable jobs), so the
stop is a database write, and the run checks its own row before each model step and tool
call (``RunStop.requested``). An MCP call already in flight is never interrupted: it
finishes and is audited; nothing after it starts.

Example::

    runs = SqlRunRegistry(engine)
    stop = await runs.start(thread_id)   # the run's own stop signal
    await runs.stop(thread_id, "alice")  # on any instance
    assert await stop.requested()
    await runs.finish(stop.run_id)
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from sqlalchemy import select, update

from infra.clock import IdFactory, random_id
from infra.storage.schema import agent_runs
from infra.storage.store import SqlStore

RUNNING, STOPPED, DONE = "running", "stopped", "done"

__all__ = [
    "ALREADY_STOPPED",
    "MemoryRunRegistry",
    "RunRegistry",
    "RunStop",
    "SqlRunRegistry",
    "StopSignal",
]


class StopSignal(Protocol):
    """Whether the person who started a run asked to stop it (checked before each step)."""

    async def requested(self) -> bool: ...


class _AlwaysStopped:
    async def requested(self) -> bool:
        return True


# For a resume that only records withdrawn approvals: no model step and no tool call runs.
ALREADY_STOPPED: StopSignal = _AlwaysStopped()


class RunRegistry(Protocol):
    async def start(self, thread_id: str) -> RunStop:
        """Record a new running run on ``thread_id``; its stop signal."""
        ...

    async def stop(self, thread_id: str, by: str) -> int:
        """Mark every running run of ``thread_id`` stopped; how many there were."""
        ...

    async def is_stopped(self, run_id: str) -> bool: ...

    async def finish(self, run_id: str) -> None:
        """The run ended (a stopped run stays ``stopped``)."""
        ...


@dataclass(slots=True)
class RunStop:
    """One run's stop signal. Once it has seen the stop it stays stopped (no more reads)."""

    run_id: str
    registry: RunRegistry
    _seen: bool = field(default=False)

    async def requested(self) -> bool:
        if not self._seen:
            self._seen = await self.registry.is_stopped(self.run_id)
        return self._seen


class MemoryRunRegistry:
    """One process's runs (unit tests, the fake assistant)."""

    def __init__(self, new_id: IdFactory = random_id) -> None:
        self._new_id = new_id
        self._runs: dict[str, tuple[str, str]] = {}  # run_id → (thread_id, state)
        self._lock = asyncio.Lock()

    async def start(self, thread_id: str) -> RunStop:
        run_id = self._new_id()
        self._runs[run_id] = (thread_id, RUNNING)
        return RunStop(run_id, self)

    async def stop(self, thread_id: str, by: str) -> int:
        async with self._lock:
            hits = [r for r, (t, s) in self._runs.items() if t == thread_id and s == RUNNING]
            for run_id in hits:
                self._runs[run_id] = (thread_id, STOPPED)
            return len(hits)

    async def is_stopped(self, run_id: str) -> bool:
        return self._runs.get(run_id, ("", RUNNING))[1] == STOPPED

    async def finish(self, run_id: str) -> None:
        async with self._lock:
            thread_id, state = self._runs.get(run_id, ("", DONE))
            if state == RUNNING:
                self._runs[run_id] = (thread_id, DONE)


class SqlRunRegistry(SqlStore):
    """Runs in the project's database: a stop on one instance reaches a run on another."""

    async def start(self, thread_id: str) -> RunStop:
        run_id = self._new_id()
        async with self._engine.begin() as conn:
            await conn.execute(
                agent_runs.insert().values(
                    run_id=run_id, thread_id=thread_id, state=RUNNING, started_at=self._clock()
                )
            )
        return RunStop(run_id, self)

    async def stop(self, thread_id: str, by: str) -> int:
        c = agent_runs.c
        now: datetime = self._clock()
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(agent_runs)
                .where(c.thread_id == thread_id, c.state == RUNNING)
                .values(state=STOPPED, stopped_at=now, stopped_by=by[:255])
            )
        return int(result.rowcount or 0)

    async def is_stopped(self, run_id: str) -> bool:
        c = agent_runs.c
        async with self._engine.connect() as conn:
            state = (await conn.execute(select(c.state).where(c.run_id == run_id))).scalar()
        return state == STOPPED

    async def finish(self, run_id: str) -> None:
        c = agent_runs.c
        async with self._engine.begin() as conn:
            await conn.execute(
                update(agent_runs).where(c.run_id == run_id, c.state == RUNNING).values(state=DONE)
            )
