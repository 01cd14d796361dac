"""Configuration of the Slack adapter, built from ``infra.settings`` by the caller."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_SUGGESTED_PROMPTS: tuple[tuple[str, str], ...] = (
    ("Open incidents", "Which incident tickets are open for my team?"),
    ("Runbook", "Find the runbook for a failing payment job."),
    ("Job status", "Which jobs failed in the last hour?"),
)


@dataclass(frozen=True, slots=True)
class SlackBotConfig:
    """Secrets are held here only in memory; ``repr`` hides them."""

    bot_token: str = field(repr=False)
    signing_secret: str = field(repr=False)
    api_url: str = "https://slack.com/api/"
    approvals_channel: str = "ops-approvals"
    # Teams served besides the installing workspace (Slack Connect guests are refused otherwise).
    allowed_team_ids: frozenset[str] = frozenset()
    app_token: str | None = field(default=None, repr=False)
    working_text: str = "Working on it…"
    suggested_prompts: tuple[tuple[str, str], ...] = DEFAULT_SUGGESTED_PROMPTS
    # How long the edit modal waits for the core before closing and reporting later
    # (Slack drops a view submission not answered within 3 s).
    submission_wait_seconds: float = 2.0
    # Longer messages and /ops questions are refused politely, privately (never echoed).
    max_message_chars: int = 4000
    rate_limit_retries: int = 3
    server_error_retries: int = 2
    # Slack's standardized app authentication (auth_provider block, user_connection events)
    # instead of opsbot's Connect button; the link itself is opsbot's OIDC login either way.
    user_connections: bool = False
    # Stream answers (chat.*Stream) and set agent session status; off, or refused by Slack:
    # the placeholder message that is replaced by the answer.
    streaming: bool = True
