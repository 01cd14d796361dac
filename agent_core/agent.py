"""``Agent``: one run for one user — and its resume after human review.

Example::

    agent = Agent(config, model=model, broker=broker, threads=threads, checkpointer=saver,
                  policy=ToolPolicy.load())
    result = await agent.run(identity, thread_id, "show ticket PAY-1")
    if isinstance(result, Interrupt):
        result = await agent.resume(identity, thread_id, [{"type": "approve"}],
                                    approval_id=approval.id)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, ToolCall
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphBubbleUp, GraphRecursionError
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from agent_core.answer import (
    FinalAnswer,
    Interrupt,
    RunResult,
)
from agent_core.binding import RunContext, RunProgress, StopSignal, ToolObserver
from agent_core.credentials import OAuthTokenSource
from agent_core.decisions import validate_decisions
from agent_core.errors import (
    AgentError,
    CredentialError,
    ModelUnavailableError,
    NoPendingApprovalError,
    ToolAuthError,
    ToolCallError,
)
from agent_core.guards import (
    BulkWriteFlag,
    CallCap,
    EditGuard,
    RepeatGuard,
    not_already_answered,
)
from agent_core.health import ServerHealth
from agent_core.middleware import (
    BindRunMiddleware,
    ModelRecorder,
    PromptMiddleware,
    ToolErrorMapper,
    is_transient,
    model_name,
)
from agent_core.pii import pii_middleware
from agent_core.policy import ToolPolicy
from agent_core.results import Results
from agent_core.sessions import RunSessions, ServerConfig, SessionStats
from agent_core.stopping import StopGuard
from agent_core.threads import ThreadStore
from agent_core.tools import (
    DiscoveryCache,
    ServerTools,
    ToolDefinition,
    build_tool,
    visible_definitions,
)
from broker import Broker, BrokerError, Identity

log = logging.getLogger(__name__)

ALLOWED_DECISIONS: list[DecisionType] = ["approve", "edit", "reject"]
# Telemetry hook: given the run's user, thread and unavailable servers, the LangChain
# callback handlers to attach to that run only (see ``opsbot.observability.runs``).
RunCallbacks = Callable[[Identity, str, Sequence[str]], Sequence[BaseCallbackHandler]]
LIMIT_TEXT = "Model call limits exceeded"
STOPPED_ANSWER = "Stopped at your request: nothing further was run."


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Limits and thresholds for runs (from ``Settings.agent``)."""

    servers: tuple[ServerConfig, ...]
    run_model_call_limit: int = 12
    thread_model_call_limit: int = 200
    read_timeout: float = 20.0
    write_timeout: float = 30.0
    read_retries: int = 2
    retry_initial_delay: float = 0.5
    summarize_trigger_tokens: int = 4000
    summarize_keep_messages: int = 20
    tool_selector_threshold: int = 15
    tool_selector_max_tools: int = 8
    bulk_write_threshold: int = 3
    health_check_interval: float = 10.0
    breaker_threshold: int = 3
    breaker_open_seconds: float = 30.0
    tool_calls_per_turn: int = 8
    pending_approvals_per_run: int = 5
    write_attempts: int = 3
    write_retry_initial_delay: float = 0.5
    write_retry_max_delay: float = 4.0


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


def _from_model(exc: BaseException) -> bool:
    """Whether a failure came out of a chat model call (provider down, bad credentials...)."""
    tb = exc.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if module.startswith("langchain_core.language_models"):
            return True
        tb = tb.tb_next
    return False


def _describe(tool_call: ToolCall, state: Any, runtime: Any) -> str:
    args = json.dumps(tool_call["args"], sort_keys=True, default=str)
    return f"Run {tool_call['name']} with {args}"


@dataclass(frozen=True, slots=True)
class _Toolset:
    definitions: tuple[ToolDefinition, ...]
    unavailable: tuple[str, ...]
    no_access: tuple[str, ...]

    @property
    def by_name(self) -> dict[str, ToolDefinition]:
        return {d.prefixed_name: d for d in self.definitions}


class Agent:
    """Runs the agent for one identity at a time; shared by all users, holding no tokens."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        model: BaseChatModel,
        broker: Broker,
        threads: ThreadStore,
        checkpointer: BaseCheckpointSaver[str],
        policy: ToolPolicy,
        fallbacks: Sequence[BaseChatModel] = (),
        summary_model: BaseChatModel | None = None,
        selector_model: BaseChatModel | None = None,
        observer: ToolObserver | None = None,
        health: ServerHealth | None = None,
        run_callbacks: RunCallbacks | None = None,
        extra_middleware: Sequence[AgentMiddleware[Any, Any, Any]] = (),
        oauth_token: OAuthTokenSource | None = None,
    ) -> None:
        self.config = config
        self._oauth_token = oauth_token
        self.policy = policy
        self._model = model
        self._fallbacks = list(fallbacks)
        self._summary_model = summary_model or model
        self._selector_model = selector_model or model
        self._broker = broker
        self._threads = threads
        self.threads = threads
        self._checkpointer = checkpointer
        self._observer = observer
        self._run_callbacks = run_callbacks
        # Innermost model wrappers (e.g. the user's saved preferences in the system prompt).
        self._extra_middleware = list(extra_middleware)
        self._servers = {s.name: s for s in config.servers}
        self.health = health or ServerHealth(
            {s.name: s.url for s in config.servers},
            failure_threshold=config.breaker_threshold,
            open_seconds=config.breaker_open_seconds,
            check_interval=config.health_check_interval,
        )
        self.cache = DiscoveryCache()
        self.stats = SessionStats()
        self._graphs: dict[tuple[str, ...], CompiledStateGraph[Any, Any, Any, Any]] = {}
        self._tools: dict[str, BaseTool] = {}
        self._discovery_locks: dict[str, asyncio.Lock] = {}
        self._results = Results(list(self._servers), policy, config.bulk_write_threshold)

    # --- public API --------------------------------------------------------------------

    async def run(
        self,
        identity: Identity,
        thread_id: str,
        message: str,
        *,
        progress: RunProgress | None = None,
        stop: StopSignal | None = None,
    ) -> RunResult:
        """Answer ``message`` on ``thread_id`` for ``identity`` (who must own the thread).

        ``progress`` is told of each MCP call as it starts and ends; ``stop`` is read before
        each model step and tool call (a stopped run starts nothing more)."""
        await self._threads.require_owner(thread_id, identity.subject)
        payload = {"messages": [HumanMessage(content=message)]}
        return await self._invoke(
            identity,
            thread_id,
            lambda: payload,
            None,
            continues=message,
            progress=progress,
            stop=stop,
        )

    async def resume(
        self,
        identity: Identity,
        thread_id: str,
        decisions: Sequence[Mapping[str, Any]],
        *,
        approval_id: str | None = None,
        stop: StopSignal | None = None,
    ) -> RunResult:
        """Continue a paused run with one decision per pending action, in order.

        ``identity`` is the requester (the thread's owner): writes run with their fresh
        tokens, never the approver's. ``approval_id`` scopes the writes' idempotency keys.
        """
        await self._threads.require_owner(thread_id, identity.subject)
        pending = await self.pending(identity, thread_id)
        if pending is None:
            raise NoPendingApprovalError(f"thread {thread_id!r} is not waiting for a decision")

        # Fresh tokens for the requester: a revoked user must fail the exchange now, not
        # ride on a token cached before the revocation.
        for server in self._servers:
            with contextlib.suppress(BrokerError):
                await self._broker.invalidate(identity, server)

        def payload() -> Any:
            # After tool discovery, so edited arguments are checked against current schemas.
            checked = validate_decisions(pending, decisions, self)
            return Command(resume={"decisions": checked})

        return await self._invoke(identity, thread_id, payload, approval_id, stop=stop)

    async def pending(self, identity: Identity, thread_id: str) -> Interrupt | None:
        """The interrupt the thread is waiting on, if any (owner only)."""
        await self._threads.require_owner(thread_id, identity.subject)
        graph = self._graph(tuple(sorted(self._tools)))
        state = await graph.aget_state(self._config(thread_id))
        if not state.interrupts:
            return None
        return self._results.interrupt(
            thread_id, state.values, state.interrupts[0].value, model_used=""
        )

    def tool_schema(self, name: str) -> dict[str, Any] | None:
        """The input JSON schema an edit of ``name`` (a prefixed tool) must satisfy."""
        for entry in (self.cache.get(s) for s in self._servers):
            for d in entry.tools if entry else ():
                if d.prefixed_name == name:
                    return d.model_schema()
        return None

    def is_allowed(self, name: str) -> bool:
        """Whether ``name`` (prefixed) is on the allowlist."""
        return self.policy.is_allowed(name)

    # --- a run -------------------------------------------------------------------------

    async def _invoke(
        self,
        identity: Identity,
        thread_id: str,
        payload: Callable[[], Any],
        approval_id: str | None,
        *,
        continues: str | None = None,
        progress: RunProgress | None = None,
        stop: StopSignal | None = None,
    ) -> RunResult:
        sessions = self._sessions(identity)
        try:
            toolset = await self._toolset(sessions)
            ctx = RunContext(
                identity=identity,
                thread_id=thread_id,
                sessions=sessions,
                policy=self.policy,
                definitions=toolset.by_name,
                approval_id=approval_id,
                unavailable=toolset.unavailable + toolset.no_access,
                read_timeout=self.config.read_timeout,
                write_timeout=self.config.write_timeout,
                observer=self._observer,
                write_attempts=self.config.write_attempts,
                write_retry_initial_delay=self.config.write_retry_initial_delay,
                write_retry_max_delay=self.config.write_retry_max_delay,
                progress=progress,
                stop=stop,
            )
            names = tuple(sorted(d.prefixed_name for d in toolset.definitions))
            for d in toolset.definitions:
                if d.prefixed_name not in self._tools:
                    self._tools[d.prefixed_name] = build_tool(d, self.policy)
            graph = self._graph(names)
            config = self._config(thread_id)
            if self._run_callbacks is not None:
                config["callbacks"] = list(
                    self._run_callbacks(identity, thread_id, toolset.unavailable)
                )
            stopped = False
            graph_input = payload()
            if continues is not None and await _cut_off_turn_of(graph, config, continues):
                # A crash stopped this very turn mid-way (a durable job runs it again): carry
                # on from its last checkpoint instead of asking the same question twice.
                graph_input = None
            try:
                await graph.ainvoke(graph_input, config, context=ctx)
            except GraphRecursionError:
                stopped = True  # answered below from the state, like a call-limit stop
            except (AgentError, GraphBubbleUp):
                raise
            except Exception as exc:
                if not _from_model(exc):
                    raise
                raise ModelUnavailableError(
                    f"the model failed ({type(exc).__name__}); please try again"
                ) from exc
            state = await graph.aget_state(config)
            used = ctx.models_used[-1] if ctx.models_used else model_name(self._model)
            if state.interrupts:
                return self._results.interrupt(
                    thread_id, state.values, state.interrupts[0].value, model_used=used
                )
            answer = self._results.answer(
                state.values, toolset.unavailable, toolset.no_access, used, stopped=stopped
            )
            if stop is not None and await stop.requested():
                # Ended by Stop, not by the model: say so (what ran is in actions_taken).
                answer.answer = STOPPED_ANSWER
                answer.sources, answer.caveats = [], []
            return answer
        finally:
            await sessions.aclose()

    def _sessions(self, identity: Identity) -> RunSessions:
        """One run's MCP sessions for ``identity``, sharing this agent's health, cache, stats."""
        return RunSessions(
            self._servers,
            self._broker,
            identity,
            health=self.health,
            cache=self.cache,
            stats=self.stats,
            http_timeout=self.config.write_timeout,
            oauth_token=self._oauth_token,
        )

    async def _toolset(self, sessions: RunSessions) -> _Toolset:
        names = list(self._servers)
        up = await self.health.available(names)
        unavailable = [n for n in names if not up[n]]
        no_access: list[str] = []

        async def discover(server: str) -> None:
            lock = self._discovery_locks.setdefault(server, asyncio.Lock())
            async with lock:  # one discovery per server, however many cold runs start at once
                if self.cache.get(server) is not None:
                    return
                await discover_now(server)

        async def discover_now(server: str) -> None:
            try:
                try:
                    await sessions.discover(server)
                except ToolAuthError as exc:
                    if exc.status != 401:
                        raise
                    await sessions.refresh(server)  # one fresh token, as for tool calls
                    await sessions.discover(server)
            except (CredentialError, ToolAuthError):
                no_access.append(server)
            except ToolCallError:
                unavailable.append(server)

        cold = [n for n in names if up[n] and self.cache.get(n) is None]
        await asyncio.gather(*(discover(n) for n in cold))
        for n in cold:
            entry = self.cache.get(n)
            if entry is not None:
                self._admit(entry)
        defs: list[ToolDefinition] = []
        for n in names:
            entry = self.cache.get(n)
            if entry is not None and n not in unavailable and n not in no_access:
                defs.extend(entry.tools)
        visible = visible_definitions(defs, self.policy)
        return _Toolset(tuple(visible), tuple(sorted(unavailable)), tuple(sorted(no_access)))

    def _admit(self, entry: ServerTools) -> None:
        """After a discovery: trust readOnlyHint where the operator opted in, and say what
        the model will and will not see (one line per server)."""
        config = self._servers[entry.server]
        if config.trust_read_only_hint and config.auth != "static":
            self.policy.trust_read_only([d.prefixed_name for d in entry.tools if d.read_only_hint])
        names = [d.prefixed_name for d in entry.tools]
        allowed = [n for n in names if self.policy.is_allowed(n)]
        left_out = sorted(set(names) - set(allowed))
        log.info(
            "mcp server %s: auth=%s tools=%d allowlisted=%d left out: %s",
            entry.server,
            config.auth,
            len(names),
            len(allowed),
            ", ".join(left_out) or "none",
        )

    @property
    def servers(self) -> Mapping[str, ServerConfig]:
        return dict(self._servers)

    async def discover_all(
        self, identity: Identity, *, user_servers: bool = True
    ) -> dict[str, ServerTools | ToolCallError]:
        """Every server's tools (cached, or listed now with ``identity``'s credentials).

        With ``user_servers=False`` only ``static`` and ``none`` servers are listed: the
        others need a real user's token.
        """
        sessions = self._sessions(identity)
        found: dict[str, ServerTools | ToolCallError] = {}
        try:
            for server, config in self._servers.items():
                cold = self.cache.get(server) is None
                if cold and not user_servers and config.acting_as == "user":
                    found[server] = CredentialError(server, "needs a linked user (--as SUBJECT)")
                    continue
                try:
                    entry = await sessions.discover(server)
                except ToolCallError as exc:
                    found[server] = exc
                    continue
                if cold:
                    self._admit(entry)
                found[server] = entry
        finally:
            await sessions.aclose()
        return found

    def _config(self, thread_id: str) -> Any:
        # Each model step passes through ~15 middleware nodes; the model call limit is the
        # real bound, this only keeps LangGraph's own guard out of its way.
        limit = 25 * (self.config.run_model_call_limit + 2)
        return {"configurable": {"thread_id": thread_id}, "recursion_limit": limit}

    def _graph(self, names: tuple[str, ...]) -> CompiledStateGraph[Any, Any, Any, Any]:
        graph = self._graphs.get(names)
        if graph is None:
            tools = [self._tools[n] for n in names]
            graph = create_agent(
                self._model,
                tools=tools,
                middleware=self._middleware(list(names)),
                checkpointer=self._checkpointer,
                response_format=ToolStrategy(FinalAnswer),
                context_schema=RunContext,
            )
            self._graphs[names] = graph
        return graph

    def _middleware(self, names: list[str]) -> list[AgentMiddleware[Any, Any, Any]]:
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
        stack.append(BulkWriteFlag(self.policy, c.bulk_write_threshold))
        stack.append(RepeatGuard())
        # Runs first of the after_model hooks: refused calls never reach review or a tool.
        stack.append(CallCap(self.policy, c.tool_calls_per_turn, c.pending_approvals_per_run))
        # After CallCap: its after_model hook runs before all the others (a stopped run's
        # proposals reach neither review nor a tool), and it wraps every tool call.
        stack.append(StopGuard())
        stack.append(EditGuard())
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


async def _cut_off_turn_of(graph: Any, config: Any, message: str) -> bool:
    """Whether the thread's last turn asked ``message`` and stopped before it finished."""
    state = await graph.aget_state(config)
    if not state.next or state.interrupts:
        return False
    messages = state.values.get("messages", [])
    asked = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    return asked is not None and asked.content == message
