"""Slack adapter: translates Slack events, commands and clicks into ``Assistant`` calls and the
results into Block Kit. No business rules live here.

Public API::

    from bot.slack import SlackBotConfig, open_app, serve_http, run_socket_mode

Exception tree: this package raises no exceptions of its own. Web API failures surface as
``slack_sdk.errors.SlackApiError`` after the client's retries (429, 5xx, connection), and are
logged by Bolt; the user is told when a run fails.
"""

from bot.slack.app import SlackBot, build_app, dedup_middleware, open_app, open_bot
from bot.slack.client import make_web_client
from bot.slack.config import SlackBotConfig
from bot.slack.core import AssistantPort
from bot.slack.server import EVENTS_PATH, run_socket_mode, serve_http, web_application
from bot.slack.store import SqlApprovalMessages, SqlProcessedEvents

__all__ = [
    "EVENTS_PATH",
    "AssistantPort",
    "SlackBot",
    "SlackBotConfig",
    "SqlApprovalMessages",
    "SqlProcessedEvents",
    "build_app",
    "dedup_middleware",
    "make_web_client",
    "open_app",
    "open_bot",
    "run_socket_mode",
    "serve_http",
    "web_application",
]
