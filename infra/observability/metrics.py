"""The Prometheus metrics of opsbot, in one registry of their own.

Core packages may import these module-level objects (``opsbot`` is allowed to them); nothing
here imports a chat SDK. Labels carry server, tool, model and error *class* names only —
never a user, a thread id, arguments or tool output (unbounded or personal label values).

``/metrics`` (``infra.observability.http``) renders ``REGISTRY`` after the roof's
``opsbot.observability.refresh_runtime_gauges()`` has read the pull-only state (circuit
breakers, broker counters).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

# --- requests ------------------------------------------------------------------------------
HTTP_REQUESTS = Counter(
    "opsbot_http_requests",
    "HTTP requests served by the app, by route and status code.",
    ["route", "status"],
    registry=REGISTRY,
)
RUNS = Counter(
    "opsbot_runs",
    "Agent runs (a new message: run; after a decision: resume), by outcome.",
    ["kind", "outcome"],
    registry=REGISTRY,
)
RUN_ERRORS = Counter(
    "opsbot_run_errors",
    "Agent runs that failed, by error class.",
    ["kind", "error"],
    registry=REGISTRY,
)

# 2.5-10 ms apart from 5 to 50 ms, where the ack's goals lie (lag p99 <= 20 ms, ack p99
# <= 50 ms), 25 ms up to 100: with 20/50/100 only, every p99 between 50 and 100 ms was
# interpolated inside that one bucket (the "89.5 ms" the benches reported).
_FINE = tuple(n / 1000 for n in (1, 2.5, 5, 7.5, 10, 15, 20, 25, 30, 40, 50, 60, 75, 100))
LAG_BUCKETS = (*_FINE, 0.25, 0.5, 1.0, 2.5, 5.0)
LOOP_LAG = Histogram(
    "opsbot_event_loop_lag_seconds",
    "How late the event loop ran a callback that was due (sampled), by loop: main (agent "
    "runs), ack (the Slack ack path on its own thread, and Teams' beside it under opsbot "
    "serve) or teams-ack (Teams' ack thread under opsbot teams).",
    ["loop"],
    buckets=LAG_BUCKETS,
    registry=REGISTRY,
)

# --- tools ---------------------------------------------------------------------------------
TOOL_CALLS = Counter(
    "opsbot_tool_calls",
    "Tool calls that left the process, by MCP server, kind (read/write) and outcome.",
    ["server", "kind", "outcome"],
    registry=REGISTRY,
)
TOOL_ERRORS = Counter(
    "opsbot_tool_errors",
    "Failed tool calls by MCP server and error class.",
    ["server", "error"],
    registry=REGISTRY,
)
TOOL_RETRIES = Counter(
    "opsbot_tool_retries",
    "Tool calls attempted again after a transient failure, by MCP server.",
    ["server"],
    registry=REGISTRY,
)
TOOL_SECONDS = Histogram(
    "opsbot_tool_call_seconds",
    "Tool call latency by MCP server.",
    ["server"],
    registry=REGISTRY,
)

# --- model ---------------------------------------------------------------------------------
MODEL_CALLS = Counter(
    "opsbot_model_calls", "Chat model calls by model.", ["model"], registry=REGISTRY
)
MODEL_ERRORS = Counter(
    "opsbot_model_errors",
    "Failed chat model calls by model and error class.",
    ["model", "error"],
    registry=REGISTRY,
)
CALL_LIMIT_HITS = Counter(
    "opsbot_model_call_limit_hits",
    "Runs stopped by the model call limit (run or thread).",
    registry=REGISTRY,
)
FALLBACKS = Counter(
    "opsbot_model_fallbacks",
    "Model calls served by a fallback model after the primary failed.",
    ["model"],
    registry=REGISTRY,
)
TOKENS = Counter(
    "opsbot_model_tokens",
    "Tokens used, from the models' usage metadata, by model and direction.",
    ["model", "direction"],
    registry=REGISTRY,
)
COST = Counter(
    "opsbot_model_cost_usd",
    "Model cost in US dollars (usage metadata × configured prices), by model.",
    ["model"],
    registry=REGISTRY,
)
RUN_TOKENS = Histogram(
    "opsbot_run_tokens",
    "Tokens used per run.",
    buckets=(100, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000),
    registry=REGISTRY,
)
RUN_COST = Histogram(
    "opsbot_run_cost_usd",
    "Model cost per run in US dollars.",
    buckets=(0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
    registry=REGISTRY,
)

# --- middleware decisions ------------------------------------------------------------------
PII_REDACTIONS = Counter(
    "opsbot_pii_redactions",
    "Messages changed by the PII middleware, by PII type.",
    ["pii_type"],
    registry=REGISTRY,
)
BULK_WRITE_PROPOSALS = Counter(
    "opsbot_bulk_write_proposals",
    "Model turns flagged as bulk-write proposals (many writes at once).",
    registry=REGISTRY,
)
DEGRADED_RUNS = Counter(
    "opsbot_degraded_runs",
    "Runs that left out an unavailable MCP server (degraded mode), by server.",
    ["server"],
    registry=REGISTRY,
)
BREAKER_OPEN = Gauge(
    "opsbot_circuit_breaker_open",
    "1 while the MCP server's circuit breaker is open, else 0.",
    ["server"],
    registry=REGISTRY,
)

# --- approvals -----------------------------------------------------------------------------
INTERRUPTS = Counter(
    "opsbot_interrupts",
    "Writes proposed for human approval (one per action request), by tool.",
    ["tool"],
    registry=REGISTRY,
)
DECISIONS = Counter(
    "opsbot_approval_decisions",
    "Decisions on proposed writes: approve, edit, reject or expired.",
    ["decision"],
    registry=REGISTRY,
)
DECISION_SECONDS = Histogram(
    "opsbot_approval_decision_seconds",
    "Time from a proposal to its decision.",
    buckets=(5, 15, 30, 60, 120, 300, 600, 1800, 3600, 14400, 86400),
    registry=REGISTRY,
)

# --- chat ----------------------------------------------------------------------------------
FEEDBACK = Counter(
    "opsbot_answer_feedback",
    "Thumbs up (positive) or down (negative) on answers, by rating.",
    ["rating"],
    registry=REGISTRY,
)
STOPS = Counter(
    "opsbot_runs_stopped",
    "Stop pressed by a requester: whether a run was working, and approvals withdrawn.",
    ["what"],
    registry=REGISTRY,
)

__all__ = [
    "BREAKER_OPEN",
    "BULK_WRITE_PROPOSALS",
    "CALL_LIMIT_HITS",
    "COST",
    "DECISIONS",
    "DECISION_SECONDS",
    "DEGRADED_RUNS",
    "FALLBACKS",
    "FEEDBACK",
    "HTTP_REQUESTS",
    "INTERRUPTS",
    "LOOP_LAG",
    "MODEL_CALLS",
    "MODEL_ERRORS",
    "PII_REDACTIONS",
    "REGISTRY",
    "RUNS",
    "RUN_COST",
    "RUN_ERRORS",
    "RUN_TOKENS",
    "STOPS",
    "TOKENS",
    "TOOL_CALLS",
    "TOOL_ERRORS",
    "TOOL_RETRIES",
    "TOOL_SECONDS",
]
