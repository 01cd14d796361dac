"""Run the real ``opsbot dev`` as a subprocess (every port 0, data in a temp dir), forked from
this test process's fork server (tests/forkserver.py: the same command without its imports).

Example::

    async with run_opsbot_dev(tmp_path) as dev:
        dev.url          # the web UI
        dev.ticket_db    # the ticketing server's SQLite file
    dev.returncode, dev.stderr()
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from mcp_servers.ticketing import TicketStore
from sandbox import PORTS
from tests import forkserver

READY = re.compile(r"Open (http://\S+) in your browser")
START_TIMEOUT = 90.0


def dev_env(data_dir: Path, **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPSBOT_", "SLACK_"))}
    env.update({var: "0" for _field, _what, var in PORTS})
    env.update(OPSBOT_DATA_DIR=str(data_dir), OPSBOT_MODEL="demo", OPSBOT_LOG_LEVEL="WARNING")
    env.update(overrides)
    return env


@dataclass
class DevProcess:
    process: asyncio.subprocess.Process
    stderr_path: Path
    data_dir: Path
    url: str = ""
    output: list[str] = field(default_factory=list)
    stderr_at_stop: int = 0

    @property
    def ticket_db(self) -> Path:
        return self.data_dir / "sandbox" / "mcp-ticketing.db"

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def ticket_history(self, key: str) -> tuple[list[tuple[str, str]], str]:
        """The ticketing server's ground truth for ticket ``key``: its changes as
        (tool, acting subject), and its status."""
        store = await TicketStore.open(f"sqlite+aiosqlite:///{self.ticket_db}", base_url="http://x")
        try:
            rows = await store.all_changes()
            changes = [(c.tool, c.subject) for c in rows if c.ticket_key == key]
            ticket = next(t for t in await store.all_tickets() if t.key == key)
        finally:
            await store.close()
        return changes, ticket.status

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stderr_after_stop(self) -> str:
        """What the process wrote after it was told to stop (shutdown problems)."""
        return self.stderr()[self.stderr_at_stop :]

    async def wait_ready(self) -> str:
        assert self.process.stdout is not None
        async with asyncio.timeout(START_TIMEOUT):
            while True:
                line = (await self.process.stdout.readline()).decode()
                if not line:
                    raise AssertionError(f"opsbot dev exited before it was ready:\n{self.stderr()}")
                self.output.append(line)
                if match := READY.search(line):
                    self.url = match.group(1)
                    return self.url

    async def wait_bot_ready(self) -> None:
        """After ``wait_ready`` (the web UI serves): until the bot itself has started, so a
        test's first message is not timed against the bot's start on a busy machine."""
        assert self.process.stdout is not None
        async with asyncio.timeout(START_TIMEOUT):
            while True:
                line = (await self.process.stdout.readline()).decode()
                if not line:
                    raise AssertionError(
                        f"opsbot dev exited before the bot started:\n{self.stderr()}"
                    )
                self.output.append(line)
                if "the bot is ready" in line:
                    return

    async def stop(self, sig: int = signal.SIGINT) -> int:
        """Send ``sig`` and wait for the exit code; the rest of stdout lands in ``output``."""
        if self.process.returncode is None:
            self.stderr_at_stop = len(self.stderr())
            self.process.send_signal(sig)
        assert self.process.stdout is not None
        async with asyncio.timeout(60):
            rest = await self.process.stdout.read()
            code = await self.process.wait()
        self.output.append(rest.decode())
        return code


def _stderr_file(data_dir: Path) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    return data_dir / "opsbot-dev.stderr"


@contextlib.asynccontextmanager
async def spawn_opsbot_dev(data_dir: Path, *args: str, **env: str) -> AsyncIterator[DevProcess]:
    """``opsbot dev`` started (not waited for); killed at the end if still running."""
    stderr_path = _stderr_file(data_dir)
    with stderr_path.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *forkserver.command("dev", *args),
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=dev_env(data_dir, **env),
            cwd=data_dir,
        )
    dev = DevProcess(process, stderr_path, data_dir)
    try:
        yield dev
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@contextlib.asynccontextmanager
async def run_opsbot_dev(
    data_dir: Path, stop_with: int = signal.SIGINT, *, bot_ready: bool = False
) -> AsyncIterator[DevProcess]:
    """``opsbot dev`` running and ready (with ``bot_ready``, the bot too); stopped with
    ``stop_with`` at the end."""
    async with spawn_opsbot_dev(data_dir) as dev:
        await dev.wait_ready()
        if bot_ready:
            await dev.wait_bot_ready()
        yield dev
        await dev.stop(stop_with)
