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

import re
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class McpServerSettings(BaseModel):
    """One MCP server opsbot talks to: its name (the tool prefix), URL and token audience."""

    name: str
    url: str
    audience: str

    @field_validator("name")
    @classmethod
    def _name_is_identifier(cls, value: str) -> str:
        if not value.isidentifier():
            raise ValueError("server name must be a plain identifier (it prefixes tool names)")
        return value


class McpOAuthClient(BaseModel):
    """A client registered by hand at an MCP server's authorization server, for servers in
    ``oauth`` mode whose authorization server has no dynamic registration (RFC 7591). Meant
    to be embedded in a server's settings (e.g. as ``oauth_client``)."""

    client_id: str = Field(min_length=1)
    client_secret: SecretStr | None = None  # None: a public client (PKCE only)
    scopes: list[str] = Field(default_factory=list)  # default: the server's scopes_supported


def _default_mcp_servers() -> list[McpServerSettings]:
    return [
        McpServerSettings(
            name=name,
            url=f"http://127.0.0.1:{port}/mcp",
            audience=f"http://127.0.0.1:{port}/mcp",
        )
        for name, port in (("ticketing", 8101), ("docs", 8102), ("database", 8103))
    ]


class IdpSettings(BaseModel):
    """The company identity provider (the development IdP by default)."""

    issuer: str = "http://127.0.0.1:8100"
    client_id: str = "opsbot"
    client_secret: SecretStr = SecretStr("opsbot-dev-secret")
    # Keycloak names the target with `audience`, RFC 8707 servers with `resource`.
    exchange_target_param: Literal["audience", "resource"] = "audience"
    token_url: str | None = None  # default: from OIDC discovery
    directory_path: Path | None = None  # dev IdP only: users, teams, groups (YAML)
    client_auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"
    # Dev IdP only: bearer token for /admin/users/{sub}/revoke|restore (empty disables them).
    dev_admin_token: SecretStr | None = SecretStr("opsbot-dev-admin")
    # The login (docs/identity-providers.md has worked values for Okta, Entra ID, Keycloak).
    # `offline_access` asks for the refresh token the broker needs; some providers only honour
    # it with `prompt=consent`.
    scopes: list[str] = Field(
        default_factory=lambda: ["openid", "profile", "email", "offline_access"], min_length=1
    )
    prompt: str | None = None  # e.g. "consent" or "login consent"
    # Where the user's details are, in the ID token or at the userinfo endpoint. A dotted name
    # reads a nested claim (Keycloak: "realm_access.roles").
    groups_claim: str = "groups"
    email_claim: str = "email"
    name_claim: str = "name"
    # Ask the userinfo endpoint (from discovery) when a claim is missing from the ID token.
    userinfo_fallback: bool = True

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


class BrokerSettings(BaseModel):
    """The token broker: in-process by default, or a separate HTTP service."""

    mode: Literal["inprocess", "remote"] = "inprocess"
    service_url: str = "http://127.0.0.1:8099"
    service_secret: SecretStr = SecretStr("opsbot-dev-broker-secret")
    token_ttl_seconds: int = 300
    cache_margin_seconds: int = 30
    # Fernet key (urlsafe base64, 32 bytes) encrypting stored refresh tokens.
    link_encryption_key: SecretStr | None = None
    # Where the IdP sends users back after linking (the app's /oauth/callback).
    link_callback_url: str = "http://127.0.0.1:3000/oauth/callback"
    link_state_ttl_seconds: int = 600


class SlackSettings(BaseModel):
    approvals_channel: str = "ops-approvals"
    allowed_team_ids: list[str] = Field(default_factory=list)
    # Processed event ids are kept this long (Slack retries within minutes) and then pruned.
    event_retention_hours: int = 24
    # How long an Edit submission waits for the core before the modal closes (Slack: 3 s).
    submission_wait_seconds: float = Field(default=2.0, gt=0, lt=3)
    # Web API retries: on 429 (after Retry-After) and on 500/503.
    rate_limit_retries: int = 3
    server_error_retries: int = 2


class RunSettings(BaseModel):
    """Durable runs (``infra.jobs``): every accepted message is a job any instance runs."""

    # False: runs go back to in-process tasks (a restart loses runs in flight).
    durable: bool = True
    # Runs at once in this process, and per user across all instances.
    global_runs: int = Field(default=32, ge=1)
    per_user_runs: int = Field(default=2, ge=1)
    # A worker renews its runs' leases; a run whose lease ran out (crash) is taken over.
    lease_seconds: float = Field(default=30.0, gt=0)
    # How often an idle worker looks for runs enqueued by other instances.
    poll_seconds: float = Field(default=1.0, gt=0)


class ModelPrice(BaseModel):
    """What a model costs, in US dollars per million tokens (for the cost-per-request metric)."""

    input_per_million: float = Field(default=0.0, ge=0)
    output_per_million: float = Field(default=0.0, ge=0)


class ObservabilitySettings(BaseModel):
    """Metrics, traces and readiness (``opsbot.observability``)."""

    # OTLP/HTTP traces endpoint (e.g. http://collector:4318/v1/traces); unset = no export.
    otlp_endpoint: str | None = None
    service_name: str = "opsbot"
    # HMAC key for pseudonymous user ids in traces and logs (never the identity itself).
    pseudonym_key: SecretStr = SecretStr("opsbot-dev-pseudonym-key")
    model_prices: dict[str, ModelPrice] = Field(default_factory=dict)
    readiness_timeout_seconds: float = Field(default=2.0, gt=0)


class RetentionSettings(BaseModel):
    """``opsbot prune``: how long threads and the audit log are kept."""

    thread_days: int = Field(default=90, ge=1)  # since the thread's last checkpoint
    audit_days: int | None = Field(default=None, ge=1)  # None keeps the audit log forever


class MemorySettings(BaseModel):
    """User memory (preferences) in a LangGraph store."""

    enabled: bool = True


class AgentSettings(BaseModel):
    """Limits and thresholds of one agent run (see ``agent_core.AgentConfig``)."""

    run_model_call_limit: int = Field(default=12, ge=1)
    thread_model_call_limit: int = Field(default=200, ge=1)
    read_timeout_seconds: float = Field(default=20.0, gt=0)
    write_timeout_seconds: float = Field(default=30.0, gt=0)
    read_retries: int = Field(default=2, ge=0)
    summarize_trigger_tokens: int = Field(default=4000, ge=100)
    summarize_keep_messages: int = Field(default=20, ge=1)
    tool_selector_threshold: int = Field(default=15, ge=1)
    tool_selector_max_tools: int = Field(default=8, ge=1)
    bulk_write_threshold: int = Field(default=3, ge=2)
    health_check_interval_seconds: float = Field(default=10.0, gt=0)
    breaker_threshold: int = Field(default=3, ge=1)
    breaker_open_seconds: float = Field(default=30.0, gt=0)


class ApprovalSettings(BaseModel):
    """Approvals and the audit log (maximum ages per tool live in the tool policy)."""

    sweep_interval_seconds: float = Field(default=60.0, gt=0)
    reconcile_grace_seconds: float = Field(default=120.0, ge=0)
    audit_max_payload_bytes: int = Field(default=2048, ge=256)


class SandboxSettings(BaseModel):
    """``opsbot dev``: where the local sandbox listens (0 = any free port)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)  # the Slack emulator and its web UI
    app_port: int = Field(default=3000, ge=0, le=65535)  # the Bolt app (/slack/events)
    idp_port: int = Field(default=8100, ge=0, le=65535)
    ticketing_port: int = Field(default=8101, ge=0, le=65535)
    docs_port: int = Field(default=8102, ge=0, le=65535)
    database_port: int = Field(default=8103, ge=0, le=65535)


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


class Settings(BaseSettings):
    """Everything opsbot can be configured with. See ``.env.example`` for each variable."""

    model_config = SettingsConfigDict(
        env_prefix="OPSBOT_",
        env_nested_delimiter="__",
        env_file=".env",
        extra="ignore",
        populate_by_name=True,
    )

    data_dir: Path = Path(".opsbot")
    database_url: str | None = None
    test_database_url: str = "postgresql://postgres@127.0.0.1:5432/test"
    log_level: str = "INFO"
    log_format: Literal["console", "json"] = "console"
    observability: ObservabilitySettings = Field(default_factory=ObservabilitySettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)

    model: str = "demo"
    model_fallbacks: list[str] = Field(default_factory=list)
    tool_policy_path: Path | None = None

    mcp_servers: list[McpServerSettings] = Field(default_factory=_default_mcp_servers)
    # The reference servers themselves (`opsbot mcp NAME`), not the servers opsbot talks to.
    reference_servers: ReferenceServersSettings = Field(default_factory=ReferenceServersSettings)

    @field_validator("mcp_servers")
    @classmethod
    def _prefixes_cannot_collide(cls, servers: list[McpServerSettings]) -> list[McpServerSettings]:
        # Tools are exposed as `<server>_<tool>`. Within one server MCP tool names are unique,
        # so two prefixed names can only coincide when one server name plus "_" starts another
        # (`a` + `b_c` and `a_b` + `c`). Refusing such configurations at start-up makes a
        # collision impossible before any tool is discovered (invariant 10); discovery checks
        # again per run.
        names = [server.name for server in servers]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"MCP server name {name!r} is configured twice")
            clash = next((o for o in names if o != name and o.startswith(f"{name}_")), None)
            if clash is not None:
                raise ValueError(
                    f"MCP server names {name!r} and {clash!r} could give two tools one prefixed "
                    "name; rename one of them"
                )
        return servers

    idp: IdpSettings = Field(default_factory=IdpSettings)
    broker: BrokerSettings = Field(default_factory=BrokerSettings)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    approvals: ApprovalSettings = Field(default_factory=ApprovalSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    runs: RunSettings = Field(default_factory=RunSettings)

    slack_bot_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("SLACK_BOT_TOKEN", "slack_bot_token")
    )
    slack_signing_secret: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("SLACK_SIGNING_SECRET", "slack_signing_secret")
    )
    slack_app_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("SLACK_APP_TOKEN", "slack_app_token")
    )
    slack_api_url: str = Field(
        default="https://slack.com/api/",
        validation_alias=AliasChoices("SLACK_API_URL", "slack_api_url"),
    )
    port: int = Field(default=3000, validation_alias=AliasChoices("PORT", "port"))
    ci: bool = Field(default=False, validation_alias=AliasChoices("CI", "ci"))

    @property
    def resolved_database_url(self) -> str:
        """The database URL to use: the configured one, or SQLite in the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'opsbot.db').as_posix()}"
