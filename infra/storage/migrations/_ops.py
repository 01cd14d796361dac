"""Column groups more than one migration creates.

Applied migrations call these, so what a helper returns is part of those migrations: never
change one in place (the schema of every database migrated with it would differ from a new
one's); a table that needs other columns gets a new helper.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa


def lease_columns() -> list[sa.Column[Any]]:
    """A durable work queue's row state (``run_jobs``, ``approval_notices``): its status, how
    often it was tried, which worker holds it and until when, and when it was queued."""
    return [
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    ]
