"""Approved calls' MCP sessions, shared by one requester's calls for a few seconds.

Each approved write runs on its own (``Agent.execute``), one per decision. A session of its
own per call cost more than the call: a client, the ``initialize`` round trip and its
``initialized`` notification, the closing ``DELETE`` — about twice the call's own CPU in
opsbot and three times at the server. Twenty approvals of one requester clicked at once
opened twenty sessions at once. Here the calls borrow their requester's sessions
(``RunSessions``, one per server): the first opens them, the others use them meanwhile (an
MCP session takes concurrent requests), and they close once unused for ``idle_s``.

Never another user's: the key is the whole ``Identity`` (subject, chat user, email, groups),
so a changed identity gets sessions of its own. Before each call the borrower puts the
requester's current credential on the session (``RunSessions.recredential``): the token
minted fresh for this decision is the one sent.

Example::

    shared = SharedSessions(agent_sessions)
    async with shared.borrow(identity) as sessions:
        await sessions.recredential("ticketing")
        ...
    await shared.aclose()  # at shutdown
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from agent_core.sessions import RunSessions
from broker import Identity

# How long a requester's sessions stay open after their last approved call.
IDLE_S = 5.0


@dataclass
class _Lent:
    sessions: RunSessions
    loop: asyncio.AbstractEventLoop
    users: int = 0
    expiry: asyncio.TimerHandle | None = field(default=None, repr=False)


class SharedSessions:
    """``RunSessions`` per identity, lent to its approved calls and closed when idle."""

    def __init__(
        self, open_sessions: Callable[[Identity], RunSessions], idle_s: float = IDLE_S
    ) -> None:
        self._open = open_sessions
        self._idle_s = idle_s
        self._lent: dict[Identity, _Lent] = {}
        self._closing: set[asyncio.Task[None]] = set()

    @contextlib.asynccontextmanager
    async def borrow(self, identity: Identity) -> AsyncIterator[RunSessions]:
        """``identity``'s shared sessions for one call (opened lazily, per server)."""
        loop = asyncio.get_running_loop()
        lent = self._lent.get(identity)
        if lent is None or lent.loop is not loop:  # sessions belong to the loop that opened them
            lent = self._lent[identity] = _Lent(self._open(identity), loop)
        if lent.expiry is not None:
            lent.expiry.cancel()
            lent.expiry = None
        lent.users += 1
        try:
            yield lent.sessions
        finally:
            lent.users -= 1
            if lent.users == 0 and self._lent.get(identity) is lent:
                lent.expiry = loop.call_later(self._idle_s, self._expire, identity, lent)

    def _expire(self, identity: Identity, lent: _Lent) -> None:
        if lent.users or self._lent.get(identity) is not lent:
            return
        del self._lent[identity]
        self._close(lent)

    def _close(self, lent: _Lent) -> None:
        task = lent.loop.create_task(lent.sessions.aclose(), name="mcp:close-shared")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every shared session of this loop now, and wait for those closing."""
        loop = asyncio.get_running_loop()
        for identity, lent in list(self._lent.items()):
            if lent.loop is not loop:
                continue
            if lent.expiry is not None:
                lent.expiry.cancel()
            del self._lent[identity]
            self._close(lent)
        while here := [t for t in self._closing if t.get_loop() is loop]:
            await asyncio.gather(*here, return_exceptions=True)
