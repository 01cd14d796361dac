"""``opsbot config example``: print ``.env.example``, generated from the ``Settings`` model.

Defaults and descriptions live only in ``infra/settings.py`` (a string under a field is its
description); regenerate after changing them::

    uv run opsbot config example > .env.example

``tests/test_env_example.py`` fails when the committed file is not what this prints.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("config", help="configuration helpers")
    parser.add_argument("what", choices=["example"], help="example: print .env.example")
    parser.set_defaults(handler=handle)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from opsbot.env_example import env_example

    print(env_example(), end="")
    return 0
