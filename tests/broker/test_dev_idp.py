"""The dev IdP over real HTTP: discovery, login, token exchange claims, scoping, revocation."""

from __future__ import annotations

from datetime import timedelta
from itertools import chain
from typing import Any

import httpx
import jwt
import pytest

from broker.dev_idp import ACCESS_TOKEN_TYPE, TOKEN_EXCHANGE_GRANT, TokenRules, parse_directory
from broker.errors import TokenVerificationError
from broker.oidc import OidcProvider
from infra.clock import ManualClock
from infra.tls import shared_ssl_context
from testing.identity import RunningIdp, login_user, start_dev_idp

EXCHANGED_CLAIMS = {"iss", "sub", "aud", "scope", "exp", "iat", "jti", "client_id", "act", "groups"}


async def exchange(
    idp: RunningIdp,
    subject_token: str,
    *,
    auth: tuple[str, str] | None = None,
    http: httpx.AsyncClient | None = None,
    **form: str,
) -> httpx.Response:
    data = {
        "grant_type": TOKEN_EXCHANGE_GRANT,
        "subject_token": subject_token,
        "subject_token_type": ACCESS_TOKEN_TYPE,
        **form,
    }
    auth = auth or (idp.client_id, idp.client_secret)
    if http is not None:
        return await http.post(idp.token_url, data=data, auth=auth)
    async with httpx.AsyncClient(verify=shared_ssl_context()) as own:
        return await own.post(idp.token_url, data=data, auth=auth)


def claims_of(token: str) -> dict[str, Any]:
    decoded: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return decoded


async def test_discovery_and_jwks_are_served(dev_idp: RunningIdp) -> None:
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        doc = (await http.get(dev_idp.discovery_url)).json()
        jwks = (await http.get(doc["jwks_uri"])).json()
    assert doc["issuer"] == dev_idp.issuer
    assert TOKEN_EXCHANGE_GRANT in doc["grant_types_supported"]
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert jwks["keys"][0]["kty"] == "RSA"
    assert "d" not in jwks["keys"][0]  # public half only


async def test_login_through_the_page_gives_verifiable_tokens(dev_idp: RunningIdp) -> None:
    tokens = await login_user(dev_idp, "carol")
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        provider = OidcProvider(dev_idp.issuer, http)
        id_claims = await provider.verify(tokens.id_token, audience=dev_idp.client_id)
    assert id_claims["sub"] == "carol"
    assert id_claims["email"] == "carol@example.com"
    assert set(id_claims["groups"]) == {"team-platform", "ticket-leads", "sre"}
    assert tokens.refresh_token


async def test_login_page_lists_every_demo_user(dev_idp: RunningIdp) -> None:
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        page = await http.get(
            f"{dev_idp.issuer}/authorize",
            params={
                "response_type": "code",
                "client_id": "opsbot",
                "redirect_uri": "http://127.0.0.1:9/cb",
                "code_challenge": "x" * 43,
                "code_challenge_method": "S256",
            },
        )
    assert page.status_code == 200
    assert "development" in page.text.lower()
    for user in ("alice", "bob", "carol", "dave", "erin", "mallory"):
        assert f'value="{user}"' in page.text


async def test_authorize_refuses_unregistered_redirect_and_missing_pkce(
    dev_idp: RunningIdp,
) -> None:
    base = {"response_type": "code", "client_id": "opsbot", "code_challenge_method": "S256"}
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        evil = await http.get(
            f"{dev_idp.issuer}/authorize",
            params={**base, "redirect_uri": "https://evil.example/cb", "code_challenge": "x" * 43},
        )
        no_pkce = await http.get(
            f"{dev_idp.issuer}/authorize",
            params={**base, "redirect_uri": "http://127.0.0.1:9/cb"},
        )
    assert evil.status_code == 400
    assert "location" not in evil.headers
    assert no_pkce.status_code == 400


async def test_wrong_pkce_verifier_and_code_replay_are_refused(dev_idp: RunningIdp) -> None:
    from testing.identity import _challenge, sign_in_at_login_page

    verifier = "v" * 50
    query = httpx.QueryParams(
        response_type="code",
        client_id="opsbot",
        redirect_uri="http://127.0.0.1:9/cb",
        scope="openid offline_access",
        code_challenge=_challenge(verifier),
        code_challenge_method="S256",
    )
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        reply = await sign_in_at_login_page(http, f"{dev_idp.issuer}/authorize?{query}", "alice")
        form = {
            "grant_type": "authorization_code",
            "code": reply["code"],
            "redirect_uri": "http://127.0.0.1:9/cb",
        }
        auth = (dev_idp.client_id, dev_idp.client_secret)
        wrong = await http.post(
            dev_idp.token_url, data={**form, "code_verifier": "w" * 50}, auth=auth
        )
        replay = await http.post(
            dev_idp.token_url, data={**form, "code_verifier": verifier}, auth=auth
        )
    assert wrong.json()["error"] == "invalid_grant"
    # The failed attempt consumed the code: single use, whatever the outcome.
    assert replay.json()["error"] == "invalid_grant"


async def test_refresh_token_grant_issues_a_new_access_token(dev_idp: RunningIdp) -> None:
    tokens = await login_user(dev_idp, "dave")
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        response = await http.post(
            dev_idp.token_url,
            data={"grant_type": "refresh_token", "refresh_token": tokens.refresh_token},
            auth=(dev_idp.client_id, dev_idp.client_secret),
        )
    assert response.status_code == 200
    assert claims_of(response.json()["access_token"])["sub"] == "dave"


async def test_exchanged_token_has_exactly_the_specified_claims(dev_idp: RunningIdp) -> None:
    tokens = await login_user(dev_idp, "bob")
    response = await exchange(dev_idp, tokens.access_token, audience=dev_idp.audience("ticketing"))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["issued_token_type"] == ACCESS_TOKEN_TYPE
    claims = claims_of(body["access_token"])
    assert set(claims) == EXCHANGED_CLAIMS
    assert claims["iss"] == dev_idp.issuer
    assert claims["sub"] == "bob"
    assert claims["aud"] == dev_idp.audience("ticketing")
    assert claims["act"] == {"sub": "opsbot"}
    assert claims["client_id"] == "opsbot"
    assert set(claims["groups"]) == {"team-payments", "ticket-leads"}
    assert set(claims["scope"].split()) == {"tickets:read", "tickets:write"}
    assert jwt.get_unverified_header(body["access_token"])["typ"] == "at+jwt"


async def test_token_for_server_a_fails_verification_for_server_b(dev_idp: RunningIdp) -> None:
    tokens = await login_user(dev_idp, "alice")
    body = (
        await exchange(dev_idp, tokens.access_token, audience=dev_idp.audience("ticketing"))
    ).json()
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        provider = OidcProvider(dev_idp.issuer, http)
        assert (
            await provider.verify(body["access_token"], audience=dev_idp.audience("ticketing"))
        )["sub"] == "alice"
        with pytest.raises(TokenVerificationError, match="audience"):
            await provider.verify(body["access_token"], audience=dev_idp.audience("docs"))
        # The same with plain pyjwt and the IdP's published key, as any resource server would.
        key = jwt.PyJWKSet.from_dict((await http.get(dev_idp.jwks_url)).json()).keys[0]
    with pytest.raises(jwt.InvalidAudienceError):
        jwt.decode(
            body["access_token"], key, algorithms=["RS256"], audience=dev_idp.audience("docs")
        )


async def test_expired_token_fails_verification() -> None:
    clock = ManualClock()
    async with start_dev_idp(clock=clock) as idp:
        tokens = await login_user(idp, "alice")
        body = (await exchange(idp, tokens.access_token, audience=idp.audience("docs"))).json()
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            provider = OidcProvider(idp.issuer, http, clock=clock)
            await provider.verify(body["access_token"], audience=idp.audience("docs"))
            clock.advance(body["expires_in"])
            with pytest.raises(TokenVerificationError, match="expired"):
                await provider.verify(body["access_token"], audience=idp.audience("docs"))


async def test_token_minted_in_the_past_fails_plain_pyjwt_verification() -> None:
    clock = ManualClock()
    clock.advance(-3 * 3600)  # the IdP lives three hours ago: its 5-minute tokens are stale
    async with start_dev_idp(clock=clock) as idp:
        tokens = await login_user(idp, "alice")
        body = (await exchange(idp, tokens.access_token, audience=idp.audience("docs"))).json()
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            key = jwt.PyJWKSet.from_dict((await http.get(idp.jwks_url)).json()).keys[0]
    with pytest.raises(jwt.ExpiredSignatureError):
        jwt.decode(body["access_token"], key, algorithms=["RS256"], audience=idp.audience("docs"))


async def test_expired_subject_token_is_not_exchanged() -> None:
    clock = ManualClock()
    async with start_dev_idp(
        clock=clock, rules=TokenRules(access_token_ttl=timedelta(minutes=10))
    ) as idp:
        tokens = await login_user(idp, "alice")
        clock.advance(600)
        response = await exchange(idp, tokens.access_token, audience=idp.audience("docs"))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"


@pytest.mark.parametrize(
    ("access_ttl", "exchange_ttl"),
    [(timedelta(minutes=2), timedelta(minutes=5)), (timedelta(hours=1), timedelta(minutes=5))],
)
async def test_exchanged_exp_never_exceeds_the_subject_tokens(
    access_ttl: timedelta, exchange_ttl: timedelta
) -> None:
    clock = ManualClock()
    async with start_dev_idp(
        clock=clock, rules=TokenRules(access_token_ttl=access_ttl, exchange_ttl=exchange_ttl)
    ) as idp:
        tokens = await login_user(idp, "carol")
        subject_exp = claims_of(tokens.access_token)["exp"]
        step = int(access_ttl.total_seconds()) // 12
        for i in range(12):
            clock.advance(step if i else 0)
            response = await exchange(idp, tokens.access_token, audience=idp.audience("database"))
            claims = claims_of(response.json()["access_token"])
            assert claims["exp"] <= subject_exp
            assert claims["exp"] <= claims["iat"] + exchange_ttl.total_seconds()
        assert claims["exp"] == subject_exp  # near the end, the subject token's exp binds


ALL_SCOPES = sorted(
    {"tickets:read", "tickets:write", "docs:read", "db:read", "db:query", "admin:all"}
)


async def test_no_user_ever_receives_a_scope_their_groups_do_not_grant(
    dev_idp: RunningIdp,
) -> None:
    directory = dev_idp.provider.directory
    requests = [[], ALL_SCOPES, *([s] for s in ALL_SCOPES)]
    http = httpx.AsyncClient(verify=shared_ssl_context())
    for user in directory.users.values():
        tokens = await login_user(dev_idp, user.subject)
        for name, resource in directory.resources.items():
            granted = resource.granted(user.groups)
            for requested in requests:
                response = await exchange(
                    dev_idp,
                    tokens.access_token,
                    http=http,
                    audience=dev_idp.audience(name),
                    **({"scope": " ".join(requested)} if requested else {}),
                )
                expected = granted & set(requested) if requested else granted
                if not expected:
                    assert response.status_code == 400, (user.subject, name, requested)
                    assert response.json()["error"] == "invalid_scope"
                    continue
                got = set(claims_of(response.json()["access_token"])["scope"].split())
                assert got == expected, (user.subject, name, requested)
                assert got <= granted
    await http.aclose()
    # Spot checks that the directory is what the team relies on.
    erin = await login_user(dev_idp, "erin")
    write = await exchange(
        dev_idp, erin.access_token, audience=dev_idp.audience("ticketing"), scope="tickets:write"
    )
    assert write.json()["error"] == "invalid_scope"
    alice = await login_user(dev_idp, "alice")
    query = await exchange(
        dev_idp, alice.access_token, audience=dev_idp.audience("database"), scope="db:read db:query"
    )
    assert claims_of(query.json()["access_token"])["scope"] == "db:read"


async def test_exchange_requires_client_authentication(dev_idp: RunningIdp) -> None:
    tokens = await login_user(dev_idp, "alice")
    target = {"audience": dev_idp.audience("docs")}
    wrong = await exchange(dev_idp, tokens.access_token, auth=("opsbot", "nope"), **target)
    assert wrong.status_code == 401
    assert wrong.json()["error"] == "invalid_client"
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        anonymous = await http.post(
            dev_idp.token_url,
            data={
                "grant_type": TOKEN_EXCHANGE_GRANT,
                "subject_token": tokens.access_token,
                "subject_token_type": ACCESS_TOKEN_TYPE,
                **target,
            },
        )
        posted = await http.post(
            dev_idp.token_url,
            data={
                "grant_type": TOKEN_EXCHANGE_GRANT,
                "subject_token": tokens.access_token,
                "subject_token_type": ACCESS_TOKEN_TYPE,
                "client_id": dev_idp.client_id,
                "client_secret": dev_idp.client_secret,
                **target,
            },
        )
    assert anonymous.status_code == 401
    assert posted.status_code == 200  # client_secret_post


async def test_exchanged_token_cannot_be_exchanged_again(dev_idp: RunningIdp) -> None:
    tokens = await login_user(dev_idp, "alice")
    first = (await exchange(dev_idp, tokens.access_token, audience=dev_idp.audience("docs"))).json()
    again = await exchange(dev_idp, first["access_token"], audience=dev_idp.audience("ticketing"))
    assert again.status_code == 400
    assert again.json()["error"] == "invalid_grant"


async def test_target_by_resource_parameter_and_one_target_only(dev_idp: RunningIdp) -> None:
    tokens = await login_user(dev_idp, "alice")
    by_resource = await exchange(
        dev_idp, tokens.access_token, resource=dev_idp.audience("ticketing")
    )
    assert claims_of(by_resource.json()["access_token"])["aud"] == dev_idp.audience("ticketing")
    two = await exchange(
        dev_idp,
        tokens.access_token,
        audience=dev_idp.audience("ticketing"),
        resource=dev_idp.audience("docs"),
    )
    unknown = await exchange(dev_idp, tokens.access_token, audience="http://elsewhere/mcp")
    assert two.json()["error"] == "invalid_target"
    assert unknown.json()["error"] == "invalid_target"


async def test_revoked_user_gets_no_more_tokens(dev_idp: RunningIdp) -> None:
    tokens = await login_user(dev_idp, "mallory")
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        refused = await http.post(f"{dev_idp.issuer}/admin/users/mallory/revoke")
        assert refused.status_code == 401  # the admin endpoint needs its token
    await dev_idp.revoke("mallory")
    ex = await exchange(dev_idp, tokens.access_token, audience=dev_idp.audience("docs"))
    assert ex.status_code == 400
    assert ex.json()["error"] == "invalid_grant"
    assert "revoked" in ex.json()["error_description"]
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        refresh = await http.post(
            dev_idp.token_url,
            data={"grant_type": "refresh_token", "refresh_token": tokens.refresh_token},
            auth=(dev_idp.client_id, dev_idp.client_secret),
        )
    assert refresh.json()["error"] == "invalid_grant"
    await dev_idp.restore("mallory")
    again = await exchange(dev_idp, tokens.access_token, audience=dev_idp.audience("docs"))
    assert again.status_code == 200


async def test_directory_revoked_flag_blocks_login_and_exchange(dev_idp: RunningIdp) -> None:
    directory = parse_directory(
        {
            "users": {"zed": {"name": "Zed", "email": "z@example.com", "groups": ["team-x"]}},
            "resources": {"docs": {"scopes": {"team-x": ["docs:read"]}}},
        }
    )
    revoked = parse_directory(
        {
            "users": {"zed": {"email": "z@example.com", "groups": ["team-x"], "revoked": True}},
            "resources": {"docs": {"scopes": {"team-x": ["docs:read"]}}},
        }
    )
    assert not directory.users["zed"].revoked
    assert revoked.users["zed"].revoked
    from broker.dev_idp import DevClient, DevIdentityProvider

    provider = DevIdentityProvider(
        "http://127.0.0.1:1",
        revoked,
        clients=[DevClient("opsbot", "s")],
        audiences={"docs": "http://d/mcp"},
    )
    assert provider.is_revoked("zed")


def test_directory_file_parses_with_the_documented_users() -> None:
    from broker.dev_idp import load_directory

    directory = load_directory()
    assert set(directory.users) == {"alice", "bob", "carol", "dave", "erin", "mallory"}
    assert directory.teams("carol") == {"platform"}
    assert directory.resources["database"].granted({"sre"}) == {"db:query"}
    assert list(chain.from_iterable(directory.resources)) != []


async def test_pkce_values_outside_rfc_7636_are_refused_not_a_500(dev_idp: RunningIdp) -> None:
    """A challenge or a verifier with a character RFC 7636 does not allow (a non-ASCII one
    made the token endpoint's comparison fail: a 500) is an OAuth error."""
    from testing.identity import _challenge, sign_in_at_login_page

    base = {
        "response_type": "code",
        "client_id": "opsbot",
        "redirect_uri": "http://127.0.0.1:9/cb",
        "code_challenge_method": "S256",
    }
    auth = (dev_idp.client_id, dev_idp.client_secret)
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        for challenge in ("é" * 43, "x" * 42, "x" * 42 + "="):
            page = await http.get(
                f"{dev_idp.issuer}/authorize", params={**base, "code_challenge": challenge}
            )
            assert page.status_code == 400, challenge
        query = httpx.QueryParams({**base, "code_challenge": _challenge("v" * 50)})
        reply = await sign_in_at_login_page(http, f"{dev_idp.issuer}/authorize?{query}", "alice")
        form = {"grant_type": "authorization_code", "redirect_uri": base["redirect_uri"]}
        wrong = await http.post(
            dev_idp.token_url,
            data={**form, "code": reply["code"], "code_verifier": "é" * 50},
            auth=auth,
        )
    assert (wrong.status_code, wrong.json()["error"]) == (400, "invalid_grant")
