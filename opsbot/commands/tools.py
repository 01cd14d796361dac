"""``opsbot tools``: every MCP tool with its server, classification, allowlisting and why.

Servers in ``static`` or ``none`` mode are listed with opsbot's own credential; ``exchange``
and ``oauth`` servers need a linked user to list with (``--as SUBJECT``): opsbot never holds
a credential of its own for them.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "tools", help="list MCP tools: server, read/write, allowlisted, and why"
    )
    parser.add_argument(
        "--as",
        dest="subject",
        help="IdP subject of a linked user, to list exchange/oauth servers with their token",
    )
    parser.set_defaults(handler=handle)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from langgraph.checkpoint.memory import InMemorySaver

    from agent_core.catalog import describe_tools
    from agent_core.checkpointer import checkpoint_serializer
    from agent_core.errors import ToolCallError
    from agent_core.factory import build_agent
    from agent_core.threads import MemoryThreadStore
    from agent_core.tools import ServerTools
    from broker import BrokerError, Identity
    from broker.factory import open_identity_service
    from infra.storage import create_engine

    engine = create_engine(settings.resolved_database_url)
    try:
        async with open_identity_service(settings, engine) as identities:
            agent = build_agent(
                settings,
                broker=identities,
                threads=MemoryThreadStore(),
                checkpointer=InMemorySaver(serde=checkpoint_serializer()),
            )
            identity = Identity(subject="opsbot-tools")
            if args.subject:
                try:
                    identity = await identities.resolve_subject(args.subject)
                except BrokerError as exc:
                    print(f"--as {args.subject}: {exc}")
                    return 2
            found: dict[str, ServerTools | ToolCallError] = await agent.discover_all(
                identity, user_servers=bool(args.subject)
            )
            rows, notes = describe_tools(agent.servers, found, agent.policy)
    finally:
        await engine.dispose()
    width = max((len(r.tool) for r in rows), default=4)
    print(f"{'TOOL':<{width}}  {'SERVER':<12} {'KIND':<5} {'ALLOWED':<7} WHY")
    for r in rows:
        allowed = "yes" if r.allowlisted else "no"
        print(f"{r.tool:<{width}}  {r.server:<12} {r.kind:<5} {allowed:<7} {r.why}")
    for note in notes:
        print(f"! {note}")
    return 0
