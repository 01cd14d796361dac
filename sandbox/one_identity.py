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
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, cast

import httpx

from infra.tls import shared_ssl_context
from sandbox.teams_chat import teams_user
from testing.slack_workspace import TEAM_ID, User

if TYPE_CHECKING:
    from assistant.types import AssistantPort, ChatUser, Linked
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
    """The core, with ``complete_link`` also linking the person's other chat account."""

    def __init__(self, inner: AssistantPort, pairs: dict[ChatUser, tuple[ChatUser, str]]):
        self._inner = inner
        self._pairs = pairs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

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
            yield cast("AssistantPort", _OneIdentity(assistant, pairs))

    return factory
