"""Account links: a chat user → their company IdP subject and encrypted refresh token.

Refresh tokens are encrypted at rest with Fernet (``cryptography``); the SQL table holds only
ciphertext. Logins started from chat are kept as single-use pending records until the callback.

Example::

    store = SqlLinkStore(engine, TokenCipher(key))
    await store.save(AccountLink(chat_user, "alice", "alice@example.com", now), refresh_token)
    token = await store.refresh_token(chat_user)      # decrypted; None when not linked
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import ColumnElement, RowMapping, and_, delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from broker.errors import BrokerError
from broker.types import ChatUser
from infra.clock import Clock, utc_now
from infra.storage.schema import account_links, link_logins


@dataclass(frozen=True, slots=True)
class AccountLink:
    chat_user: ChatUser
    subject: str
    email: str
    created_at: datetime
    # When the IdP refused to refresh this link's sign-in: the person must reconnect. A new
    # link (``save``) starts unbroken.
    broken_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class PendingLogin:
    """A login started from chat: who asked, the PKCE verifier, and until when it is valid."""

    nonce: str
    chat_user: ChatUser
    code_verifier: str = field(repr=False)
    expires_at: datetime


class TokenCipher:
    """Fernet encryption for secrets at rest, with keys derived per purpose from one master key."""

    def __init__(self, master_key: str | bytes) -> None:
        raw = master_key.encode() if isinstance(master_key, str) else master_key
        if len(raw) < 32:
            raise ValueError("link encryption key must be at least 32 bytes (a Fernet key)")
        self._master = raw
        self._fernet = Fernet(self.derive(b"opsbot account links v1"))

    def derive(self, purpose: bytes) -> bytes:
        """A Fernet key for ``purpose``; different purposes never share a key."""
        okm = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(
            self._master
        )
        return base64.urlsafe_b64encode(okm)

    def encrypt(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode()).decode("ascii")

    def decrypt(self, ciphertext: str) -> str:
        try:
            return self._fernet.decrypt(ciphertext.encode("ascii")).decode()
        except (InvalidToken, ValueError) as exc:
            raise BrokerError("stored credential cannot be decrypted (wrong key?)") from exc

    @staticmethod
    def generate_key() -> str:
        return Fernet.generate_key().decode("ascii")

    def __repr__(self) -> str:
        fingerprint = hashlib.sha256(self._master).hexdigest()[:8]
        return f"TokenCipher(key_fingerprint={fingerprint})"


class LinkStore(Protocol):
    """Where account links and pending logins live. All methods are safe across instances."""

    async def save(self, link: AccountLink, refresh_token: str) -> None:
        """Create or replace the link of ``link.chat_user``."""
        ...

    async def get(self, chat_user: ChatUser) -> AccountLink | None: ...

    async def links_for_subject(self, subject: str) -> list[AccountLink]: ...

    async def refresh_token(self, chat_user: ChatUser) -> str | None:
        """The decrypted refresh token, or ``None`` when the chat user is not linked."""
        ...

    async def set_refresh_token(self, chat_user: ChatUser, refresh_token: str) -> None:
        """Replace the stored refresh token (after rotation); no-op when not linked."""
        ...

    async def delete(self, chat_user: ChatUser) -> bool:
        """Remove the link and its refresh token; ``True`` if there was one."""
        ...

    async def mark_broken(self, chat_user: ChatUser, at: datetime) -> None:
        """Record that the IdP refused the link's refresh (no-op when not linked)."""
        ...

    async def add_login(self, login: PendingLogin) -> None: ...

    async def take_login(self, nonce: str, now: datetime) -> PendingLogin | None:
        """Remove and return the pending login, if it exists and is unexpired (single use)."""
        ...


class MemoryLinkStore:
    """In-process link store for tests and single-process development (encrypts too)."""

    def __init__(self, cipher: TokenCipher, clock: Clock = utc_now) -> None:
        self._cipher = cipher
        self._clock = clock
        self._links: dict[ChatUser, tuple[AccountLink, str]] = {}
        self._logins: dict[str, tuple[PendingLogin, str]] = {}
        self._lock = asyncio.Lock()

    async def save(self, link: AccountLink, refresh_token: str) -> None:
        fresh = replace(link, broken_at=None)
        self._links[link.chat_user] = (fresh, self._cipher.encrypt(refresh_token))

    async def mark_broken(self, chat_user: ChatUser, at: datetime) -> None:
        entry = self._links.get(chat_user)
        if entry is not None:
            self._links[chat_user] = (replace(entry[0], broken_at=at), entry[1])

    async def get(self, chat_user: ChatUser) -> AccountLink | None:
        entry = self._links.get(chat_user)
        return entry[0] if entry else None

    async def links_for_subject(self, subject: str) -> list[AccountLink]:
        return [link for link, _ in self._links.values() if link.subject == subject]

    async def refresh_token(self, chat_user: ChatUser) -> str | None:
        entry = self._links.get(chat_user)
        return self._cipher.decrypt(entry[1]) if entry else None

    async def set_refresh_token(self, chat_user: ChatUser, refresh_token: str) -> None:
        entry = self._links.get(chat_user)
        if entry is not None:
            self._links[chat_user] = (entry[0], self._cipher.encrypt(refresh_token))

    async def delete(self, chat_user: ChatUser) -> bool:
        return self._links.pop(chat_user, None) is not None

    async def add_login(self, login: PendingLogin) -> None:
        sealed = replace(login, code_verifier="")
        self._logins[login.nonce] = (sealed, self._cipher.encrypt(login.code_verifier))

    async def take_login(self, nonce: str, now: datetime) -> PendingLogin | None:
        async with self._lock:
            entry = self._logins.pop(nonce, None)
            self._logins = {k: v for k, v in self._logins.items() if v[0].expires_at > now}
        if entry is None or entry[0].expires_at <= now:
            return None
        return replace(entry[0], code_verifier=self._cipher.decrypt(entry[1]))


def _user_columns(chat_user: ChatUser) -> dict[str, str]:
    """How ``account_links`` and ``link_logins`` store a chat user (their key in the first)."""
    return {
        "platform": chat_user.platform,
        "team_id": chat_user.team_id,
        "user_id": chat_user.user_id,
    }


def _user_of(row: RowMapping) -> ChatUser:
    return ChatUser(row["platform"], row["team_id"], row["user_id"])


def _link_of(row: RowMapping) -> AccountLink:
    return AccountLink(
        _user_of(row), row["subject"], row["email"], row["created_at"], row["broken_at"]
    )


def _key(chat_user: ChatUser) -> ColumnElement[bool]:
    return and_(
        *(account_links.c[name] == value for name, value in _user_columns(chat_user).items())
    )


class SqlLinkStore:
    """Links in the project's database (SQLite or PostgreSQL)."""

    def __init__(self, engine: AsyncEngine, cipher: TokenCipher, clock: Clock = utc_now) -> None:
        self._engine = engine
        self._cipher = cipher
        self._clock = clock

    async def save(self, link: AccountLink, refresh_token: str) -> None:
        now = self._clock()
        sealed = self._cipher.encrypt(refresh_token)
        async with self._engine.begin() as conn:
            # Delete + insert in one transaction: a portable upsert.
            await conn.execute(delete(account_links).where(_key(link.chat_user)))
            await conn.execute(
                account_links.insert().values(
                    **_user_columns(link.chat_user),
                    subject=link.subject,
                    email=link.email,
                    refresh_token_encrypted=sealed,
                    created_at=link.created_at,
                    updated_at=now,
                )
            )

    async def get(self, chat_user: ChatUser) -> AccountLink | None:
        async with self._engine.connect() as conn:
            row = (
                (await conn.execute(select(account_links).where(_key(chat_user))))
                .mappings()
                .first()
            )
        return None if row is None else _link_of(row)

    async def mark_broken(self, chat_user: ChatUser, at: datetime) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                account_links.update().where(_key(chat_user)).values(broken_at=at, updated_at=at)
            )

    async def links_for_subject(self, subject: str) -> list[AccountLink]:
        async with self._engine.connect() as conn:
            rows = (
                (
                    await conn.execute(
                        select(account_links)
                        .where(account_links.c.subject == subject)
                        .order_by(account_links.c.created_at)
                    )
                )
                .mappings()
                .all()
            )
        return [_link_of(r) for r in rows]

    async def refresh_token(self, chat_user: ChatUser) -> str | None:
        async with self._engine.connect() as conn:
            sealed = (
                await conn.execute(
                    select(account_links.c.refresh_token_encrypted).where(_key(chat_user))
                )
            ).scalar_one_or_none()
        return None if sealed is None else self._cipher.decrypt(sealed)

    async def set_refresh_token(self, chat_user: ChatUser, refresh_token: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                account_links.update()
                .where(_key(chat_user))
                .values(
                    refresh_token_encrypted=self._cipher.encrypt(refresh_token),
                    updated_at=self._clock(),
                )
            )

    async def delete(self, chat_user: ChatUser) -> bool:
        async with self._engine.begin() as conn:
            result = await conn.execute(delete(account_links).where(_key(chat_user)))
        return bool(result.rowcount)

    async def add_login(self, login: PendingLogin) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                link_logins.insert().values(
                    nonce=login.nonce,
                    **_user_columns(login.chat_user),
                    code_verifier_encrypted=self._cipher.encrypt(login.code_verifier),
                    expires_at=login.expires_at,
                )
            )

    async def take_login(self, nonce: str, now: datetime) -> PendingLogin | None:
        async with self._engine.begin() as conn:
            row = (
                (await conn.execute(select(link_logins).where(link_logins.c.nonce == nonce)))
                .mappings()
                .first()
            )
            if row is None:
                return None
            # The DELETE decides who wins when two callbacks race: only one removes the row.
            result = await conn.execute(delete(link_logins).where(link_logins.c.nonce == nonce))
            await conn.execute(delete(link_logins).where(link_logins.c.expires_at <= now))
        if not result.rowcount or row["expires_at"] <= now:
            return None
        return PendingLogin(
            nonce=nonce,
            chat_user=_user_of(row),
            code_verifier=self._cipher.decrypt(row["code_verifier_encrypted"]),
            expires_at=row["expires_at"],
        )


async def linked_chat_users(engine: AsyncEngine, limit: int = 500) -> list[ChatUser]:
    """The chat users with an account link in this database, oldest first (at most ``limit``):
    the people whose App Home may list an approval. Reads no token."""
    c = account_links.c
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(c.platform, c.team_id, c.user_id).order_by(c.created_at).limit(limit)
            )
        ).all()
    return [ChatUser(r.platform, r.team_id, r.user_id) for r in rows]
