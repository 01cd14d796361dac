"""Where each approval's Teams card is: ``chat_approval_messages`` rows with platform "teams".

The table is shared with Slack (one row per approval and platform), so the core sees which
platforms show an approval. For Teams a row keeps the card's thread (conversation id with
its ``;messageid=``), the card's activity id, the ``serviceUrl`` it was posted through, and the
requester's thread (``PlatformRef`` channel and thread keys; empty for a mirrored card whose
requester is on another platform).

Example::

    cards = SqlTeamsCards(engine)
    await cards.save(TeamsCard("ap-1", tenant, conversation_id, activity_id, service_url))
    card = await cards.get("ap-1")
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.teams.incoming import PLATFORM
from infra.storage.card_rows import card_row, save_first_card
from infra.storage.store import SqlStore

_MESSAGE_ID = ";messageid="


@dataclass(frozen=True, slots=True)
class TeamsCard:
    approval_id: str
    tenant_id: str
    conversation_id: str  # the card's own thread: ``19:…@thread.tacv2;messageid=<root>``
    activity_id: str
    service_url: str
    requester_channel_key: str = ""
    requester_thread_key: str = ""

    @property
    def channel_id(self) -> str:
        """The channel the card's thread is in (the conversation id without the thread)."""
        return self.conversation_id.partition(_MESSAGE_ID)[0]

    def reference(self, app_id: str) -> dict[str, object]:
        """A conversation reference addressing the card (for the PUT that updates it)."""
        return {
            "activityId": self.activity_id,
            "bot": {"id": f"28:{app_id}"},
            "channelId": "msteams",
            "conversation": {
                "id": self.conversation_id,
                "isGroup": True,
                "conversationType": "channel",
                "tenantId": self.tenant_id,
            },
            "serviceUrl": self.service_url,
        }


class SqlTeamsCards(SqlStore):
    async def save(self, card: TeamsCard) -> bool:
        """Remember the card; the first save wins (``False``: one was saved before, so a
        retried post never points the approval at a second card)."""
        return await save_first_card(
            self._engine,
            approval_id=card.approval_id,
            platform=PLATFORM,
            team_id=card.tenant_id,
            card_channel_id=card.conversation_id,
            card_ts=card.activity_id,
            requester_channel_id=card.requester_channel_key,
            requester_thread_ts=card.requester_thread_key,
            service_url=card.service_url,
            created_at=self._clock(),
        )

    async def get(self, approval_id: str) -> TeamsCard | None:
        m = await card_row(self._engine, approval_id, PLATFORM)
        if m is None:
            return None
        return TeamsCard(
            approval_id=m["approval_id"],
            tenant_id=m["team_id"],
            conversation_id=m["card_channel_id"],
            activity_id=m["card_ts"],
            service_url=m["service_url"] or "",
            requester_channel_key=m["requester_channel_id"],
            requester_thread_key=m["requester_thread_ts"],
        )
