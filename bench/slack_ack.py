"""Slack ack latency of a real ``opsbot slack`` process, with agent turns running beside it.

The app runs as deployed (its own process, durable runs, the offline demo model against the
dev IdP and the reference MCP servers; ``bench._fleet``). Every event is a question the demo
model answers with one MCP read, so every acked event becomes a real agent turn. Phases:

1. ``single``: 20 events, one in flight (the runs they start go on meanwhile);
2. ``burst``: ``--n`` events with ``--burst`` in flight, once the app is idle;
3. ``--with-agent``: ``--burst`` questions first, and once their turns are running, ``--n``
   more with ``--burst`` in flight: the ack while agent turns run.

``--web-worker`` also runs each database in the deployed shape: the app that acks takes no
runs (``OPSBOT_RUNS__GLOBAL_RUNS=0``) and a second ``opsbot slack`` process on the same
database runs every agent turn (and posts every answer). Its figures are reported under
``web_worker``, beside the one-process figures, which stay the top-level ones.

``p50_ack_ms``/``p99_ack_ms`` are those of the last phase run. ``loop_lag_p99_ms`` is the lag
of the loop that acks (``opsbot_event_loop_lag_seconds{loop="ack"}`` over that phase, read
from ``/metrics`` as Prometheus would); ``main_loop_lag_p99_ms`` that of the loop running
the agent turns. ``lost``: events (of all phases, with 20 % redelivered as Slack retries)
not answered exactly once. ``--db both`` runs SQLite and PostgreSQL; the top-level figures
are then the worse of the two.

    uv run python -m bench slack_ack --burst 50 --with-agent --db both
    uv run python -m bench slack_ack --n 100 --db sqlite
    uv run python -m bench slack_ack --n 100 --burst 50 --with-agent --db both --web-worker
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from bench._fleet import (
    Services,
    app_env,
    histogram_quantile,
    link_users,
    lost,
    open_services,
    opsbot_command,
    opsbot_slack,
    post_all,
    questions,
    scrape,
    wait_answered,
)
from bench._support import percentile, postgres_reachable, throwaway_postgres

DEFAULT_N = 200
DEFAULT_BURST = 50
SINGLE = 20
RETRY_SHARE = 0.2
USERS = 5
LAG = "opsbot_event_loop_lag_seconds"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=DEFAULT_N, help="events per measured burst")
    parser.add_argument("--burst", type=int, default=DEFAULT_BURST, help="requests in flight")
    parser.add_argument(
        "--with-agent",
        action="store_true",
        help="also measure a burst while agent turns (started just before) are running",
    )
    parser.add_argument(
        "--db",
        choices=["sqlite", "postgres", "both"],
        default=None,
        help="default: PostgreSQL if the test server is reachable, else SQLite",
    )
    parser.add_argument("--database-url", default=None, help="a PostgreSQL URL to use as is")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="run each database first with the ack on the main loop "
        "(OPSBOT_SLACK__ACK_ON_OWN_LOOP=false, as before) and report it under 'before'",
    )
    parser.add_argument(
        "--web-worker",
        action="store_true",
        help="also run each database as web (acks only, OPSBOT_RUNS__GLOBAL_RUNS=0) + a worker "
        "process running the agent turns; reported under 'web_worker'",
    )
    parser.add_argument(
        "--per-user-runs", type=int, default=10, help="OPSBOT_RUNS__PER_USER_RUNS of the app"
    )


async def run(args: argparse.Namespace | None = None) -> dict[str, Any]:
    n = int(getattr(args, "n", 0) or DEFAULT_N)
    burst = int(getattr(args, "burst", 0) or DEFAULT_BURST)
    with_agent = bool(getattr(args, "with_agent", False))
    per_user = int(getattr(args, "per_user_runs", 0) or 10)
    db = getattr(args, "db", None) or ("postgres" if postgres_reachable() else "sqlite")
    url = getattr(args, "database_url", None)
    compare = bool(getattr(args, "compare", False))
    web_worker = bool(getattr(args, "web_worker", False))
    backends = ["sqlite", "postgres"] if db == "both" else [db]
    by_db: dict[str, dict[str, Any]] = {}
    async with open_services() as services:
        for backend in backends:
            before = None
            if compare:
                async with _database(backend, url, services) as database_url:
                    before = await _bench(
                        services, database_url, n, burst, with_agent, per_user, own_loop=False
                    )
            async with _database(backend, url, services) as database_url:
                by_db[backend] = await _bench(
                    services, database_url, n, burst, with_agent, per_user
                )
            if before is not None:
                by_db[backend]["before"] = before
            if web_worker:
                async with _database(backend, url, services) as database_url:
                    by_db[backend]["web_worker"] = await _bench(
                        services, database_url, n, burst, with_agent, per_user, web_worker=True
                    )
    if len(by_db) == 1:
        return {"name": "slack_ack", **next(iter(by_db.values()))}
    worst: dict[str, Any] = {"name": "slack_ack", "database": "both", **_worst(by_db.values())}
    if web_worker:
        worst["web_worker"] = _worst(r["web_worker"] for r in by_db.values())
    worst["by_database"] = by_db
    return worst


def _worst(results: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Each headline figure's worst value over ``results`` (one per database)."""
    results = list(results)
    worst: dict[str, Any] = {"shape": results[0]["shape"]}
    for key in ("p50_ack_ms", "p99_ack_ms", "loop_lag_p99_ms", "main_loop_lag_p99_ms", "lost"):
        values = [r[key] for r in results if r.get(key) is not None]
        worst[key] = max(values) if values else None
    return worst


@contextlib.asynccontextmanager
async def _database(backend: str, url: str | None, services: Services) -> AsyncIterator[str]:
    if backend == "sqlite":
        path = services.data_dir / f"ack-{time.monotonic_ns()}.db"
        yield f"sqlite:///{path}"
    elif url:
        yield url
    else:
        with throwaway_postgres("opsbot_bench_ack") as pg_url:
            yield pg_url


async def _bench(
    services: Services,
    database_url: str,
    n: int,
    burst: int,
    with_agent: bool,
    per_user: int,
    *,
    own_loop: bool = True,
    web_worker: bool = False,
) -> dict[str, Any]:
    """One database, one shape: one ``opsbot slack`` process that acks and runs the turns,
    or (``web_worker``) one that only acks (no runs) and a worker process that runs them."""
    env = app_env(
        database_url,
        services,
        OPSBOT_RUNS__PER_USER_RUNS=str(per_user),
        OPSBOT_SLACK__ACK_ON_OWN_LOOP=str(own_loop).lower(),
    )
    await opsbot_command(env, "migrate")
    result: dict[str, Any] = {
        "shape": "web+worker" if web_worker else "one process",
        "database": database_url.split(":", 1)[0],
        "n_events": n,
        "burst": burst,
        "with_agent": with_agent,
        "ack_on_own_loop": own_loop,
    }
    stamp = time.time() // 1
    async with contextlib.AsyncExitStack() as processes:
        if web_worker:
            # The worker first: the web instance must not be the only one when jobs come.
            await processes.enter_async_context(opsbot_slack(env))
            env = {**env, "OPSBOT_RUNS__GLOBAL_RUNS": "0"}
        app = await processes.enter_async_context(opsbot_slack(env))
        users = await link_users(services, app.url, USERS)
        everything = []

        async def phase(
            name: str, events: list[Any], concurrency: int
        ) -> tuple[list[float], dict[str, float | None]]:
            before = await scrape(app.url)
            retries = events[: int(len(events) * RETRY_SHARE)]
            acks, statuses, wall = await post_all(
                services, [app.url], events, concurrency, retries=retries, own_process=True
            )
            after = await scrape(app.url)
            everything.extend(events)
            result[f"{name}_non_200"] = sum(1 for s in statuses if s != 200)
            result[f"{name}_wall_s"] = round(wall, 2)
            # Without its own loop the ack runs on the main loop: that loop's lag is the ack's.
            lag = {
                loop: histogram_quantile(
                    before, after, LAG, 0.99, loop=loop if own_loop else "main"
                )
                for loop in ("ack", "main")
            }
            return acks, lag

        warm = questions("WARM", 2, users, stamp)
        await post_all(services, [app.url], warm, 1)
        await wait_answered(services, warm, 60)

        acks, _ = await phase("single", questions("ONE", SINGLE, users, stamp + 1e4), 1)
        result["single_p50_ack_ms"] = round(statistics.median(acks), 2)
        result["single_p99_ack_ms"] = round(percentile(acks, 0.99), 2)
        await wait_answered(services, everything, 300)

        acks, lag = await phase("burst", questions("BURST", n, users, stamp + 2e4), burst)
        _figures(result, "burst", acks, lag)
        result["burst_drain_s"] = round(await wait_answered(services, everything, 600), 2)
        last = "burst"

        if with_agent:
            primer = questions("PRIME", burst, users, stamp + 3e4)
            await post_all(services, [app.url], primer, burst)
            everything.extend(primer)
            await _until_turns_run(services, primer)
            acks, lag = await phase("agent", questions("AGENT", n, users, stamp + 4e4), burst)
            _figures(result, "agent", acks, lag)
            result["agent_drain_s"] = round(await wait_answered(services, everything, 900), 2)
            last = "agent"

        for key in ("p50_ack_ms", "p99_ack_ms", "loop_lag_p99_ms", "main_loop_lag_p99_ms"):
            result[key] = result[f"{last}_{key}"]
        result["agent_turns"] = len(everything)
        result["lost"] = lost(services.fake_slack, everything)
    return result


def _figures(
    result: dict[str, Any], name: str, acks: list[float], lag: dict[str, float | None]
) -> None:
    result[f"{name}_p50_ack_ms"] = round(statistics.median(acks), 2)
    result[f"{name}_p99_ack_ms"] = round(percentile(acks, 0.99), 2)
    result[f"{name}_max_ack_ms"] = round(max(acks), 2)
    ack, main = lag["ack"], lag["main"]
    result[f"{name}_loop_lag_p99_ms"] = None if ack is None else round(ack * 1000, 1)
    result[f"{name}_main_loop_lag_p99_ms"] = None if main is None else round(main * 1000, 1)


async def _until_turns_run(services: Services, primer: list[Any], bound: float = 60.0) -> None:
    """Until some of ``primer``'s turns have started (their working indicator is posted)."""
    threads = {(ev["channel"], ev["ts"]) for _, ev in primer}
    started = time.perf_counter()
    fake = services.fake_slack
    while time.perf_counter() - started < bound:
        posted = sum(
            1
            for m in fake.calls_to("chat.postMessage")
            if (m.get("channel"), m.get("thread_ts")) in threads
        )
        if posted >= min(10, len(primer)):
            return
        await asyncio.sleep(0.05)
