"""The seam for Teams approval cards (PLACEHOLDER: posts nothing).

The Teams approval cards (Adaptive Card 1.5, ``Action.Execute`` verbs, refresh for eligible
approvers) and the invoke handling are built in ``bot/teams/approval_cards.py`` and this
module by the approvals work of issue #17; this placeholder only fixes the interface the
adapter calls, so the conversation side can be built and tested on its own:

- ``register(app)``: add ``adaptiveCard/action`` routes to the ``AgentApplication``;
- ``post_cards(reply, message)``: after an ``ApprovalRequested`` reply, post one card per
  approval in the approvals channel (``TeamsOutbound.create_thread``) and remember where;
- ``announce(decided)``: a decision made elsewhere (the expiry sweeper, Slack) changes the
  card and tells the requester (``TeamsOutbound.post_in_thread(decided.requester_ref, ...)``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from bot.teams.core import ApprovalRequested, Decided

if TYPE_CHECKING:
    from bot.teams.incoming import TeamsMessage
    from bot.teams.outbound import TeamsOutbound

log = logging.getLogger(__name__)


class TeamsApprovals:
    def __init__(self, outbound: TeamsOutbound, approvals_conversation_id: str | None) -> None:
        self.outbound = outbound
        self.approvals_conversation_id = approvals_conversation_id

    def register(self, app: Any) -> None:
        """Placeholder: no card actions yet."""

    async def post_cards(self, reply: ApprovalRequested, message: TeamsMessage) -> None:
        """Placeholder: the approval cards are not posted in Teams yet."""
        log.info(
            "Teams approval cards are not built yet: %d approval(s) not shown in Teams",
            len(reply.all),
        )

    async def announce(self, decided: Decided) -> None:
        """Placeholder: nothing to update."""
