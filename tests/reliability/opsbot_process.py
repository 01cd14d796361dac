"""``opsbot slack`` and ``opsbot migrate`` as real processes, configured only through the
environment, as deployed: the app built by ``open_assistant`` (durable runs, the offline demo
model, the in-process broker), against the dev IdP, the reference MCP servers and the fake
Slack. Their log lines are kept so a test can count them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from cryptography.fernet import Fernet

from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers
from testing.identity import RunningIdp, sign_in_at_login_page
from testing.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack, SlackSender
from tests import forkserver

_LISTENING = re.compile(r"listening on (http://\S+?)/slack/events")
# One Fernet key per test run: every instance must read the links the others stored.
_LINK_KEY = Fernet.generate_key().decode()


def app_env(
    database_url: str,
    data_dir: Path,
    fake_slack: FakeSlack,
    idp: RunningIdp,
    servers: ReferenceServers,
    **extra: str,
) -> dict[str, str]:
    """The environment of an ``opsbot`` process: the parent's minus any ``OPSBOT_``/Slack
    settings, plus these."""
    for server in servers:
        idp.provider.set_audience(server.name, server.audience)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPSBOT_", "SLACK_", "PORT"))}
    env.update(
        OPSBOT_DATABASE_URL=database_url,
        OPSBOT_DATA_DIR=str(data_dir),
        OPSBOT_MODEL="demo",
        OPSBOT_LOG_LEVEL="INFO",
        OPSBOT_IDP__ISSUER=idp.issuer,
        OPSBOT_IDP__CLIENT_ID=idp.client_id,
        OPSBOT_IDP__CLIENT_SECRET=idp.client_secret,
        OPSBOT_MCP_SERVERS=json.dumps(
            [{"name": s.name, "url": s.url, "audience": s.audience} for s in servers]
        ),
        OPSBOT_BROKER__LINK_CALLBACK_URL="http://127.0.0.1:9/oauth/callback",
        OPSBOT_BROKER__LINK_ENCRYPTION_KEY=_LINK_KEY,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=fake_slack.url,
    )
    env.update(extra)
    return env


def _command(forked: bool, *args: str) -> list[str]:
    if forked:
        return forkserver.command(*args)
    return [sys.executable, "-m", "opsbot.cli", *args]


@dataclass
class AppProcess:
    url: str
    proc: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)

    async def readyz(self) -> tuple[int, str]:
        async with httpx.AsyncClient(verify=shared_ssl_context(), timeout=10) as http:
            response = await http.get(f"{self.url}/readyz")
        return response.status_code, response.text

    async def link(self, sender: SlackSender, user: str, username: str) -> None:
        """``/ops link`` → the IdP's login page → this process's ``/oauth/callback``."""
        status, body = await sender.post_command("link", user=user)
        assert status == 200, body
        login_url = json.loads(body)["blocks"][1]["elements"][0]["url"]
        async with httpx.AsyncClient(verify=shared_ssl_context(), timeout=10) as http:
            reply = await sign_in_at_login_page(http, login_url, username)
            page = await http.get(f"{self.url}/oauth/callback", params=reply)
        assert page.status_code == 200, page.text


async def _collect(stream: asyncio.StreamReader, lines: list[str]) -> None:
    while line := await stream.readline():
        lines.append(line.decode(errors="replace").rstrip())


@contextlib.asynccontextmanager
async def opsbot_slack(
    env: Mapping[str, str], *, bound: float, forked: bool = False
) -> AsyncIterator[AppProcess]:
    """``opsbot slack`` on a free loopback port; stopped (SIGTERM, then SIGKILL) on exit.
    Fails if the process exits before it serves. ``forked``: from the fork server
    (tests/forkserver.py), for tests that never SIGKILL it from outside (a kill the server can
    only pass on after the test saw the process gone); the others start it from scratch."""
    proc = await asyncio.create_subprocess_exec(
        *_command(forked, "slack", "--host", "127.0.0.1", "--port", "0"),
        env=dict(env), cwd=os.getcwd(),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    lines: list[str] = []
    assert proc.stderr is not None
    reader = asyncio.create_task(_collect(proc.stderr, lines))
    try:
        url = await asyncio.wait_for(_listening(proc, lines), bound)
        yield AppProcess(url, proc, lines)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await reader


@contextlib.asynccontextmanager
async def opsbot_slacks(
    env: Mapping[str, str], count: int, *, bound: float, forked: bool = False
) -> AsyncIterator[list[AppProcess]]:
    """``count`` ``opsbot slack`` processes started at once (not one after the other: each
    start imports the whole app); all stopped on exit, also when one fails to start."""
    async with contextlib.AsyncExitStack() as stack:
        started = await asyncio.gather(
            *(
                stack.enter_async_context(opsbot_slack(env, bound=bound, forked=forked))
                for _ in range(count)
            ),
            return_exceptions=True,
        )
        for outcome in started:
            if isinstance(outcome, BaseException):
                raise outcome
        yield [app for app in started if isinstance(app, AppProcess)]


async def _listening(proc: asyncio.subprocess.Process, lines: list[str]) -> str:
    # The log is another process's output: polled, there is nothing to await on.
    while True:
        for line in lines:
            if found := _LISTENING.search(line):
                return found.group(1)
        if proc.returncode is not None:
            tail = "\n".join(lines[-30:])
            raise AssertionError(f"opsbot slack exited with {proc.returncode}:\n{tail}")
        await asyncio.sleep(0.05)


async def opsbot_migrate(
    env: Mapping[str, str], *, bound: float, forked: bool = False
) -> tuple[int, str]:
    """Run ``opsbot migrate`` to completion: its exit code and output."""
    proc = await asyncio.create_subprocess_exec(
        *_command(forked, "migrate"),
        env=dict(env), cwd=os.getcwd(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), bound)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")
