"""Click-to-execution latency of an approval, and executions for N concurrent clicks.

N approvers click Approve on one approval at once, split across two app instances (two
engines) sharing one database (a fresh PostgreSQL database if reachable, else SQLite); the
write runs against a counting executor standing in for the server. Repeated for ``rounds``
approvals; latency is from the click to the write's execution, for the winning click.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from opsbot.storage import create_engine, migrate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "approvals"))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(args: argparse.Namespace | None = None) -> dict[str, Any]:
    from approval_fakes import (
        Catalog,
        CountingExecutor,
        FakeBroker,
        FakeResumer,
        identity,
        lookup_identity,
        make_interrupt,
    )

    from approvals import ActionDecision, AlreadyDecidedError, SqlApprovalStore
    from approvals.service import ApprovalService
    from audit import AuditLog, SqlAuditSink

    clicks = int(getattr(args, "clicks", 0) or 50)
    rounds = int(getattr(args, "rounds", 0) or 20)
    url, cleanup = _database()
    try:
        engines = [create_engine(url), create_engine(url)]
        await migrate(engines[0])
        executor = CountingExecutor()
        resumer = FakeResumer(executor)
        executed_at: dict[str, float] = {}
        original = executor.execute

        def timed(subject: str, tool: str, call_args: dict[str, Any], key: str) -> None:
            executed_at.setdefault(key, time.perf_counter())
            original(subject, tool, call_args, key)

        executor.execute = timed  # type: ignore[method-assign]
        services = [
            ApprovalService(
                SqlApprovalStore(e),
                AuditLog(SqlAuditSink(e)),
                Catalog(),
                resumer,
                lookup_identity,
                FakeBroker(),
            )
            for e in engines
        ]
        latencies: list[float] = []
        per_round: list[int] = []
        for r in range(rounds):
            interrupt = make_interrupt(thread_id=f"bench-{r}-{secrets.token_hex(4)}")
            resumer.interrupts[interrupt.thread_id] = interrupt
            approval = await services[0].open(interrupt, identity("alice"))
            before = len(executor.calls)
            start = time.perf_counter()
            results = await asyncio.gather(
                *(
                    services[i % 2].decide(
                        identity("bob" if i % 3 else "carol"),
                        approval.approval_id,
                        ActionDecision("approve"),
                    )
                    for i in range(clicks)
                ),
                return_exceptions=True,
            )
            unexpected = [
                r
                for r in results
                if isinstance(r, BaseException) and not isinstance(r, AlreadyDecidedError)
            ]
            if unexpected:
                raise unexpected[0]
            per_round.append(len(executor.calls) - before)
            key = executor.calls[-1][3]
            latencies.append((executed_at[key] - start) * 1000)
        for e in engines:
            await e.dispose()
    finally:
        cleanup()
    return {
        "bench": "approval",
        "database": make_url(url).get_backend_name(),
        "concurrent_clicks": clicks,
        "rounds": rounds,
        "click_to_execution_ms_p50": round(statistics.median(latencies), 2),
        "click_to_execution_ms_p99": round(_percentile(latencies, 0.99), 2),
        "executions": max(per_round),
        "executions_per_round": sorted(set(per_round)),
    }


def _database() -> tuple[str, Any]:
    admin = "postgresql://postgres@127.0.0.1:5432/postgres"
    name = f"opsbot_bench_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError:
        path = Path(tempfile.mkdtemp()) / "bench.db"
        return f"sqlite:///{path}", lambda: None

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return f"postgresql://postgres@127.0.0.1:5432/{name}", drop


if __name__ == "__main__":
    import json

    print(json.dumps(asyncio.run(run(None))))
