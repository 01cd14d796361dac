"""Start the reference servers in-process on loopback (tests, the sandbox, ``opsbot mcp``).

Sockets are bound first so each server knows its own URL — its audience — before it is built.

Example::

    async with start_reference_servers(issuer=..., jwks_url=...) as servers:
        servers.ticketing.url        # http://127.0.0.1:<port>/mcp
        servers.tickets              # the TicketStore, for assertions
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from infra.serving import bind_socket, serve_asgi, socket_url
from mcp_servers.app import AuthConfig, ScopedServer
from mcp_servers.auth import JwksClient
from mcp_servers.database import DatabaseConfig, DatabaseGateway, build_database, open_gateway
from mcp_servers.docs import DocStore, build_docs
from mcp_servers.docs import seed_docs as docs_seed
from mcp_servers.errors import ConfigError
from mcp_servers.hosts import DEFAULT_ALLOWED_HOSTS
from mcp_servers.ticketing import TicketStore, build_ticketing, seed_data

SERVER_NAMES = ("ticketing", "docs", "database")


@dataclass(frozen=True, slots=True)
class RunningServer:
    """One running server: its name (the tool prefix), endpoint URL and token audience."""

    name: str
    url: str
    audience: str
    server: ScopedServer

    @property
    def tool_scopes(self) -> dict[str, str]:
        return dict(self.server.tool_scopes)


@dataclass(frozen=True, slots=True)
class ReferenceServers:
    ticketing: RunningServer
    docs: RunningServer
    database: RunningServer
    tickets: TicketStore
    doc_store: DocStore
    db: DatabaseGateway

    def __iter__(self) -> Iterator[RunningServer]:
        return iter((self.ticketing, self.docs, self.database))

    def by_name(self, name: str) -> RunningServer:
        server: RunningServer = getattr(self, name)
        return server


def audience_for(sock: socket.socket) -> str:
    return f"{socket_url(sock)}/mcp"


@contextlib.asynccontextmanager
async def serve_server(server: ScopedServer, sock: socket.socket) -> AsyncIterator[RunningServer]:
    async with serve_asgi(server.asgi_app(), sock) as base:  # type: ignore[arg-type]
        yield RunningServer(server.name, f"{base}/mcp", server.auth.audience, server)


@contextlib.asynccontextmanager
async def _serve_together(
    pairs: list[tuple[ScopedServer, socket.socket]],
) -> AsyncIterator[list[RunningServer]]:
    """Serve several servers; they start and (the slow part) shut down concurrently."""
    stop = asyncio.Event()
    started: list[asyncio.Future[RunningServer]] = [
        asyncio.get_running_loop().create_future() for _ in pairs
    ]

    async def run(index: int) -> None:
        server, sock = pairs[index]
        try:
            async with serve_server(server, sock) as running:
                started[index].set_result(running)
                await stop.wait()
        except Exception as exc:
            if not started[index].done():
                started[index].set_exception(exc)
            raise

    tasks = [asyncio.create_task(run(i)) for i in range(len(pairs))]
    try:
        yield list(await asyncio.gather(*started))
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def open_server(
    name: str,
    auth: AuthConfig,
    *,
    store_url: str = "sqlite+aiosqlite://",
    database: DatabaseConfig | None = None,
    data_dir: Path | None = None,
    host: str = "127.0.0.1",
    public_url: str | None = None,
    allowed_hosts: Sequence[str] = DEFAULT_ALLOWED_HOSTS,
) -> AsyncIterator[ScopedServer]:
    """One seeded server by name (``opsbot mcp NAME``); its stores close with the block.

    ``public_url``: base of the canonical links of tickets and docs (default: the server's).
    ``allowed_hosts``: the ``Host`` names it answers (``mcp_servers.hosts``).
    """
    jwks = JwksClient(issuer=auth.issuer, jwks_url=auth.jwks_url)
    parsed = urlparse(auth.resource)
    links = public_url or f"{parsed.scheme}://{parsed.netloc}"
    if name == "ticketing":
        tickets = await TicketStore.open(store_url, base_url=links)
        try:
            await tickets.seed(seed_data())
            yield build_ticketing(tickets, auth, jwks=jwks, host=host, allowed_hosts=allowed_hosts)
        finally:
            await tickets.close()
    elif name == "docs":
        docs = await DocStore.open(store_url, base_url=links)
        try:
            await docs.seed(docs_seed())
            yield build_docs(docs, auth, jwks=jwks, host=host, allowed_hosts=allowed_hosts)
        finally:
            await docs.close()
    elif name == "database":
        config = database or DatabaseConfig()
        async with open_gateway(config, data_dir=data_dir) as db:
            yield build_database(
                db,
                auth,
                jwks=jwks,
                enable_query=config.enable_query,
                host=host,
                allowed_hosts=allowed_hosts,
            )
    else:
        raise ConfigError(f"unknown server {name!r}; choose one of {', '.join(SERVER_NAMES)}")


@contextlib.asynccontextmanager
async def start_reference_servers(
    *,
    issuer: str,
    jwks_url: str | None = None,
    host: str = "127.0.0.1",
    ticket_store_url: str = "sqlite+aiosqlite://",
    docs_store_url: str = "sqlite+aiosqlite://",
    database: DatabaseConfig | None = None,
    data_dir: Path | None = None,
    allowed_hosts: Sequence[str] = DEFAULT_ALLOWED_HOSTS,
) -> AsyncIterator[ReferenceServers]:
    """All three servers on free loopback ports, seeded, trusting ``issuer``'s keys."""
    socks = {name: bind_socket(host, 0) for name in SERVER_NAMES}
    jwks = JwksClient(issuer=issuer, jwks_url=jwks_url)

    def auth(name: str) -> AuthConfig:
        return AuthConfig(issuer=issuer, audience=audience_for(socks[name]), jwks_url=jwks_url)

    tickets = await TicketStore.open(ticket_store_url, base_url=socket_url(socks["ticketing"]))
    docs = await DocStore.open(docs_store_url, base_url=socket_url(socks["docs"]))
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(tickets.close)
        stack.push_async_callback(docs.close)
        await tickets.seed(seed_data())
        await docs.seed(docs_seed())
        db_config = database or DatabaseConfig()
        db = await stack.enter_async_context(open_gateway(db_config, data_dir=data_dir))
        servers = [
            build_ticketing(tickets, auth("ticketing"), jwks=jwks, allowed_hosts=allowed_hosts),
            build_docs(docs, auth("docs"), jwks=jwks, allowed_hosts=allowed_hosts),
            build_database(
                db,
                auth("database"),
                jwks=jwks,
                enable_query=db_config.enable_query,
                allowed_hosts=allowed_hosts,
            ),
        ]
        running = await stack.enter_async_context(
            _serve_together([(server, socks[server.name]) for server in servers])
        )
        yield ReferenceServers(
            running[0], running[1], running[2], tickets=tickets, doc_store=docs, db=db
        )
