"""Stage timings of an approval click, for ``bench approval`` (not a bench: the leading
underscore hides it).

The bench wraps a few methods of the objects it built (never the product's code) so each
approval records when it reached each stage; the report gives, per stage, the p50 / p99 of
the time since its click was sent. Where a stage has no approval id in its arguments (the
token), the approval whose call is running in this task is used (a context variable set at
``execute``)."""

from __future__ import annotations

import contextvars
import functools
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from bench._support import percentile

# The order a click goes through; the report lists stages in it.
ORDER = (
    "click received",
    "card deciding sent",
    "decide start",
    "approver checked",
    "claim start",
    "CAS decided",
    "execute start",
    "token",
    "MCP call sent",
    "server applied",
    "audit written",
    "approval finished",
    "run resumed",
    "card final",
)


class Stages:
    def __init__(self) -> None:
        self.at: dict[str, dict[str, float]] = defaultdict(dict)
        # The app loop's own CPU time (its thread's) at each stage reached on it: what the
        # clicks cost the app whatever else the machine runs.
        self.cpu: dict[str, list[float]] = defaultdict(list)
        self._hooks: dict[str, Callable[[], None]] = {}
        self._running: contextvars.ContextVar[str | None] = contextvars.ContextVar(
            "bench_approval", default=None
        )

    def on_first(self, stage: str, hook: Callable[[], None]) -> None:
        """Call ``hook`` when the first approval reaches ``stage`` (on the marking thread)."""
        self._hooks[stage] = hook

    def mark(self, key: str | None, stage: str, at: float | None = None) -> None:
        if key and (hook := self._hooks.pop(stage, None)) is not None:
            hook()
        if key and stage not in self.at[key]:
            self.at[key][stage] = time.perf_counter() if at is None else at
            if at is None:
                self.cpu[stage].append(time.thread_time())

    def wrap(
        self,
        obj: Any,
        name: str,
        stage: str,
        key_of: Callable[..., str | None] | None = None,
        *,
        after: bool = False,
        binds: bool = False,
    ) -> None:
        """Time ``obj.name`` (an async method) as ``stage``: its start, or its end with
        ``after``. ``key_of(*args, **kwargs)`` names the approval (default: the task's);
        ``binds``: the call's task runs that approval (later stages without an id use it)."""
        original = getattr(obj, name)

        @functools.wraps(original)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            key = key_of(*args, **kwargs) if key_of else self._running.get()
            if binds:
                self._running.set(key)
            if not after:
                self.mark(key, stage)
            result = await original(*args, **kwargs)
            if after:
                self.mark(key, stage)
            return result

        setattr(obj, name, timed)

    def cpu_per_click(self, n: int) -> dict[str, float]:
        """The app loop's CPU ms per click, from the first click received to the last
        approval reaching each stage (its thread's time: load elsewhere does not count).
        Every stage marked on the app loop: the steps between them say where a click's
        CPU goes when wall-clock gaps are blurred by a loaded machine."""
        start = min(self.cpu.get("click received", [0.0]))
        return {
            stage: round((max(self.cpu[stage]) - start) * 1000 / max(1, n), 1)
            for stage in ORDER
            if self.cpu.get(stage)
        }

    def report(self, clicked_at: dict[str, float]) -> dict[str, dict[str, float]]:
        """Per stage: p50 / p99 ms since the click was sent, and how many approvals got there."""
        out: dict[str, dict[str, float]] = {}
        for stage in ORDER:
            ms = [
                (self.at[key][stage] - started) * 1000
                for key, started in clicked_at.items()
                if stage in self.at.get(key, {})
            ]
            if ms:
                out[stage] = {
                    "p50": round(percentile(ms, 0.5), 1),
                    "p99": round(percentile(ms, 0.99), 1),
                    "n": len(ms),
                }
        return out
