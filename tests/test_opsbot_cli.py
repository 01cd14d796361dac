"""The ``opsbot`` command line, run as a user runs it (a subprocess, forked from the fork server
of tests/forkserver.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import inspect

from infra.storage import create_engine
from tests import forkserver


def _opsbot(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        forkserver.command(*args),
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_help_lists_the_subcommands() -> None:
    result = _opsbot("--help", env={})
    assert result.returncode == 0
    assert "migrate" in result.stdout


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_migrate_twice_is_a_no_op(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'fresh.db'}"
    else:
        # A fresh database: the session's shared one is migrated already.
        server: str = request.getfixturevalue("postgres_server_url")
        url = server.rsplit("/", 1)[0] + "/" + request.getfixturevalue("fresh_postgres_database")
    env = {"OPSBOT_DATABASE_URL": url, "OPSBOT_DATA_DIR": str(tmp_path)}
    first = _opsbot("migrate", env=env)
    assert first.returncode == 0, first.stderr
    assert "migrated database from empty" in first.stdout
    second = _opsbot("migrate", env=env)
    assert second.returncode == 0, second.stderr
    assert "up to date" in second.stdout

    engine = create_engine(url)
    async with engine.connect() as conn:
        tables = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
    await engine.dispose()
    assert "threads" in tables
