"""A fake Microsoft Teams channel for tests, bench and the sandbox: the Bot Connector's side.

``FakeTeams`` is an aiohttp server on a loopback port that plays every part of Microsoft the
bot talks to:

- the **token issuer**: it mints RS256 JWTs from its own test key with the Bot Connector's
  claims (``iss``, ``aud`` = the bot's app id, ``serviceurl``, ``nbf``/``exp``) and serves the
  OpenID metadata (``/.well-known/openidconfiguration``) and the JWKS (``/.well-known/keys``);
- the **channel**: ``post_activity`` POSTs activities to the bot's ``/api/messages`` with a
  ``Bearer`` token, as Teams does (messages, mentions, invokes);
- the **Connector REST API** the bot calls back on (relative to ``service_url``): reply, send,
  create conversation, update and delete activity, members, paged members, team channels;
  every call is recorded in ``calls`` and the current messages are kept in ``messages``;
  streamed replies in personal chats follow Teams' rules (``streaminfo``: informative and
  streaming typing activities, a growing ``streamSequence``, a final message; the first
  request gets the stream's id) and are kept in ``streams``;
- the **Entra token endpoint** for the bot's outbound client-credentials grant
  (``/{tenant}/oauth2/v2.0/token``), which hands out ``connector_token`` and is the only token
  the Connector API accepts.

Example::

    async with running_fake_teams() as teams:
        status, _ = await teams.post_activity(app_url, teams.message(ALICE, "show PAY-1"))
        sent = await teams.wait_for("send", where=lambda c: c.conversation_id == CHANNEL_ID)

No pytest here: fixtures live in ``tests/fixtures/teams.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import secrets
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from infra.serving import bind_socket, socket_url
from testing import recorded

APP_ID = "00000000-0000-4000-8000-0000000b0771"
APP_PASSWORD = "test-teams-client-secret"
TENANT_ID = "11111111-1111-4111-8111-111111111111"
OTHER_TENANT_ID = "99999999-9999-4999-8999-999999999999"
BOT_ID = f"28:{APP_ID}"
BOT_NAME = "opsbot"
ISSUER = "https://api.botframework.com"
TEAM_ID = "19:team-general@thread.tacv2"
CHANNEL_ID = "19:ops-general@thread.tacv2"
APPROVALS_CHANNEL_ID = "19:ops-approvals@thread.tacv2"


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@functools.cache
def _connector_key() -> rsa.RSAPrivateKey:
    """The Connector's signing key: one per test process (generating one took ~50 ms of CPU
    per ``FakeTeams``); a forged token's key (``foreign_key``) is always a new one."""
    return _new_key()


@dataclass(frozen=True, slots=True)
class TeamsUser:
    """A person as Teams shows them to a bot: the Entra object id and the app-scoped MRI."""

    aad_object_id: str
    name: str
    tenant_id: str = TENANT_ID

    @property
    def mri(self) -> str:
        return f"29:{self.aad_object_id}"


@dataclass
class ConnectorCall:
    """One Connector REST call the bot made. ``kind``: reply | send | create | update |
    delete | members | member | pagedmembers | channels."""

    kind: str
    conversation_id: str
    activity_id: str | None
    body: dict[str, Any]
    token: str | None
    at: float = field(default_factory=time.perf_counter)

    @property
    def message(self) -> dict[str, Any]:
        """The activity posted: the body, or a new conversation's first activity."""
        if self.kind == "create":
            activity = self.body.get("activity")
            return activity if isinstance(activity, dict) else {}
        return self.body

    @property
    def text(self) -> str:
        """Everything people would read: the text and every Adaptive Card's text, joined."""
        parts = [str(self.message.get("text") or "")]
        for attachment in self.message.get("attachments") or []:
            parts.append(json.dumps(attachment.get("content", {}), ensure_ascii=False))
        return "\n".join(p for p in parts if p)

    @property
    def cards(self) -> list[dict[str, Any]]:
        return self._attached("application/vnd.microsoft.card.adaptive")

    @property
    def oauth_cards(self) -> list[dict[str, Any]]:
        """OAuthCards (Teams SSO): ``tokenExchangeResource`` {id, uri}, ``connectionName``."""
        return self._attached("application/vnd.microsoft.card.oauth")

    def _attached(self, content_type: str) -> list[dict[str, Any]]:
        return [
            a.get("content") or {}
            for a in self.message.get("attachments") or []
            if a.get("contentType") == content_type
        ]


@dataclass
class FakeTeams:
    """Fake Bot Connector + token issuer. ``url`` is the base; ``service_url`` ends in ``/``."""

    app_id: str = APP_ID
    app_password: str = APP_PASSWORD
    tenant_id: str = TENANT_ID
    issuer: str = ISSUER
    members: dict[str, list[TeamsUser]] = field(default_factory=dict)
    calls: list[ConnectorCall] = field(default_factory=list)
    messages: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    # Streamed replies (personal chats): stream id → every activity sent into it, in order.
    streams: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stream_states: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The full conversation id each message in ``messages`` was posted to (with
    # ";messageid=<root>" for a reply in a channel thread): where a client shows it.
    posted_to: dict[tuple[str, str], str] = field(default_factory=dict)
    url: str = ""
    kid: str = field(default_factory=lambda: f"test-{secrets.token_hex(4)}")
    connector_token: str = field(default_factory=lambda: f"connector-{secrets.token_hex(8)}")
    token_requests: int = 0
    fail_next: dict[str, list[int]] = field(default_factory=dict)
    _key: rsa.RSAPrivateKey = field(default_factory=_connector_key)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _changed: asyncio.Condition | None = None

    @property
    def service_url(self) -> str:
        return f"{self.url}/"

    @property
    def openid_metadata_url(self) -> str:
        return f"{self.url}/.well-known/openidconfiguration"

    @property
    def token_url(self) -> str:
        return f"{self.url}/{self.tenant_id}/oauth2/v2.0/token"

    # -- tokens the channel sends ------------------------------------------------------

    def token(
        self,
        *,
        service_url: str | None = None,
        audience: str | list[str] | None = None,
        issuer: str | None = None,
        expires_in: float = 3600,
        not_before: float | None = None,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = None,
        algorithm: str = "RS256",
        secret: str = "",
        extra: dict[str, Any] | None = None,
    ) -> str:
        """A Bot Connector JWT. The defaults make a valid one; each argument forges one part
        (a foreign ``key``, an ``expires_in`` in the past, another ``audience``...).
        ``algorithm`` "HS256" signs with ``secret``; "none" is unsigned."""
        now = time.time()
        claims: dict[str, Any] = {
            "iss": issuer or self.issuer,
            "aud": self.app_id if audience is None else audience,
            "serviceurl": self.service_url if service_url is None else service_url,
            "nbf": int(now - 60 if not_before is None else not_before),
            "iat": int(now - 60),
            "exp": int(now + expires_in),
            **(extra or {}),
        }
        headers = {"kid": kid or self.kid}
        if algorithm == "RS256":
            return jwt.encode(claims, key or self._key, algorithm="RS256", headers=headers)
        if algorithm == "none":
            return jwt.encode(claims, "", algorithm="none", headers=headers)
        return jwt.encode(claims, secret or "x" * 32, algorithm=algorithm, headers=headers)

    @staticmethod
    def foreign_key() -> rsa.RSAPrivateKey:
        """A key the JWKS does not publish (for forged tokens)."""
        return _new_key()

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(RSAAlgorithm.to_jwk(self._key.public_key()))
        jwk.update({"kid": self.kid, "use": "sig", "alg": "RS256", "endorsements": ["msteams"]})
        return {"keys": [jwk]}

    # -- activities the channel sends --------------------------------------------------

    def _envelope(
        self, user: TeamsUser, conversation: dict[str, Any], channel_data: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "id": str(int(time.time() * 1000) * 1000 + next(self._ids)),
            "channelId": "msteams",
            "serviceUrl": self.service_url,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "from": {"id": user.mri, "name": user.name, "aadObjectId": user.aad_object_id},
            "recipient": {"id": BOT_ID, "name": BOT_NAME},
            "conversation": conversation,
            "channelData": {"tenant": {"id": user.tenant_id}, **channel_data},
            "locale": "en-US",
        }

    def mention(
        self,
        user: TeamsUser,
        text: str,
        *,
        channel_id: str = CHANNEL_ID,
        thread_id: str | None = None,
    ) -> dict[str, Any]:
        """``@opsbot text`` in a channel: a new post (``thread_id`` None) or a reply in the
        thread whose root message id is ``thread_id``."""
        activity = self._envelope(
            user,
            {},
            {"team": {"id": TEAM_ID}, "channel": {"id": channel_id}, "teamsChannelId": channel_id},
        )
        root = thread_id or activity["id"]
        activity["conversation"] = {
            "id": f"{channel_id};messageid={root}",
            "conversationType": "channel",
            "isGroup": True,
            "tenantId": user.tenant_id,
        }
        activity.update(
            {
                "type": "message",
                "text": f"<at>{BOT_NAME}</at> {text}",
                "textFormat": "plain",
                "entities": [
                    {
                        "type": "mention",
                        "text": f"<at>{BOT_NAME}</at>",
                        "mentioned": {"id": BOT_ID, "name": BOT_NAME},
                    }
                ],
            }
        )
        if thread_id is not None:
            activity["replyToId"] = thread_id
        return activity

    def personal(self, user: TeamsUser, text: str) -> dict[str, Any]:
        """A message in the user's personal (1:1) chat with the bot."""
        activity = self._envelope(
            user,
            {
                "id": self.personal_conversation_id(user),
                "conversationType": "personal",
                "tenantId": user.tenant_id,
            },
            {},
        )
        activity.update({"type": "message", "text": text, "textFormat": "plain"})
        return activity

    def token_exchange(
        self, user: TeamsUser, oauth_card: dict[str, Any], token: str, *, exchange_id: str = ""
    ) -> dict[str, Any]:
        """The ``signin/tokenExchange`` invoke a Teams client sends for ``oauth_card`` once it
        got ``token`` silently (an Entra token for the card's ``tokenExchangeResource.uri``),
        from the user's personal chat. ``exchange_id`` overrides the card's id."""
        resource = oauth_card["tokenExchangeResource"]
        activity = self.personal(user, "")
        del activity["text"], activity["textFormat"]
        activity.update(
            {
                "type": "invoke",
                "name": "signin/tokenExchange",
                "value": {
                    "id": exchange_id or resource["id"],
                    "connectionName": oauth_card["connectionName"],
                    "token": token,
                },
            }
        )
        return activity

    def card_action(
        self,
        user: TeamsUser,
        conversation_id: str,
        activity_id: str,
        verb: str,
        data: dict[str, Any],
        *,
        trigger: str = "manual",
    ) -> dict[str, Any]:
        """An ``Action.Execute`` on the card posted as ``activity_id`` in ``conversation_id``
        (a click, or with ``trigger`` "automatic" a refresh): the ``adaptiveCard/action``
        invoke Teams sends; ``data`` is the action's data plus the card's inputs."""
        channel = conversation_id.split(";")[0]
        channel_data: dict[str, Any] = {}
        if conversation_id.startswith("19:"):
            channel_data = {"team": {"id": TEAM_ID}, "channel": {"id": channel}}
        activity = self._envelope(
            user,
            {
                "id": conversation_id,
                "conversationType": "channel" if channel_data else "personal",
                "isGroup": bool(channel_data),
                "tenantId": user.tenant_id,
            },
            channel_data,
        )
        activity.update(
            {
                "type": "invoke",
                "name": "adaptiveCard/action",
                "replyToId": activity_id,
                "value": {
                    "action": {"type": "Action.Execute", "verb": verb, "data": data},
                    "trigger": trigger,
                },
            }
        )
        return activity

    @staticmethod
    def personal_conversation_id(user: TeamsUser) -> str:
        # Real ones are long opaque strings ("a:1..."), longer than 64 characters.
        return f"a:1{user.aad_object_id.replace('-', '')}{'x' * 60}"

    async def post_activity(
        self,
        app_url: str,
        activity: dict[str, Any],
        *,
        token: str | None = None,
        authorization: str | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> tuple[int, str]:
        """POST ``activity`` to ``{app_url}/api/messages`` with a valid token (or ``token``,
        or a raw ``authorization`` header); the status and body of the bot's answer."""
        header = authorization if authorization is not None else f"Bearer {token or self.token()}"
        headers = {"Content-Type": "application/json"}
        if header:
            headers["Authorization"] = header
        own = session is None
        session = session or aiohttp.ClientSession()
        try:
            async with session.post(
                f"{app_url}/api/messages", data=json.dumps(activity), headers=headers
            ) as response:
                return response.status, await response.text()
        finally:
            if own:
                await session.close()

    # -- what the bot did --------------------------------------------------------------

    def calls_to(self, kind: str) -> list[ConnectorCall]:
        return [c for c in self.calls if c.kind == kind]

    def posted(self, conversation_prefix: str = "") -> list[ConnectorCall]:
        """Messages (not typing) the bot replied, sent or created in conversations starting
        with ``conversation_prefix``."""
        return [
            c
            for c in self.calls
            if c.kind in ("reply", "send", "create")
            and c.message
            and c.message.get("type", "message") == "message"
            and c.conversation_id.startswith(conversation_prefix)
        ]

    async def wait_for(
        self,
        kind: str,
        count: int = 1,
        *,
        wait: float = 10.0,
        where: Callable[[ConnectorCall], bool] = lambda _c: True,
    ) -> list[ConnectorCall]:
        """Wait until ``count`` calls of ``kind`` (or "posted": any message) match ``where``."""

        def matching() -> list[ConnectorCall]:
            pool = self.posted() if kind == "posted" else self.calls_to(kind)
            return [c for c in pool if where(c)]

        return await recorded.wait_until(
            self._changed,
            matching,
            count,
            wait,
            f"{kind} call(s)",
            lambda: [(c.kind, c.conversation_id, c.body.get("type")) for c in self.calls],
        )

    async def settle(self, quiet: float = 0.3, limit: float = 10.0) -> None:
        """Wait until no Connector call arrived for ``quiet`` seconds."""
        await recorded.settle(self.calls, quiet, limit, "the bot")

    # -- server ------------------------------------------------------------------------

    async def _record(
        self, request: web.Request, kind: str, body: dict[str, Any] | None = None
    ) -> web.Response | ConnectorCall:
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        call = ConnectorCall(
            kind,
            urllib.parse.unquote(request.match_info.get("conversation", "")),
            request.match_info.get("activity"),
            body or {},
            token,
        )
        self.calls.append(call)
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()
        failures = self.fail_next.get(kind)
        if failures:
            status = failures.pop(0)
            return web.json_response(
                {"error": {"code": "ServiceError", "message": "injected failure"}}, status=status
            )
        if token != self.connector_token:
            return web.json_response(
                {"error": {"code": "Unauthorized", "message": "bad token"}}, status=401
            )
        return call

    async def _activity(self, request: web.Request) -> web.Response:
        body = await request.json()
        activity_id = request.match_info.get("activity")
        method_kind = {"POST": "reply" if activity_id else "send", "PUT": "update"}
        kind = method_kind.get(request.method, "delete")
        recorded = await self._record(request, kind, body if isinstance(body, dict) else {})
        if isinstance(recorded, web.Response):
            return recorded
        conversation = recorded.conversation_id
        info = stream_info(body)
        if info is not None and kind in ("reply", "send"):
            return self._stream_activity(conversation.split(";")[0], body, info)
        if kind == "update":
            key = (conversation.split(";")[0], str(activity_id))
            if key not in self.messages:
                return web.json_response({"error": {"code": "NotFound"}}, status=404)
            self.messages[key] = {**body, "id": activity_id}
            return web.json_response({"id": activity_id})
        new_id = str(int(time.time() * 1000) * 1000 + next(self._ids))
        if body.get("type", "message") == "message":
            self.messages[(conversation.split(";")[0], new_id)] = {**body, "id": new_id}
            self.posted_to[(conversation.split(";")[0], new_id)] = conversation
        return web.json_response({"id": new_id}, status=201)

    def _stream_activity(
        self, conversation: str, body: dict[str, Any], info: dict[str, Any]
    ) -> web.Response:
        """Teams' streaming: personal chats only; the first request (no ``streamId``) opens
        the stream and is answered with its id; then ``streamSequence`` grows, each
        ``streaming`` text holds all the text before it, and a ``final`` message ends it."""

        def refuse(status: int, code: str, message: str) -> web.Response:
            return web.json_response({"error": {"code": code, "message": message}}, status=status)

        if not conversation.startswith("a:"):
            return refuse(403, "ContentStreamNotAllowed", "streaming is for personal chats")
        kind, stream_id = info.get("streamType"), info.get("streamId")
        sequence = info.get("streamSequence")
        if kind not in ("informative", "streaming", "final"):
            return refuse(400, "BadArgument", "unknown streamType")
        if kind == "final":
            if body.get("type") != "message" or not stream_id or sequence is not None:
                return refuse(400, "BadArgument", "final: a message with streamId, no sequence")
        elif body.get("type") != "typing" or not isinstance(sequence, int):
            return refuse(400, "BadArgument", "updates are typing activities with a sequence")
        if stream_id is None:
            if sequence != 1:
                return refuse(400, "BadArgument", "a stream starts at streamSequence 1")
            stream_id = str(int(time.time() * 1000) * 1000 + next(self._ids))
            self.stream_states[stream_id] = {"conversation": conversation, "seq": 0, "text": ""}
        state = self.stream_states.get(str(stream_id))
        if state is None or state["conversation"] != conversation:
            return refuse(404, "NotFound", "no such stream")
        if state.get("ended"):
            return refuse(403, "ContentStreamNotAllowed", "the stream has ended")
        if kind != "final":
            if sequence <= state["seq"]:
                return refuse(400, "BadArgument", "streamSequence must grow")
            text = str(body.get("text") or "")
            if kind == "streaming" and not text.startswith(state["text"]):
                return refuse(400, "BadArgument", "streamed text must keep the text before it")
            state["seq"] = sequence
            state["text"] = text if kind == "streaming" else state["text"]
        else:
            state["ended"] = True
            self.messages[(conversation, str(stream_id))] = {**body, "id": stream_id}
        self.streams.setdefault(str(stream_id), []).append(body)
        return web.json_response({"id": stream_id}, status=201)

    async def _delete(self, request: web.Request) -> web.Response:
        recorded = await self._record(request, "delete")
        if isinstance(recorded, web.Response):
            return recorded
        self.messages.pop((recorded.conversation_id.split(";")[0], str(recorded.activity_id)), None)
        return web.Response(status=200)

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        recorded = await self._record(request, "create", body)
        if isinstance(recorded, web.Response):
            return recorded
        activity = body.get("activity") or {}
        channel = ((body.get("channelData") or {}).get("channel") or {}).get("id")
        if channel:  # a new thread in a channel: the conversation id names its root post
            root = str(int(time.time() * 1000) * 1000 + next(self._ids))
            conversation_id = f"{channel};messageid={root}"
            recorded.conversation_id = conversation_id
            if activity:
                self.messages[(channel, root)] = {**activity, "id": root}
                self.posted_to[(channel, root)] = conversation_id
            return web.json_response({"id": conversation_id, "activityId": root}, status=201)
        members = body.get("members") or [{}]
        user = str(members[0].get("id", "")).removeprefix("29:")
        conversation_id = f"a:1{user.replace('-', '')}{'x' * 60}"
        recorded.conversation_id = conversation_id
        response: dict[str, Any] = {"id": conversation_id}
        if activity:
            activity_id = str(int(time.time() * 1000) * 1000 + next(self._ids))
            self.messages[(conversation_id, activity_id)] = {**activity, "id": activity_id}
            self.posted_to[(conversation_id, activity_id)] = conversation_id
            response["activityId"] = activity_id
        return web.json_response(response, status=201)

    def _member_json(self, user: TeamsUser) -> dict[str, Any]:
        return {
            "id": user.mri,
            "name": user.name,
            "aadObjectId": user.aad_object_id,
            "tenantId": user.tenant_id,
            "userRole": "user",
        }

    async def _members(self, request: web.Request) -> web.Response:
        recorded = await self._record(request, "members")
        if isinstance(recorded, web.Response):
            return recorded
        people = self.members.get(recorded.conversation_id.split(";")[0], [])
        return web.json_response([self._member_json(u) for u in people])

    async def _member(self, request: web.Request) -> web.Response:
        recorded = await self._record(request, "member")
        if isinstance(recorded, web.Response):
            return recorded
        wanted = request.match_info["member"]
        for user in self.members.get(recorded.conversation_id.split(";")[0], []):
            if wanted in (user.mri, user.aad_object_id):
                return web.json_response(self._member_json(user))
        return web.json_response({"error": {"code": "MemberNotFoundInConversation"}}, status=404)

    async def _paged_members(self, request: web.Request) -> web.Response:
        recorded = await self._record(request, "pagedmembers")
        if isinstance(recorded, web.Response):
            return recorded
        people = self.members.get(recorded.conversation_id.split(";")[0], [])
        return web.json_response({"members": [self._member_json(u) for u in people]})

    async def _channels(self, request: web.Request) -> web.Response:
        recorded = await self._record(request, "channels")
        if isinstance(recorded, web.Response):
            return recorded
        return web.json_response(
            {
                "conversations": [
                    {"id": CHANNEL_ID, "name": "General"},
                    {"id": APPROVALS_CHANNEL_ID, "name": "ops-approvals"},
                ]
            }
        )

    async def _openid(self, _request: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.url}/v1/botframework.com/oauth2/authorize",
                "jwks_uri": f"{self.url}/.well-known/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            }
        )

    async def _keys(self, _request: web.Request) -> web.Response:
        return web.json_response(self.jwks())

    async def _token(self, request: web.Request) -> web.Response:
        """Entra's client-credentials grant, for the bot's outbound calls."""
        form = await request.post()
        self.token_requests += 1
        if (
            form.get("grant_type") != "client_credentials"
            or form.get("client_id") != self.app_id
            or form.get("client_secret") != self.app_password
        ):
            return web.json_response(
                {"error": "invalid_client", "error_description": "bad client"}, status=401
            )
        return web.json_response(
            {"token_type": "Bearer", "expires_in": 3599, "access_token": self.connector_token}
        )


@contextlib.asynccontextmanager
async def running_fake_teams(**kwargs: Any) -> AsyncIterator[FakeTeams]:
    """A ``FakeTeams`` served on a free loopback port until the block exits."""
    fake = FakeTeams(**kwargs)
    runner = await start_fake_teams(fake)
    try:
        yield fake
    finally:
        await runner.cleanup()


async def start_fake_teams(fake: FakeTeams) -> web.AppRunner:
    fake._changed = asyncio.Condition()
    app = web.Application()
    conv = "/v3/conversations/{conversation}"
    app.router.add_get("/.well-known/openidconfiguration", fake._openid)
    app.router.add_get("/.well-known/keys", fake._keys)
    app.router.add_post("/{tenant}/oauth2/v2.0/token", fake._token)
    app.router.add_post("/v3/conversations", fake._create)
    app.router.add_post(f"{conv}/activities", fake._activity)
    app.router.add_post(conv + "/activities/{activity}", fake._activity)
    app.router.add_put(conv + "/activities/{activity}", fake._activity)
    app.router.add_delete(conv + "/activities/{activity}", fake._delete)
    app.router.add_get(f"{conv}/members", fake._members)
    app.router.add_get(conv + "/members/{member}", fake._member)
    app.router.add_get(f"{conv}/pagedmembers", fake._paged_members)
    app.router.add_get("/v3/teams/{team}/conversations", fake._channels)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    sock = bind_socket("127.0.0.1", 0)
    await web.SockSite(runner, sock).start()
    fake.url = socket_url(sock)
    return runner


def stream_info(activity: dict[str, Any]) -> dict[str, Any] | None:
    """The ``streaminfo`` entity of an activity, if it is part of a stream."""
    for entity in activity.get("entities") or []:
        if isinstance(entity, dict) and entity.get("type") == "streaminfo":
            return entity
    return None


def new_user(name: str, tenant_id: str = TENANT_ID) -> TeamsUser:
    return TeamsUser(str(uuid.uuid4()), name, tenant_id)


__all__ = [
    "APPROVALS_CHANNEL_ID",
    "APP_ID",
    "APP_PASSWORD",
    "BOT_ID",
    "CHANNEL_ID",
    "ISSUER",
    "OTHER_TENANT_ID",
    "TEAM_ID",
    "TENANT_ID",
    "ConnectorCall",
    "FakeTeams",
    "TeamsUser",
    "new_user",
    "running_fake_teams",
    "start_fake_teams",
]
