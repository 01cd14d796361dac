"""``opsbot slack`` and ``opsbot migrate`` as real processes, configured only through the
environment, as deployed: the app built by ``open_assistant`` (durable runs, the offline demo
model, the in-process broker), against the dev IdP, the reference MCP servers and the fake
Slack (``testing.opsbot_process``). Their log lines are kept so a test can count them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from cryptography.fernet import Fernet

from mcp_servers import ReferenceServers
from testing.identity import RunningIdp
from testing.opsbot_process import AppProcess, run_to_end, serving_process, slack_app_env
from testing.slack import FakeSlack
from tests import forkserver

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
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPSBOT_", "SLACK_", "PORT"))}
    return slack_app_env(
        base,
        database_url=database_url,
        data_dir=str(data_dir),
        idp=idp,
        servers=servers,
        slack_api_url=fake_slack.url,
        link_key=_LINK_KEY,
        **extra,
    )


def _command(forked: bool, *args: str) -> list[str]:
    if forked:
        return forkserver.command(*args)
    return [sys.executable, "-m", "opsbot.cli", *args]


@contextlib.asynccontextmanager
async def opsbot_slack(
    env: Mapping[str, str], *, bound: float, forked: bool = False
) -> AsyncIterator[AppProcess]:
    """``opsbot slack`` on a free loopback port; stopped (SIGTERM, then SIGKILL) on exit.
    Fails if the process exits before it serves. ``forked``: from the fork server
    (tests/forkserver.py), for tests that never SIGKILL it from outside (a kill the server can
    only pass on after the test saw the process gone); the others start it from scratch."""
    command = _command(forked, "slack", "--host", "127.0.0.1", "--port", "0")
    async with serving_process(command, env, bound=bound, cwd=os.getcwd()) as app:
        yield app


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


async def opsbot_migrate(
    env: Mapping[str, str], *, bound: float, forked: bool = False
) -> tuple[int, str]:
    """Run ``opsbot migrate`` to completion: its exit code and output."""
    return await run_to_end(_command(forked, "migrate"), env, bound=bound, cwd=os.getcwd())
