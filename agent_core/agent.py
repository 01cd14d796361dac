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
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphBubbleUp, GraphRecursionError
from langgraph.types import Command, Durability, StateSnapshot

from agent_core.answer import Interrupt, RunResult
from agent_core.answer_stream import AnswerListener, stream_run
from agent_core.approved_calls import ApprovedCall, dump_result, load_result, run_call
from agent_core.binding import RunContext, RunProgress, StopSignal, ToolObserver
from agent_core.config import AgentConfig
from agent_core.credentials import OAuthTokenSource
from agent_core.decisions import check_edited_args, validate_decisions
from agent_core.errors import (
    AgentError,
    ConnectRequiredError,
    CredentialError,
    InvalidDecisionError,
    ModelUnavailableError,
    NoPendingApprovalError,
    ToolAuthError,
    ToolCallError,
)
from agent_core.graph import AgentGraphs
from agent_core.health import ServerHealth
from agent_core.middleware import model_name
from agent_core.policy import ToolPolicy
from agent_core.results import Results
from agent_core.sessions import RunSessions, ServerConfig, SessionStats
from agent_core.shared_sessions import SharedSessions
from agent_core.threads import ThreadStore
from agent_core.tools import DiscoveryCache, ServerTools, ToolDefinition, visible_definitions
from agent_core.transport import ConnectionPools
from broker import Broker, BrokerError, Identity, TokensByServer

log = logging.getLogger(__name__)

# Telemetry hook: given the run's user, thread and unavailable servers, the LangChain
# callback handlers to attach to that run only (see ``opsbot.observability.runs``).
RunCallbacks = Callable[[Identity, str, Sequence[str]], Sequence[BaseCallbackHandler]]
LIMIT_TEXT = "Model call limits exceeded"
# Where ``ainvoke`` puts a run's interrupts in its output (LangGraph's key; its constant is
# private since 1.0).
INTERRUPT = "__interrupt__"
STOPPED_ANSWER = "Stopped at your request: nothing further was run."


def _from_model(exc: BaseException) -> bool:
    """Whether a failure came out of a chat model call (provider down, bad credentials...)."""
    tb = exc.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if module.startswith("langchain_core.language_models"):
            return True
        tb = tb.tb_next
    return False


@dataclass(frozen=True, slots=True)
class _Toolset:
    definitions: tuple[ToolDefinition, ...]
    unavailable: tuple[str, ...]
    no_access: tuple[str, ...]
    not_connected: tuple[str, ...] = ()  # ``oauth`` servers the user has not connected

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
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._oauth_token = oauth_token
        self.policy = policy
        self._model = model
        self.graphs = AgentGraphs(
            config,
            model=model,
            policy=policy,
            checkpointer=checkpointer,
            fallbacks=fallbacks,
            summary_model=summary_model,
            selector_model=selector_model,
            extra_middleware=extra_middleware,
        )
        self._broker = broker
        self._threads = threads
        self.threads = threads
        self.checkpointer = checkpointer
        self._observer = observer
        self._run_callbacks = run_callbacks
        self._servers = {s.name: s for s in config.servers}
        self.health = health or ServerHealth(
            {s.name: s.url for s in config.servers},
            failure_threshold=config.breaker_threshold,
            open_seconds=config.breaker_open_seconds,
            breakers={
                s.name: (s.breaker_threshold, s.breaker_open_seconds)
                for s in config.servers
                if s.breaker_threshold is not None or s.breaker_open_seconds is not None
            },
            check_interval=config.health_check_interval,
            proxies=config.proxies,
        )
        self.cache = DiscoveryCache(config.tools_max_age, monotonic)
        self.stats = SessionStats()
        # TCP connections to the servers, reused by every run (each with its own session).
        self.pools = ConnectionPools(proxies=config.proxies)
        self._discovery_locks: dict[str, asyncio.Lock] = {}
        self._admitted: dict[str, str] = {}  # the line last said of each server's tools
        self._results = Results(list(self._servers), policy, config.bulk_write_threshold)
        # Runs' sessions being ended at their servers (DELETE) after the run answered.
        self._closing: set[asyncio.Task[None]] = set()
        # Approved calls' sessions, per requester, kept open a few seconds between calls.
        self._shared = SharedSessions(self._sessions)

    # --- public API --------------------------------------------------------------------

    async def run(
        self,
        identity: Identity,
        thread_id: str,
        message: str,
        *,
        progress: RunProgress | None = None,
        stop: StopSignal | None = None,
        answer: AnswerListener | None = None,
    ) -> RunResult:
        """Answer ``message`` on ``thread_id`` for ``identity`` (who must own the thread).

        ``progress`` is told of each MCP call as it starts and ends; ``stop`` is read before
        each model step and tool call (a stopped run starts nothing more). ``answer`` is
        told the answer's text as the model writes it (``agent_core.answer_stream``); the
        result still carries the whole checked answer."""
        await self._threads.require_owner(thread_id, identity.subject)
        # A thread created for this very message has no checkpoint yet: no interrupted turn
        # of it to look for, so no read of the state before the run (once per new thread;
        # a retried run reads it).
        fresh = self._threads.take_new(thread_id)
        payload = {"messages": [HumanMessage(content=message)]}
        # A first run only reads (every write waits for review), and the message it answers
        # is already durable in the job that runs it: a crash mid-run re-runs the reads, so
        # the graph checkpoints once, at exit. The interrupt that ends a run with a proposed
        # write is in that exit checkpoint, saved before ``run`` returns, so before any card.
        return await self._invoke(
            identity,
            thread_id,
            lambda: payload,
            None,
            continues=None if fresh else message,
            durability="exit",
            progress=progress,
            stop=stop,
            answer_text=answer,
        )

    async def resume(
        self,
        identity: Identity,
        thread_id: str,
        decisions: Sequence[Mapping[str, Any]],
        *,
        approval_id: str | None = None,
        recorded: Mapping[str, Mapping[str, Any]] | None = None,
        stop: StopSignal | None = None,
    ) -> RunResult:
        """Continue a paused run with one decision per pending action, in order.

        ``identity`` is the requester (the thread's owner): writes run with their fresh
        tokens, never the approver's. ``approval_id`` scopes the writes' idempotency keys.
        ``recorded`` holds, by tool call id, the stored results (``dump_result``) of approved
        calls that already ran (``execute``): the model gets those, nothing runs twice.
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

        results = {k: load_result(v) for k, v in (recorded or {}).items()}
        # A resume runs approved writes: each step is saved before the next starts, so a
        # write's result is never lost after it ran (a retry would only repeat it under the
        # same idempotency key) and a further interrupt is saved before its card.
        return await self._invoke(
            identity,
            thread_id,
            payload,
            approval_id,
            recorded=results,
            durability="sync",
            stop=stop,
        )

    async def execute(
        self, identity: Identity, call: ApprovedCall, *, tokens: TokensByServer | None = None
    ) -> dict[str, Any]:
        """Run one approved call of the paused step now, as ``identity`` (the requester).

        ``call`` comes from the approval record of a call the thread is waiting on: its
        ``args`` are checked again here against the tool's current schema when they differ
        from the model's ``proposed_args`` (an edit); the tool must still be allowlisted. The
        caller mints the requester's fresh tokens right before (``approvals``) and hands them as
        ``tokens``: the call carries its server's one, no second exchange; the idempotency key
        scoped by ``call.approval_id``, the audit rows and the retry are those of a call the graph
        runs. Reading the checkpoint is not needed (and costly under load): the resume
        checks the decisions against the pending interrupt. Returns the result stored for
        the resume (``approved_calls.dump_result``).
        """
        thread_id = call.thread_id
        await self._threads.require_owner(thread_id, identity.subject)
        name = call.tool
        args = dict(call.args)
        if not self.is_allowed(name) or self.policy.is_read(name):
            raise InvalidDecisionError(
                f"{name} is not an approvable write", {"tool": "not an approvable write"}
            )
        # The requester's sessions, shared with their other approved calls meanwhile.
        async with self._shared.borrow(identity) as sessions:
            toolset = await self._toolset(sessions)
            definition = toolset.by_name.get(name)
            if definition is not None:  # this decision's fresh token, on a session kept open
                server = definition.server
                await sessions.recredential(server, (tokens or {}).get(server))
            if args != dict(call.proposed_args):
                # Edited: the agent's one rule, against the tool's current schema.
                args = check_edited_args(
                    name, args, input_schema=self.tool_schema(name), allowed=True
                )
            # Its server down (or the tool gone): no template, so the call comes back as
            # "not run" without leaving opsbot, as it would in the graph.
            template = None if definition is None else self.graphs.template(definition)
            ctx = self._context(identity, thread_id, sessions, toolset, call.approval_id)
            tool_call = {"id": call.call_id, "name": name, "args": args}
            if self._run_callbacks is None:
                message = await run_call(ctx, template, tool_call)
            else:
                # Traced like a run ("opsbot.execute", its tool span inside it), for the
                # requester, never the approver: the call runs with the requester's rights.
                # No servers named unavailable: degraded runs count agent runs, not this call.
                callbacks = list(self._run_callbacks(identity, thread_id, ()))

                async def one_call(_: object) -> ToolMessage:
                    return await run_call(ctx, template, tool_call)

                message = await RunnableLambda(one_call, name="execute").ainvoke(
                    None,
                    {"callbacks": callbacks, "metadata": {"opsbot.run.kind": "execute"}},
                )
            return dump_result(message)

    async def pending(self, identity: Identity, thread_id: str) -> Interrupt | None:
        """The interrupt the thread is waiting on, if any (owner only)."""
        await self._threads.require_owner(thread_id, identity.subject)
        graph = self.graphs.graph(self.graphs.names())
        state = await graph.aget_state(self._config(thread_id))
        if not state.interrupts:
            return None
        return self._results.interrupt(
            thread_id, state.values, state.interrupts[0].value, model_used=""
        )

    def tool_schema(self, name: str) -> dict[str, Any] | None:
        """The input JSON schema an edit of ``name`` (a prefixed tool) must satisfy."""
        for entry in (self.cache.last(s) for s in self._servers):
            for d in entry.tools if entry else ():
                if d.prefixed_name == name:
                    return d.model_schema()
        return None

    def is_allowed(self, name: str) -> bool:
        """Whether ``name`` (prefixed) is on the allowlist."""
        return self.policy.is_allowed(name)

    def takes_exchanged_token(self, server: str) -> bool:
        """Whether ``server`` is in ``exchange`` mode: its calls carry the user's exchanged
        token (``approvals`` mints the requester's fresh one before an approved write)."""
        config = self._servers.get(server)
        return config is not None and config.takes_exchanged_token

    # --- a run -------------------------------------------------------------------------

    async def _invoke(
        self,
        identity: Identity,
        thread_id: str,
        payload: Callable[[], Any],
        approval_id: str | None,
        *,
        continues: str | None = None,
        recorded: Mapping[str, ToolMessage] | None = None,
        durability: Durability,
        progress: RunProgress | None = None,
        stop: StopSignal | None = None,
        answer_text: AnswerListener | None = None,
    ) -> RunResult:
        sessions = self._sessions(identity)
        try:
            toolset = await self._toolset(sessions)
            ctx = self._context(identity, thread_id, sessions, toolset, approval_id)
            ctx.recorded = dict(recorded or {})
            ctx.progress, ctx.stop = progress, stop
            names = tuple(sorted(d.prefixed_name for d in toolset.definitions))
            for d in toolset.definitions:
                self.graphs.template(d)
            graph = self.graphs.graph(names)
            config = self._config(thread_id)
            if self._run_callbacks is not None:
                config["callbacks"] = list(
                    self._run_callbacks(identity, thread_id, toolset.unavailable)
                )
            stopped = False
            graph_input = payload()
            if continues is not None:
                state = await graph.aget_state(config)
                if _waits_on_turn_of(state, continues):
                    # This very turn already stopped for review and a crash lost the reply
                    # (the job runs it again): the same proposal, not a second one.
                    return self._results.interrupt(
                        thread_id, state.values, state.interrupts[0].value, model_used=""
                    )
                if _cut_off_turn_of(state, continues):
                    # A crash stopped this very turn mid-way (a durable job runs it again):
                    # carry on from its last checkpoint instead of asking the same twice.
                    graph_input = None
            out: Any = None
            try:
                if answer_text is None:
                    out = await graph.ainvoke(
                        graph_input,
                        config,
                        context=ctx,
                        durability=durability,
                        # Every state channel, as ``aget_state`` reads them (private ones too).
                        output_keys=graph.stream_channels_asis,
                    )
                else:
                    out = await stream_run(
                        graph,
                        graph_input,
                        config,
                        context=ctx,
                        durability=durability,
                        listener=answer_text,
                        allowed_links=self._results.allowed_links,
                    )
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
            if isinstance(out, dict):
                # The final state as the run left it (the same channels ``aget_state`` reads)
                # and its interrupts: no second read of the checkpoint.
                values = {k: v for k, v in out.items() if k != INTERRUPT}
                interrupts = [i.value for i in out.get(INTERRUPT, ())]
            else:
                state = await graph.aget_state(config)
                values, interrupts = state.values, [i.value for i in state.interrupts]
            used = ctx.models_used[-1] if ctx.models_used else model_name(self._model)
            if interrupts:
                return self._results.interrupt(thread_id, values, interrupts[0], model_used=used)
            answer = self._results.answer(
                values,
                toolset.unavailable,
                toolset.no_access,
                used,
                stopped=stopped,
                not_connected=toolset.not_connected,
            )
            answer.connect = dict(sessions.connect_needed)
            if stop is not None and await stop.requested():
                # Ended by Stop, not by the model: say so (what ran is in actions_taken).
                answer.answer = STOPPED_ANSWER
                answer.sources, answer.caveats = [], []
            return answer
        finally:
            self._close_later(sessions)

    def _close_later(self, sessions: RunSessions) -> None:
        """End the run's sessions at their servers after the run returned: the DELETE is
        not part of the answer's time. ``settle`` (at shutdown) waits for the stragglers."""
        task = asyncio.create_task(sessions.aclose(), name="mcp:close")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def settle(self) -> None:
        """Close the approved calls' shared sessions and wait until every finished run's MCP
        sessions are closed (call at shutdown)."""
        await self._shared.aclose()
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _context(
        self,
        identity: Identity,
        thread_id: str,
        sessions: RunSessions,
        toolset: _Toolset,
        approval_id: str | None,
    ) -> RunContext:
        return RunContext(
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
        )

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
            pools=self.pools,
        )

    async def _toolset(self, sessions: RunSessions) -> _Toolset:
        names = list(self._servers)
        up = await self.health.available(names)
        unavailable = [n for n in names if not up[n]]
        no_access: list[str] = []
        not_connected: list[str] = []

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
            except ConnectRequiredError:
                not_connected.append(server)
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
        return _Toolset(
            tuple(visible),
            tuple(sorted(unavailable)),
            tuple(sorted(no_access)),
            tuple(sorted(not_connected)),
        )

    def _admit(self, entry: ServerTools) -> None:
        """After a discovery: trust readOnlyHint where the operator opted in, and say what
        the model will and will not see (one line per server)."""
        config = self._servers[entry.server]
        if config.trust_read_only_hint and config.auth != "static":
            hinted = [d.prefixed_name for d in entry.tools if d.read_only_hint]
            self.policy.trust_read_only(entry.server, hinted)
        names = [d.prefixed_name for d in entry.tools]
        allowed = [n for n in names if self.policy.is_allowed(n)]
        left_out = sorted(set(names) - set(allowed))
        line = (
            f"mcp server {entry.server}: auth={config.auth} tools={len(names)} "
            f"allowlisted={len(allowed)} left out: {', '.join(left_out) or 'none'}"
        )
        # Said when first listed, and again only when a later listing changes it.
        if self._admitted.get(entry.server) != line:
            self._admitted[entry.server] = line
            log.info("%s", line)

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

    async def list_at_start(self) -> None:
        """List now the servers that need no user's token (``static``, ``none``): their line
        (tool count, allowlisted, names left out) is in the start-up log, and the first run
        finds their tools cached. One that cannot be listed says why in one line; the others
        are listed at their first run, with that run's user's token."""
        service = [name for name, c in self._servers.items() if c.acting_as != "user"]
        if not service:
            return
        found = await self.discover_all(Identity(subject="opsbot"), user_servers=False)
        for name in service:
            outcome = found.get(name)
            if isinstance(outcome, ToolCallError):
                log.warning("mcp server %s: tools not listed at start: %s", name, outcome)

    def _config(self, thread_id: str) -> Any:
        # Each model step passes through ~15 middleware nodes; the model call limit is the
        # real bound, this only keeps LangGraph's own guard out of its way.
        limit = 25 * (self.config.run_model_call_limit + 2)
        return {"configurable": {"thread_id": thread_id}, "recursion_limit": limit}


def _asked_last(state: StateSnapshot, message: str) -> bool:
    messages = state.values.get("messages", [])
    asked = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    return asked is not None and asked.content == message


def _cut_off_turn_of(state: StateSnapshot, message: str) -> bool:
    """Whether the thread's last turn asked ``message`` and stopped before it finished."""
    return bool(state.next) and not state.interrupts and _asked_last(state, message)


def _waits_on_turn_of(state: StateSnapshot, message: str) -> bool:
    """Whether the thread's last turn asked ``message`` and waits for review."""
    return bool(state.interrupts) and _asked_last(state, message)
