"""Issue 18, several writes in one model turn — over HTTP against the running app with the REAL
core (dev IdP, broker, reference MCP servers, agent with a scripted model, approvals and audit in
SQL, on SQLite and PostgreSQL): three proposed writes post three cards; approving one runs that
call at once (the ticketing server's own change log is the ground truth), rejecting another
never runs it, the third waits with live buttons and each card shows its own state; the run
resumes once, when the last call is decided, and the model's answer covers all three calls
without a second execution.
"""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from testing.agent import AgentEnv, calls, tool_results
from testing.slack import (
    APPROVALS_CHANNEL_ID,
    block_action,
    card_decided,
    text_value,
    view_submission,
)
from tests.bot.conftest import RunApp, SlackEnv
from tests.bot.test_slack_approvals import _buttons
from tests.bot.test_slack_e2e import (
    BOB,
    _changes,
    _final,
    agent_env,  # noqa: F401  (fixture)
    mcp_trusted_issuer,  # noqa: F401  (fixture)
)
from tests.bot.test_slack_events import _texts
from tests.bot.test_slack_truth import _ask, _start

_KEYS = re.compile(r"\b([A-Z]+-\d+)\b")
KEYS = ("PAY-101", "PAY-102", "PAY-103")


def batch_model(messages: list[BaseMessage]) -> AIMessage:
    """Proposes one close_ticket per ticket named, all in ONE model turn; answers once the
    tool results are back."""
    human = [m for m in messages if isinstance(m, HumanMessage)][-1]
    keys = _KEYS.findall(str(human.content))
    if not tool_results(messages):
        return calls(
            *(("ticketing_close_ticket", {"key": k, "resolution": "Batch fix"}) for k in keys)
        )
    results = tool_results(messages)
    return _final(f"{len(results)} results: " + "; ".join(str(m.content)[:80] for m in results), [])


def _cards(env: SlackEnv) -> dict[str, dict[str, Any]]:
    """The approval cards by the ticket key their arguments name."""
    by_key: dict[str, dict[str, Any]] = {}
    for (ch, _ts), message in env.fake.messages.items():
        if ch != APPROVALS_CHANNEL_ID:
            continue
        text = _texts(message["blocks"])
        (key,) = {k for k in KEYS if f"`{k}`" in text}
        by_key[key] = message
    return by_key


async def _click(env: SlackEnv, action: str, card: dict[str, Any]) -> None:
    status, body = await env.sender.post_interaction(
        block_action(BOB.user_id, action, _buttons(card)[action]["value"], message_ts=card["ts"])
    )
    assert status == 200, body


async def test_three_writes_three_cards_only_the_approved_one_runs(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    database_url: str,
) -> None:
    assistant_cm, run = await _start(run_app, agent_env, database_url, batch_model)
    async with assistant_cm as assistant, run(assistant, database_url) as env:
        await _ask(env, "close PAY-101 PAY-102 PAY-103", "1700009950.0001")
        await env.fake.wait_for(
            "chat.postMessage", 3, where=lambda p: p["channel"] == "ops-approvals", wait=60
        )
        await env.fake.settle(limit=60)
        cards = _cards(env)
        assert sorted(cards) == list(KEYS)  # one card per write, each naming its own call
        for card in cards.values():
            assert set(_buttons(card)) >= {"approval_approve", "approval_reject"}
        for key in KEYS:
            assert await _changes(agent_env.servers, key) == []  # nothing runs before a click

        await _click(env, "approval_approve", cards["PAY-101"])
        card_101 = cards["PAY-101"]["ts"]
        await env.fake.wait_for(
            "chat.update",
            where=lambda p: (
                p.get("ts") == card_101 and "Outcome:* :white_check_mark:" in _texts(p["blocks"])
            ),
            wait=60,
        )
        # The approved call ran on its own decision: the server's change log shows it now.
        [approved] = await _changes(agent_env.servers, "PAY-101")
        assert "Batch fix" in json.dumps(approved.change)

        await _click(env, "approval_reject", cards["PAY-102"])
        modal = (await env.fake.wait_for("views.open", wait=60))[0]["view"]
        assert modal["callback_id"] == "approval_reject_submit"
        status, body = await env.sender.post_interaction(
            view_submission(BOB.user_id, modal, {"reason": text_value("not this one")})
        )
        assert (status, body) == (200, "")
        await env.fake.wait_for("chat.update", 2, where=card_decided, wait=60)
        await env.fake.settle(limit=60)

        assert await _changes(agent_env.servers, "PAY-101") == [approved]
        assert await _changes(agent_env.servers, "PAY-102") == []
        assert await _changes(agent_env.servers, "PAY-103") == []
        mid = {k: env.fake.messages[(APPROVALS_CHANNEL_ID, c["ts"])] for k, c in cards.items()}
        # Each card shows its own state: done, rejected with nothing run, and the third still
        # waiting with live buttons.
        assert "*Outcome:* :white_check_mark:" in _texts(mid["PAY-101"]["blocks"])
        assert _buttons(mid["PAY-101"]) == {}
        assert "rejected, nothing was run" in _texts(mid["PAY-102"]["blocks"])
        assert _buttons(mid["PAY-102"]) == {}
        assert mid["PAY-103"]["text"].startswith("Approval needed")
        assert set(_buttons(mid["PAY-103"])) == {
            "approval_approve",
            "approval_edit",
            "approval_reject",
        }
        # The run has not resumed: no answer from the model in the requester's thread yet.
        assert not _answers(env)

        # The third is rejected too: the run resumes once, fed the stored result.
        await _click(env, "approval_reject", cards["PAY-103"])
        modal = (await env.fake.wait_for("views.open", 2, wait=60))[1]["view"]
        status, body = await env.sender.post_interaction(
            view_submission(BOB.user_id, modal, {"reason": text_value("later")})
        )
        assert (status, body) == (200, "")
        await env.fake.wait_for("chat.postMessage", where=_is_answer, wait=60)
        await env.fake.settle(limit=60)
        [answer] = _answers(env)
        assert "3 results" in answer  # one answer per call of the step
        # Ground truth: exactly the approved write, once — the resume did not send it again.
        assert await _changes(agent_env.servers, "PAY-101") == [approved]
        assert await _changes(agent_env.servers, "PAY-102") == []
        assert await _changes(agent_env.servers, "PAY-103") == []
        final = {k: env.fake.messages[(APPROVALS_CHANNEL_ID, c["ts"])] for k, c in cards.items()}
        assert "*Outcome:* :white_check_mark:" in _texts(final["PAY-101"]["blocks"])
        assert "rejected, nothing was run" in _texts(final["PAY-102"]["blocks"])
        assert "rejected, nothing was run" in _texts(final["PAY-103"]["blocks"])


def _is_answer(params: dict[str, Any]) -> bool:
    return params.get("channel") != "ops-approvals" and "results:" in json.dumps(params)


def _answers(env: SlackEnv) -> list[str]:
    """The model's answers posted outside the approvals channel."""
    return [
        json.dumps(c.params)
        for c in env.fake.calls
        if c.method in ("chat.postMessage", "chat.update") and _is_answer(c.params)
    ]
