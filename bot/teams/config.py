"""The Teams adapter's configuration (built from ``infra.settings.TeamsSettings`` by the CLI)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.teams.auth import AuthConfig

BOT_FRAMEWORK_ISSUER = "https://api.botframework.com"
BOT_FRAMEWORK_METADATA = "https://login.botframework.com/v1/.well-known/openidconfiguration"


@dataclass(frozen=True, slots=True)
class TeamsBotConfig:
    app_id: str
    app_password: str
    tenant_id: str
    allowed_tenant_ids: frozenset[str] = frozenset()
    openid_metadata_url: str = BOT_FRAMEWORK_METADATA
    issuers: frozenset[str] = frozenset({BOT_FRAMEWORK_ISSUER})
    clock_leeway_seconds: int = 300
    token_url: str | None = None
    token_scope: str = "https://api.botframework.com/.default"  # noqa: S105 - a scope
    approvals_conversation_id: str | None = None
    # The serviceUrl to post approval cards through before any Teams activity has shown one
    # (a card mirrored from Slack right after start-up); unset: the latest one seen.
    approvals_service_url: str | None = None
    service_url_prefixes: tuple[str, ...] = ()
    max_body_bytes: int = 256 * 1024
    max_message_chars: int = 4000
    # Teams shows a typing indicator for about 3 s: it is sent again while a run goes on.
    typing_every_seconds: float = 3.0
    working_text: str = "Working on it…"
    # Personal chats stream the answer (Teams streams nowhere else); at most one stream
    # request per ``stream_every_seconds`` (the Agents SDK's pace on Teams).
    streaming: bool = True
    stream_every_seconds: float = 1.0
    # Teams SSO (the company's IdP is Entra): the Azure Bot OAuth connection's name; None =
    # the plain sign-in card. ``sso_resource``: the SSO tokens' audience (default
    # api://botid-<app id>, the manifest's webApplicationInfo.resource).
    sso_connection_name: str | None = None
    sso_resource: str | None = None

    @property
    def sso_audience(self) -> str:
        return self.sso_resource or f"api://botid-{self.app_id}"

    @property
    def served_tenants(self) -> frozenset[str]:
        """The bot's own tenant (always) and the allowed ones."""
        return self.allowed_tenant_ids | {self.tenant_id}

    @property
    def resolved_token_url(self) -> str:
        return (
            self.token_url
            or f"https://login.microsoftonline.com/{self.tenant_id}/oauth2/v2.0/token"
        )

    def auth_config(self) -> AuthConfig:
        return AuthConfig(
            app_id=self.app_id,
            openid_metadata_url=self.openid_metadata_url,
            issuers=self.issuers,
            tenant_ids=self.served_tenants,
            leeway_seconds=self.clock_leeway_seconds,
            service_url_prefixes=self.service_url_prefixes,
        )
