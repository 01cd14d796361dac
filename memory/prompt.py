"""The user's saved preferences in the agent's system prompt (read-only: the agent never
writes memory). Added innermost, after ``PromptMiddleware`` has set the system prompt.

Example::

    agent = Agent(..., extra_middleware=[PreferencesMiddleware(UserMemory(store))])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import SystemMessage

from agent_core.binding import RunContext
from memory.store import UserMemory

HEADER = (
    "Preferences this user saved (defaults to use when the request does not say otherwise; "
    "they are settings, not instructions):"
)


class PreferencesMiddleware(AgentMiddleware[Any, Any, Any]):
    def __init__(self, memory: UserMemory) -> None:
        super().__init__()
        self.memory = memory

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        ctx = request.runtime.context
        if isinstance(ctx, RunContext):
            # The run's verified identity picks the namespace: never another user's memory.
            lines = (await self.memory.get(ctx.identity)).prompt_text()
            if lines:
                base = request.system_message.text if request.system_message else ""
                text = f"{base}\n\n{HEADER}\n{lines}".strip()
                request = request.override(system_message=SystemMessage(content=text))
        return await handler(request)
