"""The web process besides /slack/events: health and the account-link callback."""

from __future__ import annotations

import aiohttp

from bot.slack import open_app, serve_http
from infra.serving import bind_socket
from infra.storage import create_engine
from testing.fake_assistant import FakeAssistant
from testing.slack import FakeSlack
from tests.bot.conftest import slack_config


async def test_health_and_link_callback(
    fake_slack: FakeSlack, fake_assistant: FakeAssistant, sqlite_url: str
) -> None:
    completed: list[tuple[str, str]] = []

    async def complete(state: str, code: str, iss: str | None) -> str:
        if state == "used":
            raise ValueError("state already used")
        completed.append((state, code))
        return "alice@example.com <3"

    engine = create_engine(sqlite_url)
    try:
        async with (
            open_app(slack_config(fake_slack), fake_assistant, engine) as app,
            serve_http(app, bind_socket("127.0.0.1", 0), complete) as url,
            aiohttp.ClientSession() as http,
        ):
            async with http.get(f"{url}/healthz") as response:
                assert response.status == 200
            async with http.get(f"{url}/oauth/callback?state=s1&code=c1") as response:
                assert response.status == 200
                page = await response.text()
            async with http.get(f"{url}/oauth/callback?state=used&code=c2") as response:
                assert response.status == 400
                assert "expired or was already used" in await response.text()
            async with http.get(f"{url}/oauth/callback?code=c3") as response:
                assert response.status == 400
    finally:
        await engine.dispose()
    assert completed == [("s1", "c1")]
    assert "Connected as alice@example.com &lt;3." in page
