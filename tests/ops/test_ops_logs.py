"""JSON logs: every logger as one JSON object a line, with the request's context bound, and
no secrets or raw tool output."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from infra.logging import configure_logging
from infra.observability.logs import configure_json_logging
from infra.settings import Settings
from opsbot.observability import request_context


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers = handlers
        root.setLevel(level)
        structlog.reset_defaults()


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_with_request_context_and_no_secrets() -> None:
    stream = io.StringIO()
    configure_json_logging("INFO", stream=stream)
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXZhbHVl"
    with request_context(route="/slack/events", thread_id="th-1") as request_id:
        logging.getLogger("bot.slack").warning("call failed with Bearer %s", jwt)
        structlog.get_logger("opsbot").info(
            "tool called",
            access_token="xoxb-123-456-abc",
            output="ticket body with a customer's card number",
            server="ticketing",
        )
    logging.getLogger("opsbot").info("after the request")

    first, second, third = _lines(stream)
    for line in (first, second):
        assert line["request_id"] == request_id
        assert line["route"] == "/slack/events"
        assert line["thread_id"] == "th-1"
        assert "timestamp" in line
        assert "level" in line
    assert first["logger"] == "bot.slack"
    assert first["event"] == "call failed with Bearer [redacted]"
    assert second["access_token"] == "[redacted]"
    assert second["output"] == "[redacted]"
    assert second["server"] == "ticketing"
    assert "request_id" not in third  # the context ends with the request
    raw = stream.getvalue()
    assert jwt not in raw
    assert "xoxb-123" not in raw
    assert "card number" not in raw


@pytest.mark.usefixtures("restore_logging")
def test_settings_select_json_logs(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(Settings(_env_file=None, log_format="json"))  # type: ignore[call-arg]
    logging.getLogger("opsbot.test").warning("hello %s", "json")
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert json.loads(err)["event"] == "hello json"


def test_a_librarys_routine_records_are_demoted_to_debug_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``infra.logging.demote_to_debug``: the records it picks are DEBUG (gone unless DEBUG
    is on); the others pass unchanged; installing twice adds one filter."""
    from infra.logging import AtDebug, demote_to_debug

    name = "tests.some_library"
    logger = logging.getLogger(name)
    for _ in range(2):
        demote_to_debug(name, "chatter", lambda r: r.getMessage().startswith("chatter"))
    assert len([f for f in logger.filters if isinstance(f, AtDebug)]) == 1
    try:
        with caplog.at_level(logging.INFO, logger=name):
            logger.error("chatter about a session")
            logger.error("a real failure")
        assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
            ("ERROR", "a real failure")
        ]
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger=name):
            logger.error("chatter again")
        assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
            ("DEBUG", "chatter again")
        ]
    finally:
        logger.filters.clear()


def _renderer() -> structlog.dev.ConsoleRenderer:
    renderer = structlog.get_config()["processors"][-1]
    assert isinstance(renderer, structlog.dev.ConsoleRenderer)
    return renderer


@pytest.mark.usefixtures("restore_logging")
def test_console_logs_have_no_colours_nor_rich_tracebacks_outside_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A service's console log (not a terminal) is plain text: no ANSI colours, the plain
    traceback; colours and the rich (or better-exceptions) traceback only in a terminal."""
    settings = Settings(_env_file=None, log_format="console")  # type: ignore[call-arg]
    configure_logging(settings, terminal=False)
    plain = _renderer()
    assert plain.colors is False
    assert plain.exception_formatter is structlog.dev.plain_traceback
    try:
        raise ValueError("boom")
    except ValueError:
        structlog.get_logger("opsbot.test").exception("failed")
    captured = capsys.readouterr()
    written = captured.out + captured.err
    assert "failed" in written
    assert "Traceback (most recent call last)" in written
    assert "\x1b[" not in written

    configure_logging(settings, terminal=True)
    coloured = _renderer()
    assert coloured.colors is True
    assert coloured.exception_formatter is structlog.dev.default_exception_formatter
