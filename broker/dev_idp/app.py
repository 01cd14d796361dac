"""HTTP routes of the dev IdP (DEVELOPMENT AND TESTS ONLY).

``/.well-known/openid-configuration``, ``/jwks``, ``/authorize`` (login page listing the demo
users), ``/token`` (authorization_code + PKCE, refresh_token, RFC 8693 token exchange),
``/revoke`` (RFC 7009), ``/userinfo``, ``/admin/users/{sub}/revoke|restore`` and
``/admin/users/{sub}/groups/{group}/add|remove`` (bearer admin token; disabled without one).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Awaitable, Callable
from html import escape
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from broker.dev_idp.provider import (
    TOKEN_EXCHANGE_GRANT,
    DevClient,
    DevIdentityProvider,
    OAuthError,
)

_AUTHORIZE_PARAMS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "nonce",
    "code_challenge",
    "code_challenge_method",
)
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


def _error(exc: OAuthError) -> JSONResponse:
    headers = dict(_NO_STORE)
    if exc.status == 401:
        headers["WWW-Authenticate"] = 'Basic realm="opsbot-dev-idp"'
    return JSONResponse(
        {"error": exc.error, "error_description": exc.description}, exc.status, headers=headers
    )


def _client_credentials(request: Request, form: dict[str, str]) -> tuple[str | None, str | None]:
    """client_secret_basic (RFC 6749 §2.3.1: form-urlencoded id and secret) or _post."""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("basic "):
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None, None
        client_id, sep, secret = decoded.partition(":")
        if not sep:
            return None, None
        return unquote(client_id), unquote(secret)
    return form.get("client_id"), form.get("client_secret")


def _with_query(uri: str, params: dict[str, str]) -> str:
    parts = urlsplit(uri)
    query = f"{parts.query}&{urlencode(params)}" if parts.query else urlencode(params)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def _login_page(idp: DevIdentityProvider, params: dict[str, str]) -> str:
    hidden = "".join(
        f'<input type="hidden" name="{k}" value="{escape(v)}">' for k, v in params.items()
    )
    rows = []
    for user in idp.directory.users.values():
        revoked = " (access revoked)" if idp.is_revoked(user.subject) else ""
        rows.append(
            f'<li><button type="submit" name="username" value="{escape(user.subject)}">'
            f"{escape(user.name)}</button> {escape(user.email)} "
            f"<small>{escape(', '.join(sorted(user.groups)))}{revoked}</small></li>"
        )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>opsbot dev IdP</title></head>"
        "<body><p><strong>Development identity provider: for development and tests only."
        "</strong></p><h1>Sign in as a demo user</h1>"
        f'<form method="post" action="{escape(idp.issuer)}/authorize">{hidden}<ul>'
        f"{''.join(rows)}</ul></form></body></html>"
    )


def build_app(idp: DevIdentityProvider) -> Starlette:
    """The ASGI app serving ``idp``; serve it with ``infra.serving.serve_asgi``."""

    async def discovery(request: Request) -> Response:
        return JSONResponse(idp.discovery())

    async def jwks(request: Request) -> Response:
        return JSONResponse(idp.jwks())

    async def authorize(request: Request) -> Response:
        if request.method == "GET":
            source: dict[str, str] = dict(request.query_params)
        else:
            source = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        params = {k: source[k] for k in _AUTHORIZE_PARAMS if k in source}
        try:
            idp.check_authorize_request(params)
        except OAuthError as exc:
            # Never redirect to an unchecked URI: show the error instead.
            return HTMLResponse(f"<h1>Login request refused</h1><p>{escape(str(exc))}</p>", 400)
        if request.method == "GET":
            return HTMLResponse(_login_page(idp, params))
        reply: dict[str, str] = {"iss": idp.issuer}
        try:
            reply["code"] = idp.issue_code(params, source.get("username", ""))
        except KeyError:
            return HTMLResponse("<h1>Unknown user</h1>", 400)
        except OAuthError as exc:
            reply = {"error": exc.error, "error_description": exc.description, "iss": idp.issuer}
        if "state" in params:
            reply["state"] = params["state"]
        return RedirectResponse(_with_query(params["redirect_uri"], reply), status_code=303)

    async def token(request: Request) -> Response:
        raw = await request.form()
        for name in ("audience", "resource", "grant_type", "subject_token"):
            if len(raw.getlist(name)) > 1:
                return _error(OAuthError("invalid_request", f"{name} given more than once"))
        form = {k: v for k, v in raw.items() if isinstance(v, str)}
        try:
            client = idp.authenticate_client(*_client_credentials(request, form))
            grant = form.get("grant_type")
            if grant == "authorization_code":
                body: dict[str, Any] = idp.grant_authorization_code(client, form)
            elif grant == "refresh_token":
                body = idp.grant_refresh_token(client, form)
            elif grant == TOKEN_EXCHANGE_GRANT:
                body = idp.grant_token_exchange(client, form)
            else:
                raise OAuthError("unsupported_grant_type", f"grant_type {grant!r} is not supported")
        except OAuthError as exc:
            idp.stats.refused[exc.error] += 1
            return _error(exc)
        return JSONResponse(body, headers=_NO_STORE)

    async def revoke(request: Request) -> Response:
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        try:
            client: DevClient = idp.authenticate_client(*_client_credentials(request, form))
        except OAuthError as exc:
            return _error(exc)
        idp.revoke_token(client, form.get("token", ""))
        return Response(status_code=200)

    async def userinfo(request: Request) -> Response:
        header = request.headers.get("authorization", "")
        if not header.lower().startswith("bearer "):
            return JSONResponse(
                {"error": "invalid_token"}, 401, headers={"WWW-Authenticate": "Bearer"}
            )
        token_value = header[7:].strip()
        for client_id in idp.clients:
            try:
                claims = idp.verify_own_token(token_value, client_id)
            except OAuthError:
                continue
            user = idp.directory.users[claims["sub"]]
            return JSONResponse({"sub": user.subject, **idp.rules.profile(user)})
        return JSONResponse({"error": "invalid_token"}, 401, headers={"WWW-Authenticate": "Bearer"})

    def admin_refusal(request: Request) -> Response | None:
        """Why an admin call is refused (disabled, or not the admin token); None: allowed."""
        expected = idp.admin_token
        given = request.headers.get("authorization", "")
        if expected is None:
            return JSONResponse({"error": "admin endpoints are disabled"}, 404)
        if not hmac.compare_digest(given.encode(), f"Bearer {expected}".encode()):
            return JSONResponse({"error": "unauthorized"}, 401)
        return None

    def admin_call(
        act: Callable[[Request, str, str], Response],
    ) -> Callable[[Request], Awaitable[Response]]:
        """An admin endpoint: ``act`` gets the path's subject and action once the call is
        allowed (``admin_refusal``)."""

        async def endpoint(request: Request) -> Response:
            refused = admin_refusal(request)
            if refused is not None:
                return refused
            return act(request, request.path_params["subject"], request.path_params["action"])

        return endpoint

    def admin(request: Request, subject: str, action: str) -> Response:
        try:
            if action == "revoke":
                idp.revoke_user(subject)
            elif action == "restore":
                idp.restore_user(subject)
            else:
                return JSONResponse({"error": f"unknown action {action!r}"}, 404)
        except KeyError:
            return JSONResponse({"error": f"unknown user {subject!r}"}, 404)
        return JSONResponse({"subject": subject, "revoked": idp.is_revoked(subject)})

    def admin_group(request: Request, subject: str, action: str) -> Response:
        if action not in ("add", "remove"):
            return JSONResponse({"error": f"unknown action {action!r}"}, 404)
        try:
            groups = idp.set_membership(subject, request.path_params["group"], action == "add")
        except KeyError:
            return JSONResponse({"error": f"unknown user {subject!r}"}, 404)
        return JSONResponse({"subject": subject, "groups": sorted(groups)})

    return Starlette(
        routes=[
            Route("/.well-known/openid-configuration", discovery),
            Route("/.well-known/oauth-authorization-server", discovery),
            Route("/jwks", jwks),
            Route("/authorize", authorize, methods=["GET", "POST"]),
            Route("/token", token, methods=["POST"]),
            Route("/revoke", revoke, methods=["POST"]),
            Route("/userinfo", userinfo),
            Route("/admin/users/{subject}/{action}", admin_call(admin), methods=["POST"]),
            Route(
                "/admin/users/{subject}/groups/{group}/{action}",
                admin_call(admin_group),
                methods=["POST"],
            ),
        ]
    )
