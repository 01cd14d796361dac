"""The ``opsbot`` command line. Each subcommand lives in ``opsbot/commands/<name>.py``.

A command module exposes ``register(subparsers)``, which adds its parser and sets
``handler`` to an ``async def handler(args, settings) -> int``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence

from infra.errors import ConfigurationError
from infra.logging import configure_logging
from infra.settings import Settings
from opsbot import __version__

COMMAND_MODULES = (
    "opsbot.commands.migrate",
    "opsbot.commands.dev",
    "opsbot.commands.idp",
    "opsbot.commands.broker",
    "opsbot.commands.slack",
    "opsbot.commands.mcp",
    "opsbot.commands.audit",
    "opsbot.commands.sweep",
    "opsbot.commands.reconcile",
    "opsbot.commands.prune",
)


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
    args = build_parser().parse_args(argv)
    settings = Settings()
    configure_logging(settings)
    try:
        code: int = asyncio.run(args.handler(args, settings))
    except KeyboardInterrupt:
        return 130
    except ConfigurationError as exc:  # for a person: one line, no traceback
        print(f"opsbot: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
