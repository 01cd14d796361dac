"""Counters and timings of the broker, for the observability work to publish."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class BrokerMetrics:
    """Plain counters; ``snapshot()`` returns a JSON-ready dict."""

    exchanges: int = 0
    refreshes: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    exchange_seconds_total: float = 0.0
    failures: Counter[str] = field(default_factory=Counter)  # by error class name
    exchange_latencies: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))

    def record_exchange(self, seconds: float) -> None:
        self.exchanges += 1
        self.exchange_seconds_total += seconds
        self.exchange_latencies.append(seconds)

    def record_failure(self, error: BaseException) -> None:
        self.failures[type(error).__name__] += 1

    def exchange_ms_percentile(self, q: float) -> float | None:
        """A percentile (0..1) of recent exchange latencies, in milliseconds."""
        if not self.exchange_latencies:
            return None
        ordered = sorted(self.exchange_latencies)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000

    def snapshot(self) -> dict[str, Any]:
        lookups = self.cache_hits + self.cache_misses
        return {
            "exchanges": self.exchanges,
            "refreshes": self.refreshes,
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
            "cache_hit_ratio": (self.cache_hits / lookups) if lookups else 0.0,
            "exchange_seconds_total": self.exchange_seconds_total,
            "exchange_ms_p50": self.exchange_ms_percentile(0.5),
            "exchange_ms_p99": self.exchange_ms_percentile(0.99),
            "failures": dict(self.failures),
        }
