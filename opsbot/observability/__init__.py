"""Operations: Prometheus metrics, OpenTelemetry traces, JSON logs and readiness.

Public API::

    from opsbot.observability import (REGISTRY, Tracing, RunInstrumentation, ToolMetrics,
        ObserverChain, ApprovalMetricsSink, Readiness, ops_routes, request_metrics,
        watching, configure_json_logging, request_context, pseudonymous_id)

Exception tree: this package raises none of its own. Probes turn every failure into a
failed ``Check``; telemetry never fails a run (callback errors are not raised).
"""

from infra.observability.health import Check, Readiness, ReadinessReport
from infra.observability.http import METRICS_PATH, READY_PATH, ops_routes, request_metrics
from infra.observability.logs import configure_json_logging, request_context, scrub_text
from infra.observability.metrics import REGISTRY
from infra.observability.pseudonym import pseudonymous_id
from infra.observability.tracing import Tracing
from opsbot.observability.approvals import ApprovalMetricsSink
from opsbot.observability.runs import RunInstrumentation, RunTelemetry
from opsbot.observability.runtime import refresh_runtime_gauges, watching
from opsbot.observability.tools import ObserverChain, ToolMetrics

__all__ = [
    "METRICS_PATH",
    "READY_PATH",
    "REGISTRY",
    "ApprovalMetricsSink",
    "Check",
    "ObserverChain",
    "Readiness",
    "ReadinessReport",
    "RunInstrumentation",
    "RunTelemetry",
    "ToolMetrics",
    "Tracing",
    "configure_json_logging",
    "ops_routes",
    "pseudonymous_id",
    "refresh_runtime_gauges",
    "request_context",
    "request_metrics",
    "scrub_text",
    "watching",
]
