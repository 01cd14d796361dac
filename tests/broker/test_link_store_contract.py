"""The LinkStore contract, on memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from broker import BrokerError, ChatUser
from broker.links import (
    AccountLink,
    LinkStore,
    MemoryLinkStore,
    PendingLogin,
    SqlLinkStore,
    TokenCipher,
)
from infra.storage import create_engine
from infra.storage.schema import account_links, link_logins

BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
ALICE = ChatUser("slack", "T1", "U-alice")
BOB = ChatUser("slack", "T1", "U-bob")
REFRESH = "refresh-token-of-alice-0123456789"


@pytest.fixture
def cipher() -> TokenCipher:
    return TokenCipher(TokenCipher.generate_key())


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, cipher: TokenCipher) -> AsyncIterator[LinkStore]:
    if request.param == "memory":
        yield MemoryLinkStore(cipher)
        return
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    engine = create_engine(url)
    try:
        yield SqlLinkStore(engine, cipher)
    finally:
        await engine.dispose()


async def test_save_get_and_read_refresh_token(store: LinkStore) -> None:
    assert await store.get(ALICE) is None
    assert await store.refresh_token(ALICE) is None
    link = AccountLink(ALICE, "alice", "alice@example.com", NOW)
    await store.save(link, REFRESH)
    assert await store.get(ALICE) == link
    assert await store.refresh_token(ALICE) == REFRESH
    assert await store.get(BOB) is None


async def test_save_replaces_the_previous_link(store: LinkStore) -> None:
    await store.save(AccountLink(ALICE, "alice", "a@example.com", NOW), REFRESH)
    await store.save(AccountLink(ALICE, "bob", "b@example.com", NOW), "other")
    found = await store.get(ALICE)
    assert found is not None
    assert found.subject == "bob"
    assert await store.refresh_token(ALICE) == "other"
    assert await store.links_for_subject("alice") == []


async def test_links_for_subject_and_rotation(store: LinkStore) -> None:
    teams = ChatUser("teams", "tenant", "aad-1")
    await store.save(AccountLink(ALICE, "alice", "a@example.com", NOW), REFRESH)
    await store.save(AccountLink(teams, "alice", "a@example.com", NOW + timedelta(seconds=1)), "x")
    assert [link.chat_user for link in await store.links_for_subject("alice")] == [ALICE, teams]
    await store.set_refresh_token(ALICE, "rotated")
    assert await store.refresh_token(ALICE) == "rotated"
    await store.set_refresh_token(BOB, "ignored")
    assert await store.get(BOB) is None


async def test_a_link_marked_broken_stays_broken_until_linked_again(store: LinkStore) -> None:
    link = AccountLink(ALICE, "alice", "alice@example.com", NOW)
    await store.save(link, REFRESH)
    await store.save(AccountLink(BOB, "bob", "bob@example.com", NOW), REFRESH)
    await store.mark_broken(ALICE, NOW + timedelta(minutes=5))
    broken = await store.get(ALICE)
    assert broken is not None
    assert broken.broken_at == NOW + timedelta(minutes=5)
    [listed] = await store.links_for_subject("alice")
    assert listed.broken_at == NOW + timedelta(minutes=5)
    other = await store.get(BOB)
    assert other is not None
    assert other.broken_at is None  # only that link
    await store.mark_broken(ChatUser("slack", "T1", "U-nobody"), NOW)  # not linked: no-op
    # Linking again (a new refresh token) clears it.
    await store.save(AccountLink(ALICE, "alice", "alice@example.com", NOW), "a-new-refresh-token")
    relinked = await store.get(ALICE)
    assert relinked is not None
    assert relinked.broken_at is None


async def test_delete_removes_link_and_refresh_token(store: LinkStore) -> None:
    await store.save(AccountLink(ALICE, "alice", "a@example.com", NOW), REFRESH)
    assert await store.delete(ALICE) is True
    assert await store.get(ALICE) is None
    assert await store.refresh_token(ALICE) is None
    assert await store.links_for_subject("alice") == []
    assert await store.delete(ALICE) is False


async def test_pending_login_is_single_use_and_expires(store: LinkStore) -> None:
    await store.add_login(PendingLogin("n1", ALICE, "verifier-1", NOW + timedelta(minutes=10)))
    await store.add_login(PendingLogin("n2", BOB, "verifier-2", NOW + timedelta(minutes=10)))
    taken = await store.take_login("n1", NOW)
    assert taken is not None
    assert (taken.chat_user, taken.code_verifier) == (ALICE, "verifier-1")
    assert await store.take_login("n1", NOW) is None  # replay
    assert await store.take_login("unknown", NOW) is None
    assert await store.take_login("n2", NOW + timedelta(minutes=10)) is None  # expired


async def test_concurrent_takes_of_one_login_have_one_winner(store: LinkStore) -> None:
    await store.add_login(PendingLogin("n", ALICE, "v", NOW + timedelta(minutes=5)))
    results = await asyncio.gather(*(store.take_login("n", NOW) for _ in range(10)))
    assert sum(r is not None for r in results) == 1


async def test_a_store_with_another_key_cannot_read_the_tokens(
    store: LinkStore, cipher: TokenCipher
) -> None:
    await store.save(AccountLink(ALICE, "alice", "a@example.com", NOW), REFRESH)
    other = TokenCipher(TokenCipher.generate_key())
    sealed = cipher.encrypt(REFRESH)
    with pytest.raises(BrokerError, match="decrypted"):
        other.decrypt(sealed)
    assert "key_fingerprint" in repr(cipher)


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_refresh_token_and_verifier_are_not_readable_in_the_database(
    request: pytest.FixtureRequest, backend: str, cipher: TokenCipher
) -> None:
    url = request.getfixturevalue(f"{backend}_url")
    engine = create_engine(url)
    try:
        store = SqlLinkStore(engine, cipher)
        await store.save(AccountLink(ALICE, "alice", "a@example.com", NOW), REFRESH)
        await store.add_login(PendingLogin("n", BOB, "the-pkce-verifier", NOW + timedelta(hours=1)))
        async with engine.connect() as conn:
            rows = [
                *(await conn.execute(select(account_links))).all(),
                *(await conn.execute(select(link_logins))).all(),
            ]
        dump = repr(rows)
        assert REFRESH not in dump
        assert "the-pkce-verifier" not in dump
        assert "alice" in dump  # the link itself is there, only the secrets are sealed
        assert await store.refresh_token(ALICE) == REFRESH
    finally:
        await engine.dispose()
