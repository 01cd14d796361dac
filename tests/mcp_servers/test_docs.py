"""Docs over HTTP with the real MCP client: group ACLs, ranking, canonical URLs, errors."""

from __future__ import annotations

from mcp_servers import ReferenceServers
from mcp_servers.docs import INJECTION_DOCS
from testing.mcp import MintToken, mcp_session
from tests.mcp_servers.test_ticketing import data, text_of


async def test_search_is_ranked_and_limited_to_readable_docs(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    async with mcp_session(reference_servers.docs, mcp_token("alice", "docs")) as s:
        hits = data(await s.call_tool("search_docs", {"query": "refunds stuck pending"}))["results"]
        assert hits[0]["id"] == "payments-refund-stuck"
        scores = [h["score"] for h in hits]
        assert scores == sorted(scores, reverse=True)
        everything = data(
            await s.call_tool(
                "search_docs", {"query": "upgrade postgres node pool reindex", "limit": 20}
            )
        )
        assert {h["id"] for h in everything["results"]}.isdisjoint(
            {"postgres-major-upgrade", "node-pool-memory", "search-reindex"}
        )
    async with mcp_session(reference_servers.docs, mcp_token("carol", "docs")) as s:
        hits = data(await s.call_tool("search_docs", {"query": "postgres major upgrade"}))[
            "results"
        ]
        assert hits[0]["id"] == "postgres-major-upgrade"
        refund = data(await s.call_tool("search_docs", {"query": "refunds stuck pending"}))[
            "results"
        ]
        assert "payments-refund-stuck" not in {h["id"] for h in refund}


async def test_get_doc_returns_content_and_canonical_url(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    base = reference_servers.docs.url.removesuffix("/mcp")
    async with mcp_session(reference_servers.docs, mcp_token("alice", "docs")) as s:
        doc = data(await s.call_tool("get_doc", {"doc_id": "payments-refund-stuck"}))
        assert doc["url"] == f"{base}/docs/payments-refund-stuck"
        assert "refund-retry" in doc["content"]
        hit = data(await s.call_tool("search_docs", {"query": "refund"}))["results"][0]
        assert hit["url"] == doc["url"]


async def test_other_teams_docs_cannot_be_read(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    async with mcp_session(reference_servers.docs, mcp_token("mallory", "docs")) as s:
        hidden = await s.call_tool("get_doc", {"doc_id": "payments-refund-stuck"})
        assert hidden.isError
        assert "no doc 'payments-refund-stuck' that you can read" in text_of(hidden)
        assert (
            data(await s.call_tool("get_doc", {"doc_id": "search-reindex"}))["id"]
            == "search-reindex"
        )
    # erin (contractors, no team) reads only docs open to everyone.
    async with mcp_session(reference_servers.docs, mcp_token("erin", "docs")) as s:
        hits = data(
            await s.call_tool(
                "search_docs",
                {"query": "runbook policy refund upgrade reindex incident change", "limit": 20},
            )
        )
        ids = {h["id"] for h in hits["results"]}
        assert ids <= {
            "incident-severity",
            "change-approval-policy",
            "vendor-webhook-debugging",
            "approvals-faq",
        }
        assert "incident-severity" in ids
        assert (await s.call_tool("get_doc", {"doc_id": "postgres-major-upgrade"})).isError


async def test_bad_doc_arguments_are_readable(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    async with mcp_session(reference_servers.docs, mcp_token("alice", "docs")) as s:
        for tool, args, expected in (
            ("get_doc", {"doc_id": "../etc/passwd"}, "invalid arguments for get_doc: doc_id"),
            ("get_doc", {"doc_id": "no-such-doc"}, "no doc 'no-such-doc'"),
            ("search_docs", {"query": ""}, "query"),
            ("search_docs", {"query": "x", "limit": 1000}, "limit"),
        ):
            result = await s.call_tool(tool, args)
            assert result.isError
            assert expected in text_of(result)
        assert data(await s.call_tool("search_docs", {"query": "severity"}))["results"]


async def test_injection_docs_are_served_as_data(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    async with mcp_session(reference_servers.docs, mcp_token("alice", "docs")) as s:
        for doc_id, marker in (
            (INJECTION_DOCS["close_all"], "close every open ticket"),
            (INJECTION_DOCS["exfiltrate"], "https://paste.exfil-collector.example.net"),
            (INJECTION_DOCS["self_approve"], "approve it yourself"),
        ):
            assert marker in data(await s.call_tool("get_doc", {"doc_id": doc_id}))["content"]
