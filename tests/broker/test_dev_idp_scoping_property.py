"""Property: whatever scope string is requested, an exchange never grants more than the
user's groups grant on that resource (down-scoping only). In-process, many cases quickly;
``test_dev_idp.py`` checks the same over HTTP for every user and resource."""

from __future__ import annotations

import base64
import hashlib

import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.dev_idp import (
    ACCESS_TOKEN_TYPE,
    TOKEN_EXCHANGE_GRANT,
    DevClient,
    DevIdentityProvider,
    OAuthError,
    load_directory,
)

DIRECTORY = load_directory()
AUDIENCES = {name: f"https://{name}.example/mcp" for name in DIRECTORY.resources}
CLIENT = DevClient("opsbot", "secret")
PROVIDER = DevIdentityProvider(
    "https://idp.example", DIRECTORY, clients=[CLIENT], audiences=AUDIENCES
)
KNOWN = sorted(
    {s for r in DIRECTORY.resources.values() for g in r.scopes_by_group.values() for s in g}
)


def subject_token(user: str) -> str:
    verifier = "v" * 48
    challenge = (
        base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    )
    params = {
        "response_type": "code",
        "client_id": "opsbot",
        "redirect_uri": "http://127.0.0.1/cb",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    code = PROVIDER.issue_code(params, user)
    tokens = PROVIDER.grant_authorization_code(
        CLIENT, {"code": code, "redirect_uri": "http://127.0.0.1/cb", "code_verifier": verifier}
    )
    return str(tokens["access_token"])


TOKENS = {user: subject_token(user) for user in DIRECTORY.users}
scope_word = st.one_of(st.sampled_from(KNOWN), st.from_regex(r"[a-z:*]{1,12}", fullmatch=True))


@settings(max_examples=300, deadline=None)
@given(
    user=st.sampled_from(sorted(DIRECTORY.users)),
    resource=st.sampled_from(sorted(DIRECTORY.resources)),
    requested=st.lists(scope_word, max_size=6),
)
def test_exchange_never_grants_beyond_the_users_groups(
    user: str, resource: str, requested: list[str]
) -> None:
    granted = DIRECTORY.resources[resource].granted(DIRECTORY.users[user].groups)
    form = {
        "grant_type": TOKEN_EXCHANGE_GRANT,
        "subject_token": TOKENS[user],
        "subject_token_type": ACCESS_TOKEN_TYPE,
        "audience": AUDIENCES[resource],
        "scope": " ".join(requested),
    }
    expected = granted & set(requested) if requested else granted
    if not expected:
        with pytest.raises(OAuthError, match="invalid_scope"):
            PROVIDER.grant_token_exchange(CLIENT, form)
        return
    body = PROVIDER.grant_token_exchange(CLIENT, form)
    claims = jwt.decode(body["access_token"], options={"verify_signature": False})
    scopes = set(claims["scope"].split())
    assert scopes <= granted
    assert scopes == expected
