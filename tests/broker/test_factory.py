"""Building the identity service from opsbot's Settings; the refresh-token key."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from broker import (
    ChatUser,
    LocalIdentityService,
    RemoteBroker,
    TokenCipher,
    load_link_cipher,
    open_identity_service,
)
from infra.settings import BrokerSettings, IdpSettings, McpServerSettings, Settings
from infra.tls import shared_ssl_context
from testing.identity import (
    SERVICE_SECRET,
    BrokerHarness,
    RunningIdp,
    serve_broker_service,
    sign_in_at_login_page,
)


def settings_for(idp: RunningIdp, tmp_path: Path, **broker: object) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None,
        data_dir=tmp_path,
        idp=IdpSettings(
            issuer=idp.issuer,
            client_id=idp.client_id,
            client_secret=idp.client_secret,  # type: ignore[arg-type]
            client_auth_method="client_secret_post",
        ),
        broker=BrokerSettings(**broker),  # type: ignore[arg-type]
        mcp_servers=[
            McpServerSettings(name=name, url=aud, audience=aud)
            for name, aud in idp.provider.audiences.items()
        ],
    )


def test_dev_key_is_generated_once_into_the_data_dir(tmp_path: Path) -> None:
    first = load_link_cipher(None, tmp_path)
    key_file = tmp_path / "link-encryption.key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    second = load_link_cipher(None, tmp_path)
    assert second.decrypt(first.encrypt("secret")) == "secret"
    configured = TokenCipher.generate_key()
    with pytest.raises(Exception, match="decrypted"):
        load_link_cipher(configured, tmp_path).decrypt(first.encrypt("secret"))


def test_a_short_key_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        TokenCipher("short")


async def test_inprocess_identity_service_from_settings(
    dev_idp: RunningIdp, tmp_path: Path, engine: AsyncEngine
) -> None:
    settings = settings_for(dev_idp, tmp_path, link_encryption_key=TokenCipher.generate_key())
    async with open_identity_service(settings, engine) as service:
        assert isinstance(service, LocalIdentityService)
        chat_user = ChatUser("slack", "T9", "U9")
        import httpx

        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            reply = await sign_in_at_login_page(http, await service.link_url(chat_user), "bob")
        await service.linking.complete(reply["state"], reply["code"], iss=reply.get("iss"))
        bob = await service.resolve(chat_user)
        assert bob is not None
        token = await service.get_token(bob, "ticketing")
        assert token.audience == dev_idp.audience("ticketing")


async def test_remote_identity_service_from_settings(
    identity_broker: BrokerHarness, tmp_path: Path
) -> None:
    alice = await identity_broker.link("alice")
    async with serve_broker_service(identity_broker) as server:
        settings = settings_for(
            identity_broker.idp,
            tmp_path,
            mode="remote",
            service_url=server.base_url,
            service_secret=SERVICE_SECRET,
        )
        async with open_identity_service(settings) as service:
            assert isinstance(service, RemoteBroker)
            token = await service.get_token(alice, "docs")
    assert token.scopes == {"docs:read"}


async def test_oauth_mode_servers_get_a_per_user_oauth_service_on_the_database(
    dev_idp: RunningIdp, tmp_path: Path, engine: AsyncEngine
) -> None:
    """An ``auth: oauth`` server (configured client or DCR) makes the in-process identity
    service carry McpOAuthService with the SQL token store and the configured callback."""
    from broker.mcp_tokens import SqlMcpTokenStore
    from infra.settings import McpOAuthClient

    plain = settings_for(dev_idp, tmp_path, link_encryption_key=TokenCipher.generate_key())
    async with open_identity_service(plain, engine) as service:
        assert isinstance(service, LocalIdentityService)
        assert service.mcp_oauth is None  # no oauth server: nothing to connect

    settings = plain.model_copy(
        update={
            "mcp_servers": [
                *plain.mcp_servers,
                McpServerSettings(
                    name="tickets",
                    url="http://127.0.0.1:9/mcp",
                    auth="oauth",
                    oauth=McpOAuthClient(client_id="opsbot", scopes=["tickets:read"]),
                ),
                McpServerSettings(name="wiki", url="http://127.0.0.1:9/wiki", auth="oauth"),
            ],
            "broker": plain.broker.model_copy(
                update={"mcp_oauth_callback_url": "https://opsbot.example/oauth/mcp/callback"}
            ),
        }
    )
    async with open_identity_service(settings, engine) as service:
        assert isinstance(service, LocalIdentityService)
        oauth = service.mcp_oauth
        assert oauth is not None
        assert oauth.redirect_uri == "https://opsbot.example/oauth/mcp/callback"
        assert isinstance(oauth._store, SqlMcpTokenStore)
        assert sorted(oauth._servers) == ["tickets", "wiki"]
        assert oauth._servers["tickets"].client == McpOAuthClient(
            client_id="opsbot", scopes=["tickets:read"]
        )
        assert oauth._servers["wiki"].client is None  # dynamic registration


def test_an_oauth_client_needs_auth_oauth() -> None:
    from infra.settings import McpOAuthClient

    with pytest.raises(ValueError, match="needs auth 'oauth'"):
        McpServerSettings(
            name="t", url="http://x/mcp", audience="a", oauth=McpOAuthClient(client_id="c")
        )
