"""Teams ack latency: N Bot Connector activities POSTed concurrently to the running app's
``/api/messages`` over HTTP (each with a Bot Connector JWT the app verifies), served as
``opsbot teams`` serves it: durable runs, acked on the ack thread (``bot.teams.front``).

``--load`` stands in for agent turns running beside the acks: the main loop computes in
bursts (``LOAD_CPU_MS`` of every ``LOAD_PERIOD_MS``, as agent steps do) and a writer holds the
database's write lock for ``LOAD_WRITE_MS`` at a time (as checkpoints do). ``--compare`` runs
the old path first (everything on the main loop, in-process runs, ``before``).
``loop_lag_p99_ms`` is the ack loop's lag (``opsbot_event_loop_lag_seconds{loop="teams-ack"}``),
``main_loop_lag_p99_ms`` the main loop's. ``ack_thread_cpu_ms_per_request`` and
``ack_thread_switches_per_request``: the ack thread's CPU time and voluntary context switches
(blocking on a socket or waiting for the GIL) per request while the activities were posted,
figures a busy machine moves far less than it moves latencies.

Each activity is delivered once, and a share of them a second time (Teams has no retry
header: the same activity id in the same conversation). Reports the same figures as
``slack_ack``: p50/p99 time to the HTTP answer (202) and ``lost``: activities that did not get
exactly one answer in their conversation (must be 0). Goal: p99 ≤ 50 ms, lost 0.

    uv run python -m bench teams_ack                       # N=300, 50 in flight, PostgreSQL
    uv run python -m bench teams_ack --database-url sqlite --load --compare
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from bench._sender import Prepared, send_from_own_process
from bench._support import (
    OtherLoop,
    ThreadUsage,
    percentile,
    postgres_reachable,
    throwaway_postgres,
)
from bot.teams import TeamsBot, TeamsBotConfig, open_teams_bot, teams_routes
from bot.teams.durable import open_durable_teams_bot
from bot.teams.front import TEAMS_ACK_LOOP, TeamsAckFront
from broker.types import ChatUser
from infra.ack import serve_fronts, serve_here
from infra.observability.loop import LoopLagMonitor
from infra.observability.metrics import REGISTRY
from infra.serving import bind_socket
from infra.storage import create_engine, migrate
from infra.storage.schema import run_jobs
from testing.fake_assistant import FakeAssistant
from testing.teams import (
    APP_ID,
    APP_PASSWORD,
    TENANT_ID,
    ConnectorCall,
    FakeTeams,
    new_user,
    start_fake_teams,
)

DEFAULT_N = 300
DEFAULT_CONCURRENCY = 50
RETRY_SHARE = 0.2
USERS = 20
LAG = "opsbot_event_loop_lag_seconds"
# --load: what 50 agent turns do to a process (measured on `bench slack_ack --with-agent`:
# the main loop busy most of the time, checkpoints holding the writer lock for a while).
LOAD_PERIOD_MS = 25
LOAD_CPU_MS = 20
LOAD_WRITE_MS = 20


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
    parser.add_argument(
        "--load", action="store_true", help="a busy main loop and database writer meanwhile"
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="first the old path (acked on the main loop) under the same load: 'before'",
    )


async def run(args: Any) -> dict[str, Any]:
    n = int(getattr(args, "n", None) or DEFAULT_N)
    concurrency = int(getattr(args, "concurrency", None) or DEFAULT_CONCURRENCY)
    load = bool(getattr(args, "load", False))
    compare = bool(getattr(args, "compare", False))
    database_url = getattr(args, "database_url", None)
    with contextlib.ExitStack() as stack:
        if database_url == "sqlite" or (database_url is None and not postgres_reachable()):
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            urls = [f"sqlite:///{tmp / name}" for name in ("before.db", "bench.db")]
        elif database_url:
            urls = [database_url, database_url]
        else:
            urls = [
                stack.enter_context(throwaway_postgres()),
                stack.enter_context(throwaway_postgres()),
            ]
        before = await _bench(n, concurrency, urls[0], load, front=False) if compare else None
        result = await _bench(n, concurrency, urls[1], load, front=True)
    if before is not None:
        result["before"] = before
    return result


@contextlib.asynccontextmanager
async def _serve(bot: TeamsBot, database_url: str, front: bool) -> AsyncIterator[str]:
    sock = bind_socket("127.0.0.1", 0)
    if front:
        async with serve_fronts(sock, [TeamsAckFront(bot, database_url)]) as url:
            yield url
        return
    async with serve_here(sock, teams_routes(bot)) as url:
        yield url


@contextlib.asynccontextmanager
async def _agents_load(engine: AsyncEngine, on: bool) -> AsyncIterator[None]:
    """What agent turns do to the process: CPU bursts on the main loop, and the database's
    write lock held for a while (the busy timeout makes SQLite writers queue)."""
    if not on:
        yield
        return

    async def compute() -> None:
        while True:
            until = time.perf_counter() + LOAD_CPU_MS / 1000
            while time.perf_counter() < until:
                pass
            await asyncio.sleep((LOAD_PERIOD_MS - LOAD_CPU_MS) / 1000)

    async def write() -> None:
        while True:
            with contextlib.suppress(Exception):
                async with engine.begin() as conn:
                    await conn.execute(
                        update(run_jobs).where(run_jobs.c.job_id == "-").values(attempts=0)
                    )
                    await asyncio.sleep(LOAD_WRITE_MS / 1000)
            await asyncio.sleep(LOAD_WRITE_MS / 1000)

    tasks = [asyncio.create_task(compute()), asyncio.create_task(write())]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _bench(
    n: int, concurrency: int, database_url: str, load: bool, *, front: bool
) -> dict[str, Any]:
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

    async def warm_up(app_url: str) -> None:
        # The first request fetches the signing keys and the outbound token.
        async with aiohttp.ClientSession() as session:
            warm = fake.personal(people[0], "warm")
            await fake.post_activity(app_url, warm, token=token, session=session)
            await fake.wait_for("posted", where=_is_answer)

    async def answered() -> None:
        await fake.wait_for("posted", n + 1, where=_is_answer, wait=120)
        await fake.settle(quiet=0.5, limit=120)

    usage = ThreadUsage("ack")  # the ack thread ``serve_fronts`` starts

    async def deliver(app_url: str) -> tuple[list[tuple[float, int]], float]:
        await teams_side.call(warm_up(app_url))
        # From a process of its own, as the Connector is (``bench._sender``): a client on a
        # thread of this process waited for the app's GIL and counted it as the ack's.
        usage.start()
        results, wall_ms = await _post_all(app_url, [*activities, *retries], concurrency, token)
        usage.stop()
        await teams_side.call(answered())
        return results, wall_ms

    opened = (
        open_durable_teams_bot(config, assistant, engine, poll_seconds=0.2)
        if front
        else open_teams_bot(config, assistant, engine)
    )
    before = _lag_counts()
    try:
        async with opened as bot, _serve(bot, database_url, front) as url:
            async with _agents_load(engine, load), LoopLagMonitor("main"):
                results, wall_ms = await deliver(url)
            await bot.adapter.idle()
            after = _lag_counts()
        async with _agents_load(engine, load):
            floor = await _floor([*activities, *retries], concurrency, token)
        answers = Counter(_question(call.text) for call in fake.posted() if _is_answer(call))
        lost = sum(1 for i in range(n) if answers[f"q{i}"] != 1)
        latencies = [ms for ms, _ in results]
        return {
            "name": "teams_ack",
            "ack_on_own_loop": front,
            "load": load,
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
            "loop_lag_p99_ms": _lag_p99(before, after, TEAMS_ACK_LOOP if front else "main"),
            "main_loop_lag_p99_ms": _lag_p99(before, after, "main"),
            "floor": floor,
            "p99_vs_floor": round(percentile(latencies, 0.99) / floor["p99_ack_ms"], 2),
            **(usage.per_request(len(results)) if front else {}),
            "lost": lost,
        }
    finally:
        await engine.dispose()
        await teams_side.call(fake_runner.cleanup())
        teams_side.close()


async def _post_all(
    url: str, activities: list[dict[str, Any]], concurrency: int, token: str
) -> tuple[list[tuple[float, int]], float]:
    """POST each activity with ``concurrency`` in flight, from a process of its own: (ms,
    status) each, and the wall ms."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    prepared = [Prepared(f"{url}/api/messages", json.dumps(a), headers) for a in activities]
    latencies, statuses, wall = await send_from_own_process(prepared, concurrency)
    return list(zip(latencies, statuses, strict=True)), wall * 1000


async def _floor(
    activities: list[dict[str, Any]], concurrency: int, token: str
) -> dict[str, float]:
    """The same POSTs, from the same client, to a server on its own thread that answers 202
    at once: what the client, this process's GIL and the machine cost before opsbot does
    anything (``p99_vs_floor`` divides by it)."""

    async def accept(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=202)

    class Trivial:
        @contextlib.asynccontextmanager
        async def opened(self, _main: asyncio.AbstractEventLoop) -> AsyncIterator[None]:
            yield

        def routes(self) -> list[web.RouteDef]:
            return [web.post("/api/messages", accept)]

    async with serve_fronts(bind_socket("127.0.0.1", 0), [Trivial()]) as url:
        results, _ = await _post_all(url, activities, concurrency, token)
    latencies = [ms for ms, _ in results]
    return {
        "p50_ack_ms": round(statistics.median(latencies), 2),
        "p99_ack_ms": round(percentile(latencies, 0.99), 2),
    }


def _lag_counts() -> dict[tuple[str, str], float]:
    """The lag histogram's cumulative bucket counts now, by (loop, upper bound)."""
    counts: dict[tuple[str, str], float] = {}
    for family in REGISTRY.collect():
        if family.name != LAG:
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                counts[(sample.labels["loop"], sample.labels["le"])] = sample.value
    return counts


def _lag_p99(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], loop: str
) -> float | None:
    """The p99 lag of ``loop`` between two readings (the upper bound of the bucket that
    holds it), in ms, as Prometheus' histogram_quantile would place it."""
    buckets = sorted(
        (float(le), after[(name, le)] - before.get((name, le), 0.0))
        for name, le in after
        if name == loop
    )
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    for bound, count in buckets:
        if count >= 0.99 * total:
            return round(bound * 1000, 1)
    return None


def _is_answer(call: ConnectorCall) -> bool:
    """An answer: a card, or the final message of a personal chat's stream (Teams streams
    answers there; its text is the answer, its card only carries sources when there are any)."""
    entities = call.message.get("entities") or []
    final = any(
        e.get("type") == "streaminfo" and e.get("streamType") == "final"
        for e in entities
        if isinstance(e, dict)
    )
    return bool(call.cards) or final


def _question(text: str) -> str:
    """The question an answer card quotes (FakeAssistant answers "You asked: <q>")."""
    _, _, rest = text.partition("You asked: ")
    # The question ends at a quote (in a card's JSON) or at the end of its line (a streamed
    # answer's text, followed by its sources card).
    return rest.split('"', 1)[0].split("\n", 1)[0].strip()
