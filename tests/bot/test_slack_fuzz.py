"""Fuzz ``POST /slack/events`` over real HTTP: Hypothesis mutates the payloads Slack sends
(events, clicks, modal submissions, ``/ops``) with wrong types, missing and huge fields and
JSON-ish garbage, signed and unsigned, against one running app, on SQLite and on PostgreSQL
(whose text cannot hold the NUL the fuzz sends). No answer is ever ≥ 500, and
afterwards the app is healthy and still answers a valid message."""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import queue
import threading
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.slack import open_bot, serve_http
from infra.serving import bind_socket
from infra.storage import create_engine
from infra.tls import shared_ssl_context
from testing.fake_assistant import FakeAssistant
from testing.slack import (
    SIGNING_SECRET,
    FakeSlack,
    SlackSender,
    block_action,
    direct_message,
    mention,
    signature,
    start_fake_slack,
    view_submission,
)
from tests.bot.conftest import ALICE, BOB, ProblemLog, slack_config
from tests.bot.test_slack_events import _texts

REQUESTS = 2_000
BATCH = 8


@dataclass
class RunningApp:
    url: str
    fake: FakeSlack
    loop: asyncio.AbstractEventLoop


@pytest.fixture
def running_app(database_url: str) -> Iterator[RunningApp]:
    """The app (in-process runs) and the fake Slack in a thread with their own event loop,
    so the synchronous Hypothesis test drives them over HTTP."""
    ready: queue.Queue[RunningApp | BaseException] = queue.Queue()
    stop: list[asyncio.Event] = []

    async def main() -> None:
        fake = FakeSlack()
        runner = await start_fake_slack(fake)
        engine = create_engine(database_url)
        assistant = FakeAssistant()
        assistant.link(ALICE, "alice", {"team-payments"})
        assistant.link(BOB, "bob", {"team-payments", "ticket-leads"})
        stop.append(asyncio.Event())
        try:
            async with (
                open_bot(slack_config(fake), assistant, engine) as bot,
                serve_http(bot.app, bind_socket("127.0.0.1", 0)) as url,
            ):
                ready.put(RunningApp(url, fake, asyncio.get_running_loop()))
                await stop[0].wait()
        finally:
            await engine.dispose()
            await runner.cleanup()

    def serve() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced to the test below
            ready.put(exc)

    thread = threading.Thread(target=serve, name="slack-app", daemon=True)
    thread.start()
    started = ready.get(timeout=30)
    if isinstance(started, BaseException):
        raise started
    try:
        yield started
    finally:
        started.loop.call_soon_threadsafe(stop[0].set)
        thread.join(30)


# -- what Slack sends, and what an attacker might ------------------------------------------

_SENDER = SlackSender("unused")
_LEAF = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(
        ["", "U0ALICE", "T0SANDBOX", "T0OTHER", "<@U0OPSBOT> hi", "1.0", "ops", "\x00", "\ud800"]
    )
    | st.sampled_from([10_000, 5_000]).map(lambda n: "x" * n)  # huge fields
)
_JSONISH = st.recursive(
    _LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _base_payloads() -> dict[str, tuple[str, dict[str, Any]]]:
    edit_view = {
        "type": "modal",
        "callback_id": "approval_edit_submit",
        "private_metadata": json.dumps({"a": "apr-1", "c": "C0APPROVALS", "t": "1.0"}),
    }
    reject_view = {**edit_view, "callback_id": "approval_reject_submit"}
    home = {"type": "app_home_opened", "user": ALICE.user_id, "channel": "D0A", "tab": "home"}
    form = {
        "token": "unused",
        "team_id": "T0SANDBOX",
        "channel_id": "C0GENERAL",
        "channel_name": "general",
        "user_id": ALICE.user_id,
        "command": "/ops",
        "text": "status",
        "response_url": "https://hooks.slack.invalid/commands/1",
        "trigger_id": "1.2.abc",
    }
    return {
        "mention": ("event", _SENDER.envelope(mention(ALICE.user_id, "is PAY-1 open?"))),
        "dm": ("event", _SENDER.envelope(direct_message(ALICE.user_id, "open tickets?"))),
        "home": ("event", _SENDER.envelope(home)),
        "messages tab": ("event", _SENDER.envelope({**home, "tab": "messages"})),
        "approve": ("interaction", block_action(BOB.user_id, "approval_approve", "apr-1")),
        "edit": ("interaction", block_action(BOB.user_id, "approval_edit", "apr-1")),
        "reject": ("interaction", block_action(BOB.user_id, "approval_reject", "apr-1")),
        "connect": ("interaction", block_action(ALICE.user_id, "connect_account", "x")),
        "forget": ("interaction", block_action(ALICE.user_id, "memory_forget_all", "x")),
        "edit submit": (
            "interaction",
            view_submission(BOB.user_id, edit_view, {"arg:status": {"value": {"value": "x"}}}),
        ),
        "reject submit": (
            "interaction",
            view_submission(BOB.user_id, reject_view, {"reason": {"value": {"value": "no"}}}),
        ),
        "command": ("command", form),
        "url_verification": ("event", {"type": "url_verification", "challenge": "c"}),
    }


BASES = _base_payloads()
_NAMES = sorted(BASES)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


@st.composite
def _mutated(draw: st.DrawFn) -> tuple[str, Any]:
    """A real payload with a few fields replaced by garbage or removed."""
    name = _NAMES[draw(st.integers(0, len(_NAMES) - 1))]
    kind, base = BASES[name]
    payload = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(payload)
        if not paths:
            break
        path = paths[draw(st.integers(0, len(paths) - 1))]
        parent = payload
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(_JSONISH)
    return kind, payload


def _encode(kind: str, payload: Any) -> tuple[bytes, str]:
    if kind == "event":
        return json.dumps(payload).encode(), "application/json"
    if kind == "interaction":
        body = urllib.parse.urlencode({"payload": json.dumps(payload)})
        return body.encode(), "application/x-www-form-urlencoded"
    fields = payload if isinstance(payload, dict) else {"text": payload}
    form = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}
    # A lone surrogate goes as the bytes UTF-8 would give it (which are not valid UTF-8).
    body = urllib.parse.urlencode(form, encoding="utf-8", errors="surrogatepass")
    return body.encode(), "application/x-www-form-urlencoded"


_GARBAGE = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=64).map(str.encode),
    _JSONISH.map(lambda v: json.dumps(v).encode()),
    st.sampled_from([b"{", b"null", b"[]", b"payload=%7B", b"payload=null", b"command=/ops"]),
)


_HOW = ["signed"] * 6 + ["unsigned", "stale", "odd headers"]


@st.composite
def slack_requests(draw: st.DrawFn) -> tuple[bytes, dict[str, str]]:
    if draw(st.integers(0, 9)) < 8:
        body, content_type = _encode(*draw(_mutated()))
    else:
        body = draw(_GARBAGE)
        content_type = draw(
            st.sampled_from(["application/json", "application/x-www-form-urlencoded", "text/x"])
        )
    now = int(time.time())
    how = _HOW[draw(st.integers(0, len(_HOW) - 1))]
    timestamp = str(now - 600 if how == "stale" else now)
    headers = {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": signature(SIGNING_SECRET, timestamp, body),
    }
    if how == "unsigned":
        headers["X-Slack-Signature"] = "v0=" + "0" * 64
    elif how == "odd headers":
        headers["X-Slack-Request-Timestamp"] = draw(st.sampled_from(["", "x", "1e9", "-1"]))
    return body, headers


def test_fuzzed_requests_never_get_a_5xx_and_the_app_stays_healthy(
    running_app: RunningApp,
) -> None:
    statuses: collections.Counter[int] = collections.Counter()
    problems = ProblemLog()
    logging.getLogger().addHandler(problems)
    events_url = f"{running_app.url}/slack/events"
    try:
        with (
            httpx.Client(
                verify=shared_ssl_context(), timeout=10, limits=httpx.Limits(max_connections=BATCH)
            ) as http,
            ThreadPoolExecutor(BATCH) as pool,
        ):

            def send(request: tuple[bytes, dict[str, str]]) -> tuple[int, bytes]:
                body, headers = request
                return http.post(events_url, content=body, headers=headers).status_code, body

            # Each example is a batch sent at once: Slack delivers concurrently too, and the
            # run stays within a few seconds.
            @settings(
                max_examples=REQUESTS // BATCH,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(batch=st.lists(slack_requests(), min_size=BATCH, max_size=BATCH))
            def post(batch: list[tuple[bytes, dict[str, str]]]) -> None:
                for status, body in pool.map(send, batch):
                    statuses[status] += 1
                    assert status < 500, (status, body[:300])

            post()
            health = http.get(f"{running_app.url}/healthz")
            sender = SlackSender(running_app.url)
            valid = asyncio.run_coroutine_threadsafe(
                sender.post_event(mention(ALICE.user_id, "still there?", ts="99.1")),
                running_app.loop,
            ).result(10)
            answered = asyncio.run_coroutine_threadsafe(
                running_app.fake.wait_for(
                    "chat.update", where=lambda p: "still there?" in _texts(p.get("blocks", []))
                ),
                running_app.loop,
            ).result(15)
    finally:
        logging.getLogger().removeHandler(problems)
    print(f"fuzz: {sum(statuses.values())} requests, statuses {dict(sorted(statuses.items()))}")
    assert sum(statuses.values()) >= REQUESTS
    assert all(status < 500 for status in statuses)
    assert health.status_code == 200
    assert valid[0] == 200
    assert answered
    tracebacks = [f"{r.name}: {r.getMessage()[:200]}" for r in problems.records]
    assert tracebacks == []
