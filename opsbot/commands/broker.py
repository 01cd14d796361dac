"""``opsbot broker serve``: the token broker as its own HTTP service.

Agents then run with ``OPSBOT_BROKER__MODE=remote`` and never hold refresh tokens. Point
``OPSBOT_BROKER__LINK_CALLBACK_URL`` at this service's ``/oauth/callback``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from infra.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("broker", help="the token broker service")
    sub = parser.add_subparsers(dest="broker_command", metavar="ACTION", required=True)
    serve = sub.add_parser("serve", help="serve the broker over HTTP (service-to-service auth)")
    serve.add_argument("--host", default=None, help="default: the service URL's host")
    serve.add_argument("--port", type=int, default=None, help="default: the service URL's port")
    serve.set_defaults(handler=handle_serve, check=check_serve)


def check_serve(args: argparse.Namespace, settings: Settings) -> None:
    """The broker service holds the refresh tokens: their key must be configured."""
    from opsbot.config_check import require_link_key

    require_link_key(settings)


async def handle_serve(args: argparse.Namespace, settings: Settings) -> int:
    from broker.factory import open_identity_service
    from broker.local import LocalIdentityService
    from broker.service import build_service_app
    from broker.web import link_routes, mcp_oauth_routes
    from infra.serving import bind_socket, serve_asgi, wait_for_shutdown
    from infra.storage import create_engine, migrate

    url = urlsplit(settings.broker.service_url)
    sock = bind_socket(args.host or url.hostname or "127.0.0.1", args.port or url.port or 8099)
    local = settings.model_copy(
        update={"broker": settings.broker.model_copy(update={"mode": "inprocess"})}
    )
    engine = create_engine(settings.resolved_database_url)
    try:
        await migrate(engine)
        async with open_identity_service(local, engine) as service:
            assert isinstance(service, LocalIdentityService)
            # The service holds the MCP OAuth grants too: their authorization servers send
            # the browser back here (OPSBOT_BROKER__MCP_OAUTH_CALLBACK_URL names this host).
            routes = link_routes(service.linking)
            if service.mcp_oauth is not None:
                routes += mcp_oauth_routes(service.mcp_oauth)
            app: Any = build_service_app(
                service, settings.broker.service_secret.get_secret_value(), extra_routes=routes
            )
            async with serve_asgi(app, sock) as base:
                print(f"token broker service at {base}; Ctrl-C to stop")
                await wait_for_shutdown()
    finally:
        await engine.dispose()
    return 0
