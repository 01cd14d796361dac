"""Guards around human review, for the known HITL failure modes.

- ``EditGuard``: an approver's edit may not switch the tool (langchain#40166: an edit that
  renamed the call ran another tool without that tool's policy). ``Agent.resume`` refuses
  such edits first; this is the second layer at execution time.
- ``RepeatGuard``: a call an approver rejected, or replaced by an edit, is not proposed for
  review again with the same arguments (reject loops, deepagents#2946; the model re-issuing
  the original call after an edit, langchain#33787). It answers the repeat itself; the
  review middleware skips calls that already have an answer.
- ``BulkWriteFlag``: flags a model turn proposing many writes, for the approver.
- ``CallCap``: at most ``max_calls`` tool calls per model turn and ``max_writes`` writes put
  up for approval; the rest are answered as refused and never run (nor reach a card).
- ``Guards``: all of the above as the agent uses them, one middleware (one hook per step).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import (
    ExtendedModelResponse,
    PrivateStateAttr,
    ToolCallRequest,
)
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolCall, ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from agent_core.fold import run_hooks
from agent_core.middleware import ToolHandler, error_message
from agent_core.policy import ToolPolicy
from agent_core.texts import note
from agent_core.tools import IDEMPOTENCY_ARG

HITL_EDITS_KEY = "hitl_edited_tool_calls"
REVIEWED_KEY = "opsbot_reviewed_calls"
BULK_KEY = "opsbot_bulk_write"


def call_signature(name: str, args: dict[str, Any]) -> str:
    clean = {k: v for k, v in args.items() if k != IDEMPOTENCY_ARG}
    return f"{name}:{json.dumps(clean, sort_keys=True, default=str)}"


def _original_calls(messages: list[AnyMessage]) -> dict[str, ToolCall]:
    calls: dict[str, ToolCall] = {}
    for message in messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id"):
                    calls[str(call["id"])] = call
    return calls


def _last_ai(messages: list[AnyMessage]) -> AIMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)


def _turn_start(messages: list[AnyMessage]) -> int:
    return max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)


def _turn_id(messages: list[AnyMessage]) -> str:
    start = _turn_start(messages)
    return str(messages[start].id or start) if messages else ""


def has_answer(messages: list[AnyMessage], tool_call_id: str | None) -> bool:
    """Whether the latest model step's call ``tool_call_id`` already has an answer.

    Only answers after the last AI message count: a model that reuses the id of an earlier,
    answered call (or a summary that dropped it) must not skip review with it.
    """
    last = max((i for i, m in enumerate(messages) if isinstance(m, AIMessage)), default=-1)
    return any(
        isinstance(m, ToolMessage) and m.tool_call_id == tool_call_id for m in messages[last + 1 :]
    )


def _unanswered_calls(state: AgentState[Any]) -> list[tuple[int, ToolCall]]:
    """The latest model step's tool calls that nothing has answered yet, each with its place
    in the step (the caps count calls in the model's order)."""
    messages = list(state["messages"])
    last = _last_ai(messages)
    if last is None:
        return []
    return [
        (index, call)
        for index, call in enumerate(last.tool_calls)
        if not has_answer(messages, call.get("id"))
    ]


def not_already_answered(request: ToolCallRequest) -> bool:
    """``interrupt_on[...]["when"]``: review only calls nothing has answered yet."""
    messages = list(request.state.get("messages", []))
    return not has_answer(messages, request.tool_call.get("id"))


class EditGuard(AgentMiddleware[Any, Any, Any]):
    """Refuses to run a call whose name differs from the model's original call."""

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command[Any]:
        call_id = request.tool_call.get("id")
        original = _original_calls(list(request.state.get("messages", []))).get(str(call_id))
        if original is not None and original["name"] != request.tool_call["name"]:
            return error_message(
                request,
                f"Refused: an approver's edit may not change the tool ({original['name']} → "
                f"{request.tool_call['name']}). Nothing was run.",
            )
        return await handler(request)


class _ReviewedState(AgentState[Any]):
    opsbot_reviewed_calls: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]


class RepeatGuard(AgentMiddleware[Any, Any, Any]):
    """Answers re-proposals of calls an approver already rejected or replaced."""

    state_schema = _ReviewedState

    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        messages = list(state["messages"])
        values: dict[str, Any] = dict(state)
        # Reviews hold for the current request only: when the user asks again in a new
        # message, a fresh proposal goes to an approver again.
        turn = _turn_id(messages)
        stored: dict[str, Any] = dict(values.get(REVIEWED_KEY) or {})
        before: dict[str, str] = (
            dict(stored.get("calls") or {}) if stored.get("turn") == turn else {}
        )
        reviewed = dict(before)
        calls = _original_calls(messages[_turn_start(messages) :])
        edits: dict[str, Any] = dict(values.get(HITL_EDITS_KEY) or {})
        for call_id, action in edits.items():
            original = calls.get(call_id)
            if original is not None and call_signature(
                original["name"], original["args"]
            ) != call_signature(action["name"], action["args"]):
                reviewed[call_signature(original["name"], original["args"])] = "replaced"
        for m in messages[_turn_start(messages) :]:
            if (
                isinstance(m, ToolMessage)
                and m.additional_kwargs.get("lc_source") == "hitl_interrupt_decision"
                and (m.additional_kwargs.get("lc_data") or {}).get("decision") == "reject"
            ):
                original = calls.get(m.tool_call_id)
                if original is not None:
                    reviewed[call_signature(original["name"], original["args"])] = "rejected"
        last = _last_ai(messages)
        answers: list[ToolMessage] = []
        if last is not None:
            for call in last.tool_calls:
                verdict = reviewed.get(call_signature(call["name"], call["args"]))
                if verdict is None or has_answer(messages, call.get("id")):
                    continue
                answers.append(
                    ToolMessage(
                        content=(
                            f"Not run: an approver already {verdict} this exact call to "
                            f"{call['name']}. Do not propose it again; tell the user the outcome."
                        ),
                        name=call["name"],
                        tool_call_id=call["id"],
                        status="error",
                        response_metadata=note(
                            "not_run", f"{call['name']} was not run again: an approver {verdict} it"
                        ),
                    )
                )
        update: dict[str, Any] = {}
        if answers:
            update["messages"] = answers
        if reviewed != before or (stored and stored.get("turn") != turn):
            update[REVIEWED_KEY] = {"turn": turn, "calls": reviewed}
        return update or None


class _BulkState(AgentState[Any]):
    opsbot_bulk_write: NotRequired[Annotated[dict[str, Any] | None, PrivateStateAttr]]


class BulkWriteFlag(AgentMiddleware[Any, Any, Any]):
    """Flags a turn that proposes ``threshold`` or more writes (a sign of injected text)."""

    state_schema = _BulkState

    def __init__(self, policy: ToolPolicy, threshold: int = 3) -> None:
        super().__init__()
        self.policy = policy
        self.threshold = threshold

    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        writes = [
            c for _, c in _unanswered_calls(state) if self.policy.classify(c["name"]).is_write
        ]
        flag: dict[str, Any] | None = None
        if len(writes) >= self.threshold:
            flag = {
                "count": len(writes),
                "tools": sorted({c["name"] for c in writes}),
                "reason": f"{len(writes)} write calls proposed in one step",
            }
        if flag is None and not dict(state).get(BULK_KEY):
            return None
        return {BULK_KEY: flag}


class CallCap(AgentMiddleware[Any, Any, Any]):
    """Refuses the tool calls of one model turn beyond the caps, before review and execution.

    Calls are kept in the model's order: the first ``max_calls`` may run (reads at once,
    writes after approval), and of those only the first ``max_writes`` writes go to review.
    Every other call gets an error answer, so neither the review nor the tool node sees it.
    """

    def __init__(self, policy: ToolPolicy, max_calls: int = 8, max_writes: int = 5) -> None:
        super().__init__()
        self.policy = policy
        self.max_calls = max_calls
        self.max_writes = max_writes

    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        answers: list[ToolMessage] = []
        writes = 0
        for index, call in _unanswered_calls(state):
            is_write = self.policy.classify(call["name"]).is_write
            if index >= self.max_calls:
                text = (
                    f"Refused: at most {self.max_calls} tool calls may run in one step; "
                    f"{call['name']} was not run. Ask for fewer at once."
                )
            elif is_write and writes >= self.max_writes:
                text = (
                    f"Refused: at most {self.max_writes} writes may wait for approval at once; "
                    f"{call['name']} was not run and not sent for approval."
                )
            else:
                writes += is_write
                continue
            answers.append(
                ToolMessage(
                    content=text, name=call["name"], tool_call_id=call["id"], status="error"
                )
            )
        return {"messages": answers} if answers else None


class _GuardsState(_ReviewedState, _BulkState):
    pass


class Guards(AgentMiddleware[Any, Any, Any]):
    """The guards in one middleware: the call cap, then the repeat guard, then the bulk
    flag on each model response (each on what the one before left), and the edit guard
    around each tool call.

    The three checks run inside the model call, on the state plus the model's response,
    and their answers are saved with the response: so they are in the state before review
    runs (review skips answered calls, and its interrupt saves the state as it is: a check
    in the same node as review would lose its update at the interrupt). Placed right after
    the review middleware, so the edit guard wraps the call inside review.
    """

    state_schema = _GuardsState

    def __init__(
        self,
        policy: ToolPolicy,
        *,
        bulk_threshold: int,
        max_calls: int,
        max_writes: int,
        first: Sequence[AgentMiddleware[Any, Any, Any]] = (),
    ) -> None:
        super().__init__()
        # ``first``: checks before the caps (the Stop check); one that jumps ends the chain.
        self.checks = [
            *first,
            CallCap(policy, max_calls, max_writes),
            RepeatGuard(),
            BulkWriteFlag(policy, bulk_threshold),
        ]
        self.edits = EditGuard()

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        response = await handler(request)
        view: dict[str, Any] = dict(request.state)
        view["messages"] = [*request.state.get("messages", []), *response.result]
        update = await run_hooks(self.checks, "after_model", view, request.runtime)  # type: ignore[arg-type]
        if not update:
            return response
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command[Any]:
        return await self.edits.awrap_tool_call(request, handler)
