"""Approved write calls run on their own decision, outside the paused run.

A model step may propose several writes; each is approved or rejected on its own, and an
approved one runs at once instead of waiting for its siblings. The run itself resumes once
every call of the step is decided, and the calls that already ran must not run again: their
recorded results are fed back to the model instead (``RecordedResults``).

``run_call`` runs one call through the same tool-side path the graph's tool node uses
(``ToolErrorMapper`` → ``BindRunMiddleware`` → the run-bound MCP tool with the
``AuditInterceptor``: idempotency key, audit rows, bounded retry of keyed writes), so a call
run here is indistinguishable, for the server and the audit log, from one the graph ran.

Example::

    message = await run_call(ctx, template_tool, {"name": n, "args": a, "id": call_id})
    stored = dump_result(message)                 # JSON, kept with the approval
    ctx.recorded = {call_id: load_result(stored)} # on resume: fed back, not re-run
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolMessage, message_to_dict, messages_from_dict
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolRuntime
from langgraph.types import Command

from agent_core.binding import RunContext
from agent_core.middleware import BindRunMiddleware, ToolErrorMapper, ToolHandler

__all__ = [
    "ApprovedCall",
    "RecordedResults",
    "dump_result",
    "load_result",
    "result_note",
    "run_call",
]


@dataclass(frozen=True, slots=True)
class ApprovedCall:
    """One approved write of a thread's paused step, as its approval records it: ``args``
    are what the approver let run, ``proposed_args`` the model's (they differ after an edit);
    ``approval_id`` scopes its idempotency key."""

    thread_id: str
    approval_id: str
    call_id: str
    tool: str
    args: Mapping[str, Any]
    proposed_args: Mapping[str, Any]


def dump_result(message: ToolMessage) -> dict[str, Any]:
    """A tool result as JSON, to be stored with its approval."""
    return dict(message_to_dict(message))


def result_note(call_id: str, tool: str, text: str, *, ok: bool) -> dict[str, Any]:
    """A stored result for a call whose own result was lost (a crash after it ran): the
    model is told what the records say instead of the call being sent again."""
    message = ToolMessage(
        content=text, name=tool, tool_call_id=call_id, status="success" if ok else "error"
    )
    return dump_result(message)


def load_result(data: Mapping[str, Any]) -> ToolMessage:
    """The stored tool result (``dump_result``) as the message the model gets."""
    (message,) = messages_from_dict([dict(data)])
    if not isinstance(message, ToolMessage):
        raise ValueError("a recorded tool result must be a ToolMessage")
    return message


async def run_call(
    ctx: RunContext, template: BaseTool | None, call: Mapping[str, Any]
) -> ToolMessage:
    """Run one tool call for ``ctx``'s user as the tool node would, and return its result.

    Failures come back as error messages (``ToolErrorMapper``), never as exceptions, except
    for a bug outside the tool path.
    """
    tool_call = {"name": call["name"], "args": dict(call["args"]), "id": call["id"]}
    runtime: ToolRuntime[Any, Any] = ToolRuntime(
        state={"messages": []},
        context=ctx,
        config={},
        stream_writer=lambda _chunk: None,
        tool_call_id=str(call["id"]),
        store=None,
    )
    request = ToolCallRequest(
        tool_call=tool_call,  # type: ignore[arg-type]
        tool=template,
        state=runtime.state,
        runtime=runtime,
    )
    mapper, bind = ToolErrorMapper(), BindRunMiddleware()

    async def execute(req: ToolCallRequest) -> ToolMessage | Command[Any]:
        assert req.tool is not None
        args = {**req.tool_call["args"], "runtime": req.runtime}
        invoked = {**req.tool_call, "args": args, "type": "tool_call"}
        result = await req.tool.ainvoke(invoked)
        if isinstance(result, ToolMessage):
            return result
        return ToolMessage(content=str(result), name=req.tool_call["name"], tool_call_id=call["id"])

    async def bound(req: ToolCallRequest) -> ToolMessage | Command[Any]:
        return await bind.awrap_tool_call(req, execute)

    result = await mapper.awrap_tool_call(request, bound)
    if not isinstance(result, ToolMessage):  # opsbot's tools never answer with a Command
        raise TypeError(f"{call['name']} answered with {type(result).__name__}")
    return result


class RecordedResults(AgentMiddleware[Any, Any, Any]):
    """Feeds the model the recorded result of a call that already ran on its approval.

    Sits right inside the review middleware: a call with a result in the run's
    ``RunContext.recorded`` never reaches a tool or a server again on the resume.
    """

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command[Any]:
        ctx = request.runtime.context
        call_id = str(request.tool_call.get("id") or "")
        recorded = ctx.recorded.get(call_id) if isinstance(ctx, RunContext) else None
        if recorded is None:
            return await handler(request)
        return recorded.model_copy(update={"tool_call_id": call_id})
