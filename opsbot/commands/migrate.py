"""``opsbot migrate``: apply the database migrations and set up the LangGraph checkpointer's
and user-memory store's tables (idempotent; instances running it at once take turns).

``opsbot slack`` does not migrate: on a database behind this code it reports unready
(``/readyz`` 503, "run `opsbot migrate`") until this has run (the Procfile's release step;
``opsbot dev`` migrates its own sandbox database)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("migrate", help="apply database migrations (safe to repeat)")
    parser.set_defaults(handler=handle)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from agent_core.checkpointer import open_checkpointer
    from infra.storage import create_engine, current_revision, migrate
    from memory.store import open_memory_store

    url = settings.resolved_database_url
    engine = create_engine(url)
    try:
        before = await migrate(engine)
        after = await current_revision(engine)
    finally:
        await engine.dispose()
    # Opening them runs their own (idempotent) set-up.
    async with open_checkpointer(url, pool_size=1):
        pass
    if settings.memory.enabled:
        async with open_memory_store(url):
            pass
    if before == after:
        print(f"database is up to date at revision {after}")
    else:
        print(f"migrated database from {before or 'empty'} to {after}")
    return 0
