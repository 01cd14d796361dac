"""The HTTP edge both chat servers share (``infra.chat_http.read_capped``), with bytes an HTTP
client library would not send: a body whose ``Content-Encoding`` does not decode was a 500
with two tracebacks, a client gone mid-body a traceback, and a body that stalled held its
connection and handler forever. Each is now one answer and one log line."""

from __future__ import annotations

import asyncio
import logging

import pytest

import infra.chat_http
from testing.fake_assistant import FakeAssistant
from testing.raw_http import exchange, request_bytes, status_of
from tests.bot.conftest import RunApp
from tests.fixtures.teams import RunTeams


def _problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Log lines that are more than one line about a request: a traceback or an error."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.exc_info or r.exc_text or r.levelno >= logging.ERROR
    ]


async def _encoding_that_does_not_decode(url: str, caplog: pytest.LogCaptureFixture) -> None:
    for encoding in ("deflate", "gzip"):
        caplog.clear()
        headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
        answer = await exchange(url, request_bytes("POST", url, headers, b"garbage"))
        assert status_of(answer) in (400, 401), answer[:300]
        assert b"Traceback" not in answer
        assert b"zlib" not in answer
        await asyncio.sleep(0.1)  # anything the server logs after answering
        assert _problems(caplog) == []
        assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= 1


async def _client_gone_mid_body(url: str, caplog: pytest.LogCaptureFixture) -> None:
    headers = {"Content-Type": "application/json", "Content-Length": "1000"}
    await exchange(url, request_bytes("POST", url, headers, b'{"a'), hang_up=True)
    for _ in range(50):
        if any("went away" in r.getMessage() for r in caplog.records):
            break
        await asyncio.sleep(0.02)
    assert _problems(caplog) == []
    assert [r.getMessage() for r in caplog.records if "went away" in r.getMessage()] == [
        f"POST /{url.split('/', 3)[3]}: the client went away mid-body"
    ]


async def _body_that_stalls(url: str, caplog: pytest.LogCaptureFixture) -> None:
    headers = {"Content-Type": "application/json", "Content-Length": "1000"}
    answer = await exchange(url, request_bytes("POST", url, headers, b'{"a'), wait=5)
    assert status_of(answer) == 408
    assert answer.endswith(b"request body too slow")
    assert _problems(caplog) == []


CHECKS = {
    "an encoding that does not decode gets 400": _encoding_that_does_not_decode,
    "a client gone mid-body is one line": _client_gone_mid_body,
    "a body that stalls gets 408": _body_that_stalls,
}


@pytest.fixture
def edge(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(infra.chat_http, "BODY_SECONDS", 0.3)  # the stall test waits this


@pytest.mark.usefixtures("edge")
@pytest.mark.parametrize("check", list(CHECKS))
async def test_slack_events(
    run_app: RunApp,
    fake_assistant: FakeAssistant,
    caplog: pytest.LogCaptureFixture,
    check: str,
) -> None:
    async with run_app(fake_assistant) as env:
        await CHECKS[check](f"{env.url}/slack/events", caplog)


@pytest.mark.usefixtures("edge")
@pytest.mark.parametrize("check", list(CHECKS))
async def test_teams_messages(
    run_teams: RunTeams,
    fake_assistant: FakeAssistant,
    caplog: pytest.LogCaptureFixture,
    check: str,
) -> None:
    async with run_teams(fake_assistant) as env:
        await CHECKS[check](f"{env.url}/api/messages", caplog)


# Requests aiohttp cannot parse: it answers 400 itself, and logged each with a traceback.
NOT_HTTP = {
    "a raw byte in a header": {"X-Foo": b"\xff\x01"},
    "a header without a colon": {"X-Foo\x00": "x"},
    "a header line over 8 KiB": {"X-Foo": "x" * 9000},
    "a negative Content-Length": {"Content-Length": "-1"},
    "a chunk size that is not hex": {"Transfer-Encoding": "chunked"},
    "an encoding aiohttp lacks": {"Content-Encoding": "br"},
}


@pytest.mark.usefixtures("edge")
@pytest.mark.parametrize("case", list(NOT_HTTP))
async def test_a_request_that_is_not_http_is_one_line(
    run_teams: RunTeams, fake_assistant: FakeAssistant, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    async with run_teams(fake_assistant) as env:
        url = f"{env.url}/api/messages"
        body = b"zz\r\nxx\r\n0\r\n\r\n" if case.startswith("a chunk") else b"{}"
        answer = await exchange(url, request_bytes("POST", url, NOT_HTTP[case], body))
        assert status_of(answer) in (400, 401, 413), answer[:200]
        await asyncio.sleep(0.1)
        assert _problems(caplog) == []
        assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= 1


@pytest.mark.usefixtures("edge")
async def test_a_token_with_a_raw_byte_is_401(
    run_teams: RunTeams, fake_assistant: FakeAssistant, caplog: pytest.LogCaptureFixture
) -> None:
    """A raw byte in the Authorization header (aiohttp keeps it as a surrogate) was a 500
    with a traceback before any credential was checked."""
    async with run_teams(fake_assistant) as env:
        url = f"{env.url}/api/messages"
        for token in (b"Bearer a.\xff.b", b"Bearer \xff\xfe"):
            caplog.clear()
            headers = {"Authorization": token, "Content-Type": "application/json"}
            answer = await exchange(url, request_bytes("POST", url, headers, b"{}"))
            assert status_of(answer) == 401, answer[:300]
            assert _problems(caplog) == []
            assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
                "POST /api/messages refused with 401: unauthenticated: malformed token: not "
                "ASCII (2 bytes)"
            ]
