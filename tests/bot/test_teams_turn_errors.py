"""What a failed Teams turn leaves in the log: one line naming the cause when the Bot
Connector could not be reached (a network fault an operator reads at a glance), a traceback
for anything else (a bug to find). Never anything in the chat."""

from __future__ import annotations

import logging

import aiohttp
import pytest

from bot.teams.app import log_turn_failure
from infra.serving import bind_socket


async def _unreachable_connector() -> aiohttp.ClientConnectorError:
    """A real connect error: a loopback port nothing listens on."""
    sock = bind_socket()
    port = sock.getsockname()[1]
    sock.close()
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientConnectorError) as caught:
            await http.post(f"http://127.0.0.1:{port}/v3/conversations/a/activities")
    return caught.value


async def test_an_unreachable_connector_is_one_line_with_its_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = await _unreachable_connector()
    with caplog.at_level(logging.ERROR, logger="bot.teams.app"):
        log_turn_failure(error)
        log_turn_failure(aiohttp.ServerDisconnectedError())
    first, second = caplog.records
    assert "the Bot Connector did not answer (ClientConnectorError: " in first.getMessage()
    assert "127.0.0.1" in first.getMessage()
    assert "ServerDisconnectedError" in second.getMessage()
    assert first.exc_info is None
    assert second.exc_info is None


async def test_anything_else_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="bot.teams.app"):
        try:
            raise KeyError("card")
        except KeyError as exc:
            log_turn_failure(exc)
    (record,) = caplog.records
    assert record.getMessage() == "a Teams turn failed: KeyError"
    assert record.exc_info is not None
