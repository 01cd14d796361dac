"""Work per key, once at a time (App Home republishing, a Home's audience).

Asked again for a key while its work runs, the work runs once more afterwards (it reads the
latest state then): a burst of asks is one or two runs, never one per ask, and never two at
once for the same key.

Example::

    homes = OnceAtATime[ChatUser]()
    await homes.run(chat_user, publish_home)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class OnceAtATime(Generic[K]):
    def __init__(self) -> None:
        self._running: set[K] = set()
        self._again: set[K] = set()

    async def run(self, key: K, work: Callable[[K], Awaitable[None]]) -> None:
        if key in self._running:
            self._again.add(key)  # the run under way goes once more
            return
        self._running.add(key)
        try:
            while True:
                self._again.discard(key)
                await work(key)
                if key not in self._again:
                    return
        finally:
            self._running.discard(key)
