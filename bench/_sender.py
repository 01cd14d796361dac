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

The sending itself is shared with ``bench approval``'s Slack side (``bench._slack_side``):
``warm_up`` opens the keep-alive connections the timed requests will use, so the timed part
opens none (a platform's servers keep theirs open), and ``send_timed`` POSTs prepared
requests and notes when each was sent and answered (``time.perf_counter``: CLOCK_MONOTONIC
on Linux, one clock for every process on the machine, so a child's times compare with its
parent's).
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


RESULT_LINE_LIMIT = 64 * 2**20


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
        # The result is one line, ~20 bytes a request: past 64 KiB (asyncio's default limit
        # for a line) at a few thousand requests.
        limit=RESULT_LINE_LIMIT,
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


@dataclass(frozen=True, slots=True)
class Sent:
    """One request of ``send_timed``: when it was sent and answered (perf_counter), status."""

    started: float
    answered: float
    status: int


class ConnectionCount:
    """TCP connections a ``ClientSession`` opened (give ``trace`` to its ``trace_configs``)."""

    def __init__(self) -> None:
        self.opened = 0
        self.trace = aiohttp.TraceConfig()
        self.trace.on_connection_create_end.append(self._opened)

    async def _opened(self, *_: Any) -> None:
        self.opened += 1


async def warm_up(
    session: aiohttp.ClientSession, url: str, connections: int, count: ConnectionCount
) -> int:
    """GET ``url`` ``connections`` times at once, again until a round opens no connection:
    the session then holds that many open to the server (kept-alive ones count, dead ones
    are replaced). Returns the connections opened."""
    before = count.opened
    for _ in range(5):
        opened = count.opened

        async def get() -> None:
            async with session.get(url) as response:
                await response.read()

        await asyncio.gather(*(get() for _ in range(connections)))
        if count.opened == opened:
            return count.opened - before
    raise RuntimeError(f"{url}: connections still opened after 5 rounds of {connections}")


async def send_timed(
    session: aiohttp.ClientSession,
    requests: Sequence[Prepared],
    *,
    concurrency: int | None = None,
    paced_ms: float = 0.0,
) -> list[Sent]:
    """POST ``requests`` in order: all at once, ``concurrency`` in flight, or one every
    ``paced_ms`` ms; when each was sent (its turn came) and answered, in the same order."""
    gate = asyncio.Semaphore(concurrency or len(requests) or 1)

    async def post(request: Prepared) -> Sent:
        async with gate:
            started = time.perf_counter()
            async with session.post(
                request.url, data=request.body.encode(), headers=request.headers
            ) as response:
                await response.read()
                return Sent(started, time.perf_counter(), response.status)

    if paced_ms <= 0:
        return list(await asyncio.gather(*(post(r) for r in requests)))
    posting = []
    for request in requests:
        posting.append(asyncio.ensure_future(post(request)))
        await asyncio.sleep(paced_ms / 1000)
    return list(await asyncio.gather(*posting))


async def _send(job: dict[str, Any]) -> dict[str, Any]:
    requests = [Prepared(**r) for r in job["requests"]]
    concurrency = int(job["concurrency"])
    connector = aiohttp.TCPConnector(limit=concurrency * 2 + 10)
    async with aiohttp.ClientSession(connector=connector) as session:
        print(READY, flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # "go"
        started = time.perf_counter()
        results = await send_timed(session, requests, concurrency=concurrency)
        wall = time.perf_counter() - started
    return {
        "latencies_ms": [(r.answered - r.started) * 1000 for r in results],
        "statuses": [r.status for r in results],
        "wall_s": wall,
    }


def main() -> None:
    job = json.loads(sys.stdin.readline())
    print(json.dumps(asyncio.run(_send(job))), flush=True)


if __name__ == "__main__":
    main()
