"""Apply Alembic migrations programmatically (``opsbot migrate``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Upgrade the database to ``revision``; a no-op when it is already there."""

    def _upgrade(connection: Connection) -> None:
        command.upgrade(alembic_config(connection), revision)

    async with engine.begin() as connection:
        await connection.run_sync(_upgrade)


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at, or ``None`` before the first migration."""

    def _current(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as connection:
        return await connection.run_sync(_current)
