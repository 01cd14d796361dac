"""One identity across the sandbox's Slack and Teams: a seeded person who connects on one
platform is connected on the other too, as if their company's single sign-on had signed
them in there as well.

The core (``AssistantPort``) is wrapped: once an account link completes through the IdP's
login page, the sandbox signs the same person in for their chat account on the other
platform through the very same path (``link_url`` → the dev IdP's login page →
``complete_link``), so nothing in the bot or the broker knows about it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

import httpx

from infra.tls import shared_ssl_context
from sandbox.teams_chat import teams_user
from testing.slack_workspace import TEAM_ID, User

if TYPE_CHECKING:
    from assistant.types import (
        ApprovalView,
        AssistantPort,
        ChatUser,
        ConnectRefused,
        Decision,
        DecisionNotifier,
        DecisionOutcome,
        Linked,
        NoticeHandler,
        PlatformRef,
        Refused,
        Remembered,
        Reply,
        RunEvents,
        ServerConnected,
        ServerConnection,
        StopResult,
        UserStatus,
    )
    from infra.settings import Settings

log = logging.getLogger(__name__)


def counterparts(people: list[User]) -> dict[ChatUser, tuple[ChatUser, str]]:
    """Each person's chat account → (their account on the other platform, their username)."""
    from assistant.types import ChatUser

    pairs: dict[ChatUser, tuple[ChatUser, str]] = {}
    for user in people:
        teams = teams_user(user)
        slack_account = ChatUser("slack", TEAM_ID, user.id)
        teams_account = ChatUser("teams", teams.tenant_id, teams.aad_object_id)
        pairs[slack_account] = (teams_account, user.name)
        pairs[teams_account] = (slack_account, user.name)
    return pairs


class _OneIdentity:
    """The core, with ``complete_link`` also linking the person's other chat account; every
    other call of ``AssistantPort`` is passed on as it is (typed, so mypy checks each one)."""

    def __init__(self, inner: AssistantPort, pairs: dict[ChatUser, tuple[ChatUser, str]]):
        self._inner = inner
        self._pairs = pairs

    async def handle_message(
        self, chat_user: ChatUser, ref: PlatformRef, text: str, *, events: RunEvents | None = None
    ) -> Reply:
        return await self._inner.handle_message(chat_user, ref, text, events=events)

    async def stop(self, chat_user: ChatUser, ref: PlatformRef) -> StopResult:
        return await self._inner.stop(chat_user, ref)

    async def record_feedback(self, chat_user: ChatUser, ref: PlatformRef, positive: bool) -> None:
        return await self._inner.record_feedback(chat_user, ref, positive)

    async def decide(
        self, approver: ChatUser, approval_id: str, decision: Decision
    ) -> DecisionOutcome:
        return await self._inner.decide(approver, approval_id, decision)

    async def approval_view(self, approval_id: str) -> ApprovalView | None:
        return await self._inner.approval_view(approval_id)

    async def pending_for(self, chat_user: ChatUser) -> list[ApprovalView]:
        return await self._inner.pending_for(chat_user)

    async def awaiting_approver(self, chat_user: ChatUser) -> list[ApprovalView]:
        return await self._inner.awaiting_approver(chat_user)

    async def my_requests(self, chat_user: ChatUser, limit: int = 10) -> list[ApprovalView]:
        return await self._inner.my_requests(chat_user, limit)

    async def connections(self, chat_user: ChatUser) -> list[ServerConnection]:
        return await self._inner.connections(chat_user)

    async def home_audience(self, approval_id: str) -> list[ChatUser]:
        return await self._inner.home_audience(approval_id)

    def on_approval_change(self, listener: Callable[[str], Awaitable[None]]) -> Callable[[], None]:
        return self._inner.on_approval_change(listener)

    async def link_url(self, chat_user: ChatUser) -> str:
        return await self._inner.link_url(chat_user)

    async def unlink(self, chat_user: ChatUser) -> bool:
        return await self._inner.unlink(chat_user)

    async def status(self, chat_user: ChatUser, *, fresh: bool = False) -> UserStatus:
        return await self._inner.status(chat_user, fresh=fresh)

    async def complete_server_connect(
        self, state: str, code: str, *, iss: str | None = None
    ) -> ServerConnected | ConnectRefused:
        return await self._inner.complete_server_connect(state, code, iss=iss)

    async def link_sso(self, chat_user: ChatUser, token: str) -> Linked | Refused:
        return await self._inner.link_sso(chat_user, token)

    async def sweep_forever(
        self, interval: float, notify: DecisionNotifier, *, platform: str | None = None
    ) -> None:
        return await self._inner.sweep_forever(interval, notify, platform=platform)

    async def deliver_notices(self, platform: str, handle: NoticeHandler) -> int:
        return await self._inner.deliver_notices(platform, handle)

    async def notices_forever(self, platform: str, interval: float, handle: NoticeHandler) -> None:
        return await self._inner.notices_forever(platform, interval, handle)

    async def memory_command(self, chat_user: ChatUser, text: str) -> str:
        return await self._inner.memory_command(chat_user, text)

    async def remembered(self, chat_user: ChatUser) -> Remembered | None:
        return await self._inner.remembered(chat_user)

    async def forget_memory(self, chat_user: ChatUser) -> bool:
        return await self._inner.forget_memory(chat_user)

    async def complete_link(self, state: str, code: str, *, iss: str | None = None) -> Linked:
        linked = await self._inner.complete_link(state, code, iss=iss)
        pair = self._pairs.get(linked.chat_user)
        if pair is not None:
            try:
                await self._sign_in(*pair)
            except Exception as exc:  # the link the person made stands
                log.warning("could not connect %s on the other platform: %s", pair[1], exc)
        return linked

    async def _sign_in(self, account: ChatUser, username: str) -> None:
        from testing.identity import sign_in_at_login_page

        if (await self._inner.status(account)).linked:
            return
        async with httpx.AsyncClient(timeout=30, verify=shared_ssl_context()) as http:
            reply = await sign_in_at_login_page(http, await self._inner.link_url(account), username)
        await self._inner.complete_link(reply["state"], reply["code"], iss=reply.get("iss"))


def one_identity(
    people: list[User],
) -> Callable[[Settings], AbstractAsyncContextManager[AssistantPort]]:
    """An assistant factory for ``serve_slack``: ``open_assistant``, one identity per person."""
    pairs = counterparts(people)

    @contextlib.asynccontextmanager
    async def factory(settings: Settings) -> AsyncIterator[AssistantPort]:
        from opsbot.wiring import open_assistant

        async with open_assistant(settings) as assistant:
            yield _OneIdentity(assistant, pairs)

    return factory
