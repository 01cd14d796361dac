"""The dev IdP and the reference MCP servers in a process of their own, as deployed (not a
bench: the leading underscore hides it).

On a thread of the bench process they shared its GIL with the app they answer: every token
they signed and every tool call they served held up the app's loop (and the other way
round), which no deployment does. Here they run in a child process; the parent gets the
same things it used: a ``RunningIdp`` (issuer, client, audiences already set) and the
servers (name, URL, audience each, and the ticketing server's change log over HTTP).

Example::

    async with servers_process(data_dir) as (idp, servers):
        async with open_agent_env(idp, servers) as env:
            ...
        changes = await servers.tickets.all_changes()
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web


@dataclass(frozen=True)
class _Server:
    name: str
    url: str
    audience: str


class _Provider:
    """The child's IdP already knows the servers' audiences (set there)."""

    def __init__(self, audiences: dict[str, str]) -> None:
        self.audiences = dict(audiences)

    def set_audience(self, name: str, audience: str) -> None:
        self.audiences[name] = audience


class _Tickets:
    def __init__(self, url: str) -> None:
        self._url = url

    async def all_changes(self) -> list[Any]:
        from mcp_servers.ticketing.models import ChangeEntry

        async with aiohttp.ClientSession() as http, http.get(self._url) as response:
            return [ChangeEntry.model_validate(e) for e in await response.json()]


class _Servers:
    def __init__(self, servers: list[_Server], changes_url: str, control_url: str) -> None:
        self._servers = servers
        self.tickets = _Tickets(changes_url)
        self._control_url = control_url

    async def cpu_seconds(self) -> float:
        """The child's CPU time so far (user + system, all its threads)."""
        async with aiohttp.ClientSession() as http, http.get(f"{self._control_url}/cpu") as r:
            return float((await r.json())["cpu_seconds"])

    async def profile(self, action: str, path: str = "") -> None:
        """``start`` cProfile of the child's loop (CPU time), or ``stop`` it into ``path``."""
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{self._control_url}/profile/{action}", params={"path": path}) as r,
        ):
            r.raise_for_status()

    def __iter__(self) -> Iterator[_Server]:
        return iter(self._servers)

    def by_name(self, name: str) -> _Server:
        return next(s for s in self._servers if s.name == name)


@contextlib.asynccontextmanager
async def servers_process(data_dir: Path) -> AsyncIterator[tuple[Any, Any]]:
    """Start the child; the IdP and the servers as the parent uses them, until exit."""
    from bench._support import child_process
    from testing.identity import RunningIdp

    async with child_process(
        "bench._servers_process", str(data_dir), what="the servers' process"
    ) as (_child, info):
        idp = RunningIdp(
            issuer=info["issuer"],
            provider=_Provider(info["audiences"]),  # type: ignore[arg-type]
            client_id=info["client_id"],
            client_secret=info["client_secret"],
        )
        servers = _Servers(
            [_Server(**s) for s in info["servers"]], info["changes_url"], info["control_url"]
        )
        yield idp, servers


async def _serve(data_dir: Path) -> None:
    from infra.serving import bind_socket, serve_aiohttp
    from mcp_servers import start_reference_servers
    from testing.identity import start_dev_idp

    async with (
        start_dev_idp() as idp,
        start_reference_servers(
            issuer=idp.issuer, jwks_url=idp.jwks_url, data_dir=data_dir
        ) as servers,
    ):
        for s in servers:
            idp.provider.set_audience(s.name, s.audience)

        async def changes(_: web.Request) -> web.Response:
            entries = await servers.tickets.all_changes()
            return web.json_response([e.model_dump(mode="json") for e in entries])

        # Only the servers' loop thread is profiled (CPU time), from start to stop
        profiler = cProfile.Profile(time.thread_time)

        async def cpu(_: web.Request) -> web.Response:
            return web.json_response({"cpu_seconds": time.process_time()})

        async def profile(request: web.Request) -> web.Response:
            if request.match_info["action"] == "start":
                profiler.enable()
            else:
                profiler.disable()
                profiler.dump_stats(request.query["path"])
            return web.Response()

        app = web.Application()
        app.router.add_get("/changes", changes)
        app.router.add_get("/cpu", cpu)
        app.router.add_post("/profile/{action}", profile)
        async with serve_aiohttp(app, bind_socket("127.0.0.1", 0)) as base:
            info = {
                "issuer": idp.issuer,
                "client_id": idp.client_id,
                "client_secret": idp.client_secret,
                "audiences": dict(idp.provider.audiences),
                "servers": [
                    {"name": s.name, "url": s.url, "audience": s.audience} for s in servers
                ],
                "changes_url": f"{base}/changes",
                "control_url": base,
            }
            print(json.dumps(info), flush=True)
            # Until the parent closes stdin (or dies)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(_serve(Path(sys.argv[1])))
