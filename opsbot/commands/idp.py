"""``opsbot idp``: the development identity provider (DEVELOPMENT AND TESTS ONLY).

``opsbot idp serve`` serves it on the issuer's port (``OPSBOT_IDP__ISSUER``, default 8100) with
the demo directory; ``opsbot idp users`` lists the demo users and what they hold per server.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from infra.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "idp", help="the development identity provider (never for production)"
    )
    sub = parser.add_subparsers(dest="idp_command", metavar="ACTION", required=True)
    serve = sub.add_parser("serve", help="serve the dev IdP over HTTP")
    serve.add_argument("--host", default=None, help="default: the issuer's host")
    serve.add_argument("--port", type=int, default=None, help="default: the issuer's port")
    serve.add_argument("--directory", type=Path, default=None, help="directory YAML")
    serve.set_defaults(handler=handle_serve)
    users = sub.add_parser("users", help="list the demo users and their scopes per server")
    users.add_argument("--directory", type=Path, default=None)
    users.set_defaults(handler=handle_users)


async def handle_users(args: argparse.Namespace, settings: Settings) -> int:
    from broker.dev_idp import load_directory

    directory = load_directory(args.directory or settings.idp.directory_path)
    for user in directory.users.values():
        held = {
            name: " ".join(sorted(resource.granted(user.groups))) or "-"
            for name, resource in directory.resources.items()
        }
        revoked = " REVOKED" if user.revoked else ""
        print(f"{user.subject:10} {user.email:24} {','.join(sorted(user.groups))}{revoked}")
        for name, scopes in held.items():
            print(f"{'':12}{name}: {scopes}")
    return 0


async def handle_serve(args: argparse.Namespace, settings: Settings) -> int:
    from broker.dev_idp import (
        DevClient,
        DevIdentityProvider,
        TokenRules,
        build_app,
        load_directory,
    )
    from infra.serving import bind_socket, serve_asgi, socket_url, wait_for_shutdown

    issuer = urlsplit(settings.idp.issuer)
    host = args.host or issuer.hostname or "127.0.0.1"
    port = args.port if args.port is not None else (issuer.port or 8100)
    sock = bind_socket(host, port)
    url = socket_url(sock) if (args.host or args.port is not None) else settings.idp.issuer
    admin = settings.idp.dev_admin_token
    provider = DevIdentityProvider(
        url,
        load_directory(args.directory or settings.idp.directory_path),
        clients=[DevClient(settings.idp.client_id, settings.idp.client_secret.get_secret_value())],
        audiences=settings.exchange_audiences,
        admin_token=admin.get_secret_value() if admin else None,
        rules=TokenRules(exchange_ttl=timedelta(seconds=settings.broker.token_ttl_seconds)),
    )
    for server in settings.mcp_servers:
        if server.name not in provider.directory.resources:
            print(f"warning: MCP server {server.name!r} is not in the directory: no tokens for it")
    app: Any = build_app(provider)
    async with serve_asgi(app, sock) as base:
        print(f"dev IdP (development only) at {base}, issuer {url}; Ctrl-C to stop")
        await wait_for_shutdown()
    return 0
