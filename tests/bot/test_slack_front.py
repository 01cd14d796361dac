"""The ack path on its own (``bot.slack.front``): a message is stored and acked without the
main loop (where agents run) and without a connection of the pools the agent side uses."""

from __future__ import annotations

import asyncio
import gc

import aiohttp
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.slack import serve_http
from bot.slack.durable import open_durable_bot
from bot.slack.front import AckFront
from infra.jobs import JobStatus, SqlJobQueue, spool_url
from infra.loop_thread import LoopThread
from infra.serving import bind_socket
from infra.storage import create_engine
from testing.fake_assistant import FakeAssistant
from testing.slack import FakeSlack, SlackSender, mention
from tests.bot.conftest import ALICE, slack_config
from tests.test_gc_pacing import full_collection_thread

BOUND = 20.0


async def _post(url: str, event_id: str) -> int:
    async with aiohttp.ClientSession() as session:
        status, _ = await SlackSender(url, session=session).post_event(
            mention(ALICE.user_id, "is PAY-102 open?"), event_id=event_id
        )
    return status


async def _acked_job(job_id: str, database_url: str, engine: AsyncEngine) -> bool:
    """Stored as the ack left it: in ``run_jobs``, or on SQLite in the ack's spool file (the
    runner on the blocked main loop has not moved it yet)."""
    url = spool_url(database_url)
    if url is None:
        return await SqlJobQueue(engine).status(job_id) is not None
    spool = create_engine(url)
    try:
        return await SqlJobQueue(spool).status(job_id) is not None
    finally:
        await spool.dispose()


async def test_a_message_is_acked_while_the_main_loop_is_blocked(
    database_url: str, fake_slack: FakeSlack, fake_assistant: FakeAssistant
) -> None:
    engine = create_engine(database_url)
    try:
        async with (
            open_durable_bot(slack_config(fake_slack), fake_assistant, engine) as bot,
            serve_http(
                bot.app, bind_socket("127.0.0.1", 0), front=AckFront(bot.adapter, database_url)
            ) as url,
            LoopThread("client") as client,
        ):
            sent = asyncio.run_coroutine_threadsafe(_post(url, "EvBLOCKED"), client.loop)
            # The injected wait: this (main) loop does nothing until the ack has arrived. An
            # ack that needed it (Bolt, the main engine, the runner) would never come.
            status = sent.result(timeout=BOUND)
            assert status == 200
            assert await _acked_job("slack-EvBLOCKED", database_url, engine)
            # Once the main loop runs again, the worker it was woken for answers.
            await fake_slack.wait_for("chat.update", wait=BOUND)
    finally:
        await engine.dispose()
    assert [text for _, _, text in fake_assistant.messages] == ["is PAY-102 open?"]


async def test_the_slack_ack_loop_runs_the_full_garbage_collections(
    sqlite_url: str, fake_slack: FakeSlack, fake_assistant: FakeAssistant
) -> None:
    """CPython's own full collections (16-55 ms holding the GIL) are off while Slack's ack
    thread serves; its loop runs them at quiet moments (``infra.gc_pacing``)."""
    before = gc.get_threshold()
    engine = create_engine(sqlite_url)
    try:
        async with (
            open_durable_bot(slack_config(fake_slack), fake_assistant, engine) as bot,
            serve_http(
                bot.app, bind_socket("127.0.0.1", 0), front=AckFront(bot.adapter, sqlite_url)
            ) as url,
        ):
            assert await _post(url, "EvGC") == 200
            assert await full_collection_thread() == "slack-ack"
    finally:
        gc.unfreeze()
        await engine.dispose()
    assert gc.get_threshold() == before


@pytest.mark.postgres
async def test_a_message_is_acked_while_every_connection_of_the_main_pool_is_held(
    postgres_url: str, fake_slack: FakeSlack, fake_assistant: FakeAssistant
) -> None:
    # The runner's and adapter's engine: one connection, and a checkout waits a minute.
    engine = create_engine(postgres_url, pool_size=1, max_overflow=0, pool_timeout=60)
    try:
        async with (
            open_durable_bot(slack_config(fake_slack), fake_assistant, engine) as bot,
            serve_http(
                bot.app, bind_socket("127.0.0.1", 0), front=AckFront(bot.adapter, postgres_url)
            ) as url,
        ):
            held = await engine.connect()  # an agent (or a slow claim) holds it
            try:
                assert await asyncio.wait_for(_post(url, "EvHELD"), BOUND) == 200
            finally:
                await held.close()
            await fake_slack.wait_for("chat.update", wait=BOUND)
            assert await SqlJobQueue(engine).status("slack-EvHELD") == (JobStatus.DONE, 1)
    finally:
        await engine.dispose()
    assert len(fake_assistant.messages) == 1
