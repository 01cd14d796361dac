"""The project's own tables: one SQLAlchemy Core schema for SQLite and PostgreSQL.

Public API::

    from infra.storage import create_engine, metadata, migrate

    engine = create_engine("postgresql://postgres@127.0.0.1/opsbot")
    await migrate(engine)            # idempotent: applies what is missing
"""

from infra.storage.engine import async_url, create_engine, is_postgres, sync_url
from infra.storage.migrate import current_revision, migrate
from infra.storage.schema import metadata

__all__ = [
    "async_url",
    "create_engine",
    "current_revision",
    "is_postgres",
    "metadata",
    "migrate",
    "sync_url",
]
