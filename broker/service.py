"""The broker as its own HTTP service, so agent instances never hold refresh tokens.

Every ``/v1`` call needs ``Authorization: Bearer <service secret>`` (service-to-service
authentication; compare in constant time). The IdP's browser redirect lands on
``/oauth/callback``, served here too, so refresh tokens only ever reach this service.

Routes (JSON bodies; chat users as ``{"platform", "team_id", "user_id"}``)::

    POST /v1/token        {subject, chat_user?, email?, server}  -> {access_token, audience,
                                                                     expires_at, scopes}
    POST /v1/invalidate   {subject, chat_user?, server}
    POST /v1/resolve      {chat_user}        -> {identity: {...} | null}
    POST /v1/resolve_subject {subject}       -> {identity: {...}}
    POST /v1/link_url     {chat_user}        -> {url}
    POST /v1/unlink       {chat_user}        -> {removed}
    POST /v1/complete_link {state, code, iss?} -> {identity: {...}}   (the app's /oauth/callback)
    POST /v1/oauth_token  {subject, chat_user?, email?, server} -> {access_token}
                                     (a server in ``oauth`` mode: the user's own token for it)
    POST /v1/complete_server_connect {state, code, iss?} -> {subject, chat_user, server}
                                     (the app's /oauth/mcp/callback)
    GET  /healthz

Errors (``broker.errors.to_wire``, read back by ``from_wire``): ``{"error":
not_linked|access_revoked|link_broken|exchange_failed|unavailable|invalid_state|linking_failed|
connect_required|bad_request, "message", "server"?, "authorize_url"?}`` with
404/403/502/503/400/502/409/400.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints, ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from broker.errors import BrokerError, to_wire
from broker.types import ChatUser, Identity, IdentityBackend
from infra.characters import ID_PATTERN
from infra.json_input import parse_json

# An id (a subject, a server, a chat user's parts): no control character and no lone
# surrogate (``infra.characters``).
_Ident = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=ID_PATTERN)]


class ChatUserModel(BaseModel):
    platform: _Ident
    team_id: _Ident
    user_id: _Ident

    def to_chat_user(self) -> ChatUser:
        return ChatUser(self.platform, self.team_id, self.user_id)


class TokenRequest(BaseModel):
    subject: _Ident
    server: _Ident
    chat_user: ChatUserModel | None = None
    email: str = ""


class ChatUserRequest(BaseModel):
    chat_user: ChatUserModel


class ResolveRequest(ChatUserRequest):
    fresh: bool = False


class SubjectRequest(BaseModel):
    subject: _Ident


class SsoRequest(ChatUserRequest):
    token: str = Field(min_length=1, max_length=16384)  # an Entra access token (Teams SSO)


class CompleteLinkRequest(BaseModel):
    state: str
    code: str
    iss: str | None = None  # RFC 9207, from the authorization response


def identity_json(identity: Identity) -> dict[str, Any]:
    cu = identity.chat_user
    return {
        "subject": identity.subject,
        "email": identity.email,
        "groups": sorted(identity.groups),
        "chat_user": None
        if cu is None
        else {"platform": cu.platform, "team_id": cu.team_id, "user_id": cu.user_id},
    }


Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def build_service_app(
    service: IdentityBackend, secret: str, *, extra_routes: list[Route] | None = None
) -> Starlette:
    """The broker service ASGI app; ``extra_routes`` typically ``link_routes(linking)``."""
    expected = f"Bearer {secret}".encode()

    def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return JSONResponse(
                    {"error": "unauthorized", "message": "service authentication failed"}, 401
                )
            try:
                body = parse_json(await request.body())
            except ValueError:  # Python's words about the bytes are nobody's business
                body = None
            except ClientDisconnect:
                return Response(status_code=400)  # nobody reads it
            if not isinstance(body, dict):
                return JSONResponse(
                    {"error": "bad_request", "message": "the body is not a JSON object"}, 400
                )
            try:
                return JSONResponse(await handler(body), headers={"Cache-Control": "no-store"})
            except (ValueError, ValidationError) as exc:
                message = str(exc).splitlines()[0][:200]
                return JSONResponse({"error": "bad_request", "message": message}, 400)
            except BrokerError as exc:
                payload, status = to_wire(exc)
                return JSONResponse(payload, status)

        return run

    async def token(body: dict[str, Any]) -> dict[str, Any]:
        req = TokenRequest.model_validate(body)
        cu = req.chat_user.to_chat_user() if req.chat_user else None
        got = await service.get_token(Identity(req.subject, cu, req.email), req.server)
        return {
            "access_token": got.value,
            "audience": got.audience,
            "expires_at": got.expires_at.isoformat(),
            "scopes": sorted(got.scopes),
        }

    async def invalidate(body: dict[str, Any]) -> dict[str, Any]:
        req = TokenRequest.model_validate(body)
        cu = req.chat_user.to_chat_user() if req.chat_user else None
        await service.invalidate(Identity(req.subject, cu), req.server)
        return {"ok": True}

    async def resolve(body: dict[str, Any]) -> dict[str, Any]:
        request = ResolveRequest.model_validate(body)
        found = await service.resolve(request.chat_user.to_chat_user(), fresh=request.fresh)
        return {"identity": identity_json(found) if found else None}

    async def resolve_subject(body: dict[str, Any]) -> dict[str, Any]:
        found = await service.resolve_subject(SubjectRequest.model_validate(body).subject)
        return {"identity": identity_json(found)}

    async def link_url(body: dict[str, Any]) -> dict[str, Any]:
        cu = ChatUserRequest.model_validate(body).chat_user.to_chat_user()
        return {"url": await service.link_url(cu)}

    async def complete_link(body: dict[str, Any]) -> dict[str, Any]:
        req = CompleteLinkRequest.model_validate(body)
        linked = await service.complete_link(req.state, req.code, iss=req.iss)
        return {"identity": identity_json(linked)}

    async def complete_sso(body: dict[str, Any]) -> dict[str, Any]:
        req = SsoRequest.model_validate(body)
        linked = await service.complete_sso(req.chat_user.to_chat_user(), req.token)
        return {"identity": identity_json(linked)}

    async def oauth_token(body: dict[str, Any]) -> dict[str, Any]:
        req = TokenRequest.model_validate(body)
        cu = req.chat_user.to_chat_user() if req.chat_user else None
        return {"access_token": await service.oauth_token(Identity(req.subject, cu), req.server)}

    async def complete_server_connect(body: dict[str, Any]) -> dict[str, Any]:
        req = CompleteLinkRequest.model_validate(body)
        done = await service.complete_server_connect(req.state, req.code, iss=req.iss)
        cu = done.chat_user
        return {
            "subject": done.subject,
            "server": done.server,
            "chat_user": {"platform": cu.platform, "team_id": cu.team_id, "user_id": cu.user_id},
        }

    async def unlink(body: dict[str, Any]) -> dict[str, Any]:
        cu = ChatUserRequest.model_validate(body).chat_user.to_chat_user()
        return {"removed": await service.unlink(cu)}

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True, "at": datetime.now().astimezone().isoformat()})

    routes = [
        Route("/v1/token", endpoint(token), methods=["POST"]),
        Route("/v1/invalidate", endpoint(invalidate), methods=["POST"]),
        Route("/v1/resolve", endpoint(resolve), methods=["POST"]),
        Route("/v1/resolve_subject", endpoint(resolve_subject), methods=["POST"]),
        Route("/v1/link_url", endpoint(link_url), methods=["POST"]),
        Route("/v1/unlink", endpoint(unlink), methods=["POST"]),
        Route("/v1/complete_link", endpoint(complete_link), methods=["POST"]),
        Route("/v1/complete_sso", endpoint(complete_sso), methods=["POST"]),
        Route("/v1/oauth_token", endpoint(oauth_token), methods=["POST"]),
        Route("/v1/complete_server_connect", endpoint(complete_server_connect), methods=["POST"]),
        Route("/healthz", healthz),
        *(extra_routes or []),
    ]
    return Starlette(routes=routes)
