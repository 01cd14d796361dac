"""``opsbot migrate``: apply the database migrations (idempotent)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("migrate", help="apply database migrations (safe to repeat)")
    parser.set_defaults(handler=handle)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from infra.storage import create_engine, current_revision, migrate

    url = settings.resolved_database_url
    engine = create_engine(url)
    try:
        before = await current_revision(engine)
        await migrate(engine)
        after = await current_revision(engine)
    finally:
        await engine.dispose()
    if before == after:
        print(f"database is up to date at revision {after}")
    else:
        print(f"migrated database from {before or 'empty'} to {after}")
    return 0
