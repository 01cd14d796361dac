"""Beyond one machine: N real ``opsbot slack`` processes on one PostgreSQL database.

For each N (default 1, 2, 4) a fresh database is migrated, N instances start (as deployed,
``bench._fleet``: durable runs, the demo model, the dev IdP and the reference MCP servers),
and ``--n`` signed questions (one MCP read each) are POSTed round-robin across them with
``--concurrency`` in flight. Any instance may run any job. Reported per N:

- ``answers_per_s``: events answered ÷ time from the first POST to the last answer;
- ``ack_p99_ms``, ``answer_p99_s``: the ack, and the time from POST to the answer in the thread;
- ``connections_per_instance``: PostgreSQL connections each instance holds after the run, from
  ``pg_stat_activity`` by ``application_name`` (``opsbot-<pid>-<pool>``), and by pool;
- ``lost``: events not answered exactly once (must be 0).

The machine running this is also the machine running the N instances, the services and
PostgreSQL: on 2 cores, throughput cannot grow with N the way it would across machines; the
figure to watch is that it does not fall and that nothing is lost.

    uv run python -m bench scale
    uv run python -m bench scale --instances 1,2 --n 100
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections import Counter, defaultdict
from typing import Any

import psycopg

from bench._fleet import (
    USERNAMES,
    AppProcess,
    Services,
    answer_seconds,
    app_env,
    link_users,
    lost,
    open_services,
    opsbot_command,
    opsbot_slack,
    post_all,
    questions,
    wait_answered,
)
from bench._support import percentile, postgres_reachable, throwaway_postgres

DEFAULT_INSTANCES = "1,2,4"
DEFAULT_N = 200
DEFAULT_CONCURRENCY = 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--instances", default=DEFAULT_INSTANCES, help="comma-separated N (instances per run)"
    )
    parser.add_argument("--n", type=int, default=DEFAULT_N, help="questions per run")
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument(
        "--per-user-runs", type=int, default=10, help="OPSBOT_RUNS__PER_USER_RUNS of the apps"
    )


async def run(args: argparse.Namespace | None = None) -> dict[str, Any]:
    if not postgres_reachable():
        raise SystemExit("bench scale needs the test PostgreSQL server (OPSBOT_TEST_DATABASE_URL)")
    counts = [int(x) for x in str(getattr(args, "instances", None) or DEFAULT_INSTANCES).split(",")]
    n = int(getattr(args, "n", 0) or DEFAULT_N)
    concurrency = int(getattr(args, "concurrency", 0) or DEFAULT_CONCURRENCY)
    per_user = int(getattr(args, "per_user_runs", 0) or 10)
    runs = []
    async with open_services() as services:
        for count in counts:
            with throwaway_postgres("opsbot_bench_scale") as url:
                runs.append(await _run(services, url, count, n, concurrency, per_user))
    base = runs[0]["answers_per_s"] if runs else 0
    for one in runs:
        one["speedup"] = round(one["answers_per_s"] / base, 2) if base else None
    return {
        "name": "scale",
        "n_events": n,
        "concurrency": concurrency,
        "runs": runs,
        "connections_per_instance_max": max(
            (max(r["connections_per_instance"].values(), default=0) for r in runs), default=0
        ),
        "lost": sum(r["lost"] for r in runs),
    }


async def _run(
    services: Services, url: str, count: int, n: int, concurrency: int, per_user: int
) -> dict[str, Any]:
    env = app_env(url, services, OPSBOT_RUNS__PER_USER_RUNS=str(per_user))
    await opsbot_command(env, "migrate")
    async with contextlib.AsyncExitStack() as stack:
        apps: list[AppProcess] = list(
            await asyncio.gather(
                *(stack.enter_async_context(opsbot_slack(env)) for _ in range(count))
            )
        )
        users = await link_users(services, apps[0].url, len(USERNAMES))
        stamp = time.time() // 1 + count * 1e5
        warm = questions(f"W{count}", 2 * count, users, stamp)
        await post_all(services, [a.url for a in apps], warm, count)
        await wait_answered(services, warm, 120)

        events = questions(f"S{count}", n, users, stamp + 1e4)
        starts: dict[str, float] = {}
        started = time.perf_counter()
        acks, statuses, _ = await post_all(
            services, [a.url for a in apps], events, concurrency, starts=starts
        )
        await wait_answered(services, events, 900)
        answered = answer_seconds(services.fake_slack, events, starts)
        answers = list(answered.values())
        last = max((starts[eid] + s for eid, s in answered.items()), default=started)
        elapsed = max(last - started, 1e-9)
        per_instance, by_pool = await _connections(url, apps)
        return {
            "instances": count,
            "answers_per_s": round(len(answers) / elapsed, 2),
            "ack_p50_ms": round(statistics.median(acks), 2),
            "ack_p99_ms": round(percentile(acks, 0.99), 2),
            "answer_p50_s": round(statistics.median(answers), 2) if answers else None,
            "answer_p99_s": round(percentile(answers, 0.99), 2) if answers else None,
            "non_200": sum(1 for s in statuses if s != 200),
            "connections_per_instance": per_instance,
            "connections_by_pool": by_pool,
            "lost": lost(services.fake_slack, events),
        }


async def _connections(url: str, apps: list[AppProcess]) -> tuple[dict[str, int], dict[str, int]]:
    """Connections to the run's database per instance (by pid) and per pool (summed)."""

    def query() -> list[tuple[str]]:
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT application_name FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
        return [(str(r[0]),) for r in rows]

    rows = await asyncio.to_thread(query)
    pids = {str(a.pid): f"instance{i}" for i, a in enumerate(apps)}
    per_instance: Counter[str] = Counter({name: 0 for name in pids.values()})
    by_pool: defaultdict[str, int] = defaultdict(int)
    for (name,) in rows:
        parts = name.split("-", 2)  # opsbot-<pid>-<pool>
        if len(parts) == 3 and parts[0] == "opsbot" and parts[1] in pids:
            per_instance[pids[parts[1]]] += 1
            by_pool[parts[2]] += 1
        else:
            by_pool[f"other:{name or '?'}"] += 1
    return dict(per_instance), dict(by_pool)
