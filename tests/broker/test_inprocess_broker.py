"""The in-process broker against the dev IdP over HTTP: caching, single-flight, errors."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import httpx
import jwt
import pytest

from broker import (
    AccessRevokedError,
    BrokerUnavailableError,
    ChatUser,
    ExchangeFailedError,
    Identity,
    NotLinkedError,
)
from broker.dev_idp import TokenRules
from broker.links import MemoryLinkStore, TokenCipher
from infra.clock import ManualClock
from infra.serving import bind_socket, socket_url
from infra.tls import shared_ssl_context
from testing.identity import BrokerHarness, RunningIdp, open_broker, start_dev_idp


def exchanges_at_idp(idp: RunningIdp, subject: str, server: str) -> int:
    return idp.provider.stats.exchanges_by[(subject, idp.audience(server))]


async def test_token_is_minted_for_the_user_and_server(identity_broker: BrokerHarness) -> None:
    alice = await identity_broker.link("alice")
    token = await identity_broker.broker.get_token(alice, "ticketing")
    claims = jwt.decode(token.value, options={"verify_signature": False})
    assert token.audience == identity_broker.idp.audience("ticketing")
    assert claims["aud"] == token.audience
    assert claims["sub"] == "alice"
    assert claims["act"] == {"sub": "opsbot"}
    assert token.scopes == {"tickets:read", "tickets:write"}
    assert alice.groups == {"team-payments"}


async def test_hundred_concurrent_calls_make_one_exchange_then_ttl_and_invalidate_renew() -> None:
    clock = ManualClock()
    async with (
        start_dev_idp(clock=clock) as idp,
        # Exchanged tokens only: the sign-in itself is kept for the whole test (the dev IdP
        # checks iat against real time, which this manual clock runs ahead of).
        open_broker(
            idp,
            clock=clock,
            cache_margin=timedelta(seconds=30),
            groups_max_age=timedelta(hours=2),
        ) as harness,
    ):
        alice = await harness.link("alice")
        broker = harness.broker
        tokens = await asyncio.gather(*(broker.get_token(alice, "docs") for _ in range(100)))
        assert exchanges_at_idp(idp, "alice", "docs") == 1
        assert len({t.value for t in tokens}) == 1
        assert broker.metrics.exchanges == 1
        assert broker.metrics.cache_misses == 100  # all joined the one flight

        again = await broker.get_token(alice, "docs")
        assert again.value == tokens[0].value
        assert exchanges_at_idp(idp, "alice", "docs") == 1
        assert broker.metrics.cache_hits == 1

        # TTL = exp - margin: just before it the cache serves, at it a new exchange happens.
        ttl = (tokens[0].expires_at - clock()).total_seconds() - 30
        clock.advance(ttl - 1)
        assert (await broker.get_token(alice, "docs")).value == tokens[0].value
        assert exchanges_at_idp(idp, "alice", "docs") == 1
        clock.advance(1)
        renewed = await broker.get_token(alice, "docs")
        assert exchanges_at_idp(idp, "alice", "docs") == 2
        assert renewed.value != tokens[0].value

        await broker.invalidate(alice, "docs")
        after = await asyncio.gather(*(broker.get_token(alice, "docs") for _ in range(100)))
        assert exchanges_at_idp(idp, "alice", "docs") == 3
        assert {t.value for t in after} == {after[0].value} != {renewed.value}


async def test_cache_is_keyed_by_user_and_audience(identity_broker: BrokerHarness) -> None:
    alice = await identity_broker.link("alice")
    bob = await identity_broker.link("bob")
    broker = identity_broker.broker
    a_docs, a_tix, b_docs = await asyncio.gather(
        broker.get_token(alice, "docs"),
        broker.get_token(alice, "ticketing"),
        broker.get_token(bob, "docs"),
    )
    assert len({a_docs.value, a_tix.value, b_docs.value}) == 3
    assert jwt.decode(b_docs.value, options={"verify_signature": False})["sub"] == "bob"
    assert identity_broker.idp.provider.stats.exchanges == 3


async def test_after_revocation_next_exchange_fails_and_cache_stops_serving(
    identity_broker: BrokerHarness,
) -> None:
    idp = identity_broker.idp
    broker = identity_broker.broker
    carol = await identity_broker.link("carol")
    old = await broker.get_token(carol, "database")
    await idp.revoke("carol")
    await broker.invalidate(carol, "database")
    with pytest.raises(AccessRevokedError) as caught:
        await broker.get_token(carol, "database")
    assert "revoked" in str(caught.value)
    assert old.value not in str(caught.value)
    # Nor does any other server fall back to a stale token once its entry is invalidated.
    await broker.invalidate_user("carol")
    with pytest.raises(AccessRevokedError):
        await broker.get_token(carol, "ticketing")
    assert exchanges_at_idp(idp, "carol", "database") == 1
    # The first refusal came from the IdP and marked the link broken; the second is refused
    # from that mark, without asking the IdP again.
    assert broker.metrics.failures["AccessRevokedError"] == 1
    assert broker.metrics.failures["LinkBrokenError"] == 1
    link = await identity_broker.links.get(carol.chat_user)  # type: ignore[arg-type]
    assert link is not None
    assert link.broken_at is not None


async def test_revocation_during_subject_token_cache_still_refuses(
    identity_broker: BrokerHarness,
) -> None:
    """The subject token is cached; after revocation the IdP refuses the exchange itself."""
    broker = identity_broker.broker
    dave = await identity_broker.link("dave")
    await broker.get_token(dave, "docs")
    await identity_broker.idp.revoke("dave")
    with pytest.raises(AccessRevokedError):
        await broker.get_token(dave, "ticketing")


async def test_not_linked_unknown_server_and_no_access_are_clear_errors(
    identity_broker: BrokerHarness,
) -> None:
    broker = identity_broker.broker
    stranger = Identity("alice", ChatUser("slack", "T-TEST", "U-nobody"))
    with pytest.raises(NotLinkedError):
        await broker.get_token(stranger, "docs")
    with pytest.raises(NotLinkedError):
        await broker.get_token(Identity("nobody"), "docs")
    erin = await identity_broker.link("erin")
    with pytest.raises(ExchangeFailedError) as no_access:
        await broker.get_token(erin, "database")
    assert no_access.value.server == "database"
    assert "database" in str(no_access.value)
    with pytest.raises(ExchangeFailedError) as unknown:
        await broker.get_token(erin, "payroll")
    assert unknown.value.server == "payroll"
    # A chat user linked to alice cannot obtain tokens as someone else.
    alice = await identity_broker.link("alice")
    with pytest.raises(NotLinkedError):
        await broker.get_token(Identity("bob", alice.chat_user), "docs")


async def test_identity_without_chat_user_uses_the_subjects_link(
    identity_broker: BrokerHarness,
) -> None:
    await identity_broker.link("bob")
    token = await identity_broker.broker.get_token(Identity("bob"), "ticketing")
    assert jwt.decode(token.value, options={"verify_signature": False})["sub"] == "bob"


async def test_idp_unreachable_is_broker_unavailable() -> None:
    sock = bind_socket("127.0.0.1", 0)
    url = socket_url(sock)
    sock.close()  # nothing listens there now
    from broker.factory import open_inprocess_broker
    from broker.inprocess import ServerTarget
    from broker.links import AccountLink

    cipher = TokenCipher(TokenCipher.generate_key())
    links = MemoryLinkStore(cipher)
    chat_user = ChatUser("slack", "T", "U")
    from datetime import UTC, datetime

    await links.save(AccountLink(chat_user, "alice", "", datetime.now(UTC)), "rt")
    async with open_inprocess_broker(
        issuer=url,
        client_id="opsbot",
        client_secret="s",
        servers=[ServerTarget("docs", "http://127.0.0.1:8102/mcp")],
        links=links,
    ) as broker:
        with pytest.raises(BrokerUnavailableError):
            await broker.get_token(Identity("alice", chat_user), "docs")
        assert broker.metrics.failures["BrokerUnavailableError"] == 1


@pytest.mark.parametrize(
    ("auth_method", "target_param"),
    [("client_secret_post", "resource"), ("client_secret_basic", "audience")],
)
async def test_client_auth_method_and_target_parameter_are_configurable(
    dev_idp: RunningIdp, auth_method: str, target_param: str
) -> None:
    async with open_broker(
        dev_idp,
        auth_method=auth_method,  # type: ignore[arg-type]
        target_param=target_param,  # type: ignore[arg-type]
    ) as harness:
        alice = await harness.link("alice")
        token = await harness.broker.get_token(alice, "ticketing")
    assert token.audience == dev_idp.audience("ticketing")


async def test_received_token_with_wrong_audience_is_rejected(dev_idp: RunningIdp) -> None:
    # The broker asks by resource *name*; the IdP answers with the URI audience, which is not
    # what the broker expects: it must refuse the token instead of handing it out.
    async with open_broker(dev_idp, servers={"docs": "docs"}) as harness:
        alice = await harness.link("alice")
        with pytest.raises(ExchangeFailedError, match="audience"):
            await harness.broker.get_token(alice, "docs")


async def test_tokens_never_appear_in_logs_reprs_or_errors(
    identity_broker: BrokerHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    broker = identity_broker.broker
    alice = await identity_broker.link("alice")
    erin = await identity_broker.link("erin")
    token = await broker.get_token(alice, "docs")
    refresh = await identity_broker.links.refresh_token(alice.chat_user)  # type: ignore[arg-type]
    assert refresh
    errors: list[str] = []
    for call in (broker.get_token(erin, "database"), broker.get_token(alice, "nope")):
        try:
            await call
        except Exception as exc:
            errors.append(f"{exc!r} {exc}")
    await identity_broker.idp.revoke("alice")
    await broker.invalidate_user("alice")
    try:
        await broker.get_token(alice, "docs")
    except AccessRevokedError as exc:
        errors.append(f"{exc!r} {exc} {exc.__cause__!r} {exc.__context__!r}")
    texts = [caplog.text, repr(token), str(token), repr(broker), repr(identity_broker), *errors]
    for text in texts:
        assert token.value not in text
        assert refresh not in text
    assert len(errors) == 3


async def test_metrics_count_exchanges_hits_misses_and_failures(
    identity_broker: BrokerHarness,
) -> None:
    broker = identity_broker.broker
    assert broker.metrics.snapshot()["exchange_ms_p50"] is None
    raw = await identity_broker.token("bob", "ticketing")  # links bob, then one exchange
    assert jwt.decode(raw, options={"verify_signature": False})["sub"] == "bob"
    assert await identity_broker.token("bob", "ticketing") == raw  # cached, not re-linked
    erin = await identity_broker.link("erin")
    with pytest.raises(ExchangeFailedError):
        await broker.get_token(erin, "database")
    snap = broker.metrics.snapshot()
    assert (snap["exchanges"], snap["refreshes"]) == (1, 2)
    assert (snap["cache_hits"], snap["cache_misses"]) == (1, 2)
    assert snap["cache_hit_ratio"] == pytest.approx(1 / 3)
    assert snap["failures"] == {"ExchangeFailedError": 1}
    assert snap["exchange_ms_p50"] > 0
    assert snap["exchange_seconds_total"] > 0


async def test_rotated_refresh_token_is_stored_and_the_old_one_is_dead() -> None:
    async with (
        start_dev_idp(rules=TokenRules(rotate_refresh_tokens=True)) as idp,
        open_broker(idp) as harness,
    ):
        alice = await harness.link("alice")
        assert alice.chat_user is not None
        first = await harness.links.refresh_token(alice.chat_user)
        await harness.broker.get_token(alice, "docs")
        second = await harness.links.refresh_token(alice.chat_user)
        assert first
        assert second
        assert first != second
        await harness.broker.invalidate_user("alice")
        await harness.broker.get_token(alice, "ticketing")  # refreshes with the stored one
        assert idp.provider.stats.refreshes == 2
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            old = await http.post(
                idp.token_url,
                data={"grant_type": "refresh_token", "refresh_token": first},
                auth=(idp.client_id, idp.client_secret),
            )
        assert old.json()["error"] == "invalid_grant"


async def test_userinfo_answers_for_a_login_access_token(dev_idp: RunningIdp) -> None:
    from testing.identity import login_user

    tokens = await login_user(dev_idp, "erin")
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        ok = await http.get(
            f"{dev_idp.issuer}/userinfo",
            headers={"Authorization": f"Bearer {tokens.access_token}"},
        )
        bad = await http.get(f"{dev_idp.issuer}/userinfo", headers={"Authorization": "Bearer nope"})
    assert ok.json() == {
        "sub": "erin",
        "email": "erin@example.com",
        "name": "Erin Evans",
        "groups": ["contractors"],
    }
    assert bad.status_code == 401


async def test_a_fresh_resolve_reads_the_link_once_and_still_asks_the_idp(
    identity_broker: BrokerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A click's approver check (``resolve(fresh=True)``) refreshes the sign-in at the IdP
    each time, from the link it has just read: the link is not read a second time."""
    alice = await identity_broker.link("alice")
    assert alice.chat_user is not None
    links = identity_broker.links
    original = links.get
    reads: list[ChatUser] = []

    async def counted(chat_user: ChatUser) -> object:
        reads.append(chat_user)
        return await original(chat_user)

    monkeypatch.setattr(links, "get", counted)
    refreshes = identity_broker.idp.provider.stats.refreshes
    for _ in range(3):
        identity = await identity_broker.broker.resolve(alice.chat_user, fresh=True)
        assert identity is not None
        assert identity.groups == {"team-payments"}
    assert identity_broker.idp.provider.stats.refreshes == refreshes + 3  # asked each time
    assert reads == [alice.chat_user] * 3
