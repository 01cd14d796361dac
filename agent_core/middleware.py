"""Tool-call middleware: bind the run's tools, map failures to messages, record the model.

Failures are classified (see ``agent_core.errors``):

- 401: the broker's token is invalidated, the session reopened with a fresh token and the
  call retried once (tenacity); a second refusal becomes a message naming the missing access.
- 403, revoked or unlinked access: a message naming the missing access; nothing is written.
- the tool's own error (bad arguments, unknown key): an error message with the server's text,
  so the model can fix its arguments.
- a timeout on a write: the outcome is unknown; the model is told to check with a read tool.
- transient failures of idempotent reads are retried (``ToolRetryMiddleware``, inside this
  one); what is left becomes a message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

from agent_core import errors
from agent_core.binding import RunContext
from agent_core.mcp_failures import one_line
from agent_core.texts import Outcome, note, tool_note
from infra.retries import retried

ToolHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]

WRITE_TIMEOUT_TEXT = (
    "The call to {tool} timed out: its outcome is unknown — it may or may not have been "
    "applied. Check with a read tool before retrying."
)


def _context(request: ToolCallRequest) -> RunContext:
    ctx = request.runtime.context
    if not isinstance(ctx, RunContext):
        raise RuntimeError("opsbot tools need a RunContext in the runtime context")
    return ctx


def error_message(
    request: ToolCallRequest, text: str, *, people: str = "", outcome: Outcome = "not_run"
) -> ToolMessage:
    """An error result: ``text`` for the model; ``people`` (and the call's ``outcome``) beside
    it for anyone shown what happened (see ``agent_core.texts``)."""
    call = request.tool_call
    return ToolMessage(
        content=text,
        name=call["name"],
        tool_call_id=call["id"],
        status="error",
        response_metadata=note(outcome, people or f"{call['name']} was not run.", args=_ran(call)),
    )


def _ran(call: Any) -> dict[str, Any]:
    """The arguments a call ran with, for records people read (no idempotency key)."""
    return {k: v for k, v in dict(call.get("args") or {}).items() if k != "idempotency_key"}


def _access_text(ctx: RunContext, server: str, detail: str) -> str:
    return (
        f"Access denied: {ctx.identity.subject} has no usable access to the {server} server "
        f"({detail}). Nothing was executed there. Tell the user which access is missing; do "
        "not retry."
    )


def _executed(
    request: ToolCallRequest, result: ToolMessage | Command[Any]
) -> ToolMessage | Command[Any]:
    """Mark a result that came back from the server: what ran (the arguments after any
    approver's edit, without the idempotency key) and whether it succeeded."""
    if not isinstance(result, ToolMessage) or tool_note(result) is not None:
        return result
    args = _ran(request.tool_call)
    if result.status == "error":
        people = f"{request.tool_call['name']} failed."
        return result.model_copy(update={"response_metadata": note("failed", people, args=args)})
    metadata = {**(result.response_metadata or {}), **note("succeeded", args=args)}
    return result.model_copy(update={"response_metadata": metadata})


class BindRunMiddleware(AgentMiddleware[Any, Any, Any]):
    """Innermost: runs the call with the tool bound to this run's own MCP session.

    The compiled graph holds template tools shared by every run; the run's context (from
    LangGraph's runtime, passed explicitly) hands over the tool converted for this run's
    session, so no credential or session is ever shared between runs.
    """

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command[Any]:
        template = request.tool
        meta = (template.metadata or {}) if template is not None else {}
        server, mcp_name = meta.get("server"), meta.get("mcp_name")
        if not isinstance(server, str) or not isinstance(mcp_name, str):
            return await handler(request)
        tool = await _context(request).sessions.tool(server, mcp_name)
        response = await handler(dataclasses.replace(request, tool=tool))
        return _plain(response)


def _plain(response: ToolMessage | Command[Any]) -> ToolMessage | Command[Any]:
    # The adapters return content blocks and ``{"structured_content": ...}``; the rest of
    # opsbot (PII scan, sources, approval cards) reads text content and the structured
    # result itself, as the MCP server sent them.
    if not isinstance(response, ToolMessage):
        return response
    content = response.content
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    if (
        isinstance(content, list)
        and len(blocks) == len(content)
        and all(b.get("type") == "text" for b in blocks)
    ):
        response.content = "\n".join(str(b.get("text", "")) for b in blocks)
    artifact = response.artifact
    if isinstance(artifact, dict) and set(artifact) == {"structured_content"}:
        response.artifact = artifact["structured_content"]
    return response


def _is_refused_token(exc: BaseException) -> bool:
    return isinstance(exc, errors.ToolAuthError) and exc.status == 401


class ToolErrorMapper(AgentMiddleware[Any, Any, Any]):
    """Turns tool failures into error ``ToolMessage``s the model can act on."""

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command[Any]:
        ctx = _context(request)
        name = request.tool_call["name"]
        if request.tool is None:
            return error_message(request, self._unknown_tool_text(ctx, name))
        server = str((request.tool.metadata or {}).get("server", ""))

        async def refresh(_: Any) -> None:
            await ctx.sessions.refresh(server)

        try:
            # One refresh: the cached token may have expired or been revoked upstream.
            once_refreshed = AsyncRetrying(
                stop=stop_after_attempt(2),
                retry=retry_if_exception(_is_refused_token),
                before_sleep=refresh,
                reraise=True,
            )
            return _executed(request, await retried(once_refreshed, handler, request))
        except errors.ToolCallError as exc:
            # Its traceback runs through some twenty layers (tenacity, LangGraph's tool node,
            # the adapters), and frames among them hold the exception (tenacity's outcome, a
            # future): each failed call left ~700 objects in a reference cycle for the next
            # full collection, which stalls the ack thread too. The model reads the message.
            _forget_frames(exc)
            is_write = ctx.policy.classify(name).is_write
            return _failure_message(request, ctx, exc, name, server, is_write)

    @staticmethod
    def _unknown_tool_text(ctx: RunContext, name: str) -> str:
        for server in ctx.unavailable:
            if name.startswith(f"{server}_"):
                return (
                    f"The {server} server is unavailable right now, so {name} cannot run. "
                    "Tell the user; do not retry."
                )
        return f"{name} is not an available tool. Use only the tools you were given."


def _forget_frames(exc: BaseException) -> None:
    """Drop the tracebacks of ``exc`` and of the exceptions it came from (handled: only its
    message is used), so the frames they pass through are freed at once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.__traceback__ = None
        current = current.__cause__ or current.__context__


def _failure_message(
    request: ToolCallRequest,
    ctx: RunContext,
    exc: errors.ToolCallError,
    name: str,
    server: str,
    is_write: bool,
) -> ToolMessage:
    """The error result for a call that failed with ``exc``: for the model and for people."""
    unknown: Outcome = "unknown" if is_write else "failed"
    match exc:
        case errors.ToolAuthError():
            detail = (
                "token refused even after a refresh"
                if exc.status == 401
                else "insufficient scope for this tool"
            )
            return error_message(
                request,
                _access_text(ctx, server, detail),
                people=f"the {server} server refused {name}: you have no access for it",
                outcome="failed",
            )
        case errors.ConnectRequiredError():
            return error_message(
                request,
                f"{name} was not run: {ctx.identity.subject} has not connected the {server} "
                "server yet. Tell the user to connect it, then ask again; do not retry.",
                people=f"{name} was not run: connect your {server} account first, then ask again",
            )
        case errors.CredentialError():
            return error_message(
                request,
                _access_text(ctx, server, str(exc)),
                people=f"{name} was not run: you have no usable access to the {server} server",
            )
        case errors.CredentialUnavailableError():
            return error_message(
                request,
                f"Could not get credentials for {server} right now (the identity service is "
                f"unreachable). {name} was not run; try again shortly.",
                people=f"{name} was not run: the identity service is unreachable right now",
            )
        case errors.ToolResultError():
            return error_message(
                request,
                f"{name} failed: {exc}",
                people=f"the {server} server refused {name}: {one_line(str(exc))}",
                outcome="failed",
            )
        case errors.ToolProtocolError():
            applied = " Whether it was applied is not known yet." if is_write else ""
            return error_message(
                request,
                f"{name} failed: {exc}.{applied} Do not retry; tell the user.",
                people=f"{server} sent a reply opsbot could not use for {name}"
                + ("; whether it was applied is not known yet" if is_write else ""),
                outcome=unknown,
            )
        case errors.ToolTimeoutError():
            if is_write:
                return error_message(
                    request,
                    WRITE_TIMEOUT_TEXT.format(tool=name),
                    people=f"{server} did not answer in time; whether {name} was applied is "
                    "not known yet",
                    outcome="unknown",
                )
            return error_message(
                request,
                f"{name} timed out on {server}; try again later.",
                people=f"{server} did not answer in time",
                outcome="failed",
            )
        case errors.ServerUnavailableError():
            return error_message(
                request,
                f"The {server} server is unavailable right now; {name} was not run.",
                people=f"{name} was not run: the {server} server is unavailable right now",
            )
        case errors.ToolTransientError():
            if is_write:
                return error_message(
                    request,
                    f"{exc}. "
                    + WRITE_TIMEOUT_TEXT.format(tool=name).replace("timed out", "failed"),
                    people=f"{server} failed to answer; whether {name} was applied is not "
                    "known yet",
                    outcome=unknown,
                )
            return error_message(
                request,
                f"{name} failed on {server}: {exc}. Try again later.",
                people=f"{server} failed to answer",
                outcome="failed",
            )
        case errors.ToolCallError():
            return error_message(
                request, f"{name} failed: {exc}", people=f"{name} failed", outcome=unknown
            )


def is_transient(exc: Exception) -> bool:
    """Retry filter for ``ToolRetryMiddleware``: only clearly transient failures."""
    return isinstance(
        exc, errors.ToolTransientError | errors.ToolTimeoutError | errors.CredentialUnavailableError
    )


class ModelRecorder(AgentMiddleware[Any, Any, Any]):
    """Records which model served each call (innermost: after fallbacks chose one)."""

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        response = await handler(request)
        ctx = request.runtime.context
        if isinstance(ctx, RunContext):
            ctx.models_used.append(model_name(request.model))
        return response


def model_name(model: Any) -> str:
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    llm_type = getattr(model, "_llm_type", None)
    return str(llm_type) if llm_type else type(model).__name__


class SystemPromptMiddleware(AgentMiddleware[Any, Any, Any]):
    """Rewrites the system prompt of each model call of a run: ``system_text`` gets the
    run's context and the prompt so far and returns the new one (``None`` keeps it)."""

    async def system_text(self, ctx: RunContext, current: str) -> str | None:
        raise NotImplementedError

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        from langchain_core.messages import SystemMessage

        ctx = request.runtime.context
        if isinstance(ctx, RunContext):
            current = request.system_message.text if request.system_message else ""
            text = await self.system_text(ctx, current)
            if text is not None:
                request = request.override(system_message=SystemMessage(content=text))
        return await handler(request)


class PromptMiddleware(SystemPromptMiddleware):
    """Sets the run's system prompt: the user, the servers and which of them are down."""

    def __init__(self, servers: list[str]) -> None:
        super().__init__()
        self.servers = servers

    async def system_text(self, ctx: RunContext, current: str) -> str | None:
        from agent_core.prompt import system_prompt

        return system_prompt(ctx.identity.subject, self.servers, ctx.unavailable)
