"""``opsbot dev``: run what opsbot has so far on embedded defaults (SQLite in ./.opsbot)."""

from __future__ import annotations

import argparse
from typing import Any

from opsbot.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "dev", help="run opsbot locally on embedded defaults (SQLite, dev IdP, sandbox)"
    )
    parser.set_defaults(handler=handle)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from agent_core.checkpointer import open_checkpointer
    from opsbot.storage import create_engine, current_revision, migrate

    url = settings.resolved_database_url
    engine = create_engine(url)
    try:
        await migrate(engine)
        revision = await current_revision(engine)
    finally:
        await engine.dispose()
    async with open_checkpointer(url):
        pass
    print(f"opsbot dev: database {url} migrated to revision {revision}; checkpointer ready.")
    return 0
