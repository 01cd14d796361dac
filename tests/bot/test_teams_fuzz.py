"""Fuzz ``POST /api/messages`` over real HTTP, as ``test_slack_fuzz`` does for Slack: the
activities Teams sends (channel mentions, personal messages, card clicks and refreshes, SSO
token exchanges, conversation updates) mutated with missing keys, wrong types, huge and odd
values, unknown activity types and bodies that are not activities at all, each with a valid
Bot Connector token. No answer is ever ≥ 500, nothing logs an error or a traceback, and
afterwards the app still answers a valid message — in process and as durable jobs."""

from __future__ import annotations

import copy
import json
import logging
import random
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from bot.teams.core import ChatUser
from testing.fake_assistant import FakeAssistant
from testing.teams import TENANT_ID, FakeTeams, new_user
from tests.bot.conftest import ProblemLog
from tests.fixtures.teams import RunTeams, TeamsEnv

ALICE = new_user("Alice")
ALICE_CHAT = ChatUser("teams", TENANT_ID, ALICE.aad_object_id)
REQUESTS = 300
SEED = 20261204

ODD_VALUES: list[Any] = [
    None,
    0,
    -1,
    2**63,
    1e308,
    True,
    "",
    " ",
    "x" * 70_000,
    "\x00",
    "\ud800",  # a lone surrogate: JSON can say it, PostgreSQL's JSON cannot hold it
    "<at>opsbot</at>",
    "19:;messageid=",
    "../../etc/passwd",
    "😀" * 50,
    [],
    [1, "2", None],
    {},
    {"id": None},
    {"type": "message", "text": 1},
]


@pytest.fixture
def problems() -> Iterator[ProblemLog]:
    handler = ProblemLog()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


@pytest.fixture(params=["in_process", "durable"])
async def env(
    request: pytest.FixtureRequest, run_teams: RunTeams, database_url: str
) -> AsyncIterator[TeamsEnv]:
    # On PostgreSQL too: its text cannot hold a NUL, and the fuzz sends some.
    assistant = FakeAssistant()
    assistant.link(ALICE_CHAT, "alice", {"team-payments"})
    durable = request.param == "durable"
    async with run_teams(assistant, database_url, durable=durable) as running:
        yield running


def _seeds(fake: FakeTeams) -> list[dict[str, Any]]:
    """One valid activity of each kind the bot handles, and some it does not."""
    personal = fake.personal(ALICE, "show PAY-1")
    mention = fake.mention(ALICE, "show PAY-1")
    click = fake.card_action(
        ALICE,
        mention["conversation"]["id"],
        mention["id"],
        "approve",
        {"approval_id": "appr-1", "reason": "ok"},
    )
    refresh = fake.card_action(
        ALICE, mention["conversation"]["id"], mention["id"], "refresh", {}, trigger="automatic"
    )
    oauth_card = {
        "connectionName": "opsbot-sso",
        "tokenExchangeResource": {"id": "exchange-1", "uri": "api://opsbot"},
    }
    exchange = fake.token_exchange(ALICE, oauth_card, "not-a-jwt")
    update = fake.personal(ALICE, "")
    update.update({"type": "conversationUpdate", "membersAdded": [{"id": ALICE.mri}]})
    reaction = fake.personal(ALICE, "")
    reaction.update({"type": "messageReaction", "reactionsAdded": [{"type": "like"}]})
    unknown_invoke = copy.deepcopy(click)
    unknown_invoke["name"] = "composeExtension/query"
    return [personal, mention, click, refresh, exchange, update, reaction, unknown_invoke]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*prefix, key)
            yield from _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield (*prefix, index)
            yield from _paths(inner, (*prefix, index))


def _mutate(activity: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    mutated = copy.deepcopy(activity)
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(mutated))
        if not paths:
            break
        *parent_path, last = rng.choice(paths)
        parent: Any = mutated
        for part in parent_path:
            parent = parent[part]
        choice = rng.random()
        if choice < 0.35 and isinstance(parent, dict):
            del parent[last]
        elif choice < 0.9:
            parent[last] = copy.deepcopy(rng.choice(ODD_VALUES))
        elif isinstance(parent, dict):
            parent[f"unknown-{rng.randint(0, 9)}"] = copy.deepcopy(rng.choice(ODD_VALUES))
    return mutated


def _raw_bodies(rng: random.Random) -> list[tuple[bytes, str]]:
    """Bodies that are not an activity at all, with the content type each is sent with."""
    return [
        (b"", "application/json"),
        (b"{", "application/json"),
        (b"null", "application/json"),
        (b"[]", "application/json"),
        (b'"message"', "application/json"),
        (b"42", "application/json"),
        (b'{"type": "message"}', "application/json"),
        (json.dumps({"a": [[[[[[[[[[]]]]]]]]]]}).encode(), "application/json"),
        # nested deeper than Python's stack: a RecursionError (was a 500)
        (b"[" * 100_000, "application/json"),
        (b'{"a":' * 60_000, "application/json"),
        (b"\xff\xfe\x00garbage", "application/json"),
        (b"type=message&text=hi", "application/x-www-form-urlencoded"),
        (bytes(rng.getrandbits(8) for _ in range(256)), "application/octet-stream"),
        (b'{"type": "message", "text": "' + b"a" * 300_000 + b'"}', "application/json"),
    ]


async def test_fuzzed_activities_never_get_a_5xx_and_the_app_stays_healthy(
    env: TeamsEnv, problems: ProblemLog
) -> None:
    rng = random.Random(SEED)
    seeds = _seeds(env.fake)
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    async with aiohttp.ClientSession() as http:
        for _ in range(REQUESTS):
            activity = _mutate(rng.choice(seeds), rng)
            status, body = await env.fake.post_activity(env.url, activity, session=http)
            statuses[status] += 1
            if status >= 500:
                failures.append(f"{status} {body[:200]} for {json.dumps(activity)[:4000]}")
        headers = {"Authorization": f"Bearer {env.fake.token()}"}
        for body, content_type in _raw_bodies(rng):
            async with http.post(
                f"{env.url}/api/messages",
                data=body,
                headers={**headers, "Content-Type": content_type},
            ) as response:
                statuses[response.status] += 1
                if response.status >= 500:
                    failures.append(f"{response.status} for raw body {body[:80]!r}")
    await env.fake.settle()
    assert failures == [], "\n".join(failures)
    # The fuzz reached the handlers: most mutations stay valid enough to be taken.
    assert statuses[202] + statuses[200] > REQUESTS // 5, statuses
    assert [r.getMessage() for r in problems.records] == []

    ask = env.fake.personal(ALICE, "show PAY-1 after the fuzz")
    conversation = ask["conversation"]["id"]
    before = len([c for c in env.fake.posted() if c.conversation_id == conversation])
    assert (await env.post(ask))[0] == 202
    await env.fake.wait_for("posted", before + 1, where=lambda c: c.conversation_id == conversation)


async def test_what_the_fuzz_found_each_gets_its_clear_answer(
    run_teams: RunTeams, caplog: pytest.LogCaptureFixture
) -> None:
    """The cases the fuzz found, one by one: a channelId that is not a string was a 500
    (a dict cannot be looked up among the key's endorsements); an activity without a sender
    or recipient, and an invoke opsbot does not implement, were the SDK's 501; a
    conversation id with a path in it sent the bot's reply, with its token, to another path
    of the Connector; a conversation update logged a warning with the activity's text."""
    assistant = FakeAssistant()
    assistant.link(ALICE_CHAT, "alice", {"team-payments"})
    async with run_teams(assistant) as env:
        for odd in ({}, [], None):
            activity = env.fake.personal(ALICE, "hi")
            activity["channelId"] = odd
            assert (await env.post(activity))[0] == 401
        for part in ("id", "from.id", "recipient.id", "conversation.id"):
            activity = env.fake.personal(ALICE, "hi")
            if part == "id":
                activity["id"] = ""
            elif part == "conversation.id":
                activity["conversation"]["id"] = " "
            else:
                del activity[part.split(".")[0]]
            with caplog.at_level(logging.WARNING):
                caplog.clear()
                assert (await env.post(activity))[0] == 400
            assert [r.getMessage() for r in caplog.records] == [
                f"POST /api/messages refused with 400: malformed activity: no {part} "
                f"({len(json.dumps(activity))} bytes)"
            ]
        # A control character in an id opsbot stores or looks up (a NUL failed the lookup
        # on PostgreSQL).
        for path in (("id",), ("from", "aadObjectId"), ("from", "id"), ("replyToId",)):
            activity = env.fake.personal(ALICE, "hi")
            holder = activity
            for key in path[:-1]:
                holder = holder[key]
            holder[path[-1]] = f"{holder.get(path[-1], 'x')}\x00"
            with caplog.at_level(logging.WARNING):
                caplog.clear()
                assert (await env.post(activity))[0] == 400, path
            assert [r.getMessage() for r in caplog.records] == [
                f"POST /api/messages refused with 400: malformed activity: {'.'.join(path)} "
                f"holds a control character ({len(json.dumps(activity))} bytes)"
            ]
        for unsafe in ("../../etc/passwd", "a:1x/activities", "a:1x?y=1", "a:1x#y", "a:%2e%2e"):
            activity = env.fake.personal(ALICE, "hi")
            activity["conversation"]["id"] = unsafe
            status, _ = await env.post(activity)
            assert status == 400, unsafe
        # A channel post whose conversation id names an empty thread root: answered as a
        # new post (it was a failed turn with a traceback: a reply to "" cannot be sent).
        post = env.fake.mention(ALICE, "show PAY-1")
        post["conversation"]["id"] = post["conversation"]["id"].split(";")[0] + ";messageid="
        with caplog.at_level(logging.WARNING):
            caplog.clear()
            assert (await env.post(post))[0] == 202
            (reply,) = await env.fake.wait_for(
                "posted", where=lambda c: c.activity_id == post["id"]
            )
        assert reply.kind == "reply"
        assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
        # A question with a lone surrogate, which the answer quotes: the SDK's models refused
        # the reply, and the user got none ("a Teams turn failed: ValidationError").
        odd = env.fake.personal(ALICE, "show x\ud800y")
        with caplog.at_level(logging.WARNING):
            caplog.clear()
            assert (await env.post(odd))[0] == 202
            answers = await env.fake.wait_for(
                "posted", where=lambda c: "x\ufffdy" in json.dumps(c.body, ensure_ascii=False)
            )
        assert [a.conversation_id for a in answers] == [odd["conversation"]["id"]]
        assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
        invoke = env.fake.personal(ALICE, "")
        invoke.update({"type": "invoke", "name": "composeExtension/query", "value": {}})
        status, body = await env.post(invoke)
        assert (status, json.loads(body)) == (
            400,
            {"error": "opsbot does not handle 'composeExtension/query' invokes"},
        )
        update = env.fake.personal(ALICE, "private words")
        update.update({"type": "conversationUpdate", "membersAdded": [{"id": ALICE.mri}]})
        asked = len(assistant.messages)
        with caplog.at_level(logging.WARNING):
            caplog.clear()
            assert (await env.post(update))[0] == 202
        assert not [r for r in caplog.records if "private words" in r.getMessage()]
        assert len(assistant.messages) == asked
