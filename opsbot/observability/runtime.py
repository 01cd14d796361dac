"""Pull-only state published at scrape time: circuit breakers and the broker's counters.

``open_assistant`` registers what it built (``with watching(health, broker_metrics): ...``);
``/metrics`` calls ``await refresh_runtime_gauges()`` before rendering. Counters of the
broker are plain attributes kept by ``broker.BrokerMetrics`` (no Prometheus import in the
core); this collector turns them into Prometheus counters.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent_core.health import ServerHealth
from broker.metrics import BrokerMetrics
from infra.observability import metrics as m


@dataclass
class _Watched:
    health: list[tuple[ServerHealth, tuple[str, ...]]] = field(default_factory=list)
    brokers: list[BrokerMetrics] = field(default_factory=list)


_WATCHED = _Watched()


@contextlib.contextmanager
def watching(
    health: ServerHealth | None = None,
    servers: Iterable[str] = (),
    broker_metrics: BrokerMetrics | None = None,
) -> Iterator[None]:
    """Publish ``health``'s breakers and ``broker_metrics`` while the block runs."""
    entry = None if health is None else (health, tuple(servers))
    if entry is not None:
        _WATCHED.health.append(entry)
    if broker_metrics is not None:
        _WATCHED.brokers.append(broker_metrics)
    try:
        yield
    finally:
        if entry is not None:
            _WATCHED.health.remove(entry)
        if broker_metrics is not None:
            _WATCHED.brokers.remove(broker_metrics)


async def refresh_runtime_gauges() -> None:
    """Set ``opsbot_circuit_breaker_open`` from every watched ``ServerHealth``."""
    for health, servers in list(_WATCHED.health):
        for server in servers:
            m.BREAKER_OPEN.labels(server=server).set(1 if await health.is_open(server) else 0)


class BrokerCollector(Collector):
    """The broker's counters (summed over the brokers watched in this process)."""

    def collect(self) -> Iterable[Metric]:
        brokers = list(_WATCHED.brokers)
        exchanges = CounterMetricFamily(
            "opsbot_broker_exchanges", "Token exchanges made by the broker."
        )
        exchanges.add_metric([], sum(b.exchanges for b in brokers))
        seconds = CounterMetricFamily(
            "opsbot_broker_exchange_seconds", "Time spent in token exchanges."
        )
        seconds.add_metric([], sum(b.exchange_seconds_total for b in brokers))
        failures = CounterMetricFamily(
            "opsbot_broker_failures", "Broker failures by error class.", labels=["error"]
        )
        totals: dict[str, int] = {}
        for b in brokers:
            for error, count in b.failures.items():
                totals[error] = totals.get(error, 0) + count
        for error, count in sorted(totals.items()):
            failures.add_metric([error], count)
        hits = CounterMetricFamily(
            "opsbot_broker_cache_lookups", "Token cache lookups by result.", labels=["result"]
        )
        hits.add_metric(["hit"], sum(b.cache_hits for b in brokers))
        hits.add_metric(["miss"], sum(b.cache_misses for b in brokers))
        refreshes = CounterMetricFamily(
            "opsbot_broker_refreshes", "Refresh-token redemptions by the broker."
        )
        refreshes.add_metric([], sum(b.refreshes for b in brokers))
        latency = GaugeMetricFamily(
            "opsbot_broker_exchange_latency_ms",
            "Recent token-exchange latency percentiles (milliseconds).",
            labels=["quantile"],
        )
        for q in (0.5, 0.99):
            values = [v for b in brokers if (v := b.exchange_ms_percentile(q)) is not None]
            if values:
                latency.add_metric([str(q)], max(values))
        yield from (exchanges, seconds, failures, hits, refreshes, latency)


m.REGISTRY.register(BrokerCollector())
