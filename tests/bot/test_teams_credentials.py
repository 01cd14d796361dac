"""The bot's outbound credentials never show in a repr (a logged object)."""

from __future__ import annotations

import aiohttp

from bot.teams.credentials import ClientCredentials


async def test_the_secret_and_cached_tokens_stay_out_of_the_repr() -> None:
    async with aiohttp.ClientSession() as session:
        credentials = ClientCredentials(
            "https://login.example/token", "app-id", "s3cret-value", "scope/.default", session
        )
        credentials._cache["scope/.default"] = ("cached-token-value", 0.0)
        shown = repr(credentials) + str(credentials)
    assert "s3cret-value" not in shown
    assert "cached-token-value" not in shown
