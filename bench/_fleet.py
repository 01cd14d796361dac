"""Real ``opsbot slack`` processes and what they talk to, for ``bench slack_ack`` and
``bench scale`` (not a bench: the leading underscore hides it).

The dev IdP and the reference MCP servers run on a thread of their own, the fake Slack Web
API on another and the signed-event sender on a third, so none of them runs on the loop that
measures; each app is a separate process configured only through its environment, as
deployed (durable runs, the offline demo model, the in-process broker).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from cryptography.fernet import Fernet
from prometheus_client.parser import text_string_to_metric_families

from bench._sender import Prepared, send_from_own_process
from bench._support import OtherLoop
from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers, start_reference_servers
from testing.identity import RunningIdp, start_dev_idp
from testing.opsbot_process import (
    AppProcess,
    link_over_slack,
    run_to_end,
    serving_process,
    slack_app_env,
)
from testing.slack import (
    SIGNING_SECRET,
    FakeSlack,
    SlackSender,
    mention,
    signature,
    start_fake_slack,
)

WORKING_TEXT = "Working on it…"  # bot.slack.config.SlackBotConfig.working_text
# The dev IdP's people; Slack user U0000 is alice, U0001 bob, ...
USERNAMES = ("alice", "bob", "carol", "dave", "erin")
Event = tuple[str, dict[str, Any]]


@dataclass
class Services:
    fake_slack: FakeSlack
    idp: RunningIdp
    servers: ReferenceServers
    data_dir: Path
    slack_loop: OtherLoop
    services_loop: OtherLoop
    sender_loop: OtherLoop
    link_key: str = field(default_factory=lambda: Fernet.generate_key().decode())

    async def on_slack(self, coro: Any) -> Any:
        return await self.slack_loop.call(coro)


@contextlib.asynccontextmanager
async def open_services() -> AsyncIterator[Services]:
    slack_loop, services_loop, sender_loop = OtherLoop(), OtherLoop(), OtherLoop()
    fake = FakeSlack()
    runner = await slack_loop.call(start_fake_slack(fake))
    stack = contextlib.AsyncExitStack()
    with tempfile.TemporaryDirectory() as tmp:

        async def start() -> tuple[RunningIdp, ReferenceServers]:
            idp = await stack.enter_async_context(start_dev_idp())
            servers = await stack.enter_async_context(
                start_reference_servers(
                    issuer=idp.issuer, jwks_url=idp.jwks_url, data_dir=Path(tmp) / "mcp"
                )
            )
            for server in servers:
                idp.provider.set_audience(server.name, server.audience)
            return idp, servers

        try:
            idp, servers = await services_loop.call(start())
            yield Services(fake, idp, servers, Path(tmp), slack_loop, services_loop, sender_loop)
        finally:
            await services_loop.call(stack.aclose())
            await slack_loop.call(runner.cleanup())
            for loop in (slack_loop, services_loop, sender_loop):
                loop.close()


def app_env(database_url: str, services: Services, **extra: str) -> dict[str, str]:
    """An ``opsbot slack`` process's whole environment (nothing of this one's: the app is
    configured by these alone, as deployed)."""
    options = {"OPSBOT_LOG_LEVEL": "WARNING", "OPSBOT_RUNS__POLL_SECONDS": "0.2", **extra}
    return slack_app_env(
        {},
        database_url=database_url,
        data_dir=str(services.data_dir / "app"),
        idp=services.idp,
        servers=services.servers,
        slack_api_url=services.fake_slack.url,
        link_key=services.link_key,
        **options,
    )


async def opsbot_command(env: Mapping[str, str], *args: str, bound: float = 120.0) -> str:
    code, out = await run_to_end([sys.executable, "-m", "opsbot.cli", *args], env, bound=bound)
    if code != 0:
        raise RuntimeError(f"opsbot {' '.join(args)} failed:\n{out}")
    return out


def opsbot_slack(
    env: Mapping[str, str], *, bound: float = 300.0
) -> contextlib.AbstractAsyncContextManager[AppProcess]:
    """``opsbot slack`` on a free loopback port; SIGTERM (then SIGKILL) on exit."""
    command = [sys.executable, "-m", "opsbot.cli", "slack", "--host", "127.0.0.1", "--port", "0"]
    env = {**env, "OPSBOT_LOG_LEVEL": "INFO"}  # it logs where it listens
    return serving_process(command, env, bound=bound, stop_within=20)


async def link_users(services: Services, app_url: str, count: int) -> list[str]:
    """``/ops link`` for Slack users U0000.. as the IdP's people; their Slack ids."""

    async def link_all() -> list[str]:
        users = []
        async with (
            aiohttp.ClientSession() as session,
            httpx.AsyncClient(timeout=30, verify=shared_ssl_context()) as http,
        ):
            sender = SlackSender(app_url, session=session)
            for i in range(count):
                user = f"U{i:04d}"
                username = USERNAMES[i % len(USERNAMES)]
                await link_over_slack(sender, http, app_url, user, username)
                users.append(user)
        return users

    return list(await services.sender_loop.call(link_all()))


def questions(prefix: str, n: int, users: Sequence[str], start: float) -> list[Event]:
    """``n`` mentions asking the demo model for a ticket (one MCP read each), each in its own
    thread, round-robin over ``users``."""
    return [
        (
            f"Ev{prefix}{i:06d}",
            mention(
                users[i % len(users)],
                f"show ticket PAY-10{1 + i % 4}",
                channel=f"C{i % 7}",
                ts=f"{start + i:.0f}.{i:06d}",
            ),
        )
        for i in range(n)
    ]


async def post_all(
    services: Services,
    urls: Sequence[str],
    events: Sequence[Event],
    concurrency: int,
    *,
    retries: Iterable[Event] = (),
    starts: dict[str, float] | None = None,
    own_process: bool = False,
) -> tuple[list[float], list[int], float]:
    """POST each event (round-robin over ``urls``) with ``concurrency`` in flight, from the
    sender's own loop (``own_process``: from a process of its own, ``bench._sender``); ack
    latencies (ms), statuses and the wall time (s)."""
    if own_process:
        if starts is not None:
            raise ValueError("start times are recorded in this process only")
        prepared = [
            signed_event(urls[k % len(urls)], eid, ev, None) for k, (eid, ev) in enumerate(events)
        ]
        prepared += [
            signed_event(urls[(k + 1) % len(urls)], eid, ev, 1)
            for k, (eid, ev) in enumerate(retries)
        ]
        return await send_from_own_process(prepared, concurrency)

    async def go() -> tuple[list[float], list[int], float]:
        connector = aiohttp.TCPConnector(limit=concurrency * 2 + 10)
        async with aiohttp.ClientSession(connector=connector) as session:
            senders = [SlackSender(u, session=session) for u in urls]
            gate = asyncio.Semaphore(concurrency)

            async def post(
                k: int, eid: str, ev: dict[str, Any], retry: int | None
            ) -> tuple[float, int]:
                async with gate:
                    started = time.perf_counter()
                    if starts is not None and retry is None:
                        starts[eid] = started
                    status, _ = await senders[k % len(senders)].post_event(
                        ev, event_id=eid, retry_num=retry
                    )
                    return (time.perf_counter() - started) * 1000, status

            jobs = [post(k, eid, ev, None) for k, (eid, ev) in enumerate(events)]
            jobs += [post(k + 1, eid, ev, 1) for k, (eid, ev) in enumerate(retries)]
            started = time.perf_counter()
            results = await asyncio.gather(*jobs)
            return [ms for ms, _ in results], [s for _, s in results], time.perf_counter() - started

    result: tuple[list[float], list[int], float] = await services.sender_loop.call(go())
    return result


def signed_event(url: str, eid: str, event: dict[str, Any], retry: int | None) -> Prepared:
    """The request ``SlackSender.post_event`` would send (signed now; Slack's retries carry
    their number), for ``bench._sender``."""
    headers = {}
    if retry is not None:
        headers = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
    body = json.dumps(SlackSender(url).envelope(event, eid))
    ts = str(int(time.time()))
    headers.update(
        {
            "Content-Type": "application/json",
            "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": signature(SIGNING_SECRET, ts, body),
        }
    )
    return Prepared(f"{url}/slack/events", body, headers)


async def wait_answered(services: Services, events: Sequence[Event], bound: float) -> float:
    """Wait until every event's thread has its answer (or ``bound`` s); seconds waited."""
    started = time.perf_counter()
    deadline = started + bound
    while time.perf_counter() < deadline:
        if lost(services.fake_slack, events) == 0:
            break
        await asyncio.sleep(0.2)
    await services.on_slack(services.fake_slack.settle(quiet=0.5, limit=60))
    return time.perf_counter() - started


def threads(fake: FakeSlack) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every thread's messages now (``FakeSlack.thread`` for all threads at once), oldest
    first. Read from a snapshot: the fake Slack adds messages on its own loop meanwhile (a
    dict changing under the iteration failed a 3,000-event run), and each event's own scan of
    all messages made the count quadratic (minutes at 3,000 events)."""
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for (channel, ts), message in sorted(
        list(fake.messages.items()), key=lambda kv: float(kv[0][1])
    ):
        for key in {message.get("thread_ts"), message.get("ts"), ts}:
            if key is not None:
                found.setdefault((channel, str(key)), []).append(message)
    return found


def lost(fake: FakeSlack, events: Sequence[Event]) -> int:
    """Events whose thread does not hold exactly one answer, updated exactly once."""
    updates = Counter((str(u["channel"]), str(u["ts"])) for u in fake.calls_to("chat.update"))
    by_thread = threads(fake)
    missing = 0
    for _eid, event in events:
        replies = by_thread.get((event["channel"], event["ts"]), [])
        answered = [m for m in replies if m.get("text") != WORKING_TEXT]
        keys = [(m["channel"], m["ts"]) for m in replies]
        if len(replies) != 1 or len(answered) != 1 or [updates[k] for k in keys] != [1]:
            missing += 1
    return missing


def answer_seconds(
    fake: FakeSlack, events: Sequence[Event], starts: Mapping[str, float]
) -> dict[str, float]:
    """Per answered event id: seconds from its POST to the update that put its answer in its
    thread (one process's clock: the fake Slack records when each call arrived)."""
    answered_at: dict[tuple[str, str], float] = {}
    for call in list(fake.calls):
        if call.method == "chat.update":
            answered_at[(str(call.params.get("channel")), str(call.params.get("ts")))] = call.at
    by_thread = threads(fake)
    seconds: dict[str, float] = {}
    for eid, event in events:
        for message in by_thread.get((event["channel"], event["ts"]), []):
            at = answered_at.get((str(message["channel"]), str(message["ts"])))
            if at is not None and eid in starts:
                seconds[eid] = at - starts[eid]
    return seconds


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(url: str) -> Samples:
    async with httpx.AsyncClient(timeout=30, verify=shared_ssl_context()) as http:
        response = await http.get(f"{url}/metrics")
    response.raise_for_status()
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def histogram_quantile(
    before: Samples, after: Samples, name: str, q: float, **labels: str
) -> float | None:
    """The ``q`` quantile of what histogram ``name`` observed between two scrapes, as
    Prometheus' ``histogram_quantile`` computes it (linear within the bucket)."""
    buckets: list[tuple[float, float]] = []
    for (sample, sample_labels), value in after.items():
        if sample != f"{name}_bucket":
            continue
        got = dict(sample_labels)
        if any(got.get(k) != v for k, v in labels.items()):
            continue
        bound = float(got["le"])
        buckets.append((bound, value - before.get((sample, sample_labels), 0.0)))
    buckets.sort()
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            share = (rank - lower_count) / (count - lower_count) if count > lower_count else 0.0
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return lower_bound
