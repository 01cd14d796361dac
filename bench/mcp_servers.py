"""Reference MCP servers: tool-call latency with the real MCP client over loopback HTTP.

All three servers run in this process (SQLite), trusting a throwaway RSA issuer whose JWKS is
served over HTTP. Every call carries a real token that the server verifies (signature, iss,
exact aud, exp, scope). Reports medians and p95 in milliseconds:

- ``open_session``: ``get_ticket`` on one already-open session (the honest per-call baseline);
- ``fresh_session``: initialize + ``get_ticket`` + close per call;
- ``idempotent_replay``: ``create_ticket`` repeated with one key (returns the stored result);
- ``add_comment``: the approved write, a new key per call (ten comments per bench ticket);
- ``search_docs`` and ``list_failed_jobs`` on open sessions;
- ``refusal_401``: a raw POST with an expired token, answered by the auth gate.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import secrets
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from infra.serving import bind_socket, serve_asgi
from infra.tls import shared_ssl_context
from mcp_servers import start_reference_servers
from testing.mcp import mcp_session


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--fresh-calls", type=int, default=40)


@contextlib.asynccontextmanager
async def _issuer() -> AsyncIterator[tuple[str, Callable[..., str]]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": "bench", "use": "sig", "alg": "RS256"})

    async def jwks(request: Request) -> JSONResponse:
        return JSONResponse({"keys": [jwk]})

    sock = bind_socket("127.0.0.1", 0)
    app = Starlette(routes=[Route("/jwks", jwks)])
    async with serve_asgi(app, sock) as issuer:  # type: ignore[arg-type]

        def mint(sub: str, aud: str, scope: str, groups: list[str], ttl: int = 600) -> str:
            now = int(time.time())
            claims = {
                "iss": issuer,
                "sub": sub,
                "aud": aud,
                "exp": now + ttl,
                "iat": now,
                "jti": secrets.token_hex(8),
                "scope": scope,
                "groups": groups,
                "act": {"sub": "opsbot"},
            }
            return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "bench"})

        yield issuer, mint


async def _time(n: int, call: Callable[[], Awaitable[Any]]) -> dict[str, float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return {
        "median_ms": round(statistics.median(samples), 2),
        "p95_ms": round(samples[int(len(samples) * 0.95) - 1], 2),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with (
        _issuer() as (issuer, mint),
        start_reference_servers(issuer=issuer, jwks_url=f"{issuer}/jwks") as servers,
    ):
        ticketing = servers.ticketing
        alice_t = mint("alice", ticketing.audience, "tickets:read tickets:write", ["team-payments"])
        alice_d = mint("alice", servers.docs.audience, "docs:read", ["team-payments"])
        alice_db = mint("alice", servers.database.audience, "db:read", ["team-payments"])

        async with mcp_session(ticketing.url, alice_t) as s:

            async def get() -> None:
                result = await s.call_tool("get_ticket", {"key": "PAY-101"})
                assert not result.isError

            results["open_session"] = await _time(args.calls, get)
            create = {
                "project": "PAY",
                "title": "Bench ticket",
                "description": "created by the bench",
                "idempotency_key": "bench-replay-0001",
            }
            await s.call_tool("create_ticket", create)

            async def replay() -> None:
                assert not (await s.call_tool("create_ticket", create)).isError

            results["idempotent_replay"] = await _time(args.calls, replay)
            targets = []
            for i in range(args.calls // 10 + 1):
                made = await s.call_tool(
                    "create_ticket", {**create, "idempotency_key": f"bench-target-{i:04}"}
                )
                assert made.structuredContent is not None
                targets.append(made.structuredContent["key"])
            numbers = itertools.count()

            async def comment() -> None:
                n = next(numbers)
                call = {
                    "key": targets[n // 10],
                    "body": f"bench comment {n}",
                    "idempotency_key": f"bench-comment-{n:05}",
                }
                assert not (await s.call_tool("add_comment", call)).isError

            results["add_comment"] = await _time(args.calls, comment)

        async def fresh() -> None:
            async with mcp_session(ticketing.url, alice_t) as s:
                assert not (await s.call_tool("get_ticket", {"key": "PAY-101"})).isError

        results["fresh_session"] = await _time(args.fresh_calls, fresh)

        async with mcp_session(servers.docs.url, alice_d) as s:

            async def search() -> None:
                assert not (await s.call_tool("search_docs", {"query": "refund stuck"})).isError

            results["search_docs"] = await _time(args.calls, search)

        async with mcp_session(servers.database.url, alice_db) as s:

            async def jobs() -> None:
                assert not (await s.call_tool("list_failed_jobs", {"since_hours": 48})).isError

            results["list_failed_jobs"] = await _time(args.calls, jobs)

        expired = mint("alice", ticketing.audience, "tickets:read", ["team-payments"], ttl=-10)
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:

            async def refused() -> None:
                response = await http.post(
                    ticketing.url,
                    json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                    headers={"Authorization": f"Bearer {expired}"},
                )
                assert response.status_code == 401

            results["refusal_401"] = await _time(args.calls, refused)
        replayed = [c for c in await servers.tickets.all_changes() if c.tool == "create_ticket"]
        tickets_created = sum(c.idempotency_key == "bench-replay-0001" for c in replayed)
    return {
        "open_session_median_ms": results["open_session"]["median_ms"],
        "fresh_session_median_ms": results["fresh_session"]["median_ms"],
        "idempotent_replay_median_ms": results["idempotent_replay"]["median_ms"],
        "add_comment_median_ms": results["add_comment"]["median_ms"],
        "refusal_401_median_ms": results["refusal_401"]["median_ms"],
        "replays_created_tickets": tickets_created,
        "calls": args.calls,
        "detail": results,
    }
