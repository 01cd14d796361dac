"""The project's own tables: one SQLAlchemy Core schema for SQLite and PostgreSQL.

Public API::

    from infra.storage import create_engine, metadata, migrate

    engine = create_engine("postgresql://postgres@127.0.0.1/opsbot")
    await migrate(engine)            # idempotent: applies what is missing
"""

from infra.storage.engine import async_url, create_engine, is_postgres, sync_url, warm_pool
from infra.storage.faults import is_connection_error
from infra.storage.migrate import (
    SchemaOutOfDateError,
    check_schema,
    current_revision,
    head_revision,
    migrate,
)
from infra.storage.schema import metadata

__all__ = [
    "SchemaOutOfDateError",
    "async_url",
    "check_schema",
    "create_engine",
    "current_revision",
    "head_revision",
    "is_connection_error",
    "is_postgres",
    "metadata",
    "migrate",
    "sync_url",
    "warm_pool",
]
