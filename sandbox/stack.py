"""``opsbot dev``'s whole system in one process: dev IdP, the three reference MCP servers,
the Slack emulator (web UI + Web API), and the production Bolt app with the real ``Assistant``
(in-process broker, SQLite checkpointer and tables, approvals, the expiry sweeper).

Every socket is bound first, so a port in use fails before anything starts and every
component knows the others' URLs (port 0 works everywhere). The bot is configured only
through ``Settings``: its Web API base URL points at the emulator, its request URL is where
the emulator POSTs signed events — nothing in ``bot/`` knows it runs in a sandbox.

Example::

    async with open_sandbox(settings) as sandbox:
        print(sandbox.urls.ui)
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import logging
import re
import secrets
import shutil
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from infra.serving import PortInUseError, bind_socket, serve_asgi, socket_url
from infra.settings import McpServerSettings, SandboxSettings, Settings
from infra.tls import shared_ssl_context
from sandbox.delivery import AppDelivery
from sandbox.emulator import SlackEmulator
from sandbox.keep import CHATS_FILE, load_chats, save_chats
from sandbox.one_identity import one_identity
from sandbox.teams_chat import TeamsChat, with_fake_teams
from sandbox.web import build_app
from testing import teams as fake_teams
from testing.slack_webapi import WebApi
from testing.slack_workspace import User, Workspace

log = logging.getLogger(__name__)

# (settings field, what listens there, environment variable)
PORTS: tuple[tuple[str, str, str], ...] = (
    ("port", "the sandbox web UI", "OPSBOT_SANDBOX__PORT"),
    ("app_port", "the Slack app", "OPSBOT_SANDBOX__APP_PORT"),
    ("idp_port", "the development IdP", "OPSBOT_SANDBOX__IDP_PORT"),
    ("ticketing_port", "the ticketing MCP server", "OPSBOT_SANDBOX__TICKETING_PORT"),
    ("docs_port", "the docs MCP server", "OPSBOT_SANDBOX__DOCS_PORT"),
    ("database_port", "the database MCP server", "OPSBOT_SANDBOX__DATABASE_PORT"),
)
MCP_NAMES = ("ticketing", "docs", "database")
SourceLookup = Callable[[str, str], Awaitable[tuple[str, list[tuple[str, str]]] | None]]


@dataclass(frozen=True, slots=True)
class SandboxUrls:
    ui: str
    app: str
    idp: str
    mcp: dict[str, str]


@dataclass(frozen=True, slots=True)
class Sandbox:
    urls: SandboxUrls
    settings: Settings  # what the bot runs on (derived from the caller's)
    emulator: SlackEmulator
    api: WebApi
    data_dir: Path
    teams: TeamsChat | None  # None: the `teams` extra is not installed
    # The dev IdP, the MCP servers and the bot start behind the web UI, since loading them
    # is most of the start-up time: done when they serve, or with the error that stopped them.
    ready: asyncio.Future[None]


def bind_ports(config: SandboxSettings) -> dict[str, socket.socket]:
    """Bind every sandbox port, or none: ``PortInUseError`` names the port and its setting."""
    socks: dict[str, socket.socket] = {}
    try:
        for name, what, env in PORTS:
            port = int(getattr(config, name))
            try:
                socks[name] = bind_socket(config.host, port)
            except PortInUseError as exc:
                raise PortInUseError(
                    exc.errno,
                    f"port {port} on {config.host} ({what}) is already in use; stop what is "
                    f"using it or set {env} to another port (0 picks a free one)",
                ) from None
    except BaseException:
        for sock in socks.values():
            sock.close()
        raise
    return socks


def demo_users(directory_path: Path | None) -> list[User]:
    """The dev IdP directory's users as workspace members (``alice`` → ``UALICE``)."""
    from broker.dev_idp import load_directory

    directory = load_directory(directory_path)
    return [
        User(
            "U" + re.sub(r"[^A-Z0-9]", "", u.subject.upper()),
            u.subject,
            u.name,
            u.email,
            tuple(sorted(u.groups)),
        )
        for u in directory.users.values()
    ]


def teams_available() -> bool:
    """The Teams app needs the ``opsbot[teams]`` extra (the Agents SDK)."""
    return importlib.util.find_spec("microsoft_agents") is not None


def sandbox_settings(
    settings: Settings,
    socks: dict[str, socket.socket],
    data_dir: Path,
    teams: fake_teams.FakeTeams | None = None,
) -> Settings:
    """The caller's settings with every address pointed at the sandbox's own components.

    The MCP servers are the sandbox's reference servers plus every other server in the
    caller's ``OPSBOT_MCP_SERVERS``, so a team can try its own server locally. A configured
    server with a reference server's name is the sandbox's own (one warning if it differed).
    """
    urls = {name: socket_url(sock) for name, sock in socks.items()}
    servers = [
        McpServerSettings(
            name=name,
            url=f"{urls[name + '_port']}/mcp",
            audience=f"{urls[name + '_port']}/mcp",
        )
        for name in MCP_NAMES
    ]
    defaults = {s.name: s for s in _default_servers()}
    for server in settings.mcp_servers:
        if server.name not in MCP_NAMES:
            servers.append(server)
        elif server != defaults.get(server.name):
            log.warning(
                "the sandbox runs its own %r server: the configured one (%s) is not used",
                server.name,
                server.url,
            )
    derived = settings.model_copy(
        update={
            "data_dir": data_dir,
            "database_url": f"sqlite:///{(data_dir / 'opsbot.db').as_posix()}",
            "mcp_servers": servers,
            "idp": settings.idp.model_copy(update={"issuer": urls["idp_port"], "token_url": None}),
            "broker": settings.broker.model_copy(
                update={
                    "mode": "inprocess",
                    "link_callback_url": f"{urls['app_port']}/oauth/callback",
                }
            ),
            "slack": settings.slack.model_copy(update={"allowed_team_ids": []}),
            "slack_bot_token": SecretStr("xoxb-sandbox-" + secrets.token_hex(12)),
            "slack_signing_secret": SecretStr(secrets.token_hex(16)),
            "slack_api_url": f"{urls['port']}/api/",
        }
    )
    if teams is not None:  # the Teams app beside Slack's, talking to the fake channel
        derived = with_fake_teams(derived, teams)
    # Checked as at start-up (names unique; with no '_' in them, tool names cannot collide).
    Settings.__pydantic_validator__.validate_assignment(derived, "mcp_servers", servers)
    return derived


def _default_servers() -> list[McpServerSettings]:
    default: list[McpServerSettings] = Settings.model_fields["mcp_servers"].get_default(
        call_default_factory=True
    )
    return default


def reset_data_dir(root: Path, *, keep: bool = False) -> Path:
    """``<data dir>/sandbox``, emptied: the sandbox starts from the seed data every time.
    With ``keep`` (``opsbot dev --keep``) what is there stays: the databases (links,
    approvals, tickets), the dev IdP's keys and refresh tokens, the conversations."""
    path = root / "sandbox"
    if path.exists() and not keep:
        shutil.rmtree(path)
    path.mkdir(parents=True, mode=0o700, exist_ok=True)  # demo keys and data: the owner's only
    return path


# Imported in a worker thread while the web UI already serves (see ``open_sandbox``).
BACKEND_MODULES = (
    "opsbot.wiring",
    "assistant.service",
    "bot.slack",
    "bot.slack.durable",
    "bot.teams",
    "bot.teams.durable",
    "opsbot.observability",
    "infra.storage",
    "mcp_servers",
    "mcp_servers.runner",
    "mcp_servers.database",
    "mcp_servers.docs",
    "mcp_servers.ticketing",
)


def _import_backend() -> None:
    # Only a head start: a module moved or missing is reported by the real import later.
    for name in BACKEND_MODULES:
        with contextlib.suppress(ModuleNotFoundError):
            importlib.import_module(name)


@contextlib.asynccontextmanager
async def open_sandbox(
    settings: Settings, *, background: bool = False, keep: bool = False
) -> AsyncIterator[Sandbox]:
    """Start everything; stop everything (in reverse order) when the block exits.

    ``keep``: start from what the last run left in the data directory instead of the seed
    data, and leave this run's state there when stopping (see ``reset_data_dir``).

    The web UI starts first. With ``background=True`` the block is entered as soon as it
    serves, while the IdP, MCP servers and bot are still loading (``Sandbox.ready`` says
    when they are up): their sockets already listen, so a request sent meanwhile waits in
    the backlog instead of failing. Otherwise the block is entered when everything serves.
    """
    socks = bind_ports(settings.sandbox)
    async with contextlib.AsyncExitStack() as stack:
        for sock in socks.values():
            stack.callback(sock.close)
        data_dir = reset_data_dir(settings.data_dir, keep=keep)
        channel: fake_teams.FakeTeams | None = None
        if teams_available():
            channel = fake_teams.FakeTeams()
            stack.push_async_callback((await fake_teams.start_fake_teams(channel)).cleanup)
        derived = sandbox_settings(settings, socks, data_dir, channel)
        ui_url = socket_url(socks["port"])
        app_url = socket_url(socks["app_port"])
        loop = asyncio.get_running_loop()
        lookup: asyncio.Future[SourceLookup] = loop.create_future()

        async def sources(kind: str, key: str) -> tuple[str, list[tuple[str, str]]] | None:
            return await (await asyncio.shield(lookup))(kind, key)

        workspace = Workspace.demo(
            demo_users(settings.idp.directory_path), derived.slack.approvals_channel
        )
        assert derived.slack_bot_token is not None
        assert derived.slack_signing_secret is not None
        api = WebApi(workspace, derived.slack_bot_token.get_secret_value())
        http = await stack.enter_async_context(
            httpx.AsyncClient(timeout=60, verify=shared_ssl_context())
        )
        delivery = AppDelivery(
            f"{app_url}/slack/events", derived.slack_signing_secret.get_secret_value(), http
        )
        emulator = SlackEmulator(workspace, delivery, ui_url)
        stack.push_async_callback(emulator.aclose)
        people = list(workspace.humans())
        teams = None
        if channel is not None:
            teams = TeamsChat(channel, {u.name: u for u in people}, app_url)
            stack.push_async_callback(teams.aclose)
        if keep:
            load_chats(data_dir / CHATS_FILE, workspace, teams)
            # Saved after the bot has stopped (callbacks run in reverse): its last words too.
            stack.callback(save_chats, data_dir / CHATS_FILE, workspace, teams)
        web = build_app(emulator, api, sources, teams)
        await stack.enter_async_context(serve_asgi(web, socks["port"]))  # type: ignore[arg-type]
        stop = asyncio.Event()
        backend = asyncio.create_task(
            _run_backend(
                derived, socks, data_dir, ui_url, lookup, stop, people, teams is not None, keep
            )
        )
        stack.push_async_callback(_stop_backend, backend, lookup, stop)
        urls = SandboxUrls(
            ui_url,
            app_url,
            derived.idp.issuer,
            {s.name: s.url for s in derived.mcp_servers},
        )
        ready: asyncio.Future[None] = asyncio.ensure_future(_when_started(lookup))
        stack.callback(ready.cancel)
        if not background:
            await ready
        yield Sandbox(urls, derived, emulator, api, data_dir, teams, ready)


async def _when_started(lookup: asyncio.Future[SourceLookup]) -> None:
    await asyncio.shield(lookup)


async def _stop_backend(
    backend: asyncio.Task[None], started: asyncio.Future[SourceLookup], stop: asyncio.Event
) -> None:
    stop.set()
    if not started.done():
        backend.cancel()  # still loading: nothing to finish
    with contextlib.suppress(asyncio.CancelledError):
        await backend


async def _run_backend(
    settings: Settings,
    socks: dict[str, socket.socket],
    data_dir: Path,
    ui_url: str,
    started: asyncio.Future[SourceLookup],
    stop: asyncio.Event,
    people: list[User],
    with_teams: bool,
    keep: bool,
) -> None:
    """The IdP, the MCP servers and the bot, until ``stop``; ``started`` gets the source
    lookup once they all serve (or the exception that stopped them)."""
    try:
        # Most of the start-up is importing these: off the loop, so the web UI stays live.
        await asyncio.to_thread(_import_backend)
        async with contextlib.AsyncExitStack() as stack:
            idp_state = data_dir / "dev-idp.json" if keep else None
            issuer = await stack.enter_async_context(
                _serve_idp(settings, socks["idp_port"], idp_state)
            )
            lookup = await stack.enter_async_context(
                _serve_mcp(settings, socks, issuer, data_dir, ui_url)
            )
            await stack.enter_async_context(
                _serve_bot(settings, socks["app_port"], people, with_teams)
            )
            started.set_result(lookup)
            await stop.wait()
    except BaseException as exc:
        if not started.done():
            started.set_exception(exc)
            # Retrieved through Sandbox.backend; keep asyncio from also logging it.
            started.exception()
        raise


@contextlib.asynccontextmanager
async def _serve_idp(
    settings: Settings, sock: socket.socket, state_file: Path | None
) -> AsyncIterator[str]:
    from broker.dev_idp import (
        DevClient,
        DevIdentityProvider,
        TokenRules,
        build_app,
        load_directory,
    )

    admin = settings.idp.dev_admin_token
    provider = DevIdentityProvider(
        settings.idp.issuer,
        load_directory(settings.idp.directory_path),
        clients=[DevClient(settings.idp.client_id, settings.idp.client_secret.get_secret_value())],
        audiences=settings.exchange_audiences,
        admin_token=admin.get_secret_value() if admin else None,
        rules=TokenRules(exchange_ttl=timedelta(seconds=settings.broker.token_ttl_seconds)),
        state_file=state_file,
    )
    app: Any = build_app(provider)
    async with serve_asgi(app, sock) as url:
        yield url


@contextlib.asynccontextmanager
async def _serve_mcp(
    settings: Settings,
    socks: dict[str, socket.socket],
    issuer: str,
    data_dir: Path,
    ui_url: str,
) -> AsyncIterator[SourceLookup]:
    """The three reference servers on SQLite files; links to tickets and docs point at the
    emulator's pages for them (``/sources/…``). Yields the lookup behind those pages."""
    from mcp_servers import AuthConfig, DatabaseConfig, JwksClient
    from mcp_servers.database import build_database, open_gateway
    from mcp_servers.docs import DocStore, build_docs
    from mcp_servers.docs import seed_docs as docs_seed
    from mcp_servers.runner import serve_server
    from mcp_servers.ticketing import TicketStore, build_ticketing, seed_data

    jwks_url = f"{issuer}/jwks"
    jwks = JwksClient(issuer=issuer, jwks_url=jwks_url)
    audience = settings.exchange_audiences

    def auth(name: str) -> AuthConfig:
        return AuthConfig(issuer=issuer, audience=audience[name], jwks_url=jwks_url)

    def store(name: str) -> str:
        return f"sqlite+aiosqlite:///{(data_dir / f'mcp-{name}.db').as_posix()}"

    host = settings.sandbox.host
    async with contextlib.AsyncExitStack() as stack:
        tickets = await TicketStore.open(store("ticketing"), base_url=f"{ui_url}/sources/ticketing")
        stack.push_async_callback(tickets.close)
        await tickets.seed(seed_data())
        docs = await DocStore.open(store("docs"), base_url=f"{ui_url}/sources/docs")
        stack.push_async_callback(docs.close)
        await docs.seed(docs_seed())
        db = await stack.enter_async_context(
            open_gateway(
                DatabaseConfig(backend="sqlite", sqlite_path=data_dir / "mcp-database.sqlite"),
                data_dir=data_dir,
            )
        )
        hosts = settings.reference_servers  # the Host names each answers (default loopback)
        servers = (
            build_ticketing(
                tickets,
                auth("ticketing"),
                jwks=jwks,
                host=host,
                allowed_hosts=hosts.ticketing.allowed_hosts,
            ),
            build_docs(
                docs, auth("docs"), jwks=jwks, host=host, allowed_hosts=hosts.docs.allowed_hosts
            ),
            build_database(
                db,
                auth("database"),
                jwks=jwks,
                host=host,
                allowed_hosts=hosts.database.allowed_hosts,
            ),
        )
        for server in servers:
            await stack.enter_async_context(serve_server(server, socks[server.name + "_port"]))

        # The pages stand in for the systems' own web UIs, which the (demo) reader may open.
        everyone = frozenset(
            {"everyone"} | {g for u in demo_users(settings.idp.directory_path) for g in u.groups}
        )

        async def lookup(kind: str, key: str) -> tuple[str, list[tuple[str, str]]] | None:
            return await _source_page(tickets, docs, kind, key, everyone)

        yield lookup


async def _source_page(
    tickets: Any, docs: Any, kind: str, key: str, groups: frozenset[str]
) -> tuple[str, list[tuple[str, str]]] | None:
    """A demo system's record as a page (the link an answer cites must open something)."""
    if kind == "tickets":
        for ticket in await tickets.all_tickets():
            if ticket.key == key:
                lines = [
                    ("Status", ticket.status),
                    ("Priority", ticket.priority),
                    ("Project", ticket.project),
                    ("Assignee", ticket.assignee or "—"),
                    ("Updated", ticket.updated_at),
                    ("Description", ticket.description),
                ]
                lines += [(f"Comment by {c.author}", c.body) for c in ticket.comments]
                return f"{ticket.key}: {ticket.title}", lines
        return None
    if kind == "docs":
        from mcp_servers import Caller

        reader = Caller("sandbox", None, None, frozenset(), groups)
        with contextlib.suppress(Exception):
            doc = await docs.get(reader, key)
            return doc.title, [("Kind", doc.kind), ("Updated", doc.updated_at), ("", doc.content)]
        return None
    return None


@contextlib.asynccontextmanager
async def _serve_bot(
    settings: Settings, sock: socket.socket, people: list[User], with_teams: bool
) -> AsyncIterator[None]:
    """The production app over HTTP: ``opsbot serve``'s own ``serve_slack`` (Slack, and Teams
    on ``/api/messages`` when the extra is installed), on the socket bound for it, with one
    identity per seeded person across the platforms; stopped when the block exits."""
    from infra.storage import create_engine, migrate
    from opsbot.commands.slack import serve_slack

    engine = create_engine(settings.resolved_database_url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(
        serve_slack(
            settings,
            socket_mode=False,
            host=settings.sandbox.host,
            port=0,
            stop=stop,
            on_ready=ready.set_result,
            sock=sock,
            assistant_factory=one_identity(people),
            with_teams=with_teams,
        )
    )
    try:
        waiting: set[asyncio.Future[Any]] = {server, ready}
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if server in done:  # it failed (or stopped) before it was ready: say why
            server.result()
            raise RuntimeError("the Slack app stopped before it was ready")
        yield
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await server
