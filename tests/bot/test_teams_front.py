"""Teams on the ack path (``bot.teams.front``): authenticated, deduplicated and stored on the
ack thread; nothing runs for a bad token, a redelivery is one job, an acked activity
survives a restart."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

import infra.storage
from bot.teams.core import ChatUser
from bot.teams.durable import open_durable_teams_bot
from bot.teams.front import TEAMS_ACK_LOOP, TeamsAckFront
from bot.teams.incoming import delivery_id
from infra.ack import serve_fronts
from infra.jobs import JobStatus, SqlJobQueue, spool_url
from infra.loop_thread import LoopThread
from infra.observability.http import ops_routes
from infra.serving import bind_socket
from infra.settings import Settings, TeamsSettings
from infra.storage import create_engine
from infra.storage.schema import processed_events, run_jobs
from opsbot.commands.teams import serve_teams
from testing.fake_assistant import FakeAssistant
from testing.teams import APP_ID, APP_PASSWORD, TENANT_ID, FakeTeams, new_user
from tests.fixtures.teams import RunTeams, teams_config

ALICE = new_user("Alice")
BOUND = 30.0


@pytest.fixture
def assistant() -> FakeAssistant:
    fake = FakeAssistant()
    fake.link(ChatUser("teams", TENANT_ID, ALICE.aad_object_id), "alice", {"team-payments"})
    return fake


async def _stored(database_url: str) -> tuple[int, int]:
    """(jobs, delivery ids) in the database and, on SQLite, the ack's spool."""
    jobs = seen = 0
    for url in filter(None, (database_url, spool_url(database_url))):
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                jobs += (await conn.scalar(select(func.count()).select_from(run_jobs))) or 0
                seen += (await conn.scalar(select(func.count()).select_from(processed_events))) or 0
        finally:
            await engine.dispose()
    return jobs, seen


@pytest.mark.parametrize("token", ["wrong_audience", "expired", "missing"])
async def test_a_bad_token_is_401_and_nothing_is_stored_or_run(
    run_teams: RunTeams, assistant: FakeAssistant, sqlite_url: str, token: str
) -> None:
    async with run_teams(assistant, durable=True) as env:
        fake = env.fake
        bad = {
            "wrong_audience": {"token": fake.token(audience="some-other-bot")},
            "expired": {"token": fake.token(expires_in=-3600)},
            "missing": {"authorization": ""},
        }[token]
        status, _ = await env.post(fake.personal(ALICE, "is PAY-102 open?"), **bad)
        assert status == 401
        await fake.settle(quiet=0.3)
        assert await _stored(sqlite_url) == (0, 0)
        # The same activity with the Connector's token is acked and answered.
        assert (await env.post(fake.personal(ALICE, "is PAY-102 open?")))[0] == 202
        await fake.wait_for("posted", where=lambda c: bool(c.cards), wait=BOUND)
    assert len(assistant.messages) == 1


async def test_a_duplicate_delivery_is_one_job_and_one_answer(
    run_teams: RunTeams, assistant: FakeAssistant, sqlite_url: str
) -> None:
    async with run_teams(assistant, durable=True) as env:
        ask = env.fake.personal(ALICE, "which jobs failed?")
        # Twice at once (one batch or two), then once more later.
        statuses = await asyncio.gather(env.post(ask), env.post(ask))
        assert [s for s, _ in statuses] == [202, 202]
        await env.fake.wait_for("posted", where=lambda c: bool(c.cards), wait=BOUND)
        assert (await env.post(ask))[0] == 202
        await env.bot.adapter.idle()
        await env.fake.settle(quiet=0.3)
        assert await _stored(sqlite_url) == (1, 2)  # one job; its id in each store
    assert len(assistant.messages) == 1
    assert len([c for c in env.fake.posted() if c.cards]) == 1


async def test_a_message_the_sdk_cannot_reference_is_a_400_not_a_500(
    run_teams: RunTeams, assistant: FakeAssistant, sqlite_url: str
) -> None:
    """A message without a recipient passes the SDK's model but not its conversation
    reference: the front answered 500 (aiohttp's, with a traceback), later 202 (the SDK's
    app logged the failed turn). The envelope check refuses it first, on both routes, with
    a clear 400 (``bot.teams.server.envelope_problem``); nothing is stored or run."""
    async with run_teams(assistant, durable=True) as env:
        odd = env.fake.personal(ALICE, "which jobs failed?")
        del odd["recipient"]
        assert (await env.post(odd))[0] == 400
        await env.fake.settle(quiet=0.3)
        assert await _stored(sqlite_url) == (0, 0)
    assert assistant.messages == []


async def test_an_acked_activity_survives_a_restart(
    run_teams: RunTeams, assistant: FakeAssistant, sqlite_url: str
) -> None:
    """The app stops while the run it acked has not answered (as a crash would leave it);
    the next start answers it, once."""
    stuck = FakeAssistant(run_delay=3600)
    stuck.link(ChatUser("teams", TENANT_ID, ALICE.aad_object_id), "alice", {"team-payments"})
    ask = None
    async with run_teams(stuck, durable=True) as env:
        ask = env.fake.personal(ALICE, "is PAY-102 open?")
        assert (await env.post(ask))[0] == 202
        for _ in range(int(BOUND / 0.05)):  # its run has started (and will never finish)
            if stuck.messages:
                break
            await asyncio.sleep(0.05)
        assert stuck.messages
    assert [c for c in env.fake.posted() if c.cards] == []

    async with run_teams(assistant, durable=True) as env:
        await env.fake.wait_for("posted", where=lambda c: bool(c.cards), wait=BOUND)
        await env.bot.adapter.idle()
        await env.fake.settle(quiet=0.3)
        job_id = "teams-" + delivery_id(ask["conversation"]["id"], ask["id"])
        status = await SqlJobQueue(env.engine).status(job_id)
    assert status is not None
    assert status[0] == JobStatus.DONE
    assert [text for _, _, text in assistant.messages] == ["is PAY-102 open?"]
    assert len([c for c in env.fake.posted() if c.cards]) == 1


async def test_metrics_report_the_teams_ack_loops_lag(
    fake_teams: FakeTeams, assistant: FakeAssistant, sqlite_url: str
) -> None:
    """Served alone (``opsbot teams``), Teams' ack loop is its own: ``/metrics`` (answered on
    the main loop) shows its lag as ``loop="teams-ack"``."""
    engine = create_engine(sqlite_url)
    try:
        async with open_durable_teams_bot(teams_config(fake_teams), assistant, engine) as bot:
            front = TeamsAckFront(bot, sqlite_url, lag_loop=TEAMS_ACK_LOOP)
            sock = bind_socket("127.0.0.1", 0)
            async with (
                serve_fronts(sock, [front], routes=ops_routes(None)) as url,
                aiohttp.ClientSession() as session,
            ):
                assert front.monitor is not None
                for _ in range(int(BOUND / 0.05)):  # a few samples on the ack loop
                    if len(front.monitor.samples) >= 3:
                        break
                    await asyncio.sleep(0.05)
                async with session.get(f"{url}/metrics") as response:
                    assert response.status == 200
                    body = await response.text()
    finally:
        await engine.dispose()
    counts = [
        line
        for line in body.splitlines()
        if line.startswith('opsbot_event_loop_lag_seconds_count{loop="teams-ack"}')
    ]
    assert counts
    assert float(counts[0].split()[-1]) >= 3


async def test_an_invoke_waiting_for_the_main_loop_does_not_hold_a_message_ack(
    run_teams: RunTeams, assistant: FakeAssistant
) -> None:
    """A card click needs its answer from the SDK on the main loop; while that loop is busy
    (blocked here), a message is still acked from the ack thread, and the click gets its
    answer once the loop runs again."""
    async with run_teams(assistant, durable=True) as env:
        fake = env.fake
        assert (await env.post(fake.personal(ALICE, "warm")))[0] == 202  # keys fetched
        await fake.wait_for("posted", where=lambda c: bool(c.cards), wait=BOUND)
        click = fake.personal(ALICE, "")
        click.pop("text", None)
        click.update(
            type="invoke",
            name="adaptiveCard/action",
            value={"action": {"type": "Action.Execute", "verb": "approve", "data": {}}},
        )
        ask = fake.personal(ALICE, "is PAY-102 open?")
        token = fake.token()
        async with LoopThread("client") as client:
            clicked = asyncio.run_coroutine_threadsafe(
                fake.post_activity(env.url, click, token=token), client.loop
            )
            asked = asyncio.run_coroutine_threadsafe(
                fake.post_activity(env.url, ask, token=token), client.loop
            )
            # The injected wait: this (main) loop runs nothing until the message is acked.
            status, _ = asked.result(timeout=BOUND)
            assert status == 202
            assert not clicked.done()  # its answer needs the main loop
            status, body = await asyncio.wait_for(asyncio.wrap_future(clicked), BOUND)
        assert status == 200
        assert body
        await fake.wait_for("posted", 2, where=lambda c: bool(c.cards), wait=BOUND)
    assert [text for _, _, text in assistant.messages] == ["warm", "is PAY-102 open?"]


async def test_opsbot_teams_acks_on_its_own_loop_and_reports_both_loops(
    fake_teams: FakeTeams,
    assistant: FakeAssistant,
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``opsbot teams`` as deployed (durable runs by default): a message is acked and
    answered, ``/metrics`` (forwarded to the main loop) has both loops' lag, and its engine
    is the job runner's, sized by the settings (it was SQLAlchemy's default pool, up to 15
    connections named "app": outside the connection budget the settings state)."""
    made: list[tuple[str, object]] = []

    def recording(url: str, **options: Any) -> AsyncEngine:
        made.append((options.get("pool_name", "app"), options.get("pool_size")))
        return create_engine(url, **options)

    monkeypatch.setattr(infra.storage, "create_engine", recording)
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        teams=TeamsSettings(
            app_id=APP_ID,
            app_password=APP_PASSWORD,  # type: ignore[arg-type]
            tenant_id=TENANT_ID,
            openid_metadata_url=fake_teams.openid_metadata_url,
            token_url=fake_teams.token_url,
        ),
        database_url=sqlite_url,
        data_dir=tmp_path,
    )
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(
        serve_teams(
            settings,
            host="127.0.0.1",
            port=0,
            stop=stop,
            on_ready=ready.set_result,
            assistant_factory=lambda _settings: contextlib.nullcontext(assistant),
        )
    )
    try:
        url = await asyncio.wait_for(ready, BOUND)
        ask = fake_teams.personal(ALICE, "is PAY-102 open?")
        assert (await fake_teams.post_activity(url, ask))[0] == 202
        await fake_teams.wait_for("posted", where=lambda c: bool(c.cards), wait=BOUND)
        async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
            assert response.status == 200
            body = await response.text()
    finally:
        stop.set()
        await asyncio.wait_for(serving, BOUND)
    assert made == [("jobs", settings.pools.jobs)]
    assert 'opsbot_event_loop_lag_seconds_count{loop="teams-ack"}' in body
    assert 'opsbot_event_loop_lag_seconds_count{loop="main"}' in body
    assert await _stored(sqlite_url) == (1, 2)  # the job (done), its id in both stores
