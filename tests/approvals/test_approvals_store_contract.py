"""One contract for every ApprovalStore backend: memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event

from approvals import (
    EXPIRY_DECIDER,
    ActionDecision,
    ActionRequest,
    AlreadyDecidedError,
    Approval,
    ApprovalExpiredError,
    ApprovalNotFoundError,
    ApprovalStatus,
    ApprovalStore,
    MemoryApprovalStore,
    NotAuthorisedError,
    ReadRef,
    SqlApprovalStore,
)
from broker.types import ChatUser
from infra.storage import create_engine

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
APPROVE = (ActionDecision("approve"),)

# Each "instance" is an independent store object; SQL ones get their own engine (pool).
StoreFactory = Callable[[], ApprovalStore]


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def instances(request: pytest.FixtureRequest) -> AsyncIterator[StoreFactory]:
    if request.param == "memory":
        shared = MemoryApprovalStore()
        yield lambda: shared
        return
    url = request.getfixturevalue(f"{request.param}_url")
    engines = []

    def factory() -> ApprovalStore:
        engine = create_engine(url)
        engines.append(engine)
        return SqlApprovalStore(engine)

    yield factory
    for engine in engines:
        await engine.dispose()


@pytest.fixture
def store(instances: StoreFactory) -> ApprovalStore:
    return instances()


def make_approval(approval_id: str = "apr-1", **changes: object) -> Approval:
    base = Approval(
        approval_id=approval_id,
        thread_id="thr-1",
        requester_subject="alice",
        requester_chat_user=ChatUser("slack", "T1", "U1"),
        actions=(
            ActionRequest(
                tool="ticketing_close_ticket",
                server="ticketing",
                args={"ticket_id": "PAY-7", "resolution": "fixed"},
                description="close PAY-7",
                tool_call_id="call-1",
                approver_group="ticket-leads",
                sensitive=True,
            ),
        ),
        reads=(ReadRef("ticketing_get_ticket", "PAY-7"),),
        created_at=NOW,
        expires_at=NOW + timedelta(minutes=30),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


async def test_round_trips_every_field(store: ApprovalStore) -> None:
    approval = make_approval()
    await store.create(approval)
    assert await store.get("apr-1") == approval
    assert await store.get("nope") is None


async def test_duplicate_id_is_refused(store: ApprovalStore) -> None:
    await store.create(make_approval())
    with pytest.raises(Exception):  # noqa: B017, PT011 - IntegrityError or ValueError
        await store.create(make_approval())


async def test_claim_moves_pending_to_deciding_and_records_the_decider(
    store: ApprovalStore,
) -> None:
    await store.create(make_approval())
    edited = (ActionDecision("edit", args={"ticket_id": "PAY-7", "resolution": "dup"}),)
    claimed = await store.claim("apr-1", "bob", edited, NOW + timedelta(minutes=1))
    assert claimed.status is ApprovalStatus.DECIDING
    assert claimed.decided_by == "bob"
    assert claimed.decided_at == NOW + timedelta(minutes=1)
    assert claimed.decisions == edited
    assert await store.get("apr-1") == claimed


async def test_second_claim_loses_and_learns_who_won(store: ApprovalStore) -> None:
    await store.create(make_approval())
    await store.claim("apr-1", "bob", APPROVE, NOW)
    with pytest.raises(AlreadyDecidedError) as lost:
        await store.claim("apr-1", "carol", APPROVE, NOW)
    assert lost.value.decided_by == "bob"
    assert lost.value.status == "deciding"
    await store.finish("apr-1", ApprovalStatus.SUCCEEDED, {"result": "ok"})
    with pytest.raises(AlreadyDecidedError) as lost_later:
        await store.claim("apr-1", "bob", APPROVE, NOW)  # a retry by the winner, too
    assert lost_later.value.decided_by == "bob"
    assert lost_later.value.status == "succeeded"


async def test_unknown_id_cannot_be_claimed_or_finished(store: ApprovalStore) -> None:
    with pytest.raises(ApprovalNotFoundError):
        await store.claim("nope", "bob", APPROVE, NOW)
    with pytest.raises(ApprovalNotFoundError):
        await store.finish("nope", ApprovalStatus.SUCCEEDED, {})


async def test_expired_approval_cannot_be_claimed_by_a_person(store: ApprovalStore) -> None:
    await store.create(make_approval())
    with pytest.raises(ApprovalExpiredError):
        await store.claim("apr-1", "bob", APPROVE, NOW + timedelta(minutes=30))
    assert (await store.get("apr-1")).status is ApprovalStatus.PENDING  # type: ignore[union-attr]


async def test_only_the_expiry_sweeper_claims_an_expired_approval(store: ApprovalStore) -> None:
    await store.create(make_approval())
    reject = (ActionDecision("reject", message="expired"),)
    with pytest.raises(AlreadyDecidedError):  # still live: the sweeper may not take it
        await store.claim("apr-1", EXPIRY_DECIDER, reject, NOW)
    later = NOW + timedelta(hours=1)
    claimed = await store.claim("apr-1", EXPIRY_DECIDER, reject, later)
    assert claimed.decided_by == EXPIRY_DECIDER
    done = await store.finish("apr-1", ApprovalStatus.EXPIRED, {"reason": "max age"})
    assert done.status is ApprovalStatus.EXPIRED
    assert done.outcome == {"reason": "max age"}


async def test_finish_needs_a_claim_and_happens_once(store: ApprovalStore) -> None:
    await store.create(make_approval())
    with pytest.raises(AlreadyDecidedError):
        await store.finish("apr-1", ApprovalStatus.SUCCEEDED, {})
    await store.claim("apr-1", "bob", APPROVE, NOW)
    with pytest.raises(ValueError, match="final"):
        await store.finish("apr-1", ApprovalStatus.PENDING, {})
    await store.finish("apr-1", ApprovalStatus.FAILED, {"reason": "access revoked"})
    with pytest.raises(AlreadyDecidedError) as second:
        await store.finish("apr-1", ApprovalStatus.SUCCEEDED, {})
    assert second.value.status == "failed"


async def test_find_filters_by_status_requester_and_expiry(store: ApprovalStore) -> None:
    await store.create(make_approval("a1"))
    await store.create(
        make_approval("a2", requester_subject="dave", created_at=NOW + timedelta(seconds=1))
    )
    await store.create(
        make_approval(
            "a3", created_at=NOW + timedelta(seconds=2), expires_at=NOW + timedelta(hours=2)
        )
    )
    await store.claim("a1", "bob", APPROVE, NOW)
    pending = await store.find(statuses=[ApprovalStatus.PENDING])
    assert [a.approval_id for a in pending] == ["a2", "a3"]
    mine = await store.find(requester_subject="alice")
    assert [a.approval_id for a in mine] == ["a1", "a3"]
    overdue = await store.find(
        statuses=[ApprovalStatus.PENDING], expired_at=NOW + timedelta(hours=1)
    )
    assert [a.approval_id for a in overdue] == ["a2"]
    assert len(await store.find(limit=1)) == 1


async def test_concurrent_claims_across_instances_have_exactly_one_winner(
    instances: StoreFactory,
) -> None:
    first, second = instances(), instances()
    await first.create(make_approval())
    deciders = [f"approver-{i}" for i in range(20)]

    async def attempt(i: int, who: str) -> str | None:
        target = first if i % 2 == 0 else second
        try:
            await target.claim("apr-1", who, APPROVE, NOW)
        except AlreadyDecidedError as lost:
            return f"lost:{lost.decided_by}"
        return f"won:{who}"

    results = await asyncio.gather(*(attempt(i, who) for i, who in enumerate(deciders)))
    winners = [r for r in results if r and r.startswith("won:")]
    assert len(winners) == 1
    winner = winners[0].removeprefix("won:")
    # Every loser that saw a decider names the one winner.
    assert {r for r in results if r != winners[0]} <= {f"lost:{winner}", "lost:None"}
    stored = await second.get("apr-1")
    assert stored is not None
    assert stored.decided_by == winner


async def test_a_checked_claim_claims_what_the_check_gives_and_nothing_it_refuses(
    store: ApprovalStore,
) -> None:
    await store.create(make_approval())
    seen: list[Approval] = []

    def refuse(approval: Approval) -> tuple[ActionDecision, ...]:
        seen.append(approval)
        raise NotAuthorisedError("not in the approver group")

    with pytest.raises(NotAuthorisedError):
        await store.claim_checked("apr-1", "bob", refuse, NOW)
    assert [a.status for a in seen] == [ApprovalStatus.PENDING]
    assert await store.get("apr-1") == make_approval()  # nothing claimed
    edited = (ActionDecision("edit", args={"ticket_id": "PAY-7", "resolution": "dup"}),)
    claimed = await store.claim_checked("apr-1", "bob", lambda _: edited, NOW)
    assert (claimed.status, claimed.decided_by, claimed.decisions) == (
        ApprovalStatus.DECIDING,
        "bob",
        edited,
    )
    assert await store.get("apr-1") == claimed
    # A check that lets a stale read through still loses the conditional write.
    with pytest.raises(AlreadyDecidedError) as lost:
        await store.claim_checked("apr-1", "carol", lambda _: APPROVE, NOW)
    assert lost.value.decided_by == "bob"
    with pytest.raises(ApprovalNotFoundError):
        await store.claim_checked("nope", "bob", lambda _: APPROVE, NOW)
    await store.create(make_approval("apr-2"))
    with pytest.raises(ApprovalExpiredError):
        await store.claim_checked("apr-2", "bob", lambda _: APPROVE, NOW + timedelta(hours=1))


async def test_concurrent_checked_claims_across_instances_have_exactly_one_winner(
    instances: StoreFactory,
) -> None:
    first, second = instances(), instances()
    await first.create(make_approval())

    async def attempt(i: int) -> str:
        target = first if i % 2 == 0 else second
        try:
            await target.claim_checked("apr-1", f"approver-{i}", lambda _: APPROVE, NOW)
        except AlreadyDecidedError as lost:
            return f"lost:{lost.decided_by}"
        return f"won:approver-{i}"

    results = await asyncio.gather(*(attempt(i) for i in range(20)))
    [winner] = [r.removeprefix("won:") for r in results if r.startswith("won:")]
    assert {r for r in results if not r.startswith("won:")} <= {f"lost:{winner}", "lost:None"}
    stored = await second.get("apr-1")
    assert stored is not None
    assert stored.decided_by == winner


@pytest.mark.postgres
async def test_a_click_reads_and_claims_in_one_transaction_on_postgres(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    began: list[object] = []
    event.listen(engine.sync_engine, "begin", began.append)
    try:
        store = SqlApprovalStore(engine)
        await store.create(make_approval())
        began.clear()
        claimed = await store.claim_checked("apr-1", "bob", lambda _: APPROVE, NOW)
        assert claimed.status is ApprovalStatus.DECIDING
        assert len(began) == 1  # was a read and then a claim, each its own transaction
    finally:
        await engine.dispose()


async def test_reclaim_takes_only_a_stale_deciding_approval_once(instances: StoreFactory) -> None:
    first, second = instances(), instances()
    await first.create(make_approval())
    later = NOW + timedelta(minutes=5)
    assert await first.reclaim("apr-1", later, later) is None  # pending: nothing to recover
    await first.claim("apr-1", "bob", APPROVE, NOW)
    assert await first.reclaim("apr-1", NOW, later) is None  # claimed at NOW: not stale yet
    assert await first.reclaim("nope", later, later) is None

    results = await asyncio.gather(
        *((first if i % 2 else second).reclaim("apr-1", later, later) for i in range(10))
    )
    taken = [r for r in results if r is not None]
    assert len(taken) == 1
    assert taken[0].status is ApprovalStatus.DECIDING
    assert taken[0].decided_by == "bob"
    assert taken[0].decided_at == later
    assert taken[0].decisions == APPROVE
    # Taken over: stale again only relative to the new time.
    assert await second.reclaim("apr-1", later, later) is None
    await second.finish("apr-1", ApprovalStatus.SUCCEEDED, {"result": "ok"})
    assert await first.reclaim("apr-1", later + timedelta(hours=1), later) is None


async def test_decided_approvals_move_through_executing_to_a_truthful_outcome(
    instances: StoreFactory,
) -> None:
    first, second = instances(), instances()
    await first.create(make_approval())
    await first.claim("apr-1", "bob", APPROVE, NOW)
    with pytest.raises(AlreadyDecidedError):  # not approved yet: cannot start executing
        await first.advance("apr-1", ApprovalStatus.APPROVED, ApprovalStatus.EXECUTING)
    approved = await first.advance("apr-1", ApprovalStatus.DECIDING, ApprovalStatus.APPROVED)
    assert approved.state is ApprovalStatus.APPROVED
    results = await asyncio.gather(
        *(
            s.advance("apr-1", ApprovalStatus.APPROVED, ApprovalStatus.EXECUTING)
            for s in (first, second, first, second)
        ),
        return_exceptions=True,
    )
    assert sum(isinstance(r, Approval) for r in results) == 1  # one executor
    reason = "the ticketing server could not be reached — outcome unknown, being reconciled"
    unknown = await second.finish("apr-1", ApprovalStatus.UNKNOWN, {}, reason=reason)
    assert (unknown.state, unknown.outcome_reason) == (ApprovalStatus.UNKNOWN, reason)
    assert unknown.state.is_final
    assert not unknown.state.is_in_flight
    # The reconciler settles an unknown one, once.
    settled = await first.finish("apr-1", ApprovalStatus.FAILED, {}, reason="no such write")
    stored = await second.get("apr-1")
    assert stored is not None
    assert (stored.state, stored.outcome_reason) == (ApprovalStatus.FAILED, "no such write")
    assert settled == stored
    with pytest.raises(AlreadyDecidedError):
        await second.finish("apr-1", ApprovalStatus.SUCCEEDED, {})
    assert [a.approval_id for a in await first.find(statuses=[ApprovalStatus.FAILED])] == ["apr-1"]
