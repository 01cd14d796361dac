"""``RemoteBroker``: the ``IdentityService`` of a broker service over HTTP.

Example::

    async with httpx.AsyncClient() as http:
        broker = RemoteBroker("http://127.0.0.1:8099", secret, http)
        token = await broker.get_token(identity, "ticketing")
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from broker.errors import BrokerUnavailableError, from_wire
from broker.http import request
from broker.types import AccessToken, ChatUser, Identity, ServerConnection
from infra.json_input import parse_json


def _chat_user_json(chat_user: ChatUser | None) -> dict[str, str] | None:
    if chat_user is None:
        return None
    return {
        "platform": chat_user.platform,
        "team_id": chat_user.team_id,
        "user_id": chat_user.user_id,
    }


def _for(identity: Identity, server: str) -> dict[str, Any]:
    """The body of a token request (``/v1/token``, ``/v1/oauth_token``): whose, for which."""
    return {
        "subject": identity.subject,
        "chat_user": _chat_user_json(identity.chat_user),
        "email": identity.email,
        "server": server,
    }


def _identity(data: dict[str, Any]) -> Identity:
    cu = data.get("chat_user")
    return Identity(
        subject=str(data["subject"]),
        chat_user=ChatUser(cu["platform"], cu["team_id"], cu["user_id"]) if cu else None,
        email=str(data.get("email", "")),
        groups=frozenset(data.get("groups", [])),
    )


class RemoteBroker:
    """Calls a broker service (``broker.service``); holds no refresh tokens itself."""

    def __init__(self, base_url: str, secret: str, http: httpx.AsyncClient) -> None:
        self._base = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {secret}"}
        self._http = http

    @property
    def base_url(self) -> str:
        return self._base

    def __repr__(self) -> str:
        return f"RemoteBroker({self._base!r})"

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await request(
            self._http,
            "POST",
            f"{self._base}{path}",
            "broker service",
            json=body,
            headers=self._headers,
        )
        try:
            data = parse_json(response.content)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise BrokerUnavailableError(f"broker service answered {response.status_code}")
        if response.status_code == 200:
            return data
        raise from_wire(data, response.status_code, str(body.get("server", "?")))

    async def get_token(self, identity: Identity, server: str) -> AccessToken:
        data = await self._call("/v1/token", _for(identity, server))
        return AccessToken(
            value=str(data["access_token"]),
            audience=str(data["audience"]),
            expires_at=datetime.fromisoformat(str(data["expires_at"])),
            scopes=frozenset(data.get("scopes", [])),
        )

    async def invalidate(self, identity: Identity, server: str) -> None:
        await self._call(
            "/v1/invalidate",
            {
                "subject": identity.subject,
                "chat_user": _chat_user_json(identity.chat_user),
                "server": server,
            },
        )

    async def resolve(self, chat_user: ChatUser, *, fresh: bool = False) -> Identity | None:
        body: dict[str, Any] = {"chat_user": _chat_user_json(chat_user), "fresh": fresh}
        data = await self._call("/v1/resolve", body)
        found = data.get("identity")
        return _identity(found) if isinstance(found, dict) else None

    async def resolve_subject(self, subject: str) -> Identity:
        data = await self._call("/v1/resolve_subject", {"subject": subject})
        return _identity(data["identity"])

    async def link_url(self, chat_user: ChatUser) -> str:
        data = await self._call("/v1/link_url", {"chat_user": _chat_user_json(chat_user)})
        return str(data["url"])

    async def complete_link(self, state: str, code: str, *, iss: str | None = None) -> Identity:
        body = {"state": state, "code": code, **({"iss": iss} if iss is not None else {})}
        data = await self._call("/v1/complete_link", body)
        return _identity(data["identity"])

    async def complete_sso(self, chat_user: ChatUser, token: str) -> Identity:
        """Link a Teams user from their client's SSO token (the service's ``broker.sso``)."""
        body = {"chat_user": _chat_user_json(chat_user), "token": token}
        data = await self._call("/v1/complete_sso", body)
        return _identity(data["identity"])

    async def oauth_token(self, identity: Identity, server: str) -> str:
        """The user's token for ``server`` (``oauth`` mode); ``ConnectRequired`` if none."""
        data = await self._call("/v1/oauth_token", _for(identity, server))
        return str(data["access_token"])

    async def complete_server_connect(
        self, state: str, code: str, *, iss: str | None = None
    ) -> ServerConnection:
        body = {"state": state, "code": code, **({"iss": iss} if iss is not None else {})}
        data = await self._call("/v1/complete_server_connect", body)
        cu = data["chat_user"]
        return ServerConnection(
            str(data["subject"]),
            ChatUser(str(cu["platform"]), str(cu["team_id"]), str(cu["user_id"])),
            str(data["server"]),
        )

    async def unlink(self, chat_user: ChatUser) -> bool:
        data = await self._call("/v1/unlink", {"chat_user": _chat_user_json(chat_user)})
        return bool(data["removed"])
