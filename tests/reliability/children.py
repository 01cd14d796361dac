"""Serving child processes for the fault tests: started, read for their port, always reaped."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import NamedTuple

from tests import forkserver


class ServingChild(NamedTuple):
    port: int
    proc: asyncio.subprocess.Process
    # The process that serves: ``proc`` itself, or (forked) the fork server's child that
    # ``proc``, its client, stands in for.
    pid: int

    async def kill(self) -> int:
        """SIGKILL the serving process from outside, as a crash kills it; returns once the
        process that started it saw it die (a forked one's client dies of the same signal)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        return await self.proc.wait()


@contextlib.asynccontextmanager
async def serving_child(
    module: str, *args: str, bound: float, forked: bool = False
) -> AsyncIterator[ServingChild]:
    """``python -m module args…``, which prints ``PORT <n>`` (forked: ``PORT <n> PID <pid>``)
    once it serves; yields the port, the process and the serving pid, and kills the serving
    process (if still alive) on exit. ``forked``: from this test process's fork server
    (tests/forkserver.py), which has the product imported already (~2-3 s of CPU a start);
    a kill still goes to the serving process itself, from outside."""
    argv = (
        forkserver.module_command(module, *args)
        if forked
        else [sys.executable, "-m", module, *args]
    )
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, cwd=os.getcwd()
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), bound)
        assert line.startswith(b"PORT "), line
        fields = line.split()
        pid = int(fields[3]) if fields[2:3] == [b"PID"] else proc.pid
        assert pid != proc.pid or not forked, line  # a forked child must say which it is
        child = ServingChild(int(fields[1]), proc, pid)
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    try:
        yield child
    finally:
        if proc.returncode is None:
            await child.kill()
        await proc.wait()
