"""Who hears that an approval changed state, and writes before follow-up work in this process.

``ApprovalChanges``: listeners (a chat adapter republishing App Home) are told an approval's id
whenever its state changes here (created, decided, executing, finished). Each call runs in a
task of its own, so a slow or failing listener never delays or fails a decision.

``WritesFirst``: twenty approvals clicked at once share one event loop; when each click's
write competed with the others' follow-up work (resuming the run with a model step, telling
the requester, republishing Homes), every write waited for all of it. Follow-up work now
waits (at most ``max_wait`` seconds) while an approved write is on its way to its server
in this process, so the writes go first and the rest follows. That includes a write's own
bookkeeping once it went out (``Writing.done``): reading its outcome back from the audit
log, finishing the approval and recording that.

Example::

    changes = ApprovalChanges()
    stop_listening = changes.listen(adapter.approval_changed)
    changes.changed(approval.approval_id)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

log = logging.getLogger(__name__)

Listener = Callable[[str], Awaitable[None]]


class Writing:
    """One write's place among those on their way (``WritesFirst.writing``)."""

    def __init__(self, writes: WritesFirst) -> None:
        self._writes: WritesFirst | None = writes

    def release(self) -> None:
        """No longer on its way (once; the block's end releases it too)."""
        writes, self._writes = self._writes, None
        if writes is not None:
            writes._release()

    async def done(self) -> None:
        """The write went out: what follows it waits for the others' writes (bounded)."""
        writes = self._writes
        self.release()
        if writes is not None:
            await writes.after_writes()


class WritesFirst:
    def __init__(self, max_wait: float = 1.0) -> None:
        self._max_wait = max_wait
        self._writing = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[Writing]:
        """Around a decision's way to its write (the claim, the checks, the call)."""
        self._writing += 1
        self._idle.clear()
        place = Writing(self)
        try:
            yield place
        finally:
            place.release()

    def _release(self) -> None:
        self._writing -= 1
        if self._writing == 0:
            self._idle.set()

    async def after_writes(self, max_wait: float | None = None) -> None:
        """Wait until no write is on its way here (bounded: a steady stream of writes never
        holds follow-up work back for more than ``max_wait``, by default the one given)."""
        if self._writing == 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), max_wait or self._max_wait)


# How long listeners (App Home) may wait for writes on their way: longer than a resume may,
# since a Home is a view and twenty clicks' writes take seconds on a loaded machine.
LISTENER_MAX_WAIT_S = 15.0


class ApprovalChanges:
    def __init__(
        self, writes: WritesFirst | None = None, max_wait: float = LISTENER_MAX_WAIT_S
    ) -> None:
        self._listeners: list[Listener] = []
        self._writes = writes
        self._max_wait = max_wait
        self._tasks: set[asyncio.Task[None]] = set()

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(approval_id)`` on every change from now on; returns the undo."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def changed(self, approval_id: str) -> None:
        for listener in list(self._listeners):
            task = asyncio.get_running_loop().create_task(self._tell(listener, approval_id))
            self._tasks.add(task)  # held until done: a bare task may be collected mid-way
            task.add_done_callback(self._tasks.discard)

    async def _tell(self, listener: Listener, approval_id: str) -> None:
        if self._writes is not None:
            await self._writes.after_writes(self._max_wait)
        try:
            await listener(approval_id)
        except Exception as exc:  # a listener's failure is its own; the decision stands
            log.warning("approval change listener failed: %s", type(exc).__name__)
