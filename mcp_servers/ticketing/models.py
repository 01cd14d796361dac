"""Ticketing payloads: what tools accept and return (Pydantic at the boundary)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Status = Literal["open", "in_progress", "blocked", "resolved", "closed"]
Priority = Literal["critical", "high", "medium", "low"]

IDEMPOTENCY_KEY_FIELD = Field(
    min_length=8,
    max_length=200,
    pattern=r"^[A-Za-z0-9._:\-]+$",
    description=(
        "Unique key for this change (8-200 chars of letters, digits, . _ : -). Repeating a call "
        "with the same key and the same arguments returns the first result and changes nothing; "
        "the same key with different arguments is refused. Scoped to the calling user."
    ),
)


class Comment(BaseModel):
    author: str
    body: str
    created_at: str


class TicketSummary(BaseModel):
    key: str
    project: str
    title: str
    status: Status
    priority: Priority
    assignee: str | None
    updated_at: str
    url: str = Field(description="the ticket's canonical link (cite it as the source)")


class Ticket(TicketSummary):
    description: str
    created_by: str
    created_at: str
    comments: list[Comment] = Field(default_factory=list)


class SearchResult(BaseModel):
    tickets: list[TicketSummary]
    total_matches: int


class ChangeEntry(BaseModel):
    """One line of the server's append-only change log."""

    id: int
    at: str
    subject: str = Field(description="the user the change was made for (token sub)")
    actor: str | None = Field(description="the client acting for the user (token act.sub)")
    tool: str
    ticket_key: str | None
    idempotency_key: str | None
    change: dict[str, Any]


class ChangeLog(BaseModel):
    entries: list[ChangeEntry]
