"""The Slack app with durable runs, as its own process, for crash tests:
``python -m tests.reliability.slack_app_process DATABASE_URL SLACK_API_URL RUN_DELAY [stall]
[front]``.

Prints ``PORT <n> PID <pid>`` once serving. The assistant is the scripted ``FakeAssistant`` (its
``run_delay`` keeps a run in flight long enough to kill the process). With ``stall``, the
process does nothing after acknowledging a message (no work after the ack, no worker poll),
so killing it then shows what an acknowledged message depends on. With ``front``, messages
are acked on the ack thread (``bot.slack.front``) as ``opsbot slack`` serves them; with
``stall`` too, the worker is never woken, so on SQLite the acked message is still in the
spool (``infra.jobs.spool``) when the process is killed.
"""

from __future__ import annotations

import asyncio
import os
import sys

import aiohttp

from bot.slack import SlackBotConfig, SqlApprovalMessages, build_app, make_web_client, serve_http
from bot.slack.durable import DurableSlackAdapter
from bot.slack.front import AckFront
from bot.slack.incoming import UserMessage
from broker.types import ChatUser
from infra.jobs import JobRunner, SqlJobQueue
from infra.serving import bind_socket
from infra.storage import create_engine, migrate
from testing.fake_assistant import FakeAssistant
from testing.slack import BOT_TOKEN, SIGNING_SECRET, TEAM_ID


async def main(url: str, api_url: str, run_delay: float, stall: bool, front: bool) -> None:
    engine = create_engine(url)
    await migrate(engine)
    assistant = FakeAssistant(run_delay=run_delay)
    assistant.link(ChatUser("slack", TEAM_ID, "U0001"), "alice")
    config = SlackBotConfig(bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET, api_url=api_url)
    queue = SqlJobQueue(engine)
    async with aiohttp.ClientSession() as session:
        client = make_web_client(config, session)
        adapter = DurableSlackAdapter(config, assistant, client, SqlApprovalMessages(engine), queue)
        if stall:
            adapter.converse = stall_forever  # type: ignore[method-assign]
        app = build_app(config, assistant, engine, client=client, adapter=adapter)
        await adapter.learn_home_team()  # the ack front accepts once it knows the team
        embedded = url.startswith("sqlite")
        async with (
            JobRunner(
                queue,
                adapter.run_job,
                recover_on_start=embedded,
                poll_seconds=3600 if stall else 1.0,
            ) as runner,
            serve_http(
                app,
                bind_socket("127.0.0.1", 0),
                front=AckFront(adapter, url) if front else None,
            ) as app_url,
        ):
            if not (stall and front):
                adapter.runner = runner
            # The pid: started from the fork server, this is not the process the test started.
            print(f"PORT {app_url.rsplit(':', 1)[1]} PID {os.getpid()}", flush=True)
            await asyncio.Event().wait()


async def stall_forever(_message: UserMessage) -> None:
    await asyncio.Event().wait()


if __name__ == "__main__":
    flags = sys.argv[4:]
    asyncio.run(
        main(sys.argv[1], sys.argv[2], float(sys.argv[3]), "stall" in flags, "front" in flags)
    )
