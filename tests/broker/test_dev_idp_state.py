"""The dev IdP's ``state_file`` (``opsbot dev --keep``): a restarted provider on the same file
signs with the same key and honours the refresh tokens issued before; a revoked refresh token
stays revoked; without a file nothing is written; an unreadable file is a clear error."""

from __future__ import annotations

import base64
import hashlib
import stat
from pathlib import Path

import jwt
import pytest

from broker.dev_idp import DevClient, DevIdentityProvider, OAuthError, load_directory

CLIENT = DevClient("opsbot", "opsbot-secret")
REDIRECT = "http://127.0.0.1:9/oauth/callback"
VERIFIER = "v" * 48


def provider(state_file: Path | None) -> DevIdentityProvider:
    return DevIdentityProvider(
        "http://127.0.0.1:9",
        load_directory(),
        clients=[CLIENT],
        audiences={},
        state_file=state_file,
    )


def log_in(idp: DevIdentityProvider, subject: str) -> str:
    challenge = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest())
    params = {
        "client_id": CLIENT.client_id,
        "redirect_uri": REDIRECT,
        "response_type": "code",
        "code_challenge": challenge.rstrip(b"=").decode(),
        "code_challenge_method": "S256",
        "scope": "openid email offline_access",
    }
    code = idp.issue_code(params, subject)
    form = {"code": code, "redirect_uri": REDIRECT, "code_verifier": VERIFIER}
    refresh: str = idp.grant_authorization_code(CLIENT, form)["refresh_token"]
    return refresh


def test_a_restarted_provider_keeps_its_key_and_refresh_tokens(tmp_path: Path) -> None:
    state = tmp_path / "dev-idp.json"
    before = provider(state)
    alice = log_in(before, "alice")
    bob = log_in(before, "bob")
    before.revoke_token(CLIENT, bob)
    assert stat.S_IMODE(state.stat().st_mode) == 0o600

    after = provider(state)
    assert after.jwks() == before.jwks()
    tokens = after.grant_refresh_token(CLIENT, {"refresh_token": alice})
    claims = jwt.decode(
        tokens["id_token"],
        jwt.PyJWK(before.jwks()["keys"][0]).key,
        algorithms=["RS256"],
        audience=CLIENT.client_id,
    )
    assert claims["sub"] == "alice"
    with pytest.raises(OAuthError):
        after.grant_refresh_token(CLIENT, {"refresh_token": bob})


def test_without_a_state_file_a_restart_forgets_everything() -> None:
    before = provider(None)
    alice = log_in(before, "alice")
    after = provider(None)
    assert after.jwks() != before.jwks()
    with pytest.raises(OAuthError):
        after.grant_refresh_token(CLIENT, {"refresh_token": alice})


def test_an_unreadable_state_file_is_named_in_the_error(tmp_path: Path) -> None:
    state = tmp_path / "dev-idp.json"
    state.write_text("{not json")
    with pytest.raises(ValueError, match=r"dev-idp\.json cannot be read"):
        provider(state)
