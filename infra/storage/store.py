"""What every store in the project's database starts from: the engine, with time and new
ids injected (tests drive both; nothing reads the wall clock or draws an id behind them)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from infra.clock import Clock, IdFactory, random_id, utc_now


class SqlStore:
    def __init__(
        self, engine: AsyncEngine, clock: Clock = utc_now, new_id: IdFactory = random_id
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._new_id = new_id
