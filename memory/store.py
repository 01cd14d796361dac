"""User memory: a few optional preferences per user, in a LangGraph store.

What is kept is an explicit schema (``Preferences``: default team, default ticket project,
answer style) — never credentials, never tool output, never free text from a conversation.
It is written only when the user asks (``/ops memory set ...``), shown and deleted by the
user, and read by the agent into its system prompt.

Isolation: the namespace is derived from the *verified* identity's subject alone
(``("opsbot", "memory", sha256(subject))``); no call takes another user's id, so a user can
reach only their own namespace.

Example::

    async with open_memory_store(settings.resolved_database_url) as store:
        memory = UserMemory(store)
        await memory.update(identity, default_team="payments")
        prefs = await memory.get(identity)          # Preferences(default_team="payments", ...)

Exception tree::

    MemoryError_ (ValueError)
      InvalidPreferenceError — unknown field or a value outside the schema (message names it)
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from typing import Any, Literal

import aiosqlite
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres.aio import AsyncPostgresStore
from langgraph.store.sqlite.aio import AsyncSqliteStore
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent_core.pii import detect_secret
from broker.types import Identity
from infra.storage.engine import sqlite_file
from infra.storage.postgres import open_set_up

MEMORY_URL = "memory://"
KEY = "preferences"

__all__ = [
    "FIELDS",
    "InvalidPreferenceError",
    "MemoryError_",
    "Preferences",
    "UserMemory",
    "namespace_for",
    "open_memory_store",
]


class MemoryError_(ValueError):
    """Base of this module's errors."""


class InvalidPreferenceError(MemoryError_):
    pass


class Preferences(BaseModel):
    """Everything opsbot may remember about a user. Nothing else can be stored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default_team: str | None = Field(
        default=None, max_length=40, pattern=r"^[a-z0-9][a-z0-9-]*$", description="e.g. payments"
    )
    default_ticket_project: str | None = Field(
        default=None, max_length=12, pattern=r"^[A-Z][A-Z0-9]*$", description="e.g. PAY"
    )
    answer_style: Literal["concise", "detailed", "bullets"] | None = None

    @field_validator("default_team", "default_ticket_project")
    @classmethod
    def _no_secrets(cls, value: str | None) -> str | None:
        if value is not None and detect_secret(value):
            raise ValueError("looks like a credential; opsbot never stores credentials")
        return value

    def is_empty(self) -> bool:
        return all(v is None for v in self.model_dump().values())

    def prompt_text(self) -> str:
        """Lines for the system prompt (preferences, not instructions)."""
        lines = []
        if self.default_team:
            lines.append(f"- default team: {self.default_team}")
        if self.default_ticket_project:
            lines.append(f"- default ticket project: {self.default_ticket_project}")
        if self.answer_style:
            lines.append(f"- preferred answer style: {self.answer_style}")
        return "\n".join(lines)


# Short names users type → schema fields.
FIELDS = {
    "team": "default_team",
    "project": "default_ticket_project",
    "style": "answer_style",
}


def namespace_for(subject: str) -> tuple[str, ...]:
    """The user's namespace. Hashed: subjects may hold characters stores refuse (``.``)."""
    return ("opsbot", "memory", hashlib.sha256(subject.encode()).hexdigest()[:32])


class UserMemory:
    """Read, update and delete one user's ``Preferences``; the identity picks the namespace."""

    def __init__(self, store: BaseStore) -> None:
        self._store = store

    async def get(self, identity: Identity) -> Preferences:
        item = await self._store.aget(namespace_for(identity.subject), KEY)
        if item is None:
            return Preferences()
        try:
            return Preferences.model_validate(item.value)
        except ValidationError:
            return Preferences()  # a stored value from an older schema is ignored, not trusted

    async def update(self, identity: Identity, **values: Any) -> Preferences:
        """Set the given fields (short names or schema names); ``None`` clears one."""
        current = (await self.get(identity)).model_dump()
        for name, value in values.items():
            field = FIELDS.get(name, name)
            if field not in Preferences.model_fields:
                raise InvalidPreferenceError(
                    f"unknown preference {name!r}; use one of: {', '.join(FIELDS)}"
                )
            current[field] = value
        try:
            prefs = Preferences.model_validate(current)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = str(err["loc"][0]) if err["loc"] else "value"
            short = next((k for k, v in FIELDS.items() if v == loc), loc)
            raise InvalidPreferenceError(f"{short}: {err['msg']}") from None
        await self._write(identity, prefs)
        return prefs

    async def delete(self, identity: Identity, name: str | None = None) -> bool:
        """Forget one preference (``name``) or everything. True when something was removed."""
        prefs = await self.get(identity)
        if prefs.is_empty():
            return False
        if name is None:
            await self._store.adelete(namespace_for(identity.subject), KEY)
            return True
        field = FIELDS.get(name, name)
        if field not in Preferences.model_fields:
            raise InvalidPreferenceError(
                f"unknown preference {name!r}; use one of: {', '.join(FIELDS)}"
            )
        if getattr(prefs, field) is None:
            return False
        await self.update(identity, **{field: None})
        return True

    async def _write(self, identity: Identity, prefs: Preferences) -> None:
        ns = namespace_for(identity.subject)
        if prefs.is_empty():
            await self._store.adelete(ns, KEY)
        else:
            await self._store.aput(ns, KEY, prefs.model_dump(exclude_none=True), index=False)


@contextlib.asynccontextmanager
async def open_memory_store(url: str, *, pool_size: int = 1) -> AsyncIterator[BaseStore]:
    """The LangGraph store for ``url``: PostgreSQL (on a pool of ``pool_size``), SQLite, or
    in-memory (``memory://``)."""
    if url == MEMORY_URL:
        yield InMemoryStore()
        return
    if url.startswith("postgresql"):
        # The shared pool helper: checked connections, so a database restart does not leave
        # dead ones behind; set-up one instance at a time (``opsbot migrate`` runs it too).
        async with open_set_up(
            url, AsyncPostgresStore, max_size=pool_size, name="user-memory"
        ) as store:
            yield store
        return
    path = sqlite_file(url, "a memory store")
    # Autocommit, as the store's own from_conn_string does: it opens its transactions itself
    # (without this, setup() leaves one open and locks the database for everyone else).
    async with aiosqlite.connect(str(path), isolation_level=None) as conn:
        sqlite_store = AsyncSqliteStore(conn)
        await sqlite_store.setup()
        yield sqlite_store
