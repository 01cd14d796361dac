"""Rows of ``chat_approval_messages``: where an approval's card is, one row per platform.

Each chat adapter keeps its own view of a row (Slack's channel and ts, Teams' conversation
and activity ids); the rules of the table are here once: the first save of an approval's card
on a platform wins, and a row is read by approval and platform.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import RowMapping, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.storage.schema import chat_approval_messages


async def save_first_card(engine: AsyncEngine, **row: Any) -> bool:
    """Insert ``row``; ``False`` when its approval already has a card on its platform (so a
    retried post never points the approval at a second card)."""
    try:
        async with engine.begin() as conn:
            await conn.execute(chat_approval_messages.insert().values(**row))
    except IntegrityError:
        return False
    return True


async def card_row(engine: AsyncEngine, approval_id: str, platform: str) -> RowMapping | None:
    c = chat_approval_messages.c
    query = select(chat_approval_messages).where(
        c.approval_id == approval_id, c.platform == platform
    )
    async with engine.connect() as conn:
        return (await conn.execute(query)).mappings().first()
