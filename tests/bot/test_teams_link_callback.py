"""Teams alone serves ``/oauth/callback`` with the shared handler, naming Teams on its pages."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from aiohttp import web

from bot.teams.server import link_callback_route
from infra.serving import bind_socket, socket_url


async def test_teams_link_callback_pages(caplog: pytest.LogCaptureFixture) -> None:
    async def complete(state: str, code: str, iss: str | None) -> str:
        if state == "used":
            raise ValueError("state already used")
        return f"bob ({iss})"

    application = web.Application()
    application.add_routes([link_callback_route(complete)])
    runner = web.AppRunner(application)
    await runner.setup()
    sock = bind_socket("127.0.0.1", 0)
    await web.SockSite(runner, sock).start()
    url = socket_url(sock)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/oauth/callback?state=s&code=c&iss=idp") as ok:
                assert ok.status == 200
                assert "Connected as bob (idp). You can go back to Teams." in await ok.text()
            with caplog.at_level(logging.WARNING, logger="infra.chat_http"):
                async with http.get(f"{url}/oauth/callback?state=used&code=c1") as used:
                    assert used.status == 400
                    assert "already used. Ask opsbot again in Teams" in await used.text()
            # A used link is one line naming its cause's type: no traceback, no state or code.
            (line,) = [r for r in caplog.records if r.name == "infra.chat_http"]
            assert line.getMessage() == "account link could not be completed: ValueError"
            assert line.exc_info is None
            async with http.get(f"{url}/oauth/callback?state=s") as incomplete:
                assert incomplete.status == 400
                assert "incomplete" in await incomplete.text()
    finally:
        await runner.cleanup()
