"""``StopGuard``: a stopped run starts nothing more — no model step, no tool call.

The run's ``RunContext.stop`` (``agent_core.runs.RunStop``) is read before each model step
and before each tool call. A call already at its MCP server is not interrupted (it finishes
and is audited by ``AuditInterceptor``); calls not yet started are answered "not run" so
the thread's history stays well-formed for the next message, and the run ends.
"""

from __future__ import annotations

import logging
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from agent_core.binding import RunContext
from agent_core.guards import has_answer
from agent_core.middleware import ToolHandler, error_message
from agent_core.texts import note

log = logging.getLogger(__name__)

STOPPED_TEXT = "Not run: the user stopped this request. Do not retry it."
STOPPED_PEOPLE = "{tool} was not run: the request was stopped."


async def _stopped(ctx: Any) -> bool:
    return isinstance(ctx, RunContext) and ctx.stop is not None and await ctx.stop.requested()


async def _skip(ctx: RunContext, tool: str, args: Any) -> None:
    ctx.skipped.append(tool)
    if ctx.progress is None:
        return
    try:
        await ctx.progress.tool_call_skipped(tool, dict(args or {}))
    except Exception as exc:  # progress is a courtesy
        log.warning("progress listener failed: %s", type(exc).__name__)


class StopGuard(AgentMiddleware[Any, Any, Any]):
    """Ends a stopped run before its next model step, and answers its unstarted calls."""

    @hook_config(can_jump_to=["end"])
    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        if await _stopped(runtime.context):
            return {"jump_to": "end"}
        return None

    @hook_config(can_jump_to=["end"])
    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        # Stopped while the model was thinking: its proposals neither run nor go to review.
        ctx = runtime.context
        if not isinstance(ctx, RunContext) or not await _stopped(ctx):
            return None
        messages = list(state["messages"])
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        answers = []
        for call in last.tool_calls if last is not None else []:
            if has_answer(messages, call.get("id")):
                continue
            await _skip(ctx, call["name"], call.get("args"))
            answers.append(
                ToolMessage(
                    content=STOPPED_TEXT,
                    name=call["name"],
                    tool_call_id=call["id"],
                    status="error",
                    response_metadata=note(
                        "not_run", STOPPED_PEOPLE.format(tool=call["name"]), args=call["args"]
                    ),
                )
            )
        return {"messages": answers, "jump_to": "end"}

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command[Any]:
        ctx = request.runtime.context
        # A resume's calls are the ones an approver just approved: they run (Stop ends the
        # run before its next model step instead).
        resumed = isinstance(ctx, RunContext) and ctx.approval_id is not None
        if isinstance(ctx, RunContext) and not resumed and await _stopped(ctx):
            name = request.tool_call["name"]
            await _skip(ctx, name, request.tool_call.get("args"))
            return error_message(request, STOPPED_TEXT, people=STOPPED_PEOPLE.format(tool=name))
        return await handler(request)


__all__ = ["STOPPED_TEXT", "StopGuard"]
