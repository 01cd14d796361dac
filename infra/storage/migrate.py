"""Apply Alembic migrations programmatically (``opsbot migrate``), and tell whether a
database is at the revision this code expects (``SchemaCheck``, for ``/readyz``)."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
log = logging.getLogger(__name__)
# What this process has said about its schema: each problem is logged once (the readiness
# probe and the job loop both run into it every few seconds), again only after it changed.
_said: set[str] = set()


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


async def migrate(engine: AsyncEngine, revision: str = "head") -> str | None:
    """Upgrade the database to ``revision``; a no-op when it is already there. Returns the
    revision it found (``None``: empty). On PostgreSQL under the set-up advisory lock:
    instances migrating at once take turns, and only the first finds work to do."""

    def _upgrade(connection: Connection) -> str | None:
        before = MigrationContext.configure(connection).get_current_revision()
        command.upgrade(alembic_config(connection), revision)
        return before

    async def upgrade() -> str | None:
        async with engine.begin() as connection:
            return await connection.run_sync(_upgrade)

    if engine.dialect.name == "postgresql":
        from infra.storage.postgres import setup_lock

        async with setup_lock(engine.url.render_as_string(hide_password=False)):
            return await upgrade()
    return await upgrade()


@functools.cache
def head_revision() -> str:
    """The revision this code's migrations end at."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at, or ``None`` before the first migration."""

    def _current(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as connection:
        return await connection.run_sync(_current)


class SchemaOutOfDateError(RuntimeError):
    """The database is not at the revision this code expects (``opsbot migrate`` fixes it)."""

    def __init__(self, current: str | None, expected: str) -> None:
        super().__init__(
            f"database schema is at revision {current or 'none'}, expected {expected}: "
            "run `opsbot migrate`"
        )
        self.current = current
        self.expected = expected


async def check_schema(engine: AsyncEngine) -> None:
    """Raise ``SchemaOutOfDateError`` unless the database is at this code's head revision."""
    current, expected = await current_revision(engine), head_revision()
    if current != expected:
        raise SchemaOutOfDateError(current, expected)


def report_schema(problem: SchemaOutOfDateError | None) -> None:
    """Log ``problem`` once per process (``None``: the schema is fine now, which is said
    once if a problem was)."""
    if problem is None:
        if _said:
            _said.clear()
            log.info("database schema is at revision %s: up to date", head_revision())
        return
    if str(problem) not in _said:
        _said.clear()
        _said.add(str(problem))
        log.error("%s", problem)
