"""``opsbot idp`` and ``opsbot broker`` commands, run as real processes on port 0."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from infra.tls import shared_ssl_context
from opsbot.cli import main
from tests import forkserver


def test_idp_users_lists_the_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["idp", "users"]) == 0
    out = capsys.readouterr().out
    assert "carol" in out
    assert "db:query" in out


@contextlib.asynccontextmanager
async def running(*argv: str, env: dict[str, str]) -> AsyncIterator[str]:
    """Start ``opsbot ARGV`` and yield the first URL it prints; stop it by its pid."""
    proc = await asyncio.create_subprocess_exec(
        *forkserver.command(*argv),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )
    try:
        assert proc.stdout is not None
        seen = []
        for _ in range(20):
            line = (await asyncio.wait_for(proc.stdout.readline(), timeout=60)).decode()
            seen.append(line)
            found = re.search(r"http://127\.0\.0\.1:\d+", line)
            if found or not line:
                break
        assert found, seen
        yield found.group(0)
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), timeout=20)


async def test_idp_serve_and_broker_serve_run_as_processes(tmp_path: Path) -> None:
    env = {"OPSBOT_DATA_DIR": str(tmp_path), "OPSBOT_DATABASE_URL": ""}
    async with running("idp", "serve", "--port", "0", env=env) as idp_url:
        # Outside `opsbot dev` the link key must be explicit (a generated one is refused).
        key = "0" * 43 + "="
        broker_env = {
            **env,
            "OPSBOT_IDP__ISSUER": idp_url,
            "OPSBOT_BROKER__LINK_ENCRYPTION_KEY": key,
        }
        async with (
            running("broker", "serve", "--port", "0", env=broker_env) as broker_url,
            httpx.AsyncClient(verify=shared_ssl_context()) as http,
        ):
            discovery = (await http.get(f"{idp_url}/.well-known/openid-configuration")).json()
            assert discovery["issuer"] == idp_url
            health = await http.get(f"{broker_url}/healthz")
            assert health.json()["ok"] is True
            refused = await http.post(f"{broker_url}/v1/token", json={})
            assert refused.status_code == 401
    assert not (tmp_path / "link-encryption.key").exists()
