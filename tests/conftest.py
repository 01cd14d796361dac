"""Shared fixtures: settings, and fresh databases on SQLite and PostgreSQL.

PostgreSQL tests use ``OPSBOT_TEST_DATABASE_URL`` (default: the local server) and get a fresh
database per test session, emptied between tests. With no reachable server they skip with the
reason — except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import asyncio
import gc
import secrets
import shutil
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.settings import Settings
from infra.storage import create_engine, metadata, migrate
from tests.scheduling import auto_workers, is_slow_file, relative_file, slowest_files_first

T = TypeVar("T")

pytest_plugins = [
    "tests.fixtures.slack",
    "tests.fixtures.identity",
    "tests.fixtures.mcp",
    "tests.fixtures.audit",
    "tests.fixtures.slack_text",
    "tests.fixtures.teams",
    "tests.fixtures.browser",
]

DATABASE_BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The cyclic garbage collector off for the test (after one collection): what a test
    then sees freed was freed by reference counting, not left in a cycle."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture(scope="session")
def base_settings() -> Settings:
    return Settings(_env_file=None)  # type: ignore[call-arg]


@pytest.fixture(scope="session")
def postgres_server_url(base_settings: Settings) -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped at the end."""
    admin_url = base_settings.test_database_url
    try:
        admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        reason = f"PostgreSQL not reachable at {make_url(admin_url).host}: {exc}"
        if base_settings.ci:
            pytest.fail(f"{reason} (CI=true: PostgreSQL tests must run)")
        pytest.skip(reason)
    name = f"opsbot_test_{secrets.token_hex(6)}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_in_own_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a fresh loop in a worker thread.

    Sync fixtures may be requested from inside a running event loop (through
    ``request.getfixturevalue``), where ``asyncio.run`` is not allowed.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.fixture
def fresh_postgres_database(postgres_server_url: str) -> Iterator[str]:
    """The name of a new, empty database on the test server, dropped afterwards."""
    admin_url = make_url(postgres_server_url).set(database="postgres")
    dsn = admin_url.render_as_string(hide_password=False)
    name = f"opsbot_fresh_{secrets.token_hex(6)}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _migrate_url(url: str) -> None:
    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
def _postgres_migrated(postgres_server_url: str) -> str:
    run_in_own_loop(_migrate_url(postgres_server_url))
    return postgres_server_url


async def _empty_tables(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            # audit_events is append-only by trigger; only a superuser may bypass it (tests).
            await conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
            for table in reversed(metadata.sorted_tables):
                await conn.execute(table.delete())
    finally:
        await engine.dispose()


@pytest.fixture
def postgres_url(_postgres_migrated: str) -> str:
    """The session's PostgreSQL database, migrated and with every opsbot table empty."""
    run_in_own_loop(_empty_tables(_postgres_migrated))
    return _postgres_migrated


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file migrated to head per test process; ``sqlite_url`` copies it."""
    path = tmp_path_factory.mktemp("sqlite-template") / "opsbot.db"
    run_in_own_loop(_migrate_url(f"sqlite:///{path}"))
    # The engine is disposed: its last connection checkpointed the WAL into the file.
    assert not path.with_name(path.name + "-wal").exists()
    return path


@pytest.fixture
def sqlite_url(tmp_path: Path, _sqlite_template: Path) -> str:
    """A fresh, migrated SQLite database file: a copy of the session's migrated template
    (a byte-for-byte copy of what ``migrate`` leaves; ~70 ms of CPU saved per test)."""
    path = tmp_path / "opsbot.db"
    shutil.copyfile(_sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=DATABASE_BACKENDS)
def database_url(request: pytest.FixtureRequest) -> str:
    """A fresh, migrated database: once on SQLite, once on PostgreSQL."""
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    yield engine
    await engine.dispose()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: more workers than cores, since the suite mostly waits (tests/scheduling.py)."""
    return auto_workers()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``slow``: the chaos and crash tests (``tests/reliability``), the browser tests, and
    every file tests/scheduling.py records at ``SLOW_FILE_SECONDS`` or more (those that start
    ``opsbot`` processes, benches or outside servers). CI runs them all (no ``-m`` in the
    pytest options nor in .ci/run; tests/test_slow_marker.py); ``-m "not slow"`` leaves them
    out of a quick local loop. The slowest files run first (tests/scheduling.py)."""
    tests_dir = str(Path(__file__).parent)
    slowest_files_first(items, tests_dir)
    for item in items:
        if (
            item.path.parent.name == "reliability"
            or item.get_closest_marker("browser")
            or is_slow_file(relative_file(item, tests_dir))
        ):
            item.add_marker(pytest.mark.slow)
