"""The ``opsbot`` command line. Each subcommand lives in ``opsbot/commands/<name>.py``.

A command module exposes ``register(subparsers)``, which adds its parser and sets
``handler`` to an ``async def handler(args, settings) -> int`` and, optionally, ``check`` to
a ``check(args, settings)`` that raises ``ConfigError`` for what that command needs.

Start-up order keeps the common paths fast: command modules import only the standard
library, so ``--help`` and argument errors never load the stack; settings are validated next
(pydantic only), so a misconfiguration is one line and exit code 2 within a second; only then
does the chosen command import what it needs.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from opsbot import __version__

COMMAND_MODULES = (
    "opsbot.commands.migrate",
    "opsbot.commands.config",
    "opsbot.commands.dev",
    "opsbot.commands.idp",
    "opsbot.commands.broker",
    "opsbot.commands.slack",
    "opsbot.commands.teams",
    "opsbot.commands.serve",
    "opsbot.commands.mcp",
    "opsbot.commands.audit",
    "opsbot.commands.tools",
    "opsbot.commands.sweep",
    "opsbot.commands.approvals",
    "opsbot.commands.reconcile",
    "opsbot.commands.prune",
)
# Commands that need the database: a PostgreSQL server that does not answer stops them at once.
DATABASE_COMMANDS = frozenset(
    {"migrate", "slack", "teams", "serve", "sweep", "reconcile", "audit", "prune", "broker"}
)
# Files opsbot creates (SQLite databases and their WAL, key files, the sandbox's data) are
# readable by their owner only.
OWNER_ONLY_UMASK = 0o077

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="opsbot",
        description="opsbot: an operations assistant that acts as the requesting engineer.",
    )
    parser.add_argument("--version", action="version", version=f"opsbot {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. With ``argv`` None (the real command line) this also sets up the
    process: owner-only file modes and, outside a development terminal, no rich."""
    parser = build_parser()
    from opsbot.commands.args import utf8_problem

    not_text = utf8_problem(sys.argv[1:] if argv is None else argv)
    if not_text is not None:
        parser.error(f"{not_text}: not UTF-8 text")  # one line, exit 2
    args = parser.parse_args(argv)
    terminal = args.command == "dev" and sys.stderr.isatty()
    if argv is None:
        os.umask(OWNER_ONLY_UMASK)
        if not terminal and "rich" not in sys.modules:
            # rich comes only with the dev tools; hiding it makes structlog and httpx take
            # their plain paths (as in the production image) and saves ~0.3 s of imports.
            sys.modules["rich"] = None  # type: ignore[assignment]

    from opsbot.config_check import (
        EXIT_CONFIG_ERROR,
        ConfigError,
        load_settings,
        require_database,
        require_files,
        startup_error,
    )

    try:
        settings = load_settings()
        check = getattr(args, "check", None)
        if check is not None:
            check(args, settings)
        require_files(settings)
        if args.command in DATABASE_COMMANDS:
            require_database(settings)
    except ConfigError as exc:
        print(exc.line(), file=sys.stderr, flush=True)
        return EXIT_CONFIG_ERROR

    import asyncio

    from infra.logging import configure_logging

    configure_logging(settings, terminal=terminal)
    try:
        code: int = asyncio.run(args.handler(args, settings))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        problem = startup_error(exc, settings)
        if problem is None:
            raise
        log.debug("stopped by a setting", exc_info=True)
        print(problem.line(), file=sys.stderr, flush=True)
        return EXIT_CONFIG_ERROR
    return code


if __name__ == "__main__":
    sys.exit(main())
