"""``opsbot mcp ticketing|docs|database --port N``: run one reference MCP server.

The server trusts the configured IdP (``OPSBOT_IDP__ISSUER``; keys by OIDC discovery unless
``--jwks-url``). Its audience (the ``aud`` its tokens must carry) is ``--audience``, else
the configured ``mcp_servers`` entry of that name (a URL only when the port matches), else
``http://<host>:<port>/mcp``. An audience that is a URL is also the server's canonical URI;
one that is a name (``tickets-mcp``, as some identity providers name audiences) leaves the
server at ``http://<host>:<port>/mcp``.
Ticketing and docs keep their data in SQLite files in the data directory (seeded once);
the database server uses SQLite there too, or PostgreSQL with ``--postgres-url``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from infra.ports import REFERENCE_PORTS

if TYPE_CHECKING:
    from infra.settings import ReferenceServerSettings, Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "mcp", help="run a reference MCP server (ticketing, docs or database)"
    )
    parser.add_argument("server", choices=sorted(REFERENCE_PORTS))
    parser.add_argument("--port", type=int, default=None, help="default: 8101/8102/8103; 0 = any")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--audience", default=None, help="aud of its tokens: its URL (default) or a name"
    )
    parser.add_argument("--issuer", default=None, help="default: the configured IdP issuer")
    parser.add_argument("--jwks-url", default=None, help="default: OIDC discovery")
    parser.add_argument("--store-url", default=None, help="SQLAlchemy URL (ticketing, docs)")
    parser.add_argument("--postgres-url", default=None, help="database server: gateway login")
    parser.add_argument("--role-prefix", default="opsbot_ro_")
    parser.add_argument("--enable-query", action="store_true", help="offer run_readonly_query")
    parser.add_argument("--public-url", default=None, help="base of ticket/doc links")
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=None,
        dest="allowed_hosts",
        type=_allowed_host,
        metavar="HOST[:PORT]",
        help="a Host name to answer (repeat; replaces "
        "OPSBOT_REFERENCE_SERVERS__<NAME>__ALLOWED_HOSTS, default loopback)",
    )
    parser.add_argument(
        "--provision-admin-url",
        default=None,
        help="dev only: create schema, roles and RLS there from the demo directory (once), "
        "then serve from it as the gateway role",
    )
    parser.set_defaults(handler=handle)


def _allowed_host(value: str) -> str:
    from mcp_servers.hosts import normalize_allowed_host

    try:
        return normalize_allowed_host(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _audience(args: argparse.Namespace, settings: Settings, port: int) -> str:
    if args.audience:
        return str(args.audience)
    for configured in settings.mcp_servers:
        audience = configured.audience
        if configured.name != args.server or not audience:
            continue
        # A URL names this server only at this port; a name (``tickets-mcp``) names it anywhere.
        if not _is_url(audience) or urlparse(audience).port == port:
            return audience
    return _own_url(args, port)


def _is_url(value: str) -> bool:
    parsed = urlparse(value)
    return parsed.scheme in ("http", "https") and bool(parsed.hostname)


def _own_url(args: argparse.Namespace, port: int) -> str:
    return f"http://{args.host}:{port}/mcp"


async def _provision(admin_url: str, role_prefix: str, settings: Settings) -> str:
    from datetime import UTC, datetime

    from broker.dev_idp import load_directory
    from mcp_servers.database import gateway_url, is_provisioned, provision

    if await is_provisioned(admin_url, role_prefix=role_prefix):
        return gateway_url(admin_url, role_prefix)
    directory = load_directory(settings.idp.directory_path)
    users = {subject: sorted(directory.teams(subject)) for subject in directory.users}
    return await provision(admin_url, role_prefix=role_prefix, users=users, now=datetime.now(UTC))


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from infra.serving import bind_socket, serve_asgi, wait_for_shutdown
    from mcp_servers import AuthConfig, DatabaseConfig
    from mcp_servers.runner import open_server

    sock = bind_socket(args.host, REFERENCE_PORTS[args.server] if args.port is None else args.port)
    port = sock.getsockname()[1]
    audience = _audience(args, settings, port)
    auth = AuthConfig(
        issuer=args.issuer or settings.idp.issuer,
        audience=audience,
        jwks_url=args.jwks_url,
        # An audience that is a name, not a URL: the server's URL is its own.
        resource_url=None if _is_url(audience) else _own_url(args, port),
    )
    data_dir = settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    store_url = (
        args.store_url or f"sqlite+aiosqlite:///{(data_dir / f'mcp-{args.server}.db').as_posix()}"
    )
    postgres_url = args.postgres_url
    if args.provision_admin_url:
        postgres_url = await _provision(args.provision_admin_url, args.role_prefix, settings)
    database = DatabaseConfig(
        backend="postgres" if postgres_url else "sqlite",
        postgres_url=postgres_url,
        sqlite_path=None if postgres_url else data_dir / "mcp-database.sqlite",
        role_prefix=args.role_prefix,
        enable_query=args.enable_query,
    )
    # Checked where they come from: the flag by argparse, the setting by the settings object.
    configured: ReferenceServerSettings = getattr(settings.reference_servers, args.server)
    allowed_hosts: list[str] = args.allowed_hosts or configured.allowed_hosts
    async with (
        open_server(
            args.server,
            auth,
            store_url=store_url,
            database=database,
            host=args.host,
            public_url=args.public_url,
            allowed_hosts=allowed_hosts,
        ) as server,
        serve_asgi(server.asgi_app(), sock, log_level="info") as base,  # type: ignore[arg-type]
    ):
        print(
            f"opsbot mcp {args.server}: serving {base}/mcp "
            f"(audience {auth.audience}, issuer {auth.issuer}, "
            f"hosts {' '.join(allowed_hosts)})",
            flush=True,
        )
        await wait_for_shutdown()
    return 0
