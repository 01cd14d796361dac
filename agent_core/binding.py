"""What one run hands its tools: the user, the run's sessions, idempotency keys and audit.

Nothing here is global. The run's ``RunContext`` travels in LangGraph's runtime context; the
run's middleware swaps each compiled template tool for the tool bound to the run's own MCP
session (``RunTools.tool``), and the adapters' interceptors receive the ``ToolRuntime``
(context and tool call id) with every call. Credentials stay in the run's sessions, never in
state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_mcp_adapters.interceptors import MCPToolCallRequest, MCPToolCallResult
from mcp.types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from agent_core.errors import (
    CredentialError,
    ServerUnavailableError,
    ToolAuthError,
    ToolCallError,
    ToolResultError,
    ToolTimeoutError,
    ToolTransientError,
)
from agent_core.mcp_failures import one_line
from agent_core.policy import ToolPolicy
from agent_core.tools import IDEMPOTENCY_ARG, ToolDefinition, prefixed
from broker import Identity
from infra.characters import LONE_SURROGATE, replace_in_strings
from infra.retries import retried

log = logging.getLogger(__name__)

ActingAs = Literal["user", "service", "anonymous"]


def idempotency_key(scope: str, tool_call_id: str) -> str:
    """Stable per tool call: a replayed or forked resume sends the same key again."""
    digest = hashlib.sha256(f"{scope}\x00{tool_call_id}".encode()).hexdigest()
    return f"opsbot-{digest[:40]}"


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """One tool call leaving the process (for the audit log). Never carries a token."""

    requester: str
    thread_id: str
    tool: str
    server: str
    kind: Literal["read", "write"]
    tool_call_id: str
    args: Mapping[str, Any]
    idempotency_key: str | None
    approval_id: str | None
    model: str = ""  # the model whose step proposed this call (empty on a resume's first call)
    # Whose credential the server saw: the requester's own token, opsbot's service secret
    # (``auth: static``) or nothing (``auth: none``).
    acting_as: ActingAs = "user"
    # When finished with an error: a short text for people on why (never the model's text).
    reason: str | None = None


class ToolObserver(Protocol):
    """Told before and after every tool call (the audit log's pending/outcome records)."""

    async def tool_call_started(self, event: ToolCallEvent) -> None: ...

    async def tool_call_finished(
        self, event: ToolCallEvent, outcome: str, latency_ms: float
    ) -> None: ...


class RunTools(Protocol):
    """The run's MCP sessions as its tools see them (``agent_core.sessions.RunSessions``)."""

    async def tool(self, server: str, name: str) -> BaseTool:
        """The LangChain tool for ``name`` on ``server``, bound to this run's session."""
        ...

    async def refresh(self, server: str) -> None:
        """After a 401: fresh credentials and a fresh session for ``server``."""
        ...

    def acting_as(self, server: str) -> ActingAs: ...

    async def call_again(self, request: MCPToolCallRequest) -> MCPToolCallResult:
        """Send ``request`` once more on a live session for its server (reopened when the
        last one died under the failed attempt); the transport guard applies as before."""
        ...


@dataclass
class RunContext:
    """What one run's tools need. Lives in the runtime context, never in checkpoints."""

    identity: Identity
    thread_id: str
    sessions: RunTools
    policy: ToolPolicy
    definitions: Mapping[str, ToolDefinition]
    approval_id: str | None = None
    unavailable: tuple[str, ...] = ()
    read_timeout: float = 20.0
    write_timeout: float = 30.0
    observer: ToolObserver | None = None
    models_used: list[str] = field(default_factory=list)
    calls: list[ToolCallEvent] = field(default_factory=list)
    # A keyed write whose server is unreachable is tried this often in all, with backoff.
    write_attempts: int = 3
    write_retry_initial_delay: float = 0.5
    write_retry_max_delay: float = 4.0
    # On a resume: results of calls that already ran on their own approval, by tool call
    # id; the model gets these instead of a second execution (``approved_calls``).
    recorded: Mapping[str, ToolMessage] = field(default_factory=dict)
    # Told of each call as it starts and ends (the chat adapter's live progress); unlike
    # the observer (audit), a failing listener never fails the call.
    progress: RunProgress | None = None
    # Checked before each model step and tool call: Stop ends the run there.
    stop: StopSignal | None = None
    # Calls that were never started because the run was stopped (prefixed tool names).
    skipped: list[str] = field(default_factory=list)


class RunProgress(ToolObserver, Protocol):
    """A run's live progress listener: every call as it starts and ends, and each call a
    Stop kept from starting."""

    async def tool_call_skipped(self, tool: str, args: Mapping[str, Any]) -> None: ...


class StopSignal(Protocol):
    """Whether the run was asked to stop (``agent_core.runs.RunStop``)."""

    async def requested(self) -> bool: ...


async def tell_progress(ctx: RunContext, event: ToolCallEvent, outcome: str | None) -> None:
    """Pass a call's start (``outcome`` None) or end to the run's progress listener."""
    if ctx.progress is None:
        return
    try:
        if outcome is None:
            await ctx.progress.tool_call_started(event)
        else:
            await ctx.progress.tool_call_finished(event, outcome, 0.0)
    except Exception as exc:  # progress is a courtesy; the call and its audit stand
        log.warning("progress listener failed: %s", type(exc).__name__)


# The server could not be reached (or failed transiently); a write is retried only when
# the idempotency key makes a second attempt safe.
_UNREACHABLE = (ServerUnavailableError, ToolTransientError)
# The most of one result's text a model reads (~25k tokens): a server that does not limit its
# results must not fill the context window, or fail the model's call, with one answer.
MAX_RESULT_CHARS = 100_000
# The most of an error result's text a model reads.
MAX_ERROR_CHARS = 2_000


def failure_reason(server: str, exc: ToolCallError) -> str:
    """What a person is told about a failed call: the server's refusal, or why it is unknown."""
    if isinstance(exc, ToolResultError):
        text = one_line(str(exc), 200)
        return f"the {server} server refused — {text}" if text else f"the {server} server refused"
    if isinstance(exc, ToolAuthError):
        if exc.status == 403:
            return f"the {server} server refused — the requester is not allowed to do this"
        return f"the {server} server did not accept the requester's sign-in"
    if isinstance(exc, CredentialError):
        return f"opsbot could not get access to {server} for the requester"
    if isinstance(exc, ToolTimeoutError):
        return f"the {server} server did not answer in time — outcome unknown"
    return f"the {server} server could not be reached — outcome unknown"


def run_of(request: MCPToolCallRequest) -> tuple[RunContext, str]:
    """The run and tool call id an MCP tool call belongs to (from its ``ToolRuntime``)."""
    runtime = request.runtime
    ctx = getattr(runtime, "context", None)
    if not isinstance(ctx, RunContext):
        raise RuntimeError("an opsbot tool was called outside an agent run")
    return ctx, str(getattr(runtime, "tool_call_id", "") or "")


MCPHandler = Callable[[MCPToolCallRequest], Awaitable[MCPToolCallResult]]


class AuditInterceptor:
    """Outermost MCP interceptor: idempotency key, audit events, tool errors as exceptions.

    Writes that take an ``idempotency_key`` get one derived from the approval (or thread) and
    the tool call id, so a replayed resume sends the same key; the model never sets it. Only
    such a keyed write is sent again when its server was unreachable (the server applies one
    key once); the finished event carries a short reason for people when the call failed.
    """

    async def __call__(self, request: MCPToolCallRequest, handler: MCPHandler) -> MCPToolCallResult:
        ctx, call_id = run_of(request)
        server, tool = request.server_name, request.name
        name = prefixed(server, tool)
        definition = ctx.definitions[name]
        cls = ctx.policy.classify(name)
        # A lone surrogate (JSON carries one: an edit typed into a card, text a model copies)
        # goes as U+FFFD: the MCP client encodes requests as UTF-8, and one failed the
        # session's transport, the call reported as a broken connection (for a write: outcome
        # unknown) though nothing was sent.
        call_args = {
            k: replace_in_strings(v, LONE_SURROGATE)
            for k, v in request.args.items()
            if k != IDEMPOTENCY_ARG
        }
        key = None
        if cls.is_write and definition.takes_idempotency_key:
            key = idempotency_key(ctx.approval_id or ctx.thread_id, call_id)
            call_args[IDEMPOTENCY_ARG] = key
        event = ToolCallEvent(
            requester=ctx.identity.subject,
            thread_id=ctx.thread_id,
            tool=name,
            server=server,
            kind=cls.kind,
            tool_call_id=call_id,
            args={k: v for k, v in call_args.items() if k != IDEMPOTENCY_ARG},
            idempotency_key=key,
            approval_id=ctx.approval_id,
            model=ctx.models_used[-1] if ctx.models_used else "",
            acting_as=ctx.sessions.acting_as(server),
        )
        ctx.calls.append(event)
        if ctx.observer is not None:
            await ctx.observer.tool_call_started(event)
        await tell_progress(ctx, event, None)
        started = time.perf_counter()
        outcome = "error:interrupted"
        reason: str | None = "the call was interrupted — outcome unknown"
        attempts = ctx.write_attempts if key is not None else 1
        try:
            sent = request.override(args=call_args)
            if attempts <= 1:  # one attempt (every read): no retry loop to set up
                result = await handler(sent)
            else:
                result = await _with_retries(ctx, attempts, handler, sent)
            if isinstance(result, CallToolResult):
                if result.isError:
                    # The model may need all of a validation error to fix its arguments, not
                    # a whole stack trace; people see one line of it (``one_line``).
                    text = "\n".join(_as_text(b) for b in result.content)[:MAX_ERROR_CHARS]
                    raise ToolResultError(server, text or "the server gave no reason")
                result = _for_the_model(result)
            outcome, reason = "success", None
            return result
        except ToolCallError as exc:
            outcome = f"error:{type(exc).__name__}"
            reason = failure_reason(server, exc)
            raise
        finally:
            finished = event if reason is None else dataclasses.replace(event, reason=reason)
            if ctx.observer is not None:
                latency = (time.perf_counter() - started) * 1000
                await ctx.observer.tool_call_finished(finished, outcome, latency)
            await tell_progress(ctx, finished, outcome)


async def _with_retries(
    ctx: RunContext, attempts: int, handler: MCPHandler, sent: MCPToolCallRequest
) -> MCPToolCallResult:
    """A keyed write, sent again (same key) while its server is unreachable, with backoff."""
    made = 0

    async def attempt() -> MCPToolCallResult:
        nonlocal made
        made += 1
        # A retry must not reuse the session the failed attempt may have killed.
        return await (handler(sent) if made == 1 else ctx.sessions.call_again(sent))

    retrying = AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(
            multiplier=ctx.write_retry_initial_delay, max=ctx.write_retry_max_delay
        ),
        retry=retry_if_exception_type(_UNREACHABLE),
        reraise=True,
    )
    return await retried(retrying, attempt)


def _for_the_model(result: CallToolResult) -> CallToolResult:
    """``result`` as the model may read it: text only, and text past ``MAX_RESULT_CHARS`` cut
    with a note saying how much and why.

    Providers take other blocks in a tool result unevenly or not at all (OpenAI's client
    refuses a file URL there, its API an image; Anthropic fetches a link's URL), and a refused
    block stays in the thread's history, failing every later turn too. So an image, audio, a
    blob is named, a resource link becomes its name and URI, an embedded text resource its
    text. A result with structured content and no text (MCP only asks a server to add the
    JSON as text) is read as that JSON: the model would read an empty result."""
    has_text = any(isinstance(block, TextContent) for block in result.content)
    if not has_text and result.structuredContent is not None:
        data = json.dumps(result.structuredContent, ensure_ascii=False, default=str)
        blocks = [TextContent(type="text", text=data), *result.content]
        result = result.model_copy(update={"content": blocks})
    if all(isinstance(block, TextContent) for block in result.content):
        total = sum(len(block.text) for block in result.content if isinstance(block, TextContent))
        if total <= MAX_RESULT_CHARS:
            return result
    texts = [_as_text(block) for block in result.content]
    total = sum(len(text) for text in texts)
    content: list[TextContent] = []
    left = MAX_RESULT_CHARS
    for text in texts:
        if left > 0:
            content.append(TextContent(type="text", text=text[:left]))
            left -= len(text)
    if total > MAX_RESULT_CHARS:
        cut = total - MAX_RESULT_CHARS
        content.append(
            TextContent(
                type="text",
                text=f"[{cut:,} more characters of this result were cut; ask for less, "
                "e.g. with a filter or a smaller page]",
            )
        )
    return result.model_copy(update={"content": content})


def _as_text(block: Any) -> str:
    """One content block of a tool result as text for the model."""
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        return f"[{block.mimeType} {kind} omitted]"
    if isinstance(block, ResourceLink):
        about = f" ({block.mimeType})" if block.mimeType else ""
        said = f": {block.description}" if block.description else ""
        return f"[resource link: {block.name} {block.uri}{about}{said}]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        size = len(resource.blob) * 3 // 4  # base64
        return (
            f"[resource {resource.uri} ({resource.mimeType or 'binary'}, {size:,} bytes) omitted]"
        )
    return f"[{getattr(block, 'type', 'unknown')} content omitted]"
