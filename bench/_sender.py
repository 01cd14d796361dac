"""The platform's side of an ack bench in a process of its own: POSTs prepared requests with
a number in flight over keep-alive connections and times each answer (not a bench: the
leading underscore hides it).

Why a process: Slack's and Teams' servers are not in opsbot's process, nor in the one that
serves the bench's fake Web API, IdP and MCP servers. A client on a thread there waited for
that process's GIL (busy answering the agent turns) between its reads, and that wait was
counted as the ack's latency; in ``bench teams_ack`` the client even shared the app's GIL.

The parent (``send_from_own_process``) prepares every request (signed, with its headers),
starts ``python -m bench._sender``, hands it the requests on stdin and says "go" once the
child has imported and opened its session, so neither start-up is measured.

    latencies_ms, statuses, wall_s = await send_from_own_process(requests, concurrency=50)
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

READY = "ready"


@dataclass(frozen=True, slots=True)
class Prepared:
    """One POST: where, its body and its headers, exactly as sent."""

    url: str
    body: str
    headers: dict[str, str]


async def send_from_own_process(
    requests: Sequence[Prepared], concurrency: int, *, bound: float = 600.0
) -> tuple[list[float], list[int], float]:
    """POST ``requests`` from a child process, ``concurrency`` in flight, in order of start:
    each one's latency (ms) and status, and the wall time (s) of them all."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench._sender",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        job = {"concurrency": concurrency, "requests": [asdict(r) for r in requests]}
        proc.stdin.write(json.dumps(job).encode() + b"\n")
        await proc.stdin.drain()
        ready = await asyncio.wait_for(proc.stdout.readline(), bound)
        if ready.decode().strip() != READY:
            raise RuntimeError(f"the sender did not start: {ready[:200]!r}")
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), bound)
        result = json.loads(line)
    finally:
        if proc.returncode is None:
            proc.stdin.close()
            await asyncio.wait_for(proc.wait(), 30)
    return list(result["latencies_ms"]), list(result["statuses"]), float(result["wall_s"])


async def _send(job: dict[str, Any]) -> dict[str, Any]:
    requests = [Prepared(**r) for r in job["requests"]]
    concurrency = int(job["concurrency"])
    connector = aiohttp.TCPConnector(limit=concurrency * 2 + 10)
    async with aiohttp.ClientSession(connector=connector) as session:
        gate = asyncio.Semaphore(concurrency)

        async def post(request: Prepared) -> tuple[float, int]:
            async with gate:
                started = time.perf_counter()
                async with session.post(
                    request.url, data=request.body.encode(), headers=request.headers
                ) as response:
                    await response.read()
                    return (time.perf_counter() - started) * 1000, response.status

        print(READY, flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # "go"
        started = time.perf_counter()
        results = await asyncio.gather(*(post(r) for r in requests))
        wall = time.perf_counter() - started
    return {
        "latencies_ms": [ms for ms, _ in results],
        "statuses": [status for _, status in results],
        "wall_s": wall,
    }


def main() -> None:
    job = json.loads(sys.stdin.readline())
    print(json.dumps(asyncio.run(_send(job))), flush=True)


if __name__ == "__main__":
    main()
