"""Serving child processes for the fault tests: started, read for their port, always reaped."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator


@contextlib.asynccontextmanager
async def serving_child(
    module: str, *args: str, bound: float
) -> AsyncIterator[tuple[int, asyncio.subprocess.Process]]:
    """``python -m module args…``, which prints ``PORT <n>`` once it serves; yields the port
    and the process, and kills the process (if still alive) on exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args, stdout=asyncio.subprocess.PIPE, cwd=os.getcwd()
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), bound)
        assert line.startswith(b"PORT "), line
        yield int(line.split()[1]), proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
