"""A throwaway MCP server process for kill tests: ``python -m tests.reliability.slow_mcp_server``.

Prints ``PORT <n>`` once listening and ``CALL <tool>`` when a tool call starts, so a test can
SIGKILL it while a call is in flight. No auth: the tests' broker hands out opaque tokens.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from mcp.server.fastmcp import FastMCP

from infra.serving import bind_socket, serve_asgi


def build() -> FastMCP:
    server = FastMCP("fake", stateless_http=False, log_level="WARNING")

    @server.tool()
    async def lookup(item: str) -> dict[str, Any]:
        """Look an item up (a read)."""
        print(f"CALL lookup {item}", flush=True)
        return {"id": item, "status": "ok"}

    @server.tool()
    async def slow_lookup(item: str, seconds: float = 60.0) -> dict[str, Any]:
        """A read that takes a while."""
        print(f"CALL slow_lookup {item}", flush=True)
        await asyncio.sleep(seconds)
        return {"id": item}

    return server


async def main() -> None:
    sock = bind_socket()
    async with serve_asgi(build().streamable_http_app(), sock):
        print(f"PORT {sock.getsockname()[1]}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
