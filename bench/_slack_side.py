"""Slack's side of ``bench approval``'s cards: the fake Web API the app calls (``chat.update``
and the rest) and the sender of the mentions and the signed clicks, in a process of its own
by default (not a bench: the leading underscore hides it).

Why a process: Slack is on other machines. On a thread of the bench process (the way
until 2026-12-04, still there as ``--slack-in-process``) every Web API call it answered and
every click it signed and sent held the GIL the app's loop needs, and that wait was counted
in the app's latencies. As ``bench._servers_process`` does for the IdP and MCP servers, the
child prints a ready line with its URL on stdout (the port exchange) and stops cleanly
when the parent closes its stdin; in between the parent sends one JSON command a line
(``ask``, ``click``, ``clicked``) and reads one JSON answer a line.

The clicks go over connections opened before them (``bench._sender.warm_up``), as Slack's
are kept open: ``click_connections_opened`` counts those the timed clicks opened (0 expected).
The times the child reports are ``time.perf_counter`` readings, CLOCK_MONOTONIC on Linux:
the same clock as the parent's, so its click times and the app's stage times subtract.

Example::

    async with slack_side_process() as side:  # or slack_side_thread(), on another loop
        ... the app, given side.url as its Slack API URL ...
        await side.ask(app_url, n, tag, first_ts)
        await side.click(app_url, paced_ms=0.0)  # returns once every card is decided
        report = await side.clicked()  # once the app is quiet: per card, its times
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import aiohttp

from bench._sender import ConnectionCount, Prepared, send_timed, warm_up
from bench._support import child_process

ALICE_ID, BOB_ID = "U0ALICE", "U0BOB"


class SlackSideHandle(Protocol):
    """What the bench uses of the Slack side, in either shape."""

    @property
    def url(self) -> str: ...

    async def ask(self, app_url: str, n: int, tag: str, first_ts: int) -> None: ...

    async def click(self, app_url: str, paced_ms: float = 0.0) -> None: ...

    async def clicked(self) -> dict[str, Any]: ...


class SlackSide:
    """The fake Web API and the sender, on the loop it is opened on. ``cpu`` is the clock of
    the CPU time charged to the Slack side (the child's process time, or the thread's)."""

    def __init__(self, cpu: Callable[[], float]) -> None:
        from testing.slack import FakeSlack

        self._cpu = cpu
        self.fake = FakeSlack()
        self._connections = ConnectionCount()
        self._runner: Any = None
        self._http: aiohttp.ClientSession | None = None
        self._clicked: dict[str, Any] = {}

    @property
    def url(self) -> str:
        return self.fake.url

    async def open(self) -> None:
        from testing.slack import start_fake_slack

        self._runner = await start_fake_slack(self.fake)
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=200), trace_configs=[self._connections.trace]
        )

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def ask(self, app_url: str, n: int, tag: str, first_ts: int) -> None:
        """Alice asks for ``n`` writes, each in its own thread; returns once every approval
        card is up and the app has gone quiet (card refs saved, Homes published)."""
        from testing.slack import SlackSender, mention

        assert self._http is not None
        sender = SlackSender(app_url, session=self._http)
        await asyncio.gather(
            *(
                sender.post_event(
                    mention(ALICE_ID, f"{tag} {i}", channel="C0BENCH", ts=f"{first_ts}.{i:06d}")
                )
                for i in range(n)
            )
        )
        await self.fake.wait_for(
            "chat.postMessage", n, where=lambda p: p["channel"] == "ops-approvals", wait=120
        )
        await self.fake.settle(quiet=0.5, limit=120)

    async def click(self, app_url: str, paced_ms: float = 0.0) -> None:
        """Bob approves every card (all at once, or one every ``paced_ms`` ms), over
        connections opened before; returns once every card shows its decision."""
        from testing.slack import APPROVALS_CHANNEL_ID, card_decided

        assert self._http is not None
        cards = [m for (ch, _ts), m in self.fake.messages.items() if ch == APPROVALS_CHANNEL_ID]
        ids = [card["blocks"][-1]["elements"][0]["value"] for card in cards]
        clicks = [signed_click(app_url, a, c) for a, c in zip(ids, cards, strict=True)]
        await warm_up(self._http, f"{app_url}/healthz", len(clicks), self._connections)
        opened, cpu = self._connections.opened, self._cpu()
        sent = await send_timed(self._http, clicks, paced_ms=paced_ms)
        click_connections = self._connections.opened - opened
        assert all(s.status == 200 for s in sent), [s.status for s in sent]
        await self.fake.wait_for("chat.update", len(cards), where=card_decided, wait=120)
        self._clicked = {
            "cards": [
                {"approval_id": a, "card_ts": card["ts"], "clicked": s.started}
                for a, card, s in zip(ids, cards, sent, strict=True)
            ],
            "click_connections_opened": click_connections,
            # from the first click until every card showed its decision
            "cpu_s": self._cpu() - cpu,
        }

    async def clicked(self) -> dict[str, Any]:
        """Once the app has gone quiet after ``click``: per card, its approval id and ts,
        when its click was sent, when its first ``chat.update`` arrived and when the final
        one did (perf_counter); the connections opened and the CPU time."""
        from testing.slack import APPROVALS_CHANNEL_ID, card_decided

        await self.fake.settle(quiet=0.5, limit=120)

        def first(card_ts: str, decided: bool) -> float | None:
            return min(
                (
                    c.at
                    for c in self.fake.calls
                    if c.method == "chat.update"
                    and c.params.get("channel") == APPROVALS_CHANNEL_ID
                    and c.params.get("ts") == card_ts
                    and (card_decided(c.params) or not decided)
                ),
                default=None,
            )

        for card in self._clicked["cards"]:
            card["deciding"] = first(card["card_ts"], decided=False)
            card["final"] = first(card["card_ts"], decided=True)
        return self._clicked


def signed_click(app_url: str, approval_id: str, card: dict[str, Any]) -> Prepared:
    """Bob's Approve on ``card``, the request ``SlackSender.post_interaction`` would send
    (signed now, before the clock starts)."""
    from testing.slack import SIGNING_SECRET, block_action, signature

    payload = block_action(
        BOB_ID,
        "approval_approve",
        approval_id,
        message_ts=card["ts"],
        message_blocks=card["blocks"],
    )
    body = urllib.parse.urlencode({"payload": json.dumps(payload)})
    ts = str(int(time.time()))
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": signature(SIGNING_SECRET, ts, body),
    }
    return Prepared(f"{app_url}/slack/events", body, headers)


@contextlib.asynccontextmanager
async def slack_side_thread() -> AsyncIterator[SlackSide]:
    """The Slack side on the calling loop (a thread of the bench process): its CPU is that
    thread's."""
    side = SlackSide(time.thread_time)
    await side.open()
    try:
        yield side
    finally:
        await side.close()


class _Remote:
    """The parent's handle on the child: the same ``url``, ``ask``, ``click``, ``clicked``."""

    def __init__(self, child: asyncio.subprocess.Process, url: str) -> None:
        self._child = child
        self.url = url

    async def _do(self, op: str, **args: Any) -> Any:
        assert self._child.stdin is not None
        assert self._child.stdout is not None
        self._child.stdin.write(json.dumps({"op": op, "args": args}).encode() + b"\n")
        await self._child.stdin.drain()
        line = await asyncio.wait_for(self._child.stdout.readline(), 600)
        if not line:
            raise RuntimeError(f"the Slack side's process ended during {op}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the Slack side's {op} failed: {answer['error']}")
        return answer["result"]

    async def ask(self, app_url: str, n: int, tag: str, first_ts: int) -> None:
        await self._do("ask", app_url=app_url, n=n, tag=tag, first_ts=first_ts)

    async def click(self, app_url: str, paced_ms: float = 0.0) -> None:
        await self._do("click", app_url=app_url, paced_ms=paced_ms)

    async def clicked(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._do("clicked")
        return result


@contextlib.asynccontextmanager
async def slack_side_process() -> AsyncIterator[_Remote]:
    """Start the child; its handle until exit (the child's CPU is its own process time)."""
    clock = time.get_clock_info("perf_counter").implementation
    if "CLOCK_MONOTONIC" not in clock:  # another process's readings would not compare
        raise RuntimeError(f"perf_counter is {clock}: use --slack-in-process here")
    async with child_process("bench._slack_side", what="the Slack side's process") as (
        child,
        info,
    ):
        yield _Remote(child, info["url"])


async def _serve() -> None:
    side = SlackSide(time.process_time)
    await side.open()
    try:
        print(json.dumps({"url": side.url}), flush=True)
        loop = asyncio.get_running_loop()
        # One command a line until the parent closes stdin (or dies)
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command = json.loads(line)
            try:
                result = await getattr(side, command["op"])(**command["args"])
                answer = {"result": result}
            except Exception as exc:  # the parent raises it, with the bench's context
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(answer), flush=True)
    finally:
        await side.close()


if __name__ == "__main__":
    asyncio.run(_serve())
