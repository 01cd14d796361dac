"""Token broker: N concurrent ``get_token`` calls for one (user, server), cold and warm.

A dev IdP and the broker run in this process over real HTTP on loopback. *Cold*: the cached
token is invalidated, then ``concurrent`` calls race (single-flight: one exchange per round).
*Warm*: the same calls with the token cached. Latency is per call, from the start of the round.
``remote`` repeats both through the broker HTTP service (``RemoteBroker``), unless
``--no-remote``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import httpx

from broker import Broker, ChatUser, Identity, LocalIdentityService, RemoteBroker
from broker.dev_idp import DevClient, DevIdentityProvider, build_app, load_directory
from broker.factory import TokenClientOptions, open_inprocess_broker, open_token_client
from broker.inprocess import InProcessBroker, ServerTarget
from broker.linking import LinkingService
from broker.links import MemoryLinkStore, TokenCipher
from broker.login_state import LoginFlow
from broker.service import build_service_app
from infra.serving import bind_socket, serve_asgi, socket_url
from infra.tls import shared_ssl_context

AUDIENCES = {
    name: f"http://127.0.0.1:{port}/mcp"
    for name, port in (("ticketing", 8101), ("docs", 8102), ("database", 8103))
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--concurrent", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--server", default="ticketing")
    parser.add_argument("--no-remote", dest="remote", action="store_false")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 3)


async def _link(linking: LinkingService, http: httpx.AsyncClient, user: str) -> Identity:
    chat_user = ChatUser("slack", "T-BENCH", f"U-{user}")
    url = await linking.start(chat_user)
    query = dict(httpx.URL(url).params)
    issuer = url.split("/authorize")[0]
    reply = await http.post(f"{issuer}/authorize", data={**query, "username": user})
    params = dict(httpx.URL(reply.headers["location"]).params)
    result = await linking.complete(params["state"], params["code"], iss=params.get("iss"))
    return Identity(result.link.subject, chat_user, result.link.email, result.groups)


async def _round(broker: Broker, who: Identity, server: str, n: int) -> list[float]:
    started = time.perf_counter()
    latencies: list[float] = []

    async def one() -> None:
        await broker.get_token(who, server)
        latencies.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(one() for _ in range(n)))
    return latencies


async def run(args: argparse.Namespace | None = None) -> dict[str, Any]:
    args = args or argparse.Namespace(concurrent=100, rounds=20, server="ticketing", remote=True)
    sock = bind_socket("127.0.0.1", 0)
    issuer = socket_url(sock)
    idp = DevIdentityProvider(
        issuer,
        load_directory(),
        clients=[DevClient("opsbot", "bench-secret")],
        audiences=AUDIENCES,
    )
    cipher = TokenCipher(TokenCipher.generate_key())
    links = MemoryLinkStore(cipher)
    creds: TokenClientOptions = {
        "issuer": issuer,
        "client_id": "opsbot",
        "client_secret": "bench-secret",
    }
    targets = [ServerTarget(name, aud) for name, aud in AUDIENCES.items()]
    app: Any = build_app(idp)
    async with (
        serve_asgi(app, sock),
        open_inprocess_broker(**creds, servers=targets, links=links) as broker,
        open_token_client(**creds) as login_client,
        httpx.AsyncClient(verify=shared_ssl_context()) as http,
    ):
        linking = LinkingService(
            flow=LoginFlow(links, cipher),
            client=login_client,
            redirect_uri="http://127.0.0.1:9/oauth/callback",
        )
        alice = await _link(linking, http, "alice")
        result = await _measure(broker, broker, idp, alice, args)
        if args.remote:
            secret = "bench-service-secret"  # noqa: S105
            service_app: Any = build_service_app(LocalIdentityService(broker, linking), secret)
            service_sock = bind_socket("127.0.0.1", 0)
            async with serve_asgi(service_app, service_sock) as service_url:
                limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
                async with httpx.AsyncClient(
                    limits=limits, timeout=30, verify=shared_ssl_context()
                ) as remote_http:
                    remote = RemoteBroker(service_url, secret, remote_http)
                    result["remote"] = await _measure(remote, broker, idp, alice, args)
    return result


async def _measure(
    client: Broker,
    broker: InProcessBroker,
    idp: DevIdentityProvider,
    alice: Identity,
    args: argparse.Namespace,
) -> dict[str, Any]:
    await client.get_token(alice, args.server)  # discovery, JWKS, subject token, pools
    await client.invalidate(alice, args.server)
    base_exchanges = idp.stats.exchanges
    base = broker.metrics.snapshot()

    cold: list[float] = []
    cold_started = time.perf_counter()
    for _ in range(args.rounds):
        await client.invalidate(alice, args.server)
        cold += await _round(client, alice, args.server, args.concurrent)
    cold_seconds = time.perf_counter() - cold_started
    cold_exchanges = idp.stats.exchanges - base_exchanges

    warm: list[float] = []
    warm_started = time.perf_counter()
    for _ in range(args.rounds):
        warm += await _round(client, alice, args.server, args.concurrent)
    warm_seconds = time.perf_counter() - warm_started
    exchanges = idp.stats.exchanges - base_exchanges

    snap = broker.metrics.snapshot()
    hits = snap["cache_hits"] - base["cache_hits"]
    misses = snap["cache_misses"] - base["cache_misses"]
    exchange_ms = [s * 1000 for s in list(broker.metrics.exchange_latencies)[-args.rounds :]]
    sequential: list[float] = []
    for _ in range(200):
        started = time.perf_counter()
        await client.get_token(alice, args.server)
        sequential.append((time.perf_counter() - started) * 1000)
    return {
        "sequential_warm_ms": {"p50": _pct(sequential, 0.5), "p99": _pct(sequential, 0.99)},
        "concurrent": args.concurrent,
        "rounds": args.rounds,
        "calls": 2 * args.rounds * args.concurrent,
        "exchanges": exchanges,
        "exchanges_per_cold_round": cold_exchanges / args.rounds,
        "cache_hit_ratio": round(hits / (hits + misses), 4) if hits + misses else 0.0,
        "p50_ms": {"cold": _pct(cold, 0.5), "warm": _pct(warm, 0.5)},
        "p99_ms": {"cold": _pct(cold, 0.99), "warm": _pct(warm, 0.99)},
        "cold": {
            "p50_ms": _pct(cold, 0.5),
            "p99_ms": _pct(cold, 0.99),
            "exchanges": cold_exchanges,
            "calls_per_s": round(len(cold) / cold_seconds, 1),
        },
        "warm": {
            "p50_ms": _pct(warm, 0.5),
            "p99_ms": _pct(warm, 0.99),
            "exchanges": exchanges - cold_exchanges,
            "calls_per_s": round(len(warm) / warm_seconds, 1),
        },
        "idp_exchange_round_trip_ms": {
            "p50": _pct(exchange_ms, 0.5),
            "mean": round(statistics.fmean(exchange_ms), 3),
        },
        "failures": {k: v - base["failures"].get(k, 0) for k, v in snap["failures"].items()},
    }
