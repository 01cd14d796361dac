"""A burst of N signed events (default 1,000) over loopback to the running Bolt app.

Each event goes the production way: deduplicated, acked, enqueued as a durable run
(``infra.jobs``) and run by the instance's worker (64 runs at once, 4 per user). A share of
the events is delivered a second time as Slack's retry (same ``event_id``,
``X-Slack-Retry-Num: 1``), all POSTed with ``--concurrency`` in flight. Every ``event_id``
must be answered exactly once in its thread: ``lost`` counts those that were not (0 is the
only passing value). ``drain_s`` is the time from the first POST until the last answer.

    uv run python -m bench burst                             # N=1000, PostgreSQL if reachable
    uv run python -m bench burst --n 200 --database-url sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from bench._support import OtherLoop, percentile, postgres_reachable, throwaway_postgres

USERS = 25


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=1000, help="distinct events")
    parser.add_argument("--retry-share", type=float, default=0.25, help="share delivered twice")
    parser.add_argument("--concurrency", type=int, default=64, help="POSTs in flight")
    parser.add_argument("--run-ms", type=float, default=50.0, help="assistant time per message")
    parser.add_argument(
        "--database-url", default=None, help="'sqlite' or a URL; default PostgreSQL if reachable"
    )


async def run(args: argparse.Namespace | None = None) -> dict[str, Any]:
    n = int(getattr(args, "n", 0) or 1000)
    share = float(getattr(args, "retry_share", None) or 0.25)
    concurrency = int(getattr(args, "concurrency", 0) or 64)
    run_s = float(getattr(args, "run_ms", None) or 50.0) / 1000
    url = getattr(args, "database_url", None)
    if url == "sqlite" or (url is None and not postgres_reachable()):
        with tempfile.TemporaryDirectory() as tmp:
            return await _bench(n, share, concurrency, run_s, f"sqlite:///{Path(tmp) / 'b.db'}")
    if url:
        return await _bench(n, share, concurrency, run_s, url)
    with throwaway_postgres("opsbot_bench_burst") as pg_url:
        return await _bench(n, share, concurrency, run_s, pg_url)


async def _bench(
    n: int, share: float, concurrency: int, run_s: float, database_url: str
) -> dict[str, Any]:
    from bot.slack import SlackBotConfig, serve_http
    from bot.slack.durable import open_durable_bot
    from broker.types import ChatUser
    from infra.jobs import RunLimits
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

    slack_side = OtherLoop()
    fake = FakeSlack()
    runner = await slack_side.call(start_fake_slack(fake))
    engine = create_engine(database_url)
    await migrate(engine)
    assistant = FakeAssistant(run_delay=run_s)
    for i in range(USERS):
        assistant.link(ChatUser("slack", TEAM_ID, f"U{i:04d}"), f"user{i}")
    config = SlackBotConfig(bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET, api_url=fake.url)
    events = [
        (
            f"EvBURST{i:06d}",
            mention(f"U{i % USERS:04d}", f"q{i}", channel=f"C{i % 9}", ts=f"1700002000.{i:06d}"),
        )
        for i in range(n)
    ]
    step = max(1, round(1 / share)) if share > 0 else 0
    retries = events[::step] if step else []

    async def deliver(app_url: str) -> tuple[list[tuple[float, int]], float, float]:
        connector = aiohttp.TCPConnector(limit=concurrency * 2)
        async with aiohttp.ClientSession(connector=connector) as session:
            sender = SlackSender(app_url, session=session)
            await sender.post_event(mention("U0000", "warm", ts="1.0"), event_id="EvWARM")
            await fake.wait_for("chat.update")
            gate = asyncio.Semaphore(concurrency)

            async def post(eid: str, ev: dict[str, Any], retry: int | None) -> tuple[float, int]:
                async with gate:
                    started = time.perf_counter()
                    status, _ = await sender.post_event(ev, event_id=eid, retry_num=retry)
                    return (time.perf_counter() - started) * 1000, status

            # Retries go out interleaved with first deliveries, as when Slack times out.
            jobs = [post(eid, ev, None) for eid, ev in events]
            for k, (eid, ev) in enumerate(retries):
                jobs.insert(min(len(jobs), (k + 1) * step * 2 - 1), post(eid, ev, 1))
            started = time.perf_counter()
            results = await asyncio.gather(*jobs)
            posted = time.perf_counter() - started
            await fake.wait_for("chat.update", n + 1, wait=300)
            drained = time.perf_counter() - started
            await fake.settle(quiet=0.5, limit=60)
            return list(results), posted, drained

    try:
        async with (
            open_durable_bot(
                config, assistant, engine, limits=RunLimits(64, 4), poll_seconds=0.2
            ) as bot,
            serve_http(bot.app, bind_socket("127.0.0.1", 0)) as app_url,
        ):
            results, posted, drained = await slack_side.call(deliver(app_url))
        updates = Counter((str(u["channel"]), str(u["ts"])) for u in fake.calls_to("chat.update"))
        lost = duplicated = 0
        for _eid, event in events:
            replies = fake.thread(event["channel"], event["ts"])
            answered = [m for m in replies if m["text"] != config.working_text]
            counts = [updates[(m["channel"], m["ts"])] for m in replies]
            if not replies or not answered:
                lost += 1
            elif len(replies) > 1 or counts != [1]:
                duplicated += 1
        acks = [ms for ms, _ in results]
        return {
            "n_events": n,
            "redelivered": len(retries),
            "requests": len(results),
            "concurrency": concurrency,
            "database": database_url.split(":", 1)[0],
            "non_200": sum(1 for _, status in results if status != 200),
            "ack_ms_p50": round(percentile(acks, 0.5), 1),
            "ack_ms_p99": round(percentile(acks, 0.99), 1),
            "post_all_s": round(posted, 2),
            "drain_s": round(drained, 2),
            "assistant_runs": len(assistant.messages) - 1,
            "answered_twice": duplicated,
            "lost": lost,
        }
    finally:
        await engine.dispose()
        await slack_side.call(runner.cleanup())
        slack_side.close()
