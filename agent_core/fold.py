"""Fold a middleware stack's node hooks into the model node and one node after the model.

``create_agent`` gives every ``before_model``/``after_model`` hook its own graph node, and
every node is a superstep: a checkpoint write with the whole state. opsbot's stack (PII
rules, summarisation, the call limits, review and the guards) had 16 such nodes around each
model call. None of them needs a node of its own: they are plain functions of the state. So
``fold`` runs them in the order ``create_agent`` would (``before`` hooks in list order,
``after`` hooks in reverse), each one seeing the state as the hooks before it left it: the
``after`` hooks in one node per model step, the ``before`` hooks inside the model node
itself, right before the model call (``FoldedWraps``, outermost): a ``before`` node was a
superstep per model step that, in a plain turn, had nothing to write. Their update is saved
with the model's response, the message list stated whole when they changed it (a
summary, a redaction), so that the response lands after what they left. A ``before`` hook
that jumps to the end skips the model call; the model node then writes only that hook's
update and a private flag (``opsbot_before_jump``), on which the ``after`` node ends the run
without running its hooks, as the graph did when the ``before`` node jumped.

The wrap hooks (tool and model calls) are folded too, into one ``FoldedWraps`` that chains
them in the order ``create_agent`` would (first listed = outermost): ``create_agent`` wraps
each wrap hook in a LangSmith ``traceable``, which costs two thread hops and a task per
hook per call even with tracing off; six hooks around every tool call made that most of
the per-call overhead. The parts stay in the list as thin stand-ins carrying their state
schema, tools and name. The one ``traceable`` left per model and tool call still sends its
run set-up and end to a worker thread; with LangSmith tracing off there is nothing to set
up there, so ``fold`` installs LangSmith's documented runtime override that runs them
inline unless tracing is on (``inline_untraced_hops``): ~0.13 ms less CPU per call and no
thread wake-up.

An interrupt (human review) ends the folded ``after`` node before its update is saved, so
review must be the first ``after`` hook (checked): what must be in the state saved at the
interrupt runs with the model call instead (``agent_core.guards.Guards``). On resume the
node runs again from the start, as LangGraph does with any node that interrupts.

Example::

    graph = create_agent(model, tools, middleware=fold([*pii, limits, review, guards]))
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Sequence
from typing import Annotated, Any, NotRequired

import langsmith
from langchain.agents.factory import (
    _chain_async_model_call_handlers,
    _ComposedExtendedModelResponse,
    _patch_invalid_tool_calls,
)
from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    HumanInTheLoopMiddleware,
    ModelResponse,
    hook_config,
)
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.callbacks import BaseCallbackManager
from langchain_core.messages import AnyMessage, RemoveMessage
from langchain_core.runnables import RunnableLambda
from langgraph.channels import EphemeralValue
from langgraph.config import get_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.runtime import Runtime
from langgraph.types import Command
from langsmith._runtime_overrides import get_runtime_overrides
from langsmith.utils import tracing_is_enabled

Middleware = AgentMiddleware[Any, Any, Any]

_NODE_HOOKS = ("before_model", "after_model")
_AGENT_HOOKS = ("before_agent", "after_agent")
_WRAPS = ("wrap_model_call", "wrap_tool_call")
# The only jump opsbot's hooks make (a call limit, PII's block strategy): to the end.
_JUMPS = ["end"]
# Written by the model node when a ``before`` hook jumped to the end (no model call): the
# ``after`` node then ends the run. Ephemeral: read by the next step only, never saved.
BEFORE_JUMP = "opsbot_before_jump"


class _FoldState(AgentState[Any]):
    opsbot_before_jump: NotRequired[Annotated[bool | None, EphemeralValue, PrivateStateAttr]]


def _overrides(part: Middleware, hook: str) -> bool:
    """Whether ``part`` defines ``hook`` (sync or async), as ``create_agent`` decides it."""
    cls = type(part)
    return getattr(cls, hook) is not getattr(AgentMiddleware, hook) or getattr(
        cls, f"a{hook}"
    ) is not getattr(AgentMiddleware, f"a{hook}")


def _jumps(part: Middleware, hook: str) -> list[str]:
    for name in (hook, f"a{hook}"):
        method = getattr(type(part), name)
        if method is not getattr(AgentMiddleware, name) and hasattr(method, "__can_jump_to__"):
            return list(method.__can_jump_to__)
    return []


async def _call(
    part: Middleware, hook: str, state: Any, runtime: Runtime[Any], in_thread: bool = False
) -> Any:
    cls = type(part)
    if in_thread and getattr(cls, hook) is not getattr(AgentMiddleware, hook):
        # A long synchronous hook: the loop serves others meanwhile.
        return await asyncio.to_thread(getattr(part, hook), state, runtime)
    if getattr(cls, f"a{hook}") is not getattr(AgentMiddleware, f"a{hook}"):
        return await getattr(part, f"a{hook}")(state, runtime)
    return getattr(part, hook)(state, runtime)


def _callbacks_attached() -> bool:
    try:
        config = get_config()
    except RuntimeError:  # outside a graph run (a unit test calling a hook)
        return False
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        return bool(callbacks.handlers)
    return bool(callbacks)


async def _traced(
    part: Middleware, hook: str, state: Any, runtime: Runtime[Any], in_thread: bool = False
) -> Any:
    """``part``'s hook; with callbacks attached (run telemetry), as a child run named like
    the node it used to be (``<middleware>.<hook>``), so spans and metrics stay the same."""
    if not _callbacks_attached():
        return await _call(part, hook, state, runtime, in_thread)

    async def run(view: Any) -> Any:
        return await _call(part, hook, view, runtime, in_thread)

    step: RunnableLambda[Any, Any] = RunnableLambda(run, name=f"{part.name}.{hook}")
    return await step.ainvoke(state, get_config())


async def run_hooks(
    parts: Sequence[Middleware],
    hook: str,
    state: AgentState[Any],
    runtime: Runtime[Any],
    *,
    in_thread: bool = False,
) -> dict[str, Any] | None:
    """``hook`` of each of ``parts`` in turn, each on the state the ones before left; the
    one update that has the same effect. A jump stops the chain, as between nodes.
    ``in_thread``: synchronous hooks run in a worker thread (long ones, so the event loop
    keeps serving other runs and requests)."""
    pending = _Pending(state)
    for part in parts:
        update = await _traced(part, hook, pending.view, runtime, in_thread)
        if not update:
            continue
        pending.apply(dict(update))
        if update.get("jump_to"):
            break
    return pending.result()


class _Pending:
    """The state as the hooks so far left it, and the one update that gets it there."""

    def __init__(self, state: AgentState[Any]) -> None:
        self.view: dict[str, Any] = dict(state)
        self.update: dict[str, Any] = {}
        self._messages: list[AnyMessage] = []
        self._replaced = False

    def apply(self, update: dict[str, Any]) -> None:
        for key, value in update.items():
            if key == "messages":
                incoming = list(value)
                self._replaced |= any(
                    isinstance(m, RemoveMessage) and m.id == REMOVE_ALL_MESSAGES for m in incoming
                )
                self._messages.extend(incoming)
                self.view["messages"] = add_messages(self.view.get("messages", []), incoming)
            else:
                self.view[key] = value
                self.update[key] = value

    def result(self) -> dict[str, Any] | None:
        out = dict(self.update)
        if self._messages:
            # A hook that rewrote the whole list (summarisation) is stated as such, with what
            # the later hooks did to it; otherwise the updates go in as they came, in order.
            out["messages"] = (
                [RemoveMessage(id=REMOVE_ALL_MESSAGES), *self.view["messages"]]
                if self._replaced
                else self._messages
            )
        return out or None


class FoldedHooks(AgentMiddleware[Any, Any, Any]):
    """The ``after_model`` hooks of ``parts``, one node after each model call (the
    ``before_model`` ones run in the model node: ``FoldedWraps``)."""

    state_schema = _FoldState

    def __init__(self, parts: Sequence[Middleware]) -> None:
        super().__init__()
        # create_agent runs after_model hooks last-registered first.
        self.after = [p for p in reversed(parts) if _overrides(p, "after_model")]
        # An interrupt ends the node before its update is saved: the updates of the hooks
        # before the reviewing one would be missing from the state saved at the interrupt
        # (they would come back on resume). So review must be the first after-hook; hooks
        # that must be saved before review run with the model call instead (Guards).
        reviews = [i for i, p in enumerate(self.after) if isinstance(p, HumanInTheLoopMiddleware)]
        if reviews and reviews != [0]:
            raise ValueError("human review must be the first after_model hook of a fold")
        _check_jumps(parts)

    @property
    def name(self) -> str:
        return "opsbot"

    @hook_config(can_jump_to=_JUMPS)  # type: ignore[arg-type]
    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        if state.get(BEFORE_JUMP):
            # A before hook ended the run in the model node: no model call to look at.
            return {"jump_to": "end"}
        return await run_hooks(self.after, "after_model", state, runtime)


def _check_jumps(parts: Sequence[Middleware]) -> None:
    for part in parts:
        extra = {j for hook in _NODE_HOOKS for j in _jumps(part, hook)} - set(_JUMPS)
        if extra:
            raise ValueError(f"{part.name} jumps to {sorted(extra)}; a fold jumps to end only")


class FoldedWraps(AgentMiddleware[Any, Any, Any]):
    """The ``wrap_tool_call`` and ``wrap_model_call`` hooks of ``parts``, chained as
    ``create_agent`` chains them (first = outermost), behind one hook of each kind; and,
    outermost of all, the ``before_model`` hooks of ``before`` (see the module's text)."""

    state_schema = _FoldState

    def __init__(self, parts: Sequence[Middleware], before: Sequence[Middleware] = ()) -> None:
        super().__init__()
        self.before = [p for p in before if _overrides(p, "before_model")]
        _check_jumps(self.before)
        self.tool_parts = [p for p in parts if _overrides(p, "wrap_tool_call")]
        self.model_parts = [p for p in parts if _overrides(p, "wrap_model_call")]
        # The same composition create_agent applies (results normalised between layers,
        # commands of every layer kept), without a traced wrapper per layer.
        self._model_chain = _chain_async_model_call_handlers(
            [p.awrap_model_call for p in self.model_parts]
        )

    @property
    def name(self) -> str:
        return "opsbot_wraps"

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await self._tool_layer(0, request, handler)

    async def _tool_layer(self, index: int, request: Any, handler: Any) -> Any:
        if index == len(self.tool_parts):
            return await handler(request)

        async def inner(req: Any) -> Any:  # may be called again (retries)
            return await self._tool_layer(index + 1, req, handler)

        return await self.tool_parts[index].awrap_tool_call(request, inner)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        if not self.before:
            return await self._wrapped(request, handler)
        update = await run_hooks(self.before, "before_model", request.state, request.runtime)
        if not update:  # the usual step: nothing to change before the call
            return await self._wrapped(request, handler)
        if update.pop("jump_to", None):
            # The model is not called; the after node ends the run on the flag.
            command: Command[Any] = Command(update={**update, BEFORE_JUMP: True})
            return ExtendedModelResponse(model_response=ModelResponse(result=[]), command=command)
        state = _updated(request.state, update)
        # Repaired as the model node repairs the state it is given (dangling tool calls).
        messages = _patch_invalid_tool_calls(list(state["messages"]))
        result = await self._wrapped(request.override(messages=messages, state=state), handler)
        if isinstance(result, _ComposedExtendedModelResponse):
            response, commands = result.model_response, list(result.commands)
        elif isinstance(result, ExtendedModelResponse):
            response = result.model_response
            commands = [result.command] if result.command is not None else []
        else:
            response, commands = result, []
        if "messages" in update:
            # Applied after the model node's own write of the response: the list as the
            # before hooks left it, then the response, stated whole.
            update["messages"] = [
                RemoveMessage(id=REMOVE_ALL_MESSAGES),
                *messages,
                *response.result,
            ]
        return _ComposedExtendedModelResponse(
            model_response=response, commands=[*commands, Command(update=update)]
        )

    async def _wrapped(self, request: Any, handler: Any) -> Any:
        if self._model_chain is None:
            return await handler(request)
        return await self._model_chain(request, handler)


def _updated(state: Any, update: dict[str, Any]) -> dict[str, Any]:
    """``state`` as ``update`` (one folded update, ``run_hooks``) leaves it."""
    pending = _Pending(state)
    pending.apply(update)
    return pending.view


def _has_wraps(part: Middleware) -> bool:
    return any(_overrides(part, h) for h in _WRAPS)


def _stand_in(part: Middleware) -> Middleware:
    """``part`` without its hooks: its state schema, tools and name."""
    ns: dict[str, Any] = {
        "state_schema": part.state_schema,
        "name": property(lambda self: part.name),
        "transformers": tuple(getattr(part, "transformers", ()) or ()),
    }
    cls = type(f"{type(part).__name__}Parts", (AgentMiddleware,), ns)
    stand_in: Middleware = cls()
    stand_in.tools = list(getattr(part, "tools", None) or [])
    return stand_in


async def _inline_when_untraced(
    default: Callable[..., Any], ctx: contextvars.Context, func: Any, /, *args: Any, **kwargs: Any
) -> Any:
    """LangSmith's ``aio_to_thread``: inline while tracing is off (the set-up and end of an
    untraced run touch no I/O); with tracing on, LangSmith's own thread hop."""
    if ctx.run(tracing_is_enabled):
        return await default(ctx, func, *args, **kwargs)
    return ctx.run(func, *args, **kwargs)


def inline_untraced_hops() -> None:
    """Install ``_inline_when_untraced`` (once; never over another override)."""
    if get_runtime_overrides().aio_to_thread is None:
        langsmith.set_runtime_overrides(aio_to_thread=_inline_when_untraced)


def fold(stack: Sequence[Middleware]) -> list[Middleware]:
    """``stack`` with every node hook folded into one ``before`` and one ``after`` node,
    and every wrap hook into one wrap of each kind.

    Middleware without hooks are returned as they are; the others are replaced by
    stand-ins (same place in the list), their ``after_model`` hooks run in one
    ``FoldedHooks`` placed first, their wrap hooks and, outermost, their ``before_model``
    hooks in one ``FoldedWraps`` after it.
    """
    inline_untraced_hops()
    for part in stack:
        for hook in _AGENT_HOOKS:
            if _overrides(part, hook):
                raise ValueError(f"{part.name} has a {hook} hook, which a fold does not run")
    noded = [p for p in stack if any(_overrides(p, h) for h in _NODE_HOOKS)]
    wrapping = [p for p in stack if _has_wraps(p)]
    if not noded and not wrapping:
        return list(stack)
    rest = [_stand_in(p) if p in noded or p in wrapping else p for p in stack]
    after = [p for p in noded if _overrides(p, "after_model")]
    before = [p for p in noded if _overrides(p, "before_model")]
    # The after node is there whenever the model node may jump (it ends the run then).
    head: list[Middleware] = [FoldedHooks(after)] if after or before else []
    if wrapping or before:
        head.append(FoldedWraps(wrapping, before))
    return [*head, *rest]
