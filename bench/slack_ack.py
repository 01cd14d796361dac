"""Slack ack latency: N signed events POSTed concurrently to the running app over HTTP.

Each event is delivered once, and a share of them a second time as Slack's retry (same
``event_id``, ``X-Slack-Retry-Num``). Reports p50/p99 time to the HTTP ack and ``lost``:
events that did not get exactly one answer in their thread (must be 0).

    uv run python -m bench slack_ack                       # N=300, 50 in flight, PostgreSQL
    uv run python -m bench slack_ack --database-url sqlite
    uv run python -m bench slack_ack --n 1000 --database-url postgresql://...
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

from bench._support import OtherLoop, percentile, postgres_reachable, throwaway_postgres
from bot.slack import SlackBotConfig, open_app, serve_http
from broker.types import ChatUser
from infra.serving import bind_socket
from infra.storage import create_engine, migrate
from testing.fake_assistant import FakeAssistant
from testing.slack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    TEAM_ID,
    FakeSlack,
    SlackSender,
    mention,
    start_fake_slack,
)

DEFAULT_N = 300
DEFAULT_CONCURRENCY = 50
RETRY_SHARE = 0.2
USERS = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=DEFAULT_N, help="distinct events")
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
    slack_side = OtherLoop()
    fake = FakeSlack()
    runner = await slack_side.call(start_fake_slack(fake))
    engine = create_engine(database_url)
    await migrate(engine)
    assistant = FakeAssistant(run_delay=0.05)  # a run takes a while; the ack must not wait
    for i in range(USERS):
        assistant.link(ChatUser("slack", TEAM_ID, f"U{i:04d}"), f"user{i}")
    config = SlackBotConfig(bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET, api_url=fake.url)
    events = [
        (
            f"EvBENCH{i:06d}",
            mention(f"U{i % USERS:04d}", f"q{i}", channel=f"C{i % 7}", ts=f"1700001000.{i:06d}"),
        )
        for i in range(n)
    ]
    retries = events[: int(n * RETRY_SHARE)]

    async def deliver(app_url: str) -> tuple[list[tuple[float, int]], float]:
        connector = aiohttp.TCPConnector(limit=200)
        async with aiohttp.ClientSession(connector=connector) as session:
            sender = SlackSender(app_url, session=session)
            # Warm-up: Bolt's first request calls auth.test.
            await sender.post_event(mention("U0000", "warm", ts="1.0"), event_id="EvWARM")
            await fake.wait_for("chat.update")

            in_flight = asyncio.Semaphore(concurrency)

            async def post(
                event_id: str, event: dict[str, Any], retry: int | None
            ) -> tuple[float, int]:
                async with in_flight:
                    started = time.perf_counter()
                    status, _ = await sender.post_event(event, event_id=event_id, retry_num=retry)
                    return (time.perf_counter() - started) * 1000, status

            wall = time.perf_counter()
            results = await asyncio.gather(
                *(post(eid, ev, None) for eid, ev in events),
                *(post(eid, ev, 1) for eid, ev in retries),
            )
            wall_ms = (time.perf_counter() - wall) * 1000
            await fake.wait_for("chat.update", n + 1, wait=120)
            await fake.settle(quiet=0.5, limit=120)
            return list(results), wall_ms

    try:
        async with (
            open_app(config, assistant, engine) as app,
            serve_http(app, bind_socket("127.0.0.1", 0)) as app_url,
        ):
            results, wall_ms = await slack_side.call(deliver(app_url))
        updates = Counter((str(u["channel"]), str(u["ts"])) for u in fake.calls_to("chat.update"))
        lost = 0
        for _eid, event in events:
            replies = fake.thread(event["channel"], event["ts"])
            answered = [m for m in replies if m["text"] != config.working_text]
            keys = [(m["channel"], m["ts"]) for m in replies]
            if len(replies) != 1 or len(answered) != 1 or [updates[k] for k in keys] != [1]:
                lost += 1
        latencies = [ms for ms, _ in results]
        return {
            "name": "slack_ack",
            "n_events": n,
            "concurrency": concurrency,
            "retries": len(retries),
            "requests": len(results),
            "database": database_url.split(":", 1)[0],
            "p50_ack_ms": round(statistics.median(latencies), 2),
            "p99_ack_ms": round(percentile(latencies, 0.99), 2),
            "max_ack_ms": round(max(latencies), 2),
            "wall_ms": round(wall_ms, 1),
            "non_200": sum(1 for _, status in results if status != 200),
            "core_runs": len(assistant.messages) - 1,
            "lost": lost,
        }
    finally:
        await engine.dispose()
        await slack_side.call(runner.cleanup())
        slack_side.close()
