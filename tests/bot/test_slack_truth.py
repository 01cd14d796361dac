"""Issue 18, what people see — over HTTP against the running app with the REAL core (dev IdP,
broker, reference MCP servers, agent with a scripted model, approvals and audit in SQL, on
SQLite and PostgreSQL, answered in process and as durable jobs):

- the card shows what runs: after an Edit the edited arguments, marked "edited by bob";
  "Approving… (bob)" the moment the click lands, before the write;
- the requester's "needs approval" note and App Home (requester and eligible approvers) are
  updated when the approval is created and decided;
- answers tell the truth: "Actions taken" comes from the run's own tool-call records, a
  source links only to the URL the tool result carried, a model-written URL is never a link;
- a write the server refuses reads "failed" with the server's reason, never as done.
"""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from broker import ChatUser
from testing.agent import AgentEnv, call, tool_results
from testing.slack import (
    APPROVALS_CHANNEL_ID,
    block_action,
    card_decided,
    mention,
    text_value,
    view_submission,
)
from tests.bot.conftest import RunApp, SlackEnv
from tests.bot.test_slack_approvals import _buttons
from tests.bot.test_slack_e2e import (
    ALICE,
    BOB,
    DAVE,
    _changes,
    _final,
    agent_env,  # noqa: F401  (fixture)
    mcp_trusted_issuer,  # noqa: F401  (fixture)
    ops_model,
    real_assistant,
)
from tests.bot.test_slack_events import _texts

EVIL = "https://evil.example/login"
_KEY = re.compile(r"\b([A-Z]+-\d+)\b")


def lying_model(messages: list[BaseMessage]) -> AIMessage:
    """Reads the ticket, then claims a write it never made and puts a foreign URL behind the
    real source, in the sources and in the answer text."""
    human = [m for m in messages if isinstance(m, HumanMessage)][-1]
    key = _KEY.search(str(human.content))
    assert key is not None
    if not tool_results(messages):
        return call("ticketing_get_ticket", key=key.group(1))
    answer = _final(
        f"Done: I closed [{key.group(1)}]({EVIL}) and PAY-999 for you. Details: {EVIL}",
        [{"system": "ticketing", "id": key.group(1), "link": EVIL}],
    )
    answer.tool_calls[0]["args"]["actions_taken"] = [f"Closed {key.group(1)} and PAY-999"]
    answer.tool_calls[0]["args"]["pending_approvals"] = ["Deleting PAY-103"]
    return answer


async def _start(run_app: RunApp, env: AgentEnv, url: str, model: Any = ops_model) -> Any:
    for name, user in (("alice", ALICE), ("bob", BOB), ("dave", DAVE)):
        await env.harness.link(name, user)

    async def people() -> list[ChatUser]:
        return [ALICE, BOB, DAVE]

    return real_assistant(env, url, model, people=people), run_app


async def _ask(env: SlackEnv, text: str, ts: str) -> None:
    status, _ = await env.sender.post_event(mention(ALICE.user_id, text, channel="C0PAY", ts=ts))
    assert status == 200


def _card(env: SlackEnv) -> dict[str, Any]:
    (card_ts,) = [ts for (ch, ts) in env.fake.messages if ch == APPROVALS_CHANNEL_ID]
    return env.fake.messages[(APPROVALS_CHANNEL_ID, card_ts)]


def _homes(env: SlackEnv, user: str) -> list[str]:
    return [
        _texts(p["view"]["blocks"])
        for p in env.fake.calls_to("views.publish")
        if p["user_id"] == user
    ]


async def test_edit_shows_edited_arguments_approving_at_once_and_updates_note_and_homes(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    database_url: str,
) -> None:
    assistant_cm, run = await _start(run_app, agent_env, database_url)
    async with assistant_cm as assistant, run(assistant, database_url) as env:
        await _ask(env, "close PAY-102", "1700009900.0001")
        await env.fake.wait_for(
            "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals", wait=60
        )
        await env.fake.settle(limit=60)
        card = _card(env)
        # The requester's note says it waits; Homes list it for alice and for bob (an approver),
        # with tool, server and the arguments on one line; dave (no approver group) gets none.
        (note,) = [
            m for m in env.fake.thread("C0PAY", "1700009900.0001") if "needs approval" in m["text"]
        ]
        assert any(
            "ticketing_close_ticket" in h and "key=PAY-102" in h for h in _homes(env, ALICE.user_id)
        )
        bob_home = _homes(env, BOB.user_id)[-1]
        assert "Waiting for your decision" in bob_home
        assert (
            "`ticketing` · `ticketing_close_ticket` (key=PAY-102, resolution=Alert fixed)"
            in bob_home
        )
        assert _homes(env, DAVE.user_id) == []

        await env.sender.post_interaction(
            block_action(
                BOB.user_id,
                "approval_edit",
                _buttons(card)["approval_edit"]["value"],
                message_ts=card["ts"],
            )
        )
        modal = (await env.fake.wait_for("views.open", wait=60))[0]["view"]
        edited = {"arg:key": text_value("PAY-102"), "arg:resolution": text_value("Rolled back")}
        before = len(env.fake.calls_to("chat.update"))
        status, body = await env.sender.post_interaction(
            view_submission(BOB.user_id, modal, edited)
        )
        assert (status, body) == (200, "")
        await env.fake.wait_for("chat.update", where=card_decided, wait=60)
        await env.fake.settle(limit=60)

        # First the card said "Approving… (bob)" with no buttons; only then the decision.
        card_updates = [
            u
            for u in env.fake.calls_to("chat.update")[before:]
            if u["channel"] == APPROVALS_CHANNEL_ID
        ]
        assert card_updates[0]["text"].startswith("Approving… (<@U0BOB>)")
        assert not [b for b in card_updates[0]["blocks"] if b["type"] == "actions"]
        assert card_decided(card_updates[-1])
        # The card shows what ran: the edited arguments, marked, and what was proposed.
        final = _texts(env.fake.messages[(APPROVALS_CHANNEL_ID, card["ts"])]["blocks"])
        edited_args = "• *key*: `PAY-102`\n• *resolution*: `Rolled back`"
        assert f"*Arguments* (:pencil2: edited by bob)\n{edited_args}" in final
        assert "*Originally proposed*\n• *key*: `PAY-102`\n• *resolution*: `Alert fixed`" in final
        assert _buttons(env.fake.messages[(APPROVALS_CHANNEL_ID, card["ts"])]) == {}
        changes = await _changes(agent_env.servers, "PAY-102")
        assert len(changes) == 1
        assert "Rolled back" in json.dumps(changes[0].change)
        # The note no longer waits: it says who decided.
        updated_note = env.fake.messages[("C0PAY", note["ts"])]
        assert "needs approval" not in updated_note["text"]
        assert "edited* by bob" in _texts(updated_note["blocks"])
        # The answer's "Actions taken" is the executed call, with the arguments that ran.
        told = [
            m
            for m in env.fake.thread("C0PAY", "1700009900.0001")
            if "Actions taken" in _texts(m["blocks"])
        ]
        assert "ticketing_close_ticket (key=PAY-102, resolution=Rolled back): done" in _texts(
            told[-1]["blocks"]
        )
        # Homes were republished after the decision: nothing waits any more.
        assert "Waiting for your decision" not in _homes(env, BOB.user_id)[-1]
        # alice's request is listed with its outcome, no longer as waiting
        assert ":white_check_mark: done" in _homes(env, ALICE.user_id)[-1]
        assert "waiting for an approver" not in _homes(env, ALICE.user_id)[-1]


async def test_a_lying_model_gets_neither_its_claimed_actions_nor_its_urls_shown(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    database_url: str,
) -> None:
    assistant_cm, run = await _start(run_app, agent_env, database_url, lying_model)
    async with assistant_cm as assistant, run(assistant, database_url) as env:
        await _ask(env, "show PAY-101", "1700009900.0002")
        answer = (
            await env.fake.wait_for("chat.update", where=lambda p: p["channel"] == "C0PAY", wait=60)
        )[0]
        await env.fake.settle(limit=60)
        text = _texts(answer["blocks"])
        assert "Actions taken" not in text  # nothing ran
        assert "Closed PAY-101" not in text
        assert "Waiting for approval" not in text
        assert "Deleting PAY-103" not in text
        # The source links to the URL the ticketing server gave for PAY-101, never the model's.
        assert re.search(r"<http://[^|>]+/tickets/PAY-101\|ticketing PAY-101>", text), text
        assert f"<{EVIL}" not in json.dumps(answer)
        assert f"`{EVIL}`" in text  # the bare URL is shown as code: not a link
        assert await _changes(agent_env.servers, "PAY-101") == []


async def test_a_refused_write_reads_failed_with_the_servers_reason(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    database_url: str,
) -> None:
    assistant_cm, run = await _start(run_app, agent_env, database_url)
    async with assistant_cm as assistant, run(assistant, database_url) as env:
        for n, ts in enumerate(("1700009900.0003", "1700009900.0004")):
            await _ask(env, "close PAY-103", ts)
            await env.fake.wait_for(
                "chat.postMessage", n + 1, where=lambda p: p["channel"] == "ops-approvals", wait=60
            )
            await env.fake.settle(limit=60)
            cards = sorted(ts for (ch, ts) in env.fake.messages if ch == APPROVALS_CHANNEL_ID)
            card = env.fake.messages[(APPROVALS_CHANNEL_ID, cards[-1])]
            await env.sender.post_interaction(
                block_action(
                    BOB.user_id,
                    "approval_approve",
                    _buttons(card)["approval_approve"]["value"],
                    message_ts=card["ts"],
                    message_blocks=card["blocks"],  # as Slack sends them: no DB read needed
                )
            )
            await env.fake.wait_for("chat.update", n + 1, where=card_decided, wait=60)
            await env.fake.settle(limit=60)
            first = next(
                u
                for u in env.fake.calls_to("chat.update")
                if u["channel"] == APPROVALS_CHANNEL_ID and u["ts"] == card["ts"]
            )
            assert first["text"].startswith("Approving… (<@U0BOB>)")
            assert "close_ticket" in _texts(first["blocks"])
            assert not [b for b in first["blocks"] if b["type"] == "actions"]
        # The second close was refused by the server (already closed): the requester reads
        # that it failed and why — not a success, and not the text written for the model.
        thread = " ".join(_texts(m["blocks"]) for m in env.fake.thread("C0PAY", "1700009900.0004"))
        assert "ticketing_close_ticket (key=PAY-103, resolution=Alert fixed): failed" in thread
        assert "already closed" in thread
        assert "): done" not in thread
        assert "human reviewer" not in thread.lower()
        changes = await _changes(agent_env.servers, "PAY-103")
        assert len(changes) == 1
