"""A ticketing server that accepts connections and then never answers, behind the real
``opsbot slack`` process (durable runs, the offline demo model, the in-process broker, SQLite).

Before, every turn waited ~300 s. Now the server's health probe (its own short timeout) and the
per-call ``timeout_s`` keep each turn to seconds: the person is told ticketing is not
responding (never the model's text), turn after turn, and the process stays up. The per-call
timeout and the breaker on their own are shown in ``tests/agent_core/test_mcp_timeouts.py``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import aiohttp
import pytest

from infra.storage import create_engine, migrate
from mcp_servers import ReferenceServers
from testing.identity import RunningIdp
from testing.slack import FakeSlack, SlackSender, mention
from tests.agent_core.test_mcp_timeouts import silent_server
from tests.bot.test_slack_events import _texts
from tests.reliability.opsbot_process import app_env, opsbot_slack

BOUND = 120.0
# Generous for a loaded 2-core machine; the hang it guards against is 300 s per turn.
TURN_LIMIT_S = 30.0
NOT_RESPONDING = ("not responding", "unavailable", "did not answer")


async def answered(fake_slack: FakeSlack, event: dict[str, object], wait: float) -> str:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for message in fake_slack.thread(str(event["channel"]), str(event["ts"])):
            text = _texts(message.get("blocks") or []) + str(message.get("text") or "")
            if "ticketing" in text.lower() and not text.strip().endswith("…"):
                return text
        await fake_slack.settle(quiet=0.2, limit=1.0)
    raise AssertionError(f"no answer within {wait:g} s")


@pytest.mark.slow
@pytest.mark.timeout(400)
async def test_a_hung_ticketing_server_costs_its_timeout_not_300_seconds(
    fake_slack: FakeSlack,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'opsbot.sqlite'}"
    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()
    async with silent_server() as hung_url:
        env = app_env(url, tmp_path, fake_slack, dev_idp, reference_servers)
        servers = json.loads(env["OPSBOT_MCP_SERVERS"])
        for server in servers:
            if server["name"] == "ticketing":
                server["url"] = hung_url  # same audience: the token is minted as usual
                server["timeout_s"] = 1.0
        env["OPSBOT_MCP_SERVERS"] = json.dumps(servers)
        async with (
            opsbot_slack(env, bound=BOUND, forked=True) as app,
            aiohttp.ClientSession() as session,
        ):
            sender = SlackSender(app.url, session=session)
            await app.link(sender, "U0ALICE", "alice")
            took: list[float] = []
            texts: list[str] = []
            for i in range(3):
                event = mention("U0ALICE", "show ticket PAY-101", ts=f"1700002000.{i:06d}")
                started = time.monotonic()
                status, _ = await sender.post_event(event, event_id=f"EvHung{i}")
                assert status == 200
                texts.append(await answered(fake_slack, event, TURN_LIMIT_S))
                took.append(time.monotonic() - started)
            assert app.proc.returncode is None

    for text in texts:
        assert any(words in text.lower() for words in NOT_RESPONDING), text
        assert "do not retry" not in text.lower()  # the model's text never reaches people
    assert all(t < TURN_LIMIT_S for t in took), took
