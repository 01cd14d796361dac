"""The ``state`` of a sign-in started from chat: one rule for account links
(``broker.linking``) and for connections to ``auth: oauth`` MCP servers
(``broker.mcp_oauth_flow``), which used to state it twice.

``start`` stores a single-use pending login (a nonce, the chat user, the PKCE verifier, valid
until ``now + ttl``) in the link store, so any instance can finish it, and returns the state: a
Fernet token (encrypted, signed, time-stamped) naming the nonce and the caller's fields.
``read`` refuses a state that opsbot did not issue, that was altered or that is older than
``ttl``; ``take`` spends the pending login, so a state works once.

Example::

    flow = LoginFlow(links, cipher, clock, ttl)          # one for both kinds of sign-in
    states = flow.states(b"opsbot link state v1", "login link")
    started = await states.start(chat_user, {"s": subject})   # started.state, .code_challenge
    fields = states.read(state)                               # {"n": nonce, "s": subject}
    pending = await states.take(fields["n"])                  # PendingLogin (its verifier)
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from cryptography.fernet import Fernet, InvalidToken

from broker.errors import InvalidStateError
from broker.links import LinkStore, PendingLogin, TokenCipher
from broker.types import ChatUser
from infra.clock import Clock, utc_now

# The state's field naming its pending login; ``start``'s caller cannot override it.
NONCE = "n"


def pkce_challenge(verifier: str) -> str:
    """The RFC 7636 S256 code challenge of ``verifier`` (every login opsbot starts uses it)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class StartedLogin:
    """What an authorization URL needs: the nonce, the ``state`` and the PKCE challenge."""

    nonce: str
    state: str
    code_challenge: str


@dataclass(frozen=True, slots=True)
class LoginFlow:
    """What every sign-in started from chat shares, account links and connections to
    ``auth: oauth`` servers alike: the link store (pending logins, and who is linked), the
    cipher their keys derive from, the clock and how long a state works. Built once (from
    the settings) and handed to both services, so the two cannot drift apart."""

    links: LinkStore
    cipher: TokenCipher
    clock: Clock = utc_now
    ttl: timedelta = timedelta(minutes=10)

    def states(self, purpose: bytes, link: str) -> LoginStates:
        """The states of one kind of sign-in; see ``LoginStates``."""
        return LoginStates(self, purpose, link)


class LoginStates:
    """Issues, checks and spends the states of one kind of sign-in (see the module doc)."""

    def __init__(self, flow: LoginFlow, purpose: bytes, link: str) -> None:
        """``purpose`` picks this kind's own key (``TokenCipher.derive``): a state of one kind
        never opens as another. ``link`` names the link in refusals a person reads."""
        self._logins = flow.links
        self._key = Fernet(flow.cipher.derive(purpose))
        self.ttl = flow.ttl
        self._clock = flow.clock
        self._link = link

    async def start(self, chat_user: ChatUser, fields: Mapping[str, str]) -> StartedLogin:
        """Store a pending login for ``chat_user`` and seal ``fields`` into its state."""
        now = self._clock()
        nonce, verifier = secrets.token_urlsafe(24), secrets.token_urlsafe(48)
        await self._logins.add_login(PendingLogin(nonce, chat_user, verifier, now + self.ttl))
        payload = json.dumps({**fields, NONCE: nonce}).encode()
        state = self._key.encrypt_at_time(payload, int(now.timestamp())).decode("ascii")
        return StartedLogin(nonce, state, pkce_challenge(verifier))

    def read(self, state: str) -> dict[str, str]:
        """The fields ``start`` sealed, with the nonce under ``NONCE``; does not spend it."""
        try:
            raw = self._key.decrypt(state.encode("ascii"))
            issued = self._key.extract_timestamp(state.encode("ascii"))
        except (InvalidToken, UnicodeEncodeError) as exc:
            raise InvalidStateError(
                f"the {self._link} was not issued by opsbot or was altered"
            ) from exc
        if self._clock().timestamp() - issued > self.ttl.total_seconds():
            raise InvalidStateError(f"the {self._link} has expired; ask opsbot for a new one")
        return {name: str(value) for name, value in json.loads(raw).items()}

    async def take(self, nonce: str) -> PendingLogin:
        """Spend the pending login ``nonce`` names (once: a second call is refused)."""
        pending = await self._logins.take_login(nonce, self._clock())
        if pending is None:
            raise InvalidStateError(
                f"the {self._link} was already used or has expired; ask opsbot for a new one"
            )
        return pending
