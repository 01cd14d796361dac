"""IdentityPython's ``idpyoidc`` OpenID provider over HTTP, for tests: an independent provider
with its own RFC 8693 token exchange (``idpyoidc.server.oidc.token_helper.token_exchange``).

``idpyoidc`` (pinned in the dev dependency group) is the library behind IdentityPython's
OpenID-certified OP. This module only configures it, as a deployment would, and puts its
endpoints on HTTP (the Starlette glue follows idpyoidc's own Flask example): discovery, JWKS,
authorization (the fixed test user is signed in without a form: ``NoAuthn``), token
(authorization code + PKCE, refresh, token exchange), userinfo and RFC 7009 revocation.

Token exchange policy: idpyoidc's default ``validate_token_exchange_policy``, with the
audiences the exchange may name (``audiences``); subject tokens are access tokens only. The
exchanged token's scope is the subject token's, its ``aud`` the requested audience, and its
user claims (``groups``) come with the ``groups`` scope.

Example::

    async with run_idpy_provider(redirect_uri, audiences=[mcp_audience]) as provider:
        provider.issuer  # http://127.0.0.1:<port>
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from infra.serving import bind_socket, serve_asgi, socket_url

CLIENT_ID, CLIENT_SECRET = "opsbot", "opsbot-idpy-secret"
USER = "carol"
USER_CLAIMS = {
    "email": "carol@example.com",
    "email_verified": True,
    "name": "Carol",
    "groups": ["team-payments", "sre"],
}
# The scopes the client may be granted (idpyoidc drops the rest from the login).
CLIENT_SCOPES = ["openid", "profile", "email", "offline_access", "groups", "tickets:read"]
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"

log = logging.getLogger(__name__)


def provider_config(
    issuer: str, audiences: Sequence[str], *, access_token_lifetime: int = 3600
) -> dict[str, Any]:
    """idpyoidc's OP configuration: keys in memory, the endpoints opsbot uses, JWT access
    tokens (RFC 9068 profile, RS256) and the token-exchange policy."""
    exchange = {
        "class": "idpyoidc.server.oidc.token_helper.token_exchange.TokenExchangeHelper",
        "kwargs": {
            "subject_token_types_supported": [ACCESS_TOKEN_TYPE],
            "requested_token_types_supported": [ACCESS_TOKEN_TYPE],
            "default_requested_token_type": ACCESS_TOKEN_TYPE,
            "policy": {
                "": {
                    "function": "idpyoidc.server.oauth2.token_helper"
                    ".validate_token_exchange_policy",
                    "kwargs": {"audience": list(audiences)},
                }
            },
        },
    }
    helpers = {
        "authorization_code": {
            "class": "idpyoidc.server.oidc.token_helper.access_token.AccessTokenHelper"
        },
        "refresh_token": {
            "class": "idpyoidc.server.oidc.token_helper.refresh_token.RefreshTokenHelper"
        },
        TOKEN_EXCHANGE: exchange,
    }
    client_auth = ["client_secret_basic", "client_secret_post"]
    return {
        "issuer": issuer,
        "key_conf": {"key_defs": [{"type": "RSA", "use": ["sig"]}], "uri_path": "jwks"},
        "httpc_params": {"verify": True, "timeout": 2},
        "add_on": {
            "pkce": {
                "function": "idpyoidc.server.oauth2.add_on.pkce.add_support",
                "kwargs": {"essential": True, "code_challenge_method": "S256"},
            }
        },
        "authentication": {
            "anon": {
                "acr": "urn:oasis:names:tc:SAML:2.0:ac:classes:InternetProtocolPassword",
                "class": "idpyoidc.server.user_authn.user.NoAuthn",
                "kwargs": {"user": USER},
            }
        },
        "authz": {
            "class": "idpyoidc.server.authz.AuthzHandling",
            "kwargs": {
                "grant_config": {
                    "usage_rules": {
                        "authorization_code": {
                            "supports_minting": ["access_token", "refresh_token", "id_token"],
                            "max_usage": 1,
                        },
                        "access_token": {
                            "supports_minting": ["access_token"],
                            "expires_in": access_token_lifetime,
                        },
                        "refresh_token": {
                            "supports_minting": ["access_token", "refresh_token", "id_token"]
                        },
                    },
                    "expires_in": 43200,
                }
            },
        },
        "userinfo": {
            "class": "idpyoidc.server.user_info.UserInfo",
            "kwargs": {"db": {USER: dict(USER_CLAIMS)}},
        },
        "cookie_handler": {
            "class": "idpyoidc.server.cookie_handler.CookieHandler",
            "kwargs": {
                "keys": {
                    "key_defs": [
                        {"type": "OCT", "use": ["enc"], "kid": "enc"},
                        {"type": "OCT", "use": ["sig"], "kid": "sig"},
                    ]
                }
            },
        },
        "endpoint": {
            "provider_config": {
                "path": ".well-known/openid-configuration",
                "class": "idpyoidc.server.oidc.provider_config.ProviderConfiguration",
                "kwargs": {},
            },
            "authorization": {
                "path": "authorization",
                "class": "idpyoidc.server.oidc.authorization.Authorization",
                "kwargs": {
                    "response_types_supported": ["code"],
                    "response_modes_supported": ["query"],
                },
            },
            "token": {
                "path": "token",
                "class": "idpyoidc.server.oidc.token.Token",
                "kwargs": {"client_authn_method": client_auth, "grant_types_helpers": helpers},
            },
            "userinfo": {
                "path": "userinfo",
                "class": "idpyoidc.server.oidc.userinfo.UserInfo",
                "kwargs": {},
            },
            "revocation": {
                "path": "revocation",
                "class": "idpyoidc.server.oauth2.token_revocation.TokenRevocation",
                "kwargs": {"client_authn_method": client_auth},
            },
        },
        "token_handler_args": {
            "code": {"kwargs": {"lifetime": 600}},
            "token": {
                "class": "idpyoidc.server.token.jwt_token.JWTToken",
                "kwargs": {
                    "lifetime": access_token_lifetime,
                    "add_claims_by_scope": True,
                    "alg": "RS256",
                },
            },
            "refresh": {"kwargs": {"lifetime": 86400}},
            "id_token": {
                "class": "idpyoidc.server.token.id_token.IDToken",
                "kwargs": {"add_claims_by_scope": True},
            },
        },
        "scopes_to_claims": {
            "openid": ["sub"],
            "profile": ["name"],
            "email": ["email", "email_verified"],
            "groups": ["groups"],
            "offline_access": [],
            "tickets:read": [],
        },
    }


@dataclass
class RunningIdpyProvider:
    """The provider while it serves: its issuer and the idpyoidc ``Server`` behind it."""

    issuer: str
    server: Any  # idpyoidc.server.Server (untyped upstream)

    def end_sign_in(self, refresh_token: str) -> None:
        """End the sign-in ``refresh_token`` belongs to, as the provider's administrator
        would: every token of its grant (refresh, access, exchanged) is revoked."""
        sessions = self.server.context.session_manager
        grant = sessions.get_grant(sessions.get_session_id_by_token(refresh_token))
        grant.revoke_token()  # no value: all of them


def build_server(
    issuer: str, redirect_uri: str, audiences: Sequence[str], *, access_token_lifetime: int = 3600
) -> Any:
    """The idpyoidc ``Server`` with opsbot registered as a confidential client."""
    # Imported here: ``testing`` ships, idpyoidc is a dev dependency only.
    from idpyoidc.server import Server
    from idpyoidc.server.configure import OPConfiguration

    config = provider_config(issuer, audiences, access_token_lifetime=access_token_lifetime)
    server = Server(OPConfiguration(config))
    server.context.cdb[CLIENT_ID] = {
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "client_salt": "opsbot-salt",
        "redirect_uris": [(redirect_uri, {})],
        "response_types_supported": ["code"],
        "token_endpoint_auth_method": "client_secret_basic",
        "grant_types_supported": ["authorization_code", "refresh_token", TOKEN_EXCHANGE],
        "allowed_scopes": CLIENT_SCOPES,
    }
    return server


def _http_info(request: Request) -> dict[str, Any]:
    return {
        "headers": {k.lower(): v for k, v in request.headers.items() if k.lower() != "cookie"},
        "method": request.method,
        "url": str(request.url),
        "cookie": [{"name": k, "value": v} for k, v in request.cookies.items()],
    }


def _error(error: str, description: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": error, "error_description": description}, status_code=status)


def app_for(server: Any) -> Starlette:
    """Each idpyoidc endpoint at its path: parse, process, respond (as its Flask example)."""

    async def serve(request: Request, endpoint: str) -> Response:
        ep = server.get_endpoint(endpoint)
        info = _http_info(request)
        if request.method == "GET":
            raw: Any = dict(request.query_params)
        else:
            raw = dict(await request.form())
        try:
            parsed = ep.parse_request(raw, http_info=info)
        except Exception as exc:
            # idpyoidc raises for some refusals (an expired subject token: "Token has
            # expired"); its Flask example answers those invalid_request, and so does this.
            log.info("%s refused a request: %r", endpoint, exc)
            return _error("invalid_request", str(exc))
        if "error" in parsed:
            return JSONResponse(parsed.to_dict(), status_code=_status(parsed))
        try:
            args = ep.process_request(parsed, http_info=info)
        except Exception as exc:
            log.info("%s failed: %r", endpoint, exc)
            return _error("invalid_request", str(exc))
        if "http_response" in args:
            return Response(args["http_response"], media_type="application/json")
        if "redirect_location" in args:
            return RedirectResponse(args["redirect_location"], status_code=302)
        is_error = "error" in args.get("response_args", {})
        done = ep.do_response(request=parsed, **args)
        placement = done.get("response_placement", ep.response_placement)
        headers = dict(done.get("http_headers", []))
        if placement == "url":
            return RedirectResponse(done["response"], status_code=302, headers=headers)
        status = done.get("response_code", 400 if is_error else 200)
        return Response(done["response"], status_code=status, headers=headers)

    async def jwks(request: Request) -> Response:
        keys = server.context.keyjar.export_jwks(issuer_id="")
        return Response(json.dumps(keys), media_type="application/json")

    def route(path: str, name: str, methods: list[str]) -> Route:
        async def handler(request: Request) -> Response:
            return await serve(request, name)

        return Route(path, handler, methods=methods)

    return Starlette(
        routes=[
            route("/.well-known/openid-configuration", "provider_config", ["GET"]),
            route("/authorization", "authorization", ["GET"]),
            route("/token", "token", ["POST"]),
            route("/userinfo", "userinfo", ["GET", "POST"]),
            route("/revocation", "token_revocation", ["POST"]),
            Route("/jwks", jwks),
        ]
    )


def _status(message: Any) -> int:
    return 401 if message.get("error") in ("invalid_client", "unauthorized_client") else 400


@contextlib.asynccontextmanager
async def run_idpy_provider(
    redirect_uri: str,
    audiences: Sequence[str],
    *,
    sock: socket.socket | None = None,
    access_token_lifetime: int = 3600,
) -> AsyncIterator[RunningIdpyProvider]:
    """idpyoidc on ``sock`` (default: a free loopback port), with opsbot's client (redirect
    ``redirect_uri``) and token exchange allowed for ``audiences``. Binding first lets the
    MCP servers know the issuer before the provider knows their audiences."""
    sock = sock or bind_socket("127.0.0.1", 0)
    issuer = socket_url(sock)
    server = build_server(
        issuer, redirect_uri, audiences, access_token_lifetime=access_token_lifetime
    )
    app: Any = app_for(server)  # uvicorn's ASGI type is narrower than Starlette's
    async with serve_asgi(app, sock):
        yield RunningIdpyProvider(issuer, server)
