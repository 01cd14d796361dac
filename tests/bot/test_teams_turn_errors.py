"""What a failed Teams turn leaves in the log: one line naming the cause when the Bot
Connector could not be reached (a network fault an operator reads at a glance), a traceback
for anything else (a bug to find). Never anything in the chat."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from aiohttp import web

from bot.teams.app import log_turn_failure
from infra.serving import bind_socket, serve_aiohttp


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


async def test_a_call_the_connector_refused_is_one_line_with_its_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A real 404 from a Connector-like server (a conversation the bot was removed from)."""

    async def not_found(_request: web.Request) -> web.Response:
        return web.Response(status=404)

    app = web.Application()
    app.router.add_post("/v3/conversations/{id}/activities", not_found)
    async with (
        serve_aiohttp(app, bind_socket()) as url,
        aiohttp.ClientSession(raise_for_status=True) as http,
    ):
        with pytest.raises(aiohttp.ClientResponseError) as caught:
            await http.post(f"{url}/v3/conversations/a:1gone/activities")
    with caplog.at_level(logging.ERROR, logger="bot.teams.app"):
        log_turn_failure(caught.value)
    (record,) = caplog.records
    assert record.getMessage() == (
        "a Teams turn failed: the Bot Connector answered 404 to "
        "/v3/conversations/a:1gone/activities"
    )
    assert record.exc_info is None


async def test_anything_else_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="bot.teams.app"):
        try:
            raise KeyError("card")
        except KeyError as exc:
            log_turn_failure(exc)
    (record,) = caplog.records
    assert record.getMessage() == "a Teams turn failed: KeyError"
    assert record.exc_info is not None
