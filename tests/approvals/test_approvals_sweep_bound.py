"""A decision interrupted by a crash is finished by the sweeper within 30 s with the default
settings (issue 18): each sweep tick (``sweep_interval_seconds``) finishes approvals left
deciding for longer than ``reconcile_grace_seconds``."""

from __future__ import annotations

from datetime import timedelta

from approval_fakes import build_harness

from approvals import ActionDecision, ApprovalStatus
from infra.settings import Settings

FINISHED_WITHIN = timedelta(seconds=30)


async def test_default_sweeps_finish_an_interrupted_decision_within_30_seconds() -> None:
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    grace = timedelta(seconds=settings.approvals.reconcile_grace_seconds)
    tick = timedelta(seconds=settings.approvals.sweep_interval_seconds)
    harness = build_harness()
    approval_id = await harness.open("alice")
    crashed_at = harness.clock()
    await harness.store.claim(approval_id, "bob", [ActionDecision("approve")], crashed_at)
    # ...and the instance that claimed it dies. The sweeper ticks; the worst case is a tick
    # just before the grace runs out.
    harness.clock.advance(seconds=0.001)
    finished_at = None
    while harness.clock() - crashed_at <= FINISHED_WITHIN + tick:
        if await harness.service.finish_interrupted(grace):
            finished_at = harness.clock()
            break
        harness.clock.advance(seconds=tick.total_seconds())
    assert finished_at is not None
    assert finished_at - crashed_at <= FINISHED_WITHIN
    done = await harness.store.get(approval_id)
    assert done is not None
    assert done.status is ApprovalStatus.SUCCEEDED
    assert harness.executor.executions == 1
