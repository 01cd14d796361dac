"""Where each user's sealed MCP OAuth grants live: in memory or in the project's database.

``McpOAuthService`` seals a grant (Fernet, a key derived from the link key) before it calls
``put``, so a store only ever holds ciphertext, keyed by IdP subject and MCP server name.
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy import and_, delete, select
from sqlalchemy.sql.elements import ColumnElement

from infra.storage.schema import mcp_oauth_tokens
from infra.storage.store import SqlStore


class McpTokenStore(Protocol):
    async def get(self, subject: str, server: str) -> str | None: ...
    async def put(self, subject: str, server: str, sealed: str) -> None: ...
    async def delete(self, subject: str, server: str) -> None: ...
    async def servers(self, subject: str) -> list[str]: ...


class MemoryMcpTokenStore:
    """Sealed grants per user·server, in memory (tests and single-process development)."""

    def __init__(self) -> None:
        self.sealed: dict[tuple[str, str], str] = {}

    async def get(self, subject: str, server: str) -> str | None:
        return self.sealed.get((subject, server))

    async def put(self, subject: str, server: str, sealed: str) -> None:
        self.sealed[(subject, server)] = sealed

    async def delete(self, subject: str, server: str) -> None:
        self.sealed.pop((subject, server), None)

    async def servers(self, subject: str) -> list[str]:
        return sorted(srv for (sub, srv) in self.sealed if sub == subject)


def _key(subject: str, server: str) -> ColumnElement[bool]:
    return and_(mcp_oauth_tokens.c.subject == subject, mcp_oauth_tokens.c.server == server)


class SqlMcpTokenStore(SqlStore):
    """Sealed grants in the ``mcp_oauth_tokens`` table (SQLite or PostgreSQL)."""

    async def get(self, subject: str, server: str) -> str | None:
        async with self._engine.connect() as conn:
            sealed = (
                await conn.execute(
                    select(mcp_oauth_tokens.c.grant_encrypted).where(_key(subject, server))
                )
            ).scalar_one_or_none()
        return sealed

    async def put(self, subject: str, server: str, sealed: str) -> None:
        async with self._engine.begin() as conn:
            # Delete + insert in one transaction: a portable upsert (as SqlLinkStore does).
            await conn.execute(delete(mcp_oauth_tokens).where(_key(subject, server)))
            await conn.execute(
                mcp_oauth_tokens.insert().values(
                    subject=subject,
                    server=server,
                    grant_encrypted=sealed,
                    updated_at=self._clock(),
                )
            )

    async def delete(self, subject: str, server: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(delete(mcp_oauth_tokens).where(_key(subject, server)))

    async def servers(self, subject: str) -> list[str]:
        async with self._engine.connect() as conn:
            rows = await conn.execute(
                select(mcp_oauth_tokens.c.server)
                .where(mcp_oauth_tokens.c.subject == subject)
                .order_by(mcp_oauth_tokens.c.server)
            )
            return [str(r) for r in rows.scalars().all()]
