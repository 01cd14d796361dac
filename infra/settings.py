"""The one settings object, read from the environment (and an optional ``.env`` file).

Our variables carry the ``OPSBOT_`` prefix; nested sections use ``__`` (for example
``OPSBOT_BROKER__TOKEN_TTL_SECONDS=300``). Slack's own variables keep the names Bolt reads
(``SLACK_BOT_TOKEN``, ``SLACK_SIGNING_SECRET``, ``SLACK_APP_TOKEN``). Nothing else in opsbot
reads ``os.environ``: components receive the parts of this object they need.

Example::

    settings = Settings()                       # from the environment
    settings = Settings(database_url="postgresql://u@db/opsbot")   # explicit, in tests
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from pathlib import Path
from typing import Literal, Self
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from infra.ports import REFERENCE_PORTS

DATABASE_BACKENDS = ("sqlite", "postgresql")


class Section(BaseModel):
    """A nested settings section. A string under a field is its description: ``opsbot config
    example`` writes ``.env.example`` from these (the class docstring heads the section)."""

    model_config = ConfigDict(use_attribute_docstrings=True)


class McpOAuthClient(BaseModel):
    """A client registered by hand at an MCP server's authorization server, for servers in
    ``oauth`` mode whose authorization server has no dynamic registration (RFC 7591). Meant
    to be embedded in a server's settings (as ``oauth``)."""

    client_id: str = Field(min_length=1)
    client_secret: SecretStr | None = None  # None: a public client (PKCE only)
    scopes: list[str] = Field(default_factory=list)  # default: the server's scopes_supported


SERVER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]{0,31}")


class McpServerSettings(BaseModel):
    """One MCP server opsbot talks to: its name (the tool prefix), URL and how to authenticate.

    ``auth``: ``exchange`` (default: the user's RFC 8693 token for ``audience``), ``static``
    (a header whose value is read from the env var ``header_value_env`` or the file
    ``header_value_file``; the server sees opsbot's service identity), ``none`` (explicit
    only) or ``oauth`` (per-user OAuth through the broker). Unknown keys are an error.

    Example::

        OPSBOT_MCP_SERVERS='[{"name": "grafana", "url": "https://grafana/mcp", "auth": "static",
          "header_name": "X-API-Key", "header_value_env": "GRAFANA_MCP_KEY", "timeout_s": 10}]'
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    url: str
    audience: str | None = None
    auth: Literal["exchange", "static", "none", "oauth"] = "exchange"
    header_name: str = "Authorization"
    header_value_env: str | None = None
    header_value_file: Path | None = None
    # Per call (and session open). Unset: the agent's read and write timeouts
    # (OPSBOT_AGENT__READ_TIMEOUT_SECONDS, __WRITE_TIMEOUT_SECONDS), by the tool's class.
    timeout_s: float | None = Field(default=None, gt=0)
    # This server's circuit breaker. Unset: the agent's (OPSBOT_AGENT__BREAKER_THRESHOLD,
    # __BREAKER_OPEN_SECONDS).
    breaker_threshold: int | None = Field(default=None, ge=1)
    breaker_open_seconds: float | None = Field(default=None, gt=0)
    # When true, an unclassified tool the server marks readOnlyHint is a read (no approval).
    trust_read_only_hint: bool = False
    # auth 'oauth' only: a client registered by hand; without it, dynamic registration (DCR).
    oauth: McpOAuthClient | None = None
    _header_value: SecretStr | None = PrivateAttr(default=None)

    @property
    def header_value(self) -> SecretStr | None:
        """The static credential, read from its env var or file at load (never in repr)."""
        return self._header_value

    @model_validator(mode="after")
    def _auth_mode_is_complete(self) -> Self:
        where = f"MCP server {self.name!r}"
        if self.auth == "exchange" and not self.audience:
            raise ValueError(f"{where}: auth 'exchange' needs an 'audience'")
        if self.auth != "oauth" and self.oauth is not None:
            raise ValueError(f"{where}: an 'oauth' client needs auth 'oauth'")
        if self.auth != "static" and (self.header_value_env or self.header_value_file):
            raise ValueError(f"{where}: header_value_env/header_value_file need auth 'static'")
        if self.auth == "static":
            if self.trust_read_only_hint:
                raise ValueError(
                    f"{where}: trust_read_only_hint is not allowed with auth 'static' (the "
                    "server acts as opsbot's service identity: classify its reads in the policy)"
                )
            self._header_value = SecretStr(self._static_value(where))
        return self

    def _static_value(self, where: str) -> str:
        if bool(self.header_value_env) == bool(self.header_value_file):
            raise ValueError(
                f"{where}: auth 'static' needs exactly one of header_value_env or "
                'header_value_file, e.g. "header_value_env": "GRAFANA_MCP_KEY"'
            )
        if self.header_value_env:
            value = os.environ.get(self.header_value_env, "").strip()
            if not value:
                raise ValueError(f"{where}: the env var {self.header_value_env} is not set")
            return value
        assert self.header_value_file is not None
        try:
            value = self.header_value_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(
                f"{where}: cannot read header_value_file {self.header_value_file}: {exc.strerror}"
            ) from None
        if not value:
            raise ValueError(f"{where}: header_value_file {self.header_value_file} is empty")
        return value

    @field_validator("name")
    @classmethod
    def _name_is_a_plain_word(cls, value: str) -> str:
        # It prefixes tool names ("<name>_<tool>"), which model providers take only in ASCII,
        # and opsbot reads a prefixed name's server up to its first underscore.
        if not SERVER_NAME.fullmatch(value):
            raise ValueError(
                f"server name {value!r} must be ASCII letters and digits, starting with a "
                "letter, at most 32 (no '_': it separates the server from the tool)"
            )
        return value


def _default_mcp_servers() -> list[McpServerSettings]:
    return [
        McpServerSettings(
            name=name,
            url=f"http://127.0.0.1:{port}/mcp",
            audience=f"http://127.0.0.1:{port}/mcp",
        )
        for name, port in REFERENCE_PORTS.items()
    ]


class IdpSettings(Section):
    """Identity provider: the company's OIDC provider (the development IdP by default)."""

    issuer: str = "http://127.0.0.1:8100"
    client_id: str = "opsbot"
    client_secret: SecretStr = SecretStr("opsbot-dev-secret")
    exchange_target_param: Literal["audience", "resource"] = "audience"
    """How the token endpoint names the target server in token exchange: `audience` (Keycloak)
    or `resource` (RFC 8707)."""
    token_url: str | None = None
    """Token endpoint; unset = from OIDC discovery."""
    directory_path: Path | None = None
    """Development IdP only: the demo directory (users, teams, groups, scopes; YAML)."""
    client_auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"
    """How opsbot authenticates at the token endpoint."""
    dev_admin_token: SecretStr | None = SecretStr("opsbot-dev-admin")
    """Development IdP only: bearer token of its /admin/users/{sub}/revoke|restore endpoints
    (empty disables them)."""
    scopes: list[str] = Field(
        default_factory=lambda: ["openid", "profile", "email", "offline_access"], min_length=1
    )
    """Login scopes (docs/identity-providers.md has worked values for Okta, Entra ID,
    Keycloak). `offline_access` asks for the refresh token the broker needs; some providers
    only honour it with `prompt=consent`."""
    prompt: str | None = None
    """OIDC `prompt` for the login, e.g. "consent" or "login consent"."""
    groups_claim: str = "groups"
    """Claim with the user's groups, in the ID token or at the userinfo endpoint. A dotted name
    reads a nested claim (Keycloak: "realm_access.roles")."""
    email_claim: str = "email"
    """Claim with the user's email."""
    name_claim: str = "name"
    """Claim with the user's display name."""
    userinfo_fallback: bool = True
    """Ask the userinfo endpoint (from discovery) when a claim is missing from the ID token."""

    @field_validator("scopes")
    @classmethod
    def _openid_scope(cls, scopes: list[str]) -> list[str]:
        if "openid" not in scopes:
            raise ValueError("the login scopes must include 'openid' (the ID token names the user)")
        return scopes

    @field_validator("groups_claim", "email_claim", "name_claim")
    @classmethod
    def _claim_path(cls, value: str) -> str:
        if not value or any(not part for part in value.split(".")):
            raise ValueError(f"{value!r} is not a claim name (dots separate nested names)")
        return value


class BrokerSettings(Section):
    """Token broker: in-process by default, or a separate HTTP service."""

    mode: Literal["inprocess", "remote"] = "inprocess"
    """`remote`: a separate broker service (`opsbot broker serve`, listening on SERVICE_URL,
    callers authenticated by SERVICE_SECRET) holds the refresh tokens instead."""
    service_url: str = "http://127.0.0.1:8099"
    service_secret: SecretStr = SecretStr("opsbot-dev-broker-secret")
    token_ttl_seconds: int = 300
    """Lifetime of exchanged tokens minted by the development IdP (capped at the subject
    token's)."""
    cache_margin_seconds: int = 30
    """A cached token is renewed this long before it expires."""
    groups_max_age_seconds: float = Field(default=60.0, gt=0, le=60)
    """A user's sign-in and groups are re-read from the IdP (a refresh) when older than this,
    so an approver removed from a group or disabled is refused within it (at most 60 s)."""
    # Fernet key (urlsafe base64, 32 bytes) encrypting stored refresh tokens.
    link_encryption_key: SecretStr | None = None
    """Fernet key encrypting stored refresh tokens (generate: `python -c "from
    cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"`). Unset =
    development only: a random key is generated once into OPSBOT_DATA_DIR/link-encryption.key."""
    link_callback_url: str = "http://127.0.0.1:3000/oauth/callback"
    """Where the IdP sends users back after "Connect your account" (the app's /oauth/callback)."""
    mcp_oauth_callback_url: str = "http://127.0.0.1:3000/oauth/mcp/callback"
    """Where MCP servers' authorization servers send users back after *Connect <server>*."""
    link_state_ttl_seconds: int = 600
    """How long a "Connect your account" link stays valid."""

    @field_validator("link_encryption_key")
    @classmethod
    def _is_a_fernet_key(cls, value: SecretStr | None) -> SecretStr | None:
        # Checked here, not when the first link is stored, so a typo stops start-up.
        if value is None or not value.get_secret_value():
            return None
        try:
            raw = base64.urlsafe_b64decode(value.get_secret_value().encode())
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            raise ValueError("not a Fernet key (32 bytes, url-safe base64: 44 characters)")
        return value


class SlackSettings(Section):
    """Slack (the app's tokens are SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_APP_TOKEN)."""

    approvals_channel: str = "ops-approvals"
    """Where approval cards go."""
    allowed_team_ids: list[str] = Field(default_factory=list)
    """JSON list of Slack team ids allowed besides the app's own (Slack Connect)."""
    event_retention_hours: int = 24
    """Processed event ids are kept this long for deduplication (Slack retries within
    minutes), then pruned."""
    submission_wait_seconds: float = Field(default=2.0, gt=0, lt=3)
    """How long an Edit-and-approve submission waits for the result before the modal closes
    (Slack allows 3 s)."""
    max_body_bytes: int = Field(default=512 * 1024, ge=16 * 1024)
    """POST /slack/events bodies above this get 413 before they are read further."""
    max_message_chars: int = Field(default=4000, ge=1)
    """Longer messages and /ops questions get a polite private refusal (never echoed)."""
    rate_limit_retries: int = 3
    """Web API retries on HTTP 429 (honouring Retry-After)."""
    server_error_retries: int = 2
    """Web API retries on HTTP 500/503."""
    ack_on_own_loop: bool = True
    """With durable runs, Slack's HTTP is served and messages are stored on a thread, event
    loop and database pool of their own (bot.slack.front), so an ack never waits for agent
    steps. False: everything on the main loop (for comparison: bench slack_ack --compare)."""
    user_connections: bool = False
    """Slack's standardized app authentication: Connect in Slack's own UI (the auth_provider
    block, user_connection events). Also set features.user_connections.is_enabled in
    manifest.yml. False: opsbot's Connect button. Either way the link is opsbot's OIDC login."""
    streaming: bool = True
    """Stream answers with one task per tool call (chat.startStream) and set agent session
    status; false, or a workspace where Slack refuses those methods: a placeholder message
    that is replaced by the answer."""


class TeamsSettings(Section):
    """Microsoft Teams (an Azure Bot, single-tenant; /api/messages). The client secret is
    OPSBOT_TEAMS__APP_PASSWORD."""

    app_id: str | None = None
    """The Azure Bot's Microsoft App ID (its Entra app registration's client id): the exact
    `aud` of every inbound token, and the client id of the bot's outbound calls."""
    app_password: SecretStr | None = None
    """The Entra app registration's client secret (outbound calls to the Bot Connector)."""
    tenant_id: str | None = None
    """The bot's own Entra tenant (single-tenant bot): always served, and where the bot's
    outbound tokens come from."""
    allowed_tenant_ids: list[str] = Field(default_factory=list)
    """JSON list of further tenants whose users may talk to the bot (default: none)."""
    openid_metadata_url: str = "https://login.botframework.com/v1/.well-known/openidconfiguration"
    """OpenID metadata of the Bot Connector's token issuer; its jwks_uri gives the keys."""
    issuers: list[str] = Field(default_factory=lambda: ["https://api.botframework.com"])
    """JSON list of accepted `iss` values of inbound tokens."""
    clock_leeway_seconds: int = Field(default=300, ge=0, le=300)
    """Clock skew allowed on inbound tokens' exp/nbf (at most Microsoft's 5 minutes)."""
    token_url: str | None = None
    """Token endpoint of the bot's outbound client-credentials grant; unset =
    https://login.microsoftonline.com/{tenant_id}/oauth2/v2.0/token."""
    token_scope: str = "https://api.botframework.com/.default"  # noqa: S105 - a scope
    """Scope of the bot's outbound tokens (the Bot Connector)."""
    approvals_conversation_id: str | None = None
    """The Teams channel where approval cards go (its id, 19:...@thread.tacv2)."""
    approvals_service_url: str | None = None
    """The Bot Connector serviceUrl of your tenant's region (e.g. https://smba.trafficmanager.net/amer/),
    used to post approval cards requested on another platform before any Teams activity has
    shown it; unset: the serviceUrl of the latest Teams activity."""
    service_url_prefixes: list[str] = Field(default_factory=list)
    """JSON list: if set, inbound activities must name a serviceUrl starting with one of these
    (e.g. ["https://smba.trafficmanager.net/"]); the token's serviceurl claim is always
    checked against the activity."""
    max_body_bytes: int = Field(default=256 * 1024, ge=16 * 1024)
    """POST /api/messages bodies above this get 413 before they are read further."""
    max_message_chars: int = Field(default=4000, ge=1)
    """Longer messages get a polite refusal (never echoed)."""
    streaming: bool = True
    """Stream answers in personal chats (the only place Teams streams): informative updates
    while tools run, then the text as it is written, then the final card. False, or a chat
    where Teams refuses streaming: typing indicators and one reply."""
    sso_connection_name: str | None = None
    """Azure Bot OAuth connection for Teams SSO (manifest webApplicationInfo). Set it only when
    the company's IdP (OPSBOT_IDP__ISSUER) is the tenant's Entra ID: the Teams client's token
    then links the user (the broker's RFC 8693 subject_token). Unset = the sign-in card only."""
    sso_resource: str | None = None
    """The Entra app ID URI that Teams SSO tokens are minted for (the OAuthCard's
    tokenExchangeResource); unset = api://botid-{app_id}, as in the app manifest's
    webApplicationInfo. A token's `aud` must be exactly this URI or (Entra v2 tokens) app_id."""
    app_domain: str | None = None
    """opsbot's public host name, for the app manifest's validDomains (opsbot teams package)."""

    @property
    def sso_audience(self) -> str | None:
        """The audience of Teams SSO tokens when SSO is on; ``None`` when it is off."""
        if not self.sso_connection_name or not self.app_id:
            return None
        return self.sso_resource or f"api://botid-{self.app_id}"

    @property
    def served_tenants(self) -> frozenset[str]:
        """The bot's own tenant and the allowed ones."""
        own = {self.tenant_id} if self.tenant_id else set()
        return frozenset(self.allowed_tenant_ids) | own


class RunSettings(Section):
    """Durable runs (infra.jobs): every accepted message is a job any instance runs."""

    durable: bool = True
    """False: runs go back to in-process tasks (a restart loses runs in flight)."""
    global_runs: int = Field(default=32, ge=0)
    """Runs at once in this process. 0: a web instance that only acknowledges and stores
    messages (and serves clicks and pages) while worker instances run the agents, so agent
    turns never share its CPU and GIL with the acks (durable runs only)."""
    per_user_runs: int = Field(default=2, ge=1)
    """Runs at once per user, across all instances."""
    lease_seconds: float = Field(default=30.0, gt=0)
    """A worker's lease on a run (renewed every third); a crashed worker's runs are taken
    over by another instance after this. The embedded SQLite default recovers at start."""
    poll_seconds: float = Field(default=1.0, gt=0)
    """How often an idle worker looks for runs enqueued by other instances."""

    @model_validator(mode="after")
    def _web_only_needs_durable_runs(self) -> Self:
        # Without durable runs a message runs where it was accepted: an instance taking no
        # runs would accept messages that nobody ever answers.
        if self.global_runs == 0 and not self.durable:
            raise ValueError("global_runs=0 (acks only) needs durable=true: workers run the jobs")
        return self


class PoolSettings(Section):
    """Database connection pools of one opsbot process. The PostgreSQL connections an
    instance holds are at most ack + app + jobs + checkpointer + memory (README, Scaling):
    keep instances × that under the server's max_connections. On a SQLite file a pool keeps
    every connection it opens, up to twice its size where that pool takes overflow."""

    ack: int = Field(default=2, ge=1)
    """The Slack ack path's own pool: stores an accepted message while agents hold theirs."""
    app: int = Field(default=3, ge=1)
    """opsbot's tables for the agent side (threads, approvals, audit, links)."""
    jobs: int = Field(default=2, ge=1)
    """The job runner's claims, leases and progress, and the Slack adapter's records."""
    checkpointer: int = Field(default=4, ge=1)
    """The LangGraph checkpointer (one connection per checkpoint write in flight)."""
    memory: int = Field(default=1, ge=1)
    """The user-memory store (read once per run, written by /ops memory)."""


class ModelPrice(BaseModel):
    """What a model costs, in US dollars per million tokens (for the cost-per-request metric)."""

    input_per_million: float = Field(default=0.0, ge=0)
    output_per_million: float = Field(default=0.0, ge=0)


class ObservabilitySettings(Section):
    """Observability: the app serves Prometheus metrics at /metrics, liveness at /healthz and
    readiness at /readyz (503 when the database or the IdP/broker is down; MCP servers that
    are down are listed under "degraded"). Alert rules: ops/alerts.yml. LangSmith tracing is
    LangChain's own: set LANGSMITH_TRACING=true and LANGSMITH_API_KEY in the process
    environment (a .env file is not forwarded); LangSmith then receives prompts and tool
    outputs, so use it only where that is allowed."""

    otlp_endpoint: str | None = None
    """OTLP/HTTP traces endpoint (e.g. http://otel-collector:4318/v1/traces); unset = no
    export. Spans carry thread_id and a pseudonymous user id, never the identity."""
    service_name: str = "opsbot"
    pseudonym_key: SecretStr = SecretStr("opsbot-dev-pseudonym-key")
    """HMAC key for pseudonymous user ids in traces and logs: set a long random secret."""
    model_prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """Prices per model for the cost metrics, as JSON, e.g. {"gpt-4.1": {"input_per_million":
    2.0, "output_per_million": 8.0}} (US dollars per million tokens)."""
    readiness_timeout_seconds: float = Field(default=2.0, gt=0)


class RetentionSettings(Section):
    """Retention (`opsbot prune`): how long threads and the audit log are kept."""

    thread_days: int = Field(default=90, ge=1)
    """Threads whose latest checkpoint is older than this are deleted (checkpoints,
    approvals, rows); threads with an open approval are kept."""
    audit_days: int | None = Field(default=None, ge=1)
    """Audit log retention (unset = keep forever). Deleting audit events bypasses the
    append-only trigger and needs `opsbot prune --audit --admin-database-url <superuser URL>`
    on PostgreSQL."""


class MemorySettings(Section):
    """User memory (/ops memory: default team, ticket project, answer style), in a LangGraph
    store in the same database."""

    enabled: bool = True


class AgentSettings(Section):
    """Agent core: limits and thresholds of one agent run (see agent_core.AgentConfig)."""

    run_model_call_limit: int = Field(default=12, ge=1)
    """Model calls allowed per run; a run that hits the limit ends with a message."""
    thread_model_call_limit: int = Field(default=200, ge=1)
    """Model calls allowed per thread."""
    read_timeout_seconds: float = Field(default=20.0, gt=0)
    write_timeout_seconds: float = Field(default=30.0, gt=0)
    """A write that times out is reported as "outcome unknown"."""
    read_retries: int = Field(default=2, ge=0)
    """Retries (with backoff) for idempotent read tools, on transient errors only."""
    summarize_trigger_tokens: int = Field(default=4000, ge=100)
    """Summarise history above this many tokens..."""
    summarize_keep_messages: int = Field(default=20, ge=1)
    """...keeping the last this many messages intact."""
    tool_selector_threshold: int = Field(default=15, ge=1)
    """Above this many model-visible tools, a model call first picks the relevant ones."""
    tool_selector_max_tools: int = Field(default=8, ge=1)
    bulk_write_threshold: int = Field(default=3, ge=2)
    """A model step proposing at least this many writes is flagged to the approver as bulk."""
    health_check_interval_seconds: float = Field(default=10.0, gt=0)
    """Degraded mode: how often unavailable MCP servers are probed."""
    tools_max_age_seconds: float = Field(default=600.0, gt=0)
    """How long a server's tool list is used before the next run lists it again (at once when
    the server reports another version): a server redeployed under the same version is seen."""
    breaker_threshold: int = Field(default=3, ge=1)
    """A server's circuit breaker opens after this many transport failures..."""
    breaker_open_seconds: float = Field(default=30.0, gt=0)
    """...for this long."""
    tool_calls_per_turn: int = Field(default=8, ge=1)
    """Tool calls one model turn may make; the rest are refused back to the model, never run."""
    pending_approvals_per_run: int = Field(default=5, ge=1)
    """Writes one model turn may put up for approval; the rest are refused, with no card."""
    write_attempts: int = Field(default=3, ge=1)
    """An approved write whose server is unreachable is retried only when it carries an
    idempotency key (the server then applies it once): attempts in all, with backoff."""
    write_retry_initial_delay_seconds: float = Field(default=0.5, ge=0)
    """First backoff between write attempts."""
    write_retry_max_delay_seconds: float = Field(default=4.0, ge=0)
    """Longest backoff between write attempts."""


class ApprovalSettings(Section):
    """Approvals and audit (maximum ages per tool live in the tool policy:
    max_approval_age_seconds)."""

    sweep_interval_seconds: float = Field(default=5.0, gt=0)
    """How often the in-process sweeper rejects approvals past their maximum age and finishes
    approvals a crash interrupted (`opsbot sweep` does one pass on demand). With the grace, a
    decision a crash interrupted is finished within grace + interval (≤ 30 s by default)."""
    reconcile_grace_seconds: float = Field(default=20.0, ge=0)
    """Sweeps and `opsbot reconcile` leave pending write records and approvals left deciding
    younger than this alone (they may still be running on another instance): keep it above
    the longest write, retries included."""
    audit_max_payload_bytes: int = Field(default=2048, ge=256)
    """Audit argument summaries larger than this (JSON bytes, after redaction) are stored as
    a hash."""
    card_platforms: list[Literal["slack", "teams"]] = Field(default_factory=list)
    """JSON list of chat platforms on which every approval's card is shown, whichever platform
    it was requested on (e.g. ["slack", "teams"] when opsbot serves both). The first decision
    wins and every copy shows it. Empty: a card only on the requester's platform."""
    notice_poll_seconds: float = Field(default=2.0, gt=0)
    """How often each adapter looks for approvals requested or decided on another platform
    (notices published in this process are delivered at once)."""


class SandboxSettings(Section):
    """Sandbox (`opsbot dev`): where the local sandbox listens; 0 picks any free port. It keeps
    its data in OPSBOT_DATA_DIR/sandbox and resets it on every start."""

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    """The web UI: the Slack emulator, which also serves the Web API to the bot."""
    app_port: int = Field(default=3000, ge=0, le=65535)
    """The Bolt app (/slack/events)."""
    idp_port: int = Field(default=8100, ge=0, le=65535)
    ticketing_port: int = Field(default=REFERENCE_PORTS["ticketing"], ge=0, le=65535)
    docs_port: int = Field(default=REFERENCE_PORTS["docs"], ge=0, le=65535)
    database_port: int = Field(default=REFERENCE_PORTS["database"], ge=0, le=65535)


def _loopback_hosts() -> list[str]:
    return ["127.0.0.1", "localhost", "[::1]"]


# A DNS name or IPv4 address, or a bracketed IPv6 address; optional :port.
_HOST_ENTRY = re.compile(
    r"^(?P<name>\[[0-9a-f:.]+\]|[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*)"
    r"(:(?P<port>\d{1,5}))?$"
)


def normalize_host_entry(entry: str) -> str:
    """An allowed ``Host`` entry, lower-cased; ``ValueError`` saying what is wrong."""
    value = entry.strip().lower()
    match = _HOST_ENTRY.match(value)
    if match is None or (match["port"] is not None and not 0 < int(match["port"]) < 65536):
        raise ValueError(
            f"{entry!r} is not a host name: give a name or address with an optional port, "
            "without scheme or path, e.g. tickets.internal or tickets.internal:8101"
        )
    return value


class ReferenceServerSettings(BaseModel):
    """One reference MCP server run by ``opsbot mcp NAME`` (``mcp_servers``).

    ``allowed_hosts``: the ``Host`` names it answers (others get 421): a name or address, with
    ``:port`` for that port only, without for any port. Default loopback; behind a proxy or as
    a Kubernetes service list the name it is reached by, e.g.
    ``OPSBOT_REFERENCE_SERVERS__TICKETING__ALLOWED_HOSTS='["localhost","tickets.internal"]'``.
    """

    allowed_hosts: list[str] = Field(default_factory=_loopback_hosts, min_length=1)

    @field_validator("allowed_hosts")
    @classmethod
    def _plain_host_names(cls, hosts: list[str]) -> list[str]:
        return [normalize_host_entry(host) for host in hosts]


class ReferenceServersSettings(BaseModel):
    ticketing: ReferenceServerSettings = Field(default_factory=ReferenceServerSettings)
    docs: ReferenceServerSettings = Field(default_factory=ReferenceServerSettings)
    database: ReferenceServerSettings = Field(default_factory=ReferenceServerSettings)


# The proxy schemes opsbot's httpx connects through (SOCKS would need the socksio package).
PROXY_SCHEMES = ("http", "https")


class Settings(BaseSettings):
    """Everything opsbot can be configured with. See ``.env.example`` for each variable."""

    model_config = SettingsConfigDict(
        env_prefix="OPSBOT_",
        env_nested_delimiter="__",
        env_file=".env",
        extra="ignore",
        populate_by_name=True,
        use_attribute_docstrings=True,
    )

    data_dir: Path = Path(".opsbot")
    """Where the embedded SQLite database and other local state live."""
    database_url: str | None = None
    """The project's database: opsbot's tables, the LangGraph checkpointer, the job queue.
    Unset = SQLite in OPSBOT_DATA_DIR; for production postgresql://opsbot@db.internal/opsbot."""
    test_database_url: str = "postgresql://postgres@127.0.0.1:5432/test"
    """PostgreSQL server the test suite creates its throwaway databases on."""
    test_chromium: Path = Path("/usr/bin/chromium")
    """The Chromium the browser tests drive (Debian's `apt-get install chromium`); when it is
    missing they skip, or fail under CI=true."""
    test_crash_at: Literal["job_start", "tool_call", "before_card", "after_write"] | None = None
    """Test only, never in production: `opsbot slack` SIGKILLs itself when a turn reaches this
    point (infra/faults.py), for the kill-at-each-point durability test. Unset: off."""
    log_level: str = "INFO"
    log_format: Literal["console", "json"] = "console"
    """`console` (development) or `json` (production: one line with request_id, route,
    thread_id and a pseudonymous user; secrets scrubbed)."""
    observability: ObservabilitySettings = Field(default_factory=ObservabilitySettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)

    model: str = "demo"
    """Any init_chat_model("provider:model") string, e.g. openai:gpt-4.1; `demo` is the
    offline demo model (a few fixed phrasings, no API key)."""
    model_fallbacks: list[str] = Field(default_factory=list)
    """JSON list of fallback models tried in order when the primary fails."""
    tool_policy_path: Path | None = None
    """Tool policy YAML (read/write, approver group, sensitive, idempotent, max approval age);
    unset = the built-in one."""

    mcp_servers: list[McpServerSettings] = Field(default_factory=_default_mcp_servers)
    """JSON list of {"name", "url", "audience"}; name prefixes the server's tools. Default:
    the three reference servers on 8101-8103."""
    reference_servers: ReferenceServersSettings = Field(default_factory=ReferenceServersSettings)
    """The reference servers themselves (`opsbot mcp NAME`), not the servers opsbot talks to."""

    @field_validator("database_url")
    @classmethod
    def _is_a_database_url(cls, value: str | None) -> str | None:
        # Checked without SQLAlchemy (slow to import), so a typo is reported at once.
        if not value:
            return None
        scheme, sep, rest = value.partition("://")
        backend = scheme.split("+", 1)[0]
        if not sep or backend not in DATABASE_BACKENDS:
            raise ValueError("not a database URL: it must start with postgresql:// or sqlite:///")
        if backend == "postgresql":
            try:
                urlsplit(value).port  # noqa: B018 - raises on a malformed port
            except ValueError:
                raise ValueError("the port in the URL is not a number") from None
        elif rest and not rest.startswith("/"):
            raise ValueError("a SQLite URL needs three slashes and a path: sqlite:///path/db")
        return value

    @field_validator("mcp_servers")
    @classmethod
    def _names_are_unique(cls, servers: list[McpServerSettings]) -> list[McpServerSettings]:
        # Tools are exposed as `<server>_<tool>`, and a server name has no "_": two servers'
        # tools can only share a name when the servers do (invariant 10). Within one server,
        # discovery keeps the first of two tools that share a model-visible name.
        names = [server.name for server in servers]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"MCP server name {name!r} is configured twice")
        return servers

    idp: IdpSettings = Field(default_factory=IdpSettings)
    broker: BrokerSettings = Field(default_factory=BrokerSettings)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    teams: TeamsSettings = Field(default_factory=TeamsSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    approvals: ApprovalSettings = Field(default_factory=ApprovalSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    runs: RunSettings = Field(default_factory=RunSettings)
    pools: PoolSettings = Field(default_factory=PoolSettings)

    slack_bot_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("SLACK_BOT_TOKEN", "slack_bot_token")
    )
    """From your Slack app (xoxb-...)."""
    slack_signing_secret: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("SLACK_SIGNING_SECRET", "slack_signing_secret")
    )
    """From your Slack app: verifies that requests come from Slack."""
    slack_app_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("SLACK_APP_TOKEN", "slack_app_token")
    )
    """Socket Mode only (xapp-...)."""
    slack_api_url: str = Field(
        default="https://slack.com/api/",
        validation_alias=AliasChoices("SLACK_API_URL", "slack_api_url"),
    )
    """Web API base URL; point it at a local fake or the sandbox emulator."""
    port: int = Field(default=3000, validation_alias=AliasChoices("PORT", "port"))
    """HTTP port of the web process (/slack/events, /metrics, /healthz, /readyz)."""
    https_proxy: str | None = Field(
        default=None, validation_alias=AliasChoices("HTTPS_PROXY", "https_proxy")
    )
    """Proxy for opsbot's MCP traffic to https:// servers (and their health probes), e.g.
    http://proxy.internal:3128. Unset: direct."""
    http_proxy: str | None = Field(
        default=None, validation_alias=AliasChoices("HTTP_PROXY", "http_proxy")
    )
    """Proxy for opsbot's MCP traffic to http:// servers. Unset: direct."""
    no_proxy: str = Field(default="", validation_alias=AliasChoices("NO_PROXY", "no_proxy"))
    """Comma-separated hosts reached directly despite a proxy: * (all), a host name (and its
    subdomains), an IP address or network (10.0.0.0/8), each optionally with :port."""
    ci: bool = Field(default=False, validation_alias=AliasChoices("CI", "ci"))
    """Set by CI systems; when true, PostgreSQL-backed and browser tests fail instead of
    skipping."""

    @field_validator("https_proxy", "http_proxy")
    @classmethod
    def _proxy_url(cls, value: str | None) -> str | None:
        # Checked here, once: a proxy httpx cannot use failed every MCP call of every run.
        if not value:
            return None
        parts = urlsplit(value)
        if parts.scheme not in PROXY_SCHEMES or not parts.hostname:
            raise ValueError(
                f"{value!r} is not a proxy URL: give one like http://proxy.internal:3128 "
                f"({', '.join(PROXY_SCHEMES)})"
            )
        return value

    @property
    def exchange_audiences(self) -> dict[str, str]:
        """Server name → audience, for the servers that get the user's exchanged token only."""
        return {s.name: s.audience for s in self.mcp_servers if s.auth == "exchange" and s.audience}

    @property
    def resolved_database_url(self) -> str:
        """The database URL to use: the configured one, or SQLite in the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'opsbot.db').as_posix()}"
