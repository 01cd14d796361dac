"""Binding shared tool objects to the current run: its user, sessions and idempotency keys.

Tool objects are built once from cached definitions and shared by all runs; the run a call
belongs to is found through a context variable that the innermost ``wrap_tool_call`` sets
from the graph's runtime context. Credentials stay in the run's sessions, never in state.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agent_core.errors import ToolCallError, ToolResultError
from agent_core.policy import ToolPolicy
from agent_core.sessions import RunSessions
from agent_core.tools import IDEMPOTENCY_ARG, ToolDefinition, prefixed, result_text
from broker import Identity


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


class ToolObserver(Protocol):
    """Told before and after every tool call (the audit log's pending/outcome records)."""

    async def tool_call_started(self, event: ToolCallEvent) -> None: ...

    async def tool_call_finished(
        self, event: ToolCallEvent, outcome: str, latency_ms: float
    ) -> None: ...


@dataclass
class RunContext:
    """What one run's tools need. Lives in the runtime context, never in checkpoints."""

    identity: Identity
    thread_id: str
    sessions: RunSessions
    policy: ToolPolicy
    definitions: Mapping[str, ToolDefinition]
    approval_id: str | None = None
    unavailable: tuple[str, ...] = ()
    read_timeout: float = 20.0
    write_timeout: float = 30.0
    observer: ToolObserver | None = None
    models_used: list[str] = field(default_factory=list)
    calls: list[ToolCallEvent] = field(default_factory=list)


_CURRENT: ContextVar[tuple[RunContext, str]] = ContextVar("opsbot_current_tool_call")


@contextmanager
def bound(ctx: RunContext, tool_call_id: str) -> Iterator[None]:
    token = _CURRENT.set((ctx, tool_call_id))
    try:
        yield
    finally:
        _CURRENT.reset(token)


async def call_current_run(server: str, tool: str, args: dict[str, Any]) -> tuple[str, Any]:
    """Run one MCP tool call for the run bound to this task."""
    try:
        ctx, call_id = _CURRENT.get()
    except LookupError:
        raise RuntimeError("an opsbot tool was called outside an agent run") from None
    name = prefixed(server, tool)
    definition = ctx.definitions[name]
    cls = ctx.policy.classify(name)
    call_args = {k: v for k, v in args.items() if k != IDEMPOTENCY_ARG}
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
    )
    ctx.calls.append(event)
    if ctx.observer is not None:
        await ctx.observer.tool_call_started(event)
    started = time.perf_counter()
    outcome = "error:interrupted"
    try:
        timeout = ctx.write_timeout if cls.is_write else ctx.read_timeout
        result = await ctx.sessions.call_tool(server, tool, call_args, timeout=timeout)
        text = result_text(result.content)
        if result.isError:
            raise ToolResultError(server, text or f"{name} failed")
        outcome = "success"
        return text, result.structuredContent
    except ToolCallError as exc:
        outcome = f"error:{type(exc).__name__}"
        raise
    finally:
        if ctx.observer is not None:
            latency = (time.perf_counter() - started) * 1000
            await ctx.observer.tool_call_finished(event, outcome, latency)
