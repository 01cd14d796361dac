"""Operational demo state: orders, jobs and deploys of three teams, timed relative to "now"."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

TABLES = ("orders", "jobs", "deploys")


def seed_rows(now: datetime) -> dict[str, list[dict[str, Any]]]:
    def ago(hours: float) -> datetime:
        return now - timedelta(hours=hours)

    orders = [
        ("ORD-10041", "payments", "Lumen Bikes GmbH", "refund_pending", 12999, "EUR", 20),
        ("ORD-10042", "payments", "Café Nord", "paid", 4550, "EUR", 3),
        ("ORD-10043", "payments", "Harbor Supplies Ltd", "refunded", 23900, "GBP", 30),
        ("ORD-10044", "payments", "Atelier Sol", "refund_pending", 8900, "EUR", 18),
        ("ORD-20001", "platform", "internal-capacity", "paid", 120000, "USD", 72),
        ("ORD-30001", "search", "Catalogue Boost trial", "cancelled", 0, "USD", 50),
    ]
    jobs = [
        ("JOB-501", "payments", "refund-retry", "failed", "acquirer timeout after 30s", 5, 4.9),
        ("JOB-502", "payments", "settlement-export", "succeeded", None, 26, 25.5),
        ("JOB-503", "payments", "refund-retry", "failed", "acquirer timeout after 30s", 2, 1.9),
        ("JOB-601", "platform", "backup-orders", "failed", "disk quota exceeded", 10, 9.8),
        ("JOB-602", "platform", "backup-orders", "failed", "disk quota exceeded", 58, 57.7),
        ("JOB-603", "platform", "cert-renewal", "succeeded", None, 30, 29.9),
        ("JOB-701", "search", "catalogue-reindex", "failed", "shard 3 out of memory", 40, 34),
        ("JOB-702", "search", "catalogue-reindex", "running", None, 1, None),
    ]
    deploys = [
        ("DEP-9001", "payments", "refund-worker", "4.12.0", "succeeded", "alice", 31),
        ("DEP-9002", "payments", "refund-worker", "4.11.3", "rolled_back", "alice", 8),
        ("DEP-9003", "payments", "payment-gateway", "2.40.1", "succeeded", "bob", 50),
        ("DEP-9101", "platform", "api-gw", "1.9.4", "succeeded", "dave", 12),
        ("DEP-9102", "platform", "cluster-autoscaler", "1.31.2", "succeeded", "carol", 70),
        ("DEP-9201", "search", "search-api", "7.2.0", "failed", "mallory", 6),
    ]
    return {
        "orders": [
            {
                "id": i,
                "team": t,
                "customer": c,
                "status": s,
                "amount_cents": a,
                "currency": cur,
                "updated_at": ago(h),
            }
            for i, t, c, s, a, cur, h in orders
        ],
        "jobs": [
            {
                "id": i,
                "team": t,
                "name": n,
                "status": s,
                "error": e,
                "started_at": ago(start),
                "finished_at": None if end is None else ago(end),
            }
            for i, t, n, s, e, start, end in jobs
        ],
        "deploys": [
            {
                "id": i,
                "team": t,
                "service": svc,
                "version": v,
                "status": s,
                "deployed_by": by,
                "deployed_at": ago(h),
            }
            for i, t, svc, v, s, by, h in deploys
        ],
    }
