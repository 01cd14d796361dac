"""Teams ack latency: N Bot Connector activities POSTed concurrently to the running app's
``/api/messages`` over HTTP (each with a Bot Connector JWT the app verifies).

Each activity is delivered once, and a share of them a second time (Teams has no retry
header: the same activity id in the same conversation). Reports the same figures as
``slack_ack``: p50/p99 time to the HTTP answer (202) and ``lost``: activities that did not get
exactly one answer in their conversation (must be 0). Goal: p99 ≤ 50 ms, lost 0.

    uv run python -m bench teams_ack                       # N=300, 50 in flight, PostgreSQL
    uv run python -m bench teams_ack --database-url sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench._support import OtherLoop, percentile, postgres_reachable, throwaway_postgres
from bot.teams import TeamsBotConfig, open_teams_bot, teams_routes
from broker.types import ChatUser
from infra.serving import bind_socket, socket_url
from infra.storage import create_engine, migrate
from testing.fake_assistant import FakeAssistant
from testing.teams import APP_ID, APP_PASSWORD, TENANT_ID, FakeTeams, new_user, start_fake_teams

DEFAULT_N = 300
DEFAULT_CONCURRENCY = 50
RETRY_SHARE = 0.2
USERS = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=DEFAULT_N, help="distinct activities")
    parser.add_argument(
        "--concurrency", type=int, default=DEFAULT_CONCURRENCY, help="requests in flight"
    )
    parser.add_argument(
        "--database-url",
        default=None,
        help="default: a throwaway PostgreSQL database on the test server if reachable, "
        "else SQLite; 'sqlite' forces a throwaway SQLite file",
    )


async def run(args: Any) -> dict[str, Any]:
    n = int(getattr(args, "n", None) or DEFAULT_N)
    concurrency = int(getattr(args, "concurrency", None) or DEFAULT_CONCURRENCY)
    database_url = getattr(args, "database_url", None)
    if database_url == "sqlite" or (database_url is None and not postgres_reachable()):
        with tempfile.TemporaryDirectory() as tmp:
            return await _bench(n, concurrency, f"sqlite:///{Path(tmp) / 'bench.db'}")
    if database_url:
        return await _bench(n, concurrency, database_url)
    with throwaway_postgres() as url:
        return await _bench(n, concurrency, url)


async def _bench(n: int, concurrency: int, database_url: str) -> dict[str, Any]:
    # The channel (fake Connector, keys, token endpoint) runs on its own loop, like Teams.
    teams_side = OtherLoop()
    fake = FakeTeams()
    fake_runner = await teams_side.call(start_fake_teams(fake))
    engine = create_engine(database_url)
    await migrate(engine)
    assistant = FakeAssistant(run_delay=0.05)  # a run takes a while; the ack must not wait
    people = [new_user(f"User {i}") for i in range(USERS)]
    for i, person in enumerate(people):
        assistant.link(ChatUser("teams", TENANT_ID, person.aad_object_id), f"user{i}")
    config = TeamsBotConfig(
        app_id=APP_ID,
        app_password=APP_PASSWORD,
        tenant_id=TENANT_ID,
        openid_metadata_url=fake.openid_metadata_url,
        token_url=fake.token_url,
        typing_every_seconds=60.0,
    )
    activities = [
        fake.mention(people[i % USERS], f"q{i}")
        if i % 3
        else fake.personal(people[i % USERS], f"q{i}")
        for i in range(n)
    ]
    # Personal chats are one conversation per person: tell the answers apart by activity.
    retries = activities[: int(n * RETRY_SHARE)]
    token = fake.token()  # the Connector reuses a token for its lifetime

    async def deliver(app_url: str) -> tuple[list[tuple[float, int]], float]:
        connector = aiohttp.TCPConnector(limit=200)
        async with aiohttp.ClientSession(connector=connector) as session:
            # Warm-up: the first request fetches the signing keys and the outbound token.
            warm = fake.personal(people[0], "warm")
            await fake.post_activity(app_url, warm, token=token, session=session)
            await fake.wait_for("posted", where=lambda c: bool(c.cards))
            in_flight = asyncio.Semaphore(concurrency)

            async def post(activity: dict[str, Any]) -> tuple[float, int]:
                async with in_flight:
                    started = time.perf_counter()
                    status, _ = await fake.post_activity(
                        app_url, activity, token=token, session=session
                    )
                    return (time.perf_counter() - started) * 1000, status

            wall = time.perf_counter()
            results = await asyncio.gather(
                *(post(a) for a in activities), *(post(a) for a in retries)
            )
            wall_ms = (time.perf_counter() - wall) * 1000
            await fake.wait_for("posted", n + 1, where=lambda c: bool(c.cards), wait=120)
            await fake.settle(quiet=0.5, limit=120)
            return list(results), wall_ms

    try:
        async with open_teams_bot(config, assistant, engine) as bot:
            application = web.Application()
            application.add_routes(teams_routes(bot))
            app_runner = web.AppRunner(application, access_log=None, handle_signals=False)
            await app_runner.setup()
            sock = bind_socket("127.0.0.1", 0)
            await web.SockSite(app_runner, sock).start()
            try:
                results, wall_ms = await teams_side.call(deliver(socket_url(sock)))
                await bot.adapter.idle()
            finally:
                await app_runner.cleanup()
        answers = Counter(_question(call.text) for call in fake.posted() if call.cards)
        lost = sum(1 for i in range(n) if answers[f"q{i}"] != 1)
        latencies = [ms for ms, _ in results]
        return {
            "name": "teams_ack",
            "n_events": n,
            "concurrency": concurrency,
            "retries": len(retries),
            "requests": len(results),
            "database": database_url.split(":", 1)[0],
            "p50_ack_ms": round(statistics.median(latencies), 2),
            "p99_ack_ms": round(percentile(latencies, 0.99), 2),
            "max_ack_ms": round(max(latencies), 2),
            "wall_ms": round(wall_ms, 1),
            "non_202": sum(1 for _, status in results if status != 202),
            "core_runs": len(assistant.messages) - 1,
            "lost": lost,
        }
    finally:
        await engine.dispose()
        await teams_side.call(fake_runner.cleanup())
        teams_side.close()


def _question(text: str) -> str:
    """The question an answer card quotes (FakeAssistant answers "You asked: <q>")."""
    _, _, rest = text.partition("You asked: ")
    return rest.split('"', 1)[0].strip()
