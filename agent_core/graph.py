"""The compiled agent graph for a set of tools, shared by every run.

One graph per set of model-visible tool names, built on first use: the template tools the
model is shown (a tool listed anew, with another schema, gets a new template and the graphs
holding the old one are dropped), the middleware stack in its order, review of every tool
that is not a classified read (``interrupt_on_for``, fail closed), and the checkpointer. A
run reaches its own sessions and context through ``BindRunMiddleware``, never through the
graph.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    HumanInTheLoopMiddleware,
    InterruptOnConfig,
    LLMToolSelectorMiddleware,
    ModelCallLimitMiddleware,
    ModelFallbackMiddleware,
    SummarizationMiddleware,
    ToolRetryMiddleware,
)
from langchain.agents.middleware.human_in_the_loop import DecisionType
from langchain.agents.structured_output import ToolStrategy
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import ToolCall
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from agent_core.answer import FinalAnswer
from agent_core.approved_calls import RecordedResults
from agent_core.binding import RunContext
from agent_core.config import AgentConfig
from agent_core.fold import fold
from agent_core.guards import Guards, not_already_answered
from agent_core.middleware import (
    BindRunMiddleware,
    ModelRecorder,
    PromptMiddleware,
    ToolErrorMapper,
    is_transient,
)
from agent_core.pii import pii_middleware
from agent_core.policy import ToolPolicy
from agent_core.stopping import StopCheck, StopGuard
from agent_core.tools import ToolDefinition, build_tool

__all__ = ["AgentGraphs", "interrupt_on_for"]

ALLOWED_DECISIONS: list[DecisionType] = ["approve", "edit", "reject"]


def interrupt_on_for(
    tools: Sequence[str], policy: ToolPolicy
) -> dict[str, bool | InterruptOnConfig]:
    """Every tool that is not a classified read needs review (fail closed)."""
    return {
        name: InterruptOnConfig(
            allowed_decisions=list(ALLOWED_DECISIONS),
            description=_describe,
            when=not_already_answered,
        )
        for name in tools
        if not policy.is_read(name)
    }


def _describe(tool_call: ToolCall, state: Any, runtime: Any) -> str:
    args = json.dumps(tool_call["args"], sort_keys=True, default=str)
    return f"Run {tool_call['name']} with {args}"


class AgentGraphs:
    """The template tools and the compiled graphs of one ``Agent``."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        model: BaseChatModel,
        policy: ToolPolicy,
        checkpointer: BaseCheckpointSaver[str],
        fallbacks: Sequence[BaseChatModel] = (),
        summary_model: BaseChatModel | None = None,
        selector_model: BaseChatModel | None = None,
        extra_middleware: Sequence[AgentMiddleware[Any, Any, Any]] = (),
    ) -> None:
        self.config = config
        self.policy = policy
        self._model = model
        self._fallbacks = list(fallbacks)
        self._summary_model = summary_model or model
        self._selector_model = selector_model or model
        self._checkpointer = checkpointer
        # Innermost model wrappers (e.g. the user's saved preferences in the system prompt).
        self._extra_middleware = list(extra_middleware)
        self._servers = [s.name for s in config.servers]
        self._graphs: dict[tuple[str, ...], CompiledStateGraph[Any, Any, Any, Any]] = {}
        # The template tool the model is shown, per prefixed name, with the definition it
        # was built from: a server that lists a tool anew (another schema) gets a new one.
        self._tools: dict[str, tuple[ToolDefinition, BaseTool]] = {}

    def names(self) -> tuple[str, ...]:
        """Every tool with a template so far (a graph over them reads any thread's state)."""
        return tuple(sorted(self._tools))

    def template(self, definition: ToolDefinition) -> BaseTool:
        """The template tool for ``definition``, built again when the server listed the tool
        differently (the graphs holding the old one are dropped): the model is shown what the
        server takes now, not what it took when this process first saw the tool."""
        name = definition.prefixed_name
        held = self._tools.get(name)
        if held is not None and (held[0] is definition or held[0] == definition):
            return held[1]
        tool = build_tool(definition, self.policy)
        self._tools[name] = (definition, tool)
        if held is not None:
            self._graphs = {k: g for k, g in self._graphs.items() if name not in k}
        return tool

    def graph(self, names: tuple[str, ...]) -> CompiledStateGraph[Any, Any, Any, Any]:
        graph = self._graphs.get(names)
        if graph is None:
            tools = [self._tools[n][1] for n in names]
            graph = create_agent(
                self._model,
                tools=tools,
                # One node before and one after each model call instead of one per hook:
                # each node is a superstep (see agent_core.fold).
                middleware=fold(self.middleware(list(names))),
                checkpointer=self._checkpointer,
                response_format=ToolStrategy(FinalAnswer),
                context_schema=RunContext,
            )
            self._graphs[names] = graph
        return graph

    def middleware(self, names: list[str]) -> list[AgentMiddleware[Any, Any, Any]]:
        c = self.config
        stack: list[AgentMiddleware[Any, Any, Any]] = [*pii_middleware()]
        stack.append(
            SummarizationMiddleware(
                self._summary_model,
                trigger=("tokens", c.summarize_trigger_tokens),
                keep=("messages", c.summarize_keep_messages),
            )
        )
        stack.append(
            ModelCallLimitMiddleware(
                thread_limit=c.thread_model_call_limit,
                run_limit=c.run_model_call_limit,
                exit_behavior="end",
            )
        )
        if len(names) > c.tool_selector_threshold:
            stack.append(
                LLMToolSelectorMiddleware(
                    model=self._selector_model,
                    max_tools=c.tool_selector_max_tools,
                    on_parsing_failure="all",  # a confused selector degrades, never fails
                )
            )
        if self._fallbacks:
            stack.append(ModelFallbackMiddleware(*self._fallbacks))
        stack.append(PromptMiddleware(list(self._servers)))
        stack.append(ModelRecorder())
        # Tool side, outermost first. after_model hooks run in reverse: the repeat guard,
        # then the bulk flag, then the review interrupt.
        stack.append(HumanInTheLoopMiddleware(interrupt_on=interrupt_on_for(names, self.policy)))
        # Right inside review: a call that already ran on its approval is not run again.
        stack.append(RecordedResults())
        # Its checks run with the model call, so refused or repeated calls are answered
        # before review sees them; its edit guard wraps the call inside review. The Stop
        # check goes first: a stopped run's proposals reach neither the caps nor review.
        stack.append(
            Guards(
                self.policy,
                bulk_threshold=c.bulk_write_threshold,
                max_calls=c.tool_calls_per_turn,
                max_writes=c.pending_approvals_per_run,
                first=[StopCheck()],
            )
        )
        # Ends a stopped run before its next model step, and answers its unstarted calls.
        # Inside RecordedResults: a call that ran on its approval is always fed its result.
        stack.append(StopGuard())
        stack.append(ToolErrorMapper())
        retryable = [n for n in names if self.policy.classify(n).kind == "read"]
        retryable = [n for n in retryable if self.policy.classify(n).idempotent]
        if retryable and c.read_retries > 0:
            stack.append(
                ToolRetryMiddleware(
                    max_retries=c.read_retries,
                    tools=list(retryable),
                    retry_on=is_transient,
                    on_failure="error",
                    initial_delay=c.retry_initial_delay,
                    jitter=c.retry_initial_delay > 0,
                )
            )
        stack.append(BindRunMiddleware())
        stack.extend(self._extra_middleware)
        return stack
