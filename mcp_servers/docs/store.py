"""The docs server's own storage: runbooks and policies with group ACLs, ranked text search.

A doc's ``acl`` lists the groups that may read it (``team-payments``, ``sre``...) or
``everyone`` (any caller with ``docs:read``). Search ranks with BM25 over title (weighted) and
body, computed over the caller's visible docs only, so hidden docs never influence ranking.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncEngine

from mcp_servers.auth import Caller
from mcp_servers.errors import NotFoundError
from mcp_servers.store_engine import open_store_engine

EVERYONE = "everyone"
Kind = Literal["runbook", "policy"]

metadata = sa.MetaData()
docs_table = sa.Table(
    "docs",
    metadata,
    sa.Column("slug", sa.String(120), primary_key=True),
    sa.Column("title", sa.String(300), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("acl", sa.String(500), nullable=False),  # comma-separated groups
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("updated_at", sa.String(40), nullable=False),
)


class DocHit(BaseModel):
    id: str
    title: str
    kind: Kind
    url: str
    score: float
    snippet: str


class SearchDocsResult(BaseModel):
    results: list[DocHit]


class Doc(BaseModel):
    id: str
    title: str
    kind: Kind
    url: str
    content: str
    updated_at: str


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class DocStore:
    def __init__(self, engine: AsyncEngine, *, base_url: str) -> None:
        self.engine = engine
        self.base_url = base_url.rstrip("/")

    @classmethod
    async def open(cls, url: str = "sqlite+aiosqlite://", *, base_url: str) -> DocStore:
        return cls(await open_store_engine(url, metadata), base_url=base_url)

    async def close(self) -> None:
        await self.engine.dispose()

    def url_for(self, slug: str) -> str:
        """The doc's canonical URL (stable; what answers cite as the source)."""
        return f"{self.base_url}/docs/{slug}"

    async def seed(self, rows: list[dict[str, Any]]) -> None:
        """Load demo docs into an empty store (a store with docs is left as it is)."""
        async with self.engine.begin() as conn:
            if (await conn.execute(sa.select(sa.func.count()).select_from(docs_table))).scalar():
                return
            await conn.execute(docs_table.insert(), rows)

    async def _visible(self, caller: Caller) -> list[Any]:
        async with self.engine.connect() as conn:
            rows = (await conn.execute(sa.select(docs_table))).mappings().all()
        return [row for row in rows if _may_read(caller, row["acl"])]

    async def search(self, caller: Caller, query: str, limit: int = 5) -> SearchDocsResult:
        rows = await self._visible(caller)
        terms = set(_tokens(query))
        if not terms or not rows:
            return SearchDocsResult(results=[])
        docs = [(row, _tokens(row["title"]) * 3 + _tokens(row["body"])) for row in rows]
        average = sum(len(toks) for _, toks in docs) / len(docs)
        frequency = Counter(t for _, toks in docs for t in set(toks))
        hits = []
        for row, toks in docs:
            counts = Counter(toks)
            score = 0.0
            for term in terms:
                tf = counts.get(term, 0)
                if not tf:
                    continue
                idf = math.log(1 + (len(docs) - frequency[term] + 0.5) / (frequency[term] + 0.5))
                score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(toks) / average))
            if score > 0:
                hits.append((score, row))
        hits.sort(key=lambda hit: hit[0], reverse=True)
        return SearchDocsResult(
            results=[
                DocHit(
                    id=row["slug"],
                    title=row["title"],
                    kind=row["kind"],
                    url=self.url_for(row["slug"]),
                    score=round(score, 4),
                    snippet=_snippet(row["body"], terms),
                )
                for score, row in hits[:limit]
            ]
        )

    async def get(self, caller: Caller, doc_id: str) -> Doc:
        async with self.engine.connect() as conn:
            row = (
                (await conn.execute(sa.select(docs_table).where(docs_table.c.slug == doc_id)))
                .mappings()
                .first()
            )
        if row is None or not _may_read(caller, row["acl"]):
            raise NotFoundError(f"no doc {doc_id!r} that you can read")
        return Doc(
            id=row["slug"],
            title=row["title"],
            kind=row["kind"],
            url=self.url_for(row["slug"]),
            content=row["body"],
            updated_at=row["updated_at"],
        )


def _may_read(caller: Caller, acl: str) -> bool:
    groups = {g.strip() for g in acl.split(",") if g.strip()}
    return EVERYONE in groups or bool(groups & caller.groups)


def _snippet(body: str, terms: set[str], width: int = 160) -> str:
    lowered = body.lower()
    positions = [lowered.find(t) for t in terms if lowered.find(t) >= 0]
    start = max(0, min(positions) - 40) if positions else 0
    text = body[start : start + width].replace("\n", " ")
    return ("…" if start else "") + text + ("…" if start + width < len(body) else "")
