"""The Slack Web API client: configurable base URL, retries on 429, 5xx and lost connections."""

from __future__ import annotations

import aiohttp
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.config import SlackBotConfig


def retry_handlers(config: SlackBotConfig) -> list[AsyncRetryHandler]:
    return [
        AsyncConnectionErrorRetryHandler(max_retry_count=2),
        AsyncRateLimitErrorRetryHandler(max_retry_count=config.rate_limit_retries),
        AsyncServerErrorRetryHandler(max_retry_count=config.server_error_retries),
    ]


def make_web_client(
    config: SlackBotConfig, session: aiohttp.ClientSession | None = None
) -> AsyncWebClient:
    """Without ``session`` every call opens a new connection; pass one to reuse connections."""
    base_url = config.api_url if config.api_url.endswith("/") else config.api_url + "/"
    return AsyncWebClient(
        token=config.bot_token,
        base_url=base_url,
        retry_handlers=retry_handlers(config),
        timeout=30,
        session=session,
    )
