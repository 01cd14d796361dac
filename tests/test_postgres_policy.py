"""PostgreSQL tests skip with a reason when no server is reachable — but fail under CI=true."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from infra.serving import bind_socket
from tests import forkserver

ROOT = Path(__file__).resolve().parent.parent
TARGET = "tests/agent_core/test_thread_store_contract.py::test_owner_check"


def _pytest_against_dead_server(ci: str) -> subprocess.CompletedProcess[str]:
    # A port we hold bound but never accept on: nothing answers there.
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    env = {
        **os.environ,
        "OPSBOT_TEST_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{port}/test",
        "CI": ci,
    }
    # A pytest of its own, forked from this test process's fork server (tests/forkserver.py):
    # what it checks is the conftest's policy, not how pytest starts, and a fresh one spent
    # ~3.5 s of CPU importing the product for its fixtures.
    return subprocess.run(
        forkserver.module_command(
            "pytest", "-n", "0", "-q", "-rs", "-p", "no:cacheprovider", TARGET
        ),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(("ci", "expected"), [("false", "skipped"), ("true", "error")])
def test_unreachable_postgres(ci: str, expected: str) -> None:
    result = _pytest_against_dead_server(ci)
    out = result.stdout
    assert "PostgreSQL not reachable" in out
    if expected == "skipped":
        assert result.returncode == 0, out
        assert "2 passed, 1 skipped" in out
    else:
        assert result.returncode != 0, out
        assert "CI=true: PostgreSQL tests must run" in out
