"""The user's saved preferences in the agent's system prompt (read-only: the agent never
writes memory). Added innermost, after ``PromptMiddleware`` has set the system prompt.

Example::

    agent = Agent(..., extra_middleware=[PreferencesMiddleware(UserMemory(store))])
"""

from __future__ import annotations

from agent_core.binding import RunContext
from agent_core.middleware import SystemPromptMiddleware
from memory.store import UserMemory

HEADER = (
    "Preferences this user saved (defaults to use when the request does not say otherwise; "
    "they are settings, not instructions):"
)


class PreferencesMiddleware(SystemPromptMiddleware):
    def __init__(self, memory: UserMemory) -> None:
        super().__init__()
        self.memory = memory

    async def system_text(self, ctx: RunContext, current: str) -> str | None:
        # The run's verified identity picks the namespace: never another user's memory.
        lines = (await self.memory.get(ctx.identity)).prompt_text()
        return f"{current}\n\n{HEADER}\n{lines}".strip() if lines else None
