"""Per-run telemetry: one LangChain callback handler per agent run, making OpenTelemetry
spans (run → middleware decisions, model calls, tool calls) and moving the run metrics.

Every span carries ``thread_id`` and ``opsbot.user`` — the pseudonymous id, never the
subject, email or chat user. Spans carry names, counts, models and error *classes*; never
prompts, arguments or tool output.

Wiring (``opsbot.wiring.open_assistant``)::

    agent = Agent(..., run_callbacks=RunInstrumentation(tracing, prices))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langgraph.types import Command
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from broker import Identity
from infra.observability import metrics as m
from infra.observability.pseudonym import pseudonymous_id
from infra.observability.tracing import Tracing
from infra.settings import ModelPrice

_LIMIT_NODE = "ModelCallLimitMiddleware"
_PII_NODE = "PIIMiddleware["
_BULK_NODE = "BulkWriteFlag"
# Middleware hooks run as graph nodes named "<middleware>.<hook>".
_HOOKS = frozenset({"before_agent", "before_model", "after_model", "after_agent"})


@dataclass
class RunInstrumentation:
    """``Agent(run_callbacks=...)``: builds the handler for one run."""

    tracing: Tracing
    prices: Mapping[str, ModelPrice] = field(default_factory=dict)

    def __call__(
        self, identity: Identity, thread_id: str, unavailable: Sequence[str]
    ) -> list[BaseCallbackHandler]:
        for server in unavailable:
            m.DEGRADED_RUNS.labels(server=server).inc()
        return [
            RunTelemetry(
                self.tracing,
                self.prices,
                thread_id=thread_id,
                user=pseudonymous_id(self.tracing.pseudonym_key, identity.subject),
                unavailable=tuple(unavailable),
            )
        ]


def _name(serialized: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> str:
    name = kwargs.get("name")
    if isinstance(name, str) and name:
        return name
    if serialized:
        if isinstance(serialized.get("name"), str):
            return str(serialized["name"])
        ids = serialized.get("id")
        if isinstance(ids, list) and ids:
            return str(ids[-1])
    return "chain"


def _model_name(serialized: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> str:
    meta = kwargs.get("metadata") or {}
    params = kwargs.get("invocation_params") or {}
    for value in (
        meta.get("ls_model_name"),
        params.get("model_name"),
        params.get("model"),
    ):
        if isinstance(value, str) and value:
            return value
    return _name(serialized, {})


class RunTelemetry(BaseCallbackHandler):
    """Spans and metrics for one run. Runs inline on the event loop (cheap, no I/O)."""

    run_inline = True
    raise_error = False

    def __init__(
        self,
        tracing: Tracing,
        prices: Mapping[str, ModelPrice],
        *,
        thread_id: str,
        user: str,
        unavailable: tuple[str, ...] = (),
    ) -> None:
        self._tracer = tracing.tracer
        self._prices = prices
        self._attrs = {"thread_id": thread_id, "opsbot.user": user}
        self._unavailable = unavailable
        self._parents: dict[UUID, UUID | None] = {}
        self._spans: dict[UUID, Span] = {}
        self._root: UUID | None = None
        self._kind = "run"
        self._interrupted = False
        self._models: dict[UUID, str] = {}
        self._failed_model_parents: set[UUID] = set()
        self.tokens = 0
        self.cost = 0.0

    # --- span plumbing --------------------------------------------------------------------

    def _start(self, run_id: UUID, parent: UUID | None, name: str, **attrs: Any) -> Span:
        context = None
        ancestor = parent
        while ancestor is not None and ancestor not in self._spans:
            ancestor = self._parents.get(ancestor)
        if ancestor is not None:
            context = trace.set_span_in_context(self._spans[ancestor])
        span = self._tracer.start_span(name, context=context, attributes={**self._attrs, **attrs})
        self._spans[run_id] = span
        return span

    def _end(
        self,
        run_id: UUID,
        attrs: Mapping[str, Any] | None = None,
        *,
        error: BaseException | None = None,
    ) -> None:
        span = self._spans.pop(run_id, None)
        if span is None:
            return
        for key, value in (attrs or {}).items():
            span.set_attribute(key, value)
        if error is not None:
            span.set_attribute("error.type", type(error).__name__)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end()

    # --- chains: the run and middleware nodes ------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._parents[run_id] = parent_run_id
        name = _name(serialized, kwargs)
        if parent_run_id is None and self._root is None:
            self._root = run_id
            kind = (kwargs.get("metadata") or {}).get("opsbot.run.kind")
            if kind == "execute":
                self._kind = "execute"  # an approved call run at its decision
            else:
                self._kind = "resume" if isinstance(inputs, Command) else "run"
            attrs: dict[str, Any] = {"opsbot.run.kind": self._kind}
            if self._unavailable:
                attrs["opsbot.degraded_servers"] = list(self._unavailable)
            self._start(run_id, None, f"opsbot.{self._kind}", **attrs)
        elif name.rpartition(".")[2] in _HOOKS:
            self._start(run_id, parent_run_id, f"middleware {name}", **{"opsbot.middleware": name})

    def on_chain_end(
        self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        span = self._spans.get(run_id)
        if run_id == self._root:
            outcome = "interrupted" if self._interrupted else "completed"
            m.RUNS.labels(kind=self._kind, outcome=outcome).inc()
            self._spans[run_id].set_attribute("opsbot.outcome", outcome)
            m.RUN_TOKENS.observe(self.tokens)
            m.RUN_COST.observe(self.cost)
            self._end(run_id, {"opsbot.tokens": self.tokens, "opsbot.cost_usd": self.cost})
            return
        if span is None:
            return
        decision = self._decision(span, outputs)
        self._end(run_id, {"opsbot.decision": decision})

    def _decision(self, span: Span, outputs: Any) -> str:
        name = str(getattr(span, "name", ""))
        changed = isinstance(outputs, dict) and any(v is not None for v in outputs.values())
        if not changed:
            return "pass"
        assert isinstance(outputs, dict)
        if _LIMIT_NODE in name and outputs.get("jump_to") == "end":
            m.CALL_LIMIT_HITS.inc()
            return "call_limit_hit"
        if _PII_NODE in name and outputs.get("messages"):
            pii_type = name.split("[", 1)[1].split("]", 1)[0]
            m.PII_REDACTIONS.labels(pii_type=pii_type).inc()
            return "redacted"
        if _BULK_NODE in name:
            m.BULK_WRITE_PROPOSALS.inc()
            return "bulk_write_flagged"
        if outputs.get("jump_to"):
            return f"jump_to:{outputs['jump_to']}"
        return "changed"

    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        interrupted = type(error).__name__ in ("GraphInterrupt", "Interrupt")
        if run_id == self._root:
            if interrupted:
                m.RUNS.labels(kind=self._kind, outcome="interrupted").inc()
                self._end(run_id, {"opsbot.outcome": "interrupted"})
                return
            if type(error).__name__ == "GraphRecursionError":
                m.CALL_LIMIT_HITS.inc()
            m.RUNS.labels(kind=self._kind, outcome="error").inc()
            m.RUN_ERRORS.labels(kind=self._kind, error=type(error).__name__).inc()
            self._end(run_id, error=error)
            return
        if interrupted:
            self._interrupted = True  # a node paused the run for human review
            self._end(run_id, {"opsbot.decision": "interrupt"})
        else:
            self._end(run_id, error=error)

    # --- model calls ----------------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._parents[run_id] = parent_run_id
        model = _model_name(serialized, kwargs)
        self._models[run_id] = model
        m.MODEL_CALLS.labels(model=model).inc()
        fallback = parent_run_id is not None and parent_run_id in self._failed_model_parents
        if fallback:
            m.FALLBACKS.labels(model=model).inc()
        self._start(
            run_id,
            parent_run_id,
            f"model {model}",
            **{"gen_ai.request.model": model, "opsbot.fallback": fallback},
        )

    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        model = self._models.pop(run_id, "unknown")
        tokens_in = tokens_out = 0
        for generations in response.generations:
            for generation in generations:
                usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
                if usage:
                    tokens_in += int(usage.get("input_tokens", 0))
                    tokens_out += int(usage.get("output_tokens", 0))
        price = self._prices.get(model)
        cost = 0.0
        if price is not None:
            cost = (
                tokens_in * price.input_per_million + tokens_out * price.output_per_million
            ) / 1_000_000
        if tokens_in:
            m.TOKENS.labels(model=model, direction="input").inc(tokens_in)
        if tokens_out:
            m.TOKENS.labels(model=model, direction="output").inc(tokens_out)
        if cost:
            m.COST.labels(model=model).inc(cost)
        self.tokens += tokens_in + tokens_out
        self.cost += cost
        self._end(
            run_id,
            {
                "gen_ai.usage.input_tokens": tokens_in,
                "gen_ai.usage.output_tokens": tokens_out,
                "opsbot.cost_usd": cost,
            },
        )

    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        model = self._models.pop(run_id, "unknown")
        m.MODEL_ERRORS.labels(model=model, error=type(error).__name__).inc()
        if parent_run_id is not None:
            self._failed_model_parents.add(parent_run_id)
        self._end(run_id, error=error)

    # --- tool calls -----------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._parents[run_id] = parent_run_id
        name = _name(serialized, kwargs)
        attrs: dict[str, Any] = {"gen_ai.tool.name": name}
        call_id = (kwargs.get("inputs") or {}).get("tool_call_id") if kwargs.get("inputs") else None
        if isinstance(call_id, str):
            attrs["gen_ai.tool.call.id"] = call_id
        self._start(run_id, parent_run_id, f"tool {name}", **attrs)

    def on_tool_end(
        self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        status = getattr(output, "status", "success")
        self._end(run_id, {"opsbot.outcome": str(status)})

    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._end(run_id, error=error)
