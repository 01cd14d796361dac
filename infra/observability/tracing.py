"""OpenTelemetry tracing: an OTLP/HTTP exporter when an endpoint is configured, else no-op.

Spans are created through the tracer this module hands out (never the global one), so tests
and several apps in one process do not fight over the global provider.

LangSmith tracing is independent: LangChain enables it itself when *its* variables
(``LANGSMITH_TRACING=true``, ``LANGSMITH_API_KEY``, optional ``LANGSMITH_PROJECT``) are in the
process environment; opsbot neither reads nor forwards them.

Example::

    tracing = Tracing.from_settings(settings.observability)
    span = tracing.tracer.start_span("opsbot.run")
    ...
    tracing.shutdown()      # flushes the exporter
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from infra.settings import ObservabilitySettings

TRACER_NAME = "opsbot"


@dataclass
class Tracing:
    """A tracer (real or no-op) and the pseudonym key spans are tagged with."""

    tracer: trace.Tracer
    pseudonym_key: str
    provider: TracerProvider | None = None

    @classmethod
    def from_settings(
        cls, settings: ObservabilitySettings, *, exporter: SpanExporter | None = None
    ) -> Tracing:
        key = settings.pseudonym_key.get_secret_value()
        if exporter is None and not settings.otlp_endpoint:
            return cls(trace.NoOpTracer(), key)
        if exporter is None:
            # Imported only when an endpoint is configured: the exporter pulls in protobuf,
            # which every process without tracing (the default) paid for at start-up.
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=settings.otlp_endpoint)
        provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider.get_tracer(TRACER_NAME), key, provider)

    @property
    def enabled(self) -> bool:
        return self.provider is not None

    def flush(self) -> bool:
        return True if self.provider is None else self.provider.force_flush()

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()
