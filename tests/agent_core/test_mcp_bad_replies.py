"""A server that answers a call with something that is not a usable MCP reply.

Found by sending a third-party server's worst replies at a run: a body that is not JSON or not
JSON-RPC, another content type, an event stream that ends without the answer, an answer to
another request, a result that is not a ``CallToolResult`` or is off the tool's output schema.
Each made the SDK log an error with a traceback and left the call waiting for its timeout (three
times with read retries: a one-minute turn that tripped the breaker), told the model to "fix
its arguments", or raised out of ``Agent.run``. Now each call fails at once, is not retried,
the model and the person read what went wrong, the log has one line, and the server stays in
use. A JSON-RPC error the server sends is the server's answer (its text, not "the connection
failed"), and a session the server no longer knows (404) is opened again. A reply past 4 MiB
is not read on, and a result's text past what a model should read is cut, with a note.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver

from agent_core import Agent, AgentConfig, Answer, Interrupt, ServerConfig, ToolPolicy
from agent_core.binding import ToolCallEvent
from agent_core.catalog import describe_tools
from agent_core.discovery import MAX_DESCRIPTION_CHARS
from agent_core.texts import tool_note
from agent_core.threads import MemoryThreadStore
from agent_core.tools import MODEL_TOOL_NAME, prefixed
from testing.agent import (
    FAKE_POLICY,
    FakeBroker,
    FaultPlan,
    RawReply,
    ScriptedChatModel,
    call,
    final,
    tool_results,
)
from tests.agent_core.test_tool_errors import ALICE, make_agent, run

JSON = ("Content-Type", "application/json")
EVENTS = ("Content-Type", "text/event-stream")


def _rpc(message: dict[str, Any]) -> bytes:
    return json.dumps(message).replace('"ID"', "{id}").encode()


def _result(result: Any) -> bytes:
    return _rpc({"jsonrpc": "2.0", "id": "ID", "result": result})


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def _event(data: bytes) -> bytes:
    return b"event: message\ndata: " + data + b"\n\n"


NOT_MCP = "sent a reply that is not MCP"
MALFORMED = "sent a malformed result for lookup"

# name: (the reply, what the model reads)
BAD_REPLIES = {
    "not JSON": (RawReply(200, (JSON,), (b"<<not json>>",)), NOT_MCP),
    "empty body": (RawReply(200, (JSON,), ()), NOT_MCP),
    "JSON but not JSON-RPC": (RawReply(200, (JSON,), (b"[1, 2]",)), NOT_MCP),
    "invalid UTF-8": (
        RawReply(200, (JSON,), (b'{"jsonrpc": "2.0", "id": {id}, "result": "\xff\xfe"}',)),
        NOT_MCP,
    ),
    "nested 100,000 deep": (
        RawReply(200, (JSON,), (b'{"jsonrpc": "2.0", "id": {id}, "result": ' + b"[" * 100_000,)),
        NOT_MCP,
    ),
    "an error with the wrong types": (
        RawReply(
            200,
            (JSON,),
            (_rpc({"jsonrpc": "2.0", "id": "ID", "error": {"code": "x", "message": 5}}),),
        ),
        NOT_MCP,
    ),
    "an answer to another request": (
        RawReply(200, (JSON,), (_rpc({"jsonrpc": "2.0", "id": 987654, "result": {}}),)),
        NOT_MCP + " (it held no answer to the request)",
    ),
    "HTML": (RawReply(200, (("Content-Type", "text/html"),), (b"<h1>Sign in</h1>",)), NOT_MCP),
    "no content type": (RawReply(200, (), (_result({"content": []}),)), NOT_MCP),
    "an event stream that is not SSE": (RawReply(200, (EVENTS,), (b"garbage\n\n",)), NOT_MCP),
    "an event that is not JSON": (RawReply(200, (EVENTS,), (_event(b"nope"),)), NOT_MCP),
    "a result that is a string": (RawReply(200, (JSON,), (_result("done"),)), NOT_MCP),
    "content that is not a list": (
        RawReply(200, (JSON,), (_result({"content": "text"}),)),
        MALFORMED,
    ),
    "content of an unknown type": (
        RawReply(200, (JSON,), (_result({"content": [{"type": "hologram"}]}),)),
        MALFORMED,
    ),
    "no structured content for an output schema": (
        RawReply(200, (EVENTS,), (_event(_result({"content": []})),)),
        MALFORMED,
    ),
    "structured content that is a list": (
        RawReply(200, (JSON,), (_result({"content": [], "structuredContent": [1]}),)),
        MALFORMED,
    ),
    # Read whole into memory, then parsed on the event loop: not past MAX_REPLY_BYTES.
    "a reply of 5 MiB": (
        RawReply(200, (JSON,), (_result({"content": [_text("x" * 5 * 2**20)]}),)),
        NOT_MCP + " (larger than 4 MiB)",
    ),
    "an event stream of 5 MiB": (
        RawReply(200, (EVENTS,), (_event(_result({"content": [_text("x" * 5 * 2**20)]})),)),
        NOT_MCP + " (larger than 4 MiB)",
    ),
}


def _quiet(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What an operator would read: warnings and errors, and any traceback at all."""
    return [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


async def _read_after_listing(
    fake: tuple[str, FaultPlan], caplog: pytest.LogCaptureFixture, listing: list[RawReply]
) -> tuple[_Reader, list[str]]:
    """One read of X-1 by an agent whose discovery got ``listing``: it answered with the
    tool's result; what the model was given and read, and the lines logged."""
    url, plan = fake
    plan.raw_replies["tools/list"] = list(listing)
    reader = _Reader("fake_lookup", item="X-1")
    agent = make_agent(url, reader.model)
    caplog.set_level(logging.INFO)

    _, result = await asyncio.wait_for(run(agent, "look up X-1"), 15)

    assert isinstance(result, Answer)
    assert '"status": "ok"' in reader.read[0]
    return reader, [r.getMessage() for r in _quiet(caplog)]


class _Reader:
    """A model that calls ``tool`` once, keeps what it read and answers without quoting it."""

    def __init__(self, tool: str, **args: Any) -> None:
        self.read: list[str] = []
        self.model = ScriptedChatModel(steps=[call(tool, **args), self._answer])

    def _answer(self, messages: list[BaseMessage]) -> Any:
        self.read.extend(str(m.content) for m in tool_results(messages))
        return final("done")


@pytest.mark.parametrize("case", list(BAD_REPLIES))
async def test_a_reply_that_is_not_usable_fails_the_call_at_once(
    fake: tuple[str, FaultPlan], case: str, caplog: pytest.LogCaptureFixture
) -> None:
    url, plan = fake
    reply, told = BAD_REPLIES[case]
    reader = _Reader("fake_lookup", item="X-1")
    # Retries and a long timeout: neither may be waited for, or used.
    agent = make_agent(url, reader.model, read_timeout=60, read_retries=2, breaker_threshold=1)
    plan.raw_replies["lookup"] = [reply]
    caplog.set_level(logging.INFO)

    _, result = await asyncio.wait_for(run(agent, f"look up X-1 ({case})"), 15)

    assert isinstance(result, Answer)
    assert plan.calls["lookup"] == 1  # not retried: the same server would say the same
    assert len(reader.read) == 1
    assert "fake_lookup failed: fake " + told in reader.read[0]
    assert "Do not retry" in reader.read[0]
    logged = _quiet(caplog)
    assert [(r.name, r.levelname) for r in logged] == [("agent_core.sessions", "WARNING")]
    assert not logged[0].exc_info
    assert "\n" not in logged[0].getMessage()
    # The server is not taken for down (the breaker opens at the first failure it counts).
    _, result = await run(agent, f"look up X-1 again ({case})")
    assert isinstance(result, Answer)
    assert '"status": "ok"' in reader.read[1]


async def test_a_json_rpc_error_is_the_servers_answer_not_a_broken_connection(
    fake: tuple[str, FaultPlan], caplog: pytest.LogCaptureFixture
) -> None:
    url, plan = fake
    reader = _Reader("fake_lookup", item="X-1")
    agent = make_agent(url, reader.model, read_timeout=60, read_retries=2, breaker_threshold=1)
    error = {"code": -32000, "message": "Ticket store\n is read-only today " + "x" * 500}
    plan.raw_replies["lookup"] = [
        RawReply(200, (JSON,), (_rpc({"jsonrpc": "2.0", "id": "ID", "error": error}),))
    ]
    caplog.set_level(logging.INFO)

    _, result = await asyncio.wait_for(run(agent, "look up X-1"), 15)

    assert isinstance(result, Answer)
    assert plan.calls["lookup"] == 1
    # The server's own words, on one line and cut short, not "the connection failed".
    assert reader.read[0].startswith("fake_lookup failed: Ticket store is read-only today x")
    assert len(reader.read[0]) < 400
    assert "connection" not in reader.read[0]
    assert _quiet(caplog) == []


async def test_an_error_result_with_a_stack_trace_is_one_line_for_people(
    fake: tuple[str, FaultPlan],
) -> None:
    """A server that answers a failed call with its stack trace (``isError``): the model read
    all 10,000 characters and people's text of the call (the tool step shown in chat) was the
    whole traceback, line by line. An empty one read "fake_lookup failed: fake_lookup failed"."""
    url, plan = fake
    trace = 'Traceback (most recent call last):\n  File "/srv/app.py", line 12\n' * 150
    errors = [{"content": [_text(trace)], "isError": True}, {"content": [], "isError": True}]
    plan.raw_replies["lookup"] = [RawReply(200, (JSON,), (_result(e),)) for e in errors]
    notes: list[dict[str, Any]] = []
    read: list[Any] = []

    def answer(messages: list[BaseMessage]) -> Any:
        notes.extend(tool_note(m) or {} for m in tool_results(messages))
        read.extend(m.content for m in tool_results(messages))
        return final("done")

    steps = [call("fake_lookup", item="X-1"), answer]
    for text in ("look up X-1", "look up X-2"):
        agent = make_agent(url, ScriptedChatModel(steps=steps), read_retries=0)
        _, result = await asyncio.wait_for(run(agent, text), 15)
        assert isinstance(result, Answer)

    traced, empty = notes
    assert traced["people_text"].startswith(
        'the fake server refused fake_lookup: Traceback (most recent call last): File "/srv'
    )
    assert "\n" not in traced["people_text"]
    assert len(traced["people_text"]) <= 300 + len("the fake server refused fake_lookup: ")
    assert empty["people_text"] == (
        "the fake server refused fake_lookup: the server gave no reason"
    )
    # The model reads the start of it, lines kept (a validation error may list several).
    assert read[0].startswith("fake_lookup failed: Traceback (most recent call last):\n")
    assert len(read[0]) == len("fake_lookup failed: ") + 2_000
    assert read[1] == "fake_lookup failed: the server gave no reason"


class _Finished:
    """A tool observer that keeps each finished call's event and outcome."""

    def __init__(self) -> None:
        self.finished: list[tuple[ToolCallEvent, str]] = []

    async def tool_call_started(self, event: ToolCallEvent) -> None:
        return None

    async def tool_call_finished(self, event: ToolCallEvent, outcome: str, latency: float) -> None:
        self.finished.append((event, outcome))


async def _look_up(url: str, item: str) -> tuple[list[Any], list[tuple[ToolCallEvent, str]]]:
    """One run that looks ``item`` up on the fake server: the tool results the model read,
    and each finished call's audit event and outcome."""
    results: list[Any] = []

    def answer(messages: list[BaseMessage]) -> Any:
        results.extend(tool_results(messages))
        return final("done")

    observer = _Finished()
    agent = Agent(
        AgentConfig(servers=(ServerConfig("fake", url, url),), read_retries=0),
        model=ScriptedChatModel(steps=[call("fake_lookup", item=item), answer]),
        broker=FakeBroker(audiences={"fake": url}),
        threads=MemoryThreadStore(),
        checkpointer=InMemorySaver(),
        policy=ToolPolicy.from_yaml(FAKE_POLICY),
        observer=observer,
    )
    _, result = await asyncio.wait_for(run(agent, f"look up {item}"), 15)
    await agent.settle()
    assert isinstance(result, Answer)
    return results, observer.finished


async def test_control_characters_in_a_refusal_never_reach_people_or_the_audit(
    fake: tuple[str, FaultPlan],
) -> None:
    """A refusal carrying a NUL, a terminal escape and a bell: people's text of the call and
    the reason the audit (and an approval's ``outcome_reason``) keeps hold none of them.
    PostgreSQL's text cannot hold a NUL: an approved write refused so could not be finished."""
    url, plan = fake
    error = {"content": [_text("Refused:\x00 bad \x1b[31minput\x07 here")], "isError": True}
    plan.raw_replies["lookup"] = [RawReply(200, (JSON,), (_result(error),))]
    [message], [(event, outcome)] = await _look_up(url, "X-1")
    note = tool_note(message) or {}
    assert note["people_text"] == "the fake server refused fake_lookup: Refused: bad [31minput here"
    assert outcome == "error:ToolResultError"
    assert event.reason == "the fake server refused — Refused: bad [31minput here"


async def test_an_argument_with_a_lone_surrogate_is_sent_not_reported_as_a_broken_link(
    fake: tuple[str, FaultPlan],
) -> None:
    """The MCP client encodes a request as UTF-8, which cannot hold a lone surrogate (JSON
    can, from an edit typed into a card or a message a model copies from): the session's
    transport failed, and the call read "the connection to fake failed" though nothing was
    sent. The code point goes as U+FFFD, as the audit records it."""
    url, plan = fake
    [message], [(event, outcome)] = await _look_up(url, "x\ud800y")
    assert plan.calls == {"lookup": 1}
    assert json.loads(message.content) == {"id": "x\ufffdy", "status": "ok"}
    assert (outcome, event.args) == ("success", {"item": "x\ufffdy"})


async def test_a_session_the_server_forgot_is_opened_again(
    fake: tuple[str, FaultPlan], caplog: pytest.LogCaptureFixture
) -> None:
    url, plan = fake
    reader = _Reader("fake_lookup", item="X-1")
    agent = make_agent(url, reader.model, read_retries=0)  # not a retry: a new session
    plan.raw_replies["lookup"] = [RawReply(404, (JSON,), (b'{"error": "unknown session"}',))]
    plan.raw_replies["DELETE"] = [RawReply(404, (JSON,), (b'{"error": "unknown session"}',))]
    caplog.set_level(logging.INFO)

    _, result = await asyncio.wait_for(run(agent, "look up X-1"), 15)
    await agent.settle()

    assert isinstance(result, Answer)
    assert plan.calls["lookup"] == 2
    assert '"status": "ok"' in reader.read[0]
    assert agent.stats.sessions_opened == 2
    # Its close finds it gone too (404): what the close was for, not a warning per run.
    assert plan.raw_replies["DELETE"] == []
    assert _quiet(caplog) == []


async def test_an_unreadable_reply_to_a_write_leaves_its_outcome_open_and_is_not_resent(
    fake: tuple[str, FaultPlan],
) -> None:
    url, plan = fake
    reader = _Reader("fake_change", item="X-1")
    agent = make_agent(url, reader.model, write_attempts=3)
    plan.raw_replies["change"] = [RawReply(200, (JSON,), (b"{{{",))]
    thread, pending = await run(agent, "change X-1")
    assert isinstance(pending, Interrupt)

    result = await asyncio.wait_for(agent.resume(ALICE, thread, [{"type": "approve"}]), 15)

    assert isinstance(result, Answer)
    assert plan.calls["change"] == 1  # a keyed write is resent only when nothing was read
    assert "Whether it was applied is not known yet" in reader.read[0]
    assert result.actions_taken == ["fake_change (item=X-1): outcome unknown — being reconciled"]


async def test_a_result_longer_than_a_model_should_read_is_cut_with_a_note(
    fake: tuple[str, FaultPlan],
) -> None:
    url, plan = fake
    reader = _Reader("fake_lookup", item="X-1")
    agent = make_agent(url, reader.model)
    blocks = [_text("7" * 60_000), _text("8" * 60_000), _text("9" * 180_000)]
    structured = {"id": "X-1", "status": "ok"}
    plan.raw_replies["lookup"] = [
        RawReply(200, (JSON,), (_result({"content": blocks, "structuredContent": structured}),))
    ]

    _, result = await run(agent, "look up X-1")

    assert isinstance(result, Answer)
    read = reader.read[0]
    assert read.count("7") == 60_000
    assert read.count("8") == 40_000
    assert "9" not in read
    assert "[200,000 more characters of this result were cut; ask for less" in read
    assert len(read) < 100_500


def test_a_model_visible_name_is_one_every_provider_takes_and_stays_one_tools() -> None:
    assert prefixed("jira", "search_issues") == "jira_search_issues"  # as it was
    assert prefixed("jira", "search.issues") == "jira_search_issues"
    assert prefixed("jira", "admin/users list") == "jira_admin_users_list"
    # Non-ASCII letters say nothing once made "_": a hash of the whole keeps names apart.
    assert prefixed("jira", "tïcket").startswith("jira_t_cket_")
    assert prefixed("jira", "検索") != prefixed("jira", "取得")
    assert prefixed("jira", "検索").startswith("jira____")
    long_a, long_b = prefixed("jira", "x" * 100 + "a"), prefixed("jira", "x" * 100 + "b")
    assert long_a != long_b
    assert long_a.startswith("jira_xxx")
    for name in (
        long_a,
        long_b,
        prefixed("jira", ""),
        prefixed("jira", "☃" * 200),
        prefixed("jira", "検索"),
        prefixed("jira", "tïcket"),
    ):
        assert MODEL_TOOL_NAME.fullmatch(name), name


def _listed(*names: str) -> RawReply:
    schema = {"type": "object", "properties": {"item": {"type": "string"}}}
    tools = [{"name": n, "description": f"{n}.", "inputSchema": schema} for n in names]
    return RawReply(200, (JSON,), (_result({"tools": tools}),))


async def test_tools_named_as_mcp_allows_reach_the_model_as_providers_allow(
    fake: tuple[str, FaultPlan], caplog: pytest.LogCaptureFixture
) -> None:
    """MCP tool names may have dots, slashes, spaces and 128 characters; a model provider
    refuses a request whose tool names have any (every turn failed). A server listing one
    name twice stopped the run with ``ToolCollisionError``; two names that come out as one
    would have too."""
    url, plan = fake
    long_name = "describe_" + "the_whole_" * 10 + "incident"
    plan.raw_replies["tools/list"] = [
        _listed(
            "lookup",
            "search.issues",
            "admin/list users",
            long_name,
            "search_issues",
            "lookup",
            "検索",
            "取得",
        )
    ]
    plan.raw_replies["search.issues"] = [
        RawReply(200, (JSON,), (_result({"content": [_text("3 issues")]}),))
    ]
    reader = _Reader("fake_search_issues", item="open")
    policy = ToolPolicy.from_yaml("tools:\n  fake_search_issues: {kind: read}\n")
    agent = Agent(
        AgentConfig(servers=(ServerConfig("fake", url, url),)),
        model=reader.model,
        broker=FakeBroker(audiences={"fake": url}),
        threads=MemoryThreadStore(),
        checkpointer=InMemorySaver(),
        policy=policy,
    )
    caplog.set_level(logging.INFO)

    _, result = await asyncio.wait_for(run(agent, "search open issues"), 15)

    assert isinstance(result, Answer)
    bound = reader.model.bound_tools[0]
    assert all(MODEL_TOOL_NAME.fullmatch(name) for name in bound), bound
    assert {"fake_search_issues", "fake_admin_list_users"} <= set(bound)
    assert {prefixed("fake", "検索"), prefixed("fake", "取得")} <= set(bound)  # two tools
    assert plan.calls == {"search.issues": 1}  # under the server's own name
    assert reader.read == ["3 issues"]
    left_out = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # "lookup" listed again as it was: nothing to say.
    assert left_out == [
        "mcp server fake: tool 'search_issues' left out: 'search.issues' has its name for the "
        "model (fake_search_issues)"
    ]


BAD_SCHEMAS = {
    "a string": ({"type": "string"}, "of type 'string', not an object"),
    "object or null": ({"type": ["object", "null"]}, "of type ['object', 'null']"),
    "properties as a list": ({"type": "object", "properties": ["item"]}, "not valid JSON Schema"),
    "a property that is a number": ({"properties": {"item": 5}}, "not valid JSON Schema"),
    "required as a string": (
        {"type": "object", "properties": {"item": {}}, "required": "item"},
        "not valid JSON Schema",
    ),
}


@pytest.mark.parametrize("case", list(BAD_SCHEMAS))
async def test_a_tool_whose_input_schema_a_model_cannot_take_is_left_out_with_one_line(
    fake: tuple[str, FaultPlan], case: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A provider refuses a request whose tool parameters are not an object's JSON Schema
    (every turn would fail); a list of properties raised ValueError out of ``Agent.run``."""
    schema, why = BAD_SCHEMAS[case]
    good = {"type": "object", "properties": {"item": {"type": "string"}}}
    tools = [
        {"name": "lookup", "inputSchema": good},
        {"name": "odd", "description": "Odd.", "inputSchema": schema},
    ]
    listing = [RawReply(200, (JSON,), (_result({"tools": tools}),))]

    reader, logged = await _read_after_listing(fake, caplog, listing)

    assert reader.model.bound_tools[0] == ["fake_lookup", "FinalAnswer"]
    assert len(logged) == 1
    assert logged[0].startswith(f"mcp server fake: tool 'odd' left out: its input schema is {why}")


async def test_a_tool_too_large_for_every_model_request_is_cut_or_left_out(
    fake: tuple[str, FaultPlan], caplog: pytest.LogCaptureFixture
) -> None:
    """Every model request carries every tool's description and schema: a server's 1 MB
    description, or a schema of 200,000 characters, went to the model on every turn."""
    good = {"type": "object", "properties": {"item": {"type": "string"}}}
    huge = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(2000)},
    }
    tools = [
        {"name": "lookup", "description": "Look it up. " * 100_000, "inputSchema": good},
        {"name": "vast", "description": "Vast.", "inputSchema": huge},
    ]
    listing = [RawReply(200, (JSON,), (_result({"tools": tools}),))]

    reader, logged = await _read_after_listing(fake, caplog, listing)

    assert reader.model.bound_tools[0] == ["fake_lookup", "FinalAnswer"]
    description = reader.model.bound[0][0].description
    assert len(description) == MAX_DESCRIPTION_CHARS + 1
    assert description.startswith("Look it up. Look it up.")
    assert description.endswith("…")
    size = len(json.dumps(huge, separators=(",", ":")))
    assert sorted(logged) == [
        "mcp server fake: tool 'lookup': its description of 1,200,000 characters is cut to 4,000",
        f"mcp server fake: tool 'vast' left out: its input schema is {size:,} characters, "
        "more than 32,000",
    ]


async def test_a_result_reaches_the_model_as_text_whatever_blocks_the_server_sent(
    fake: tuple[str, FaultPlan],
) -> None:
    """An image, audio, a resource link or an embedded file in a tool result went to the
    model as content blocks: OpenAI's client refuses a file URL in a tool message ("does not
    support file URLs"), its API an image there, Anthropic fetches a link's URL (here
    ``demo://``) — and the message stays in the thread's history, so every later turn of the
    thread failed too. The model now reads one text, each block said in words."""
    url, plan = fake
    blocks = [
        _text("Found it."),
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {
            "type": "resource_link",
            "uri": "demo://resource/1",
            "name": "Resource 1",
            "mimeType": "text/plain",
            "description": "The first.",
        },
        {"type": "resource", "resource": {"uri": "demo://notes/2", "text": "note two"}},
        {
            "type": "resource",
            "resource": {"uri": "demo://x.gz", "mimeType": "application/gzip", "blob": "H4sIAAAA"},
        },
    ]
    structured = {"id": "X-1", "status": "ok"}
    reply = _result({"content": blocks, "structuredContent": structured})
    plan.raw_replies["lookup"] = [RawReply(200, (JSON,), (reply,))]
    read: list[Any] = []

    def answer(messages: list[BaseMessage]) -> Any:
        read.extend(m.content for m in tool_results(messages))
        return final("done")

    agent = make_agent(url, ScriptedChatModel(steps=[call("fake_lookup", item="X-1"), answer]))

    _, result = await asyncio.wait_for(run(agent, "look up X-1"), 15)

    assert isinstance(result, Answer)
    assert read == [
        "Found it.\n"
        "[image/png image omitted]\n"
        "[audio/wav audio omitted]\n"
        "[resource link: Resource 1 demo://resource/1 (text/plain): The first.]\n"
        "[resource demo://notes/2]\nnote two\n"
        "[resource demo://x.gz (application/gzip, 6 bytes) omitted]"
    ]


async def test_a_result_with_structured_content_only_is_read_as_its_json(
    fake: tuple[str, FaultPlan],
) -> None:
    """MCP asks a server to add its structured content as text too, but does not require it:
    a result with an empty content list reached the model as an empty text."""
    url, plan = fake
    structured = {"id": "X-1", "status": "ok", "owner": "Zoë"}
    reply = _result({"content": [], "structuredContent": structured})
    plan.raw_replies["lookup"] = [RawReply(200, (JSON,), (reply,))]
    reader = _Reader("fake_lookup", item="X-1")
    agent = make_agent(url, reader.model)

    _, result = await asyncio.wait_for(run(agent, "look up X-1"), 15)

    assert isinstance(result, Answer)
    assert reader.read == ['{"id": "X-1", "status": "ok", "owner": "Zoë"}']


async def test_opsbot_tools_shows_the_listed_tools_a_model_cannot_be_given_and_why(
    fake: tuple[str, FaultPlan],
) -> None:
    """They were only in a log line at discovery: ``opsbot tools`` did not list them."""
    url, plan = fake
    good = {"type": "object", "properties": {"item": {"type": "string"}}}
    tools = [
        {"name": "lookup", "inputSchema": good},
        {"name": "odd", "inputSchema": {"type": "string"}},
        {"name": "look.up", "inputSchema": good},  # the model would know it as fake_look_up
        {"name": "look_up", "inputSchema": good},
        {"name": "research", "inputSchema": good, "execution": {"taskSupport": "required"}},
    ]
    plan.raw_replies["tools/list"] = [RawReply(200, (JSON,), (_result({"tools": tools}),))]
    agent = make_agent(url, ScriptedChatModel(steps=[final("ok")]))

    found = await agent.discover_all(ALICE)
    rows, notes = describe_tools(agent.servers, found, agent.policy)

    assert notes == []
    assert [(r.tool, r.kind, r.allowlisted, r.why) for r in rows if r.kind == "-"] == [
        (
            "research",
            "-",
            False,
            "left out: it runs only as an MCP task, which opsbot does not use",
        ),
        ("odd", "-", False, "left out: its input schema is of type 'string', not an object"),
        ("look_up", "-", False, "left out: 'look.up' has its name for the model (fake_look_up)"),
    ]
    assert [r.tool for r in rows if r.kind != "-"] == ["fake_lookup", "fake_look_up"]


_INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "serverInfo": {"name": "x", "version": "1"},
}
BAD_INITIALIZE = {
    "not JSON": (RawReply(200, (JSON,), (b"nope",)), "sent a reply that is not MCP"),
    "a sign-in page": (
        RawReply(200, (("Content-Type", "text/html"),), (b"<h1>Sign in</h1>",)),
        "sent a reply that is not MCP",
    ),
    "a protocol version from 1999": (
        RawReply(200, (JSON,), (_result({**_INIT, "protocolVersion": "1999-01-01"}),)),
        "cannot open an MCP session (Unsupported protocol version from the server: 1999-01-01)",
    ),
    "no serverInfo": (
        RawReply(200, (JSON,), (_result({"protocolVersion": "2025-06-18", "capabilities": {}}),)),
        "cannot open an MCP session (a malformed result)",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INITIALIZE))
async def test_a_session_that_cannot_open_for_its_reply_is_said_so_once_not_retried(
    fake: tuple[str, FaultPlan], case: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Was "the connection to fake failed" (retried, counted by the breaker), and for a
    result without serverInfo, two warnings from the SDK carrying the server's raw reply."""
    url, plan = fake
    reply, told = BAD_INITIALIZE[case]
    reader = _Reader("fake_lookup", item="X-1")
    agent = make_agent(url, reader.model, read_retries=2, breaker_threshold=1)
    _, warm = await run(agent, "look up X-1 (warm: the tool is known)")
    assert isinstance(warm, Answer)
    plan.raw_replies["initialize"] = [reply] * 3
    caplog.set_level(logging.INFO)

    _, result = await asyncio.wait_for(run(agent, f"look up X-1 ({case})"), 15)

    assert isinstance(result, Answer)
    assert len(plan.raw_replies["initialize"]) == 2  # one session tried, not three
    assert reader.read[1].startswith(f"fake_lookup failed: fake {told}")
    logged = _quiet(caplog)
    assert [(r.name, r.levelname) for r in logged] == [("agent_core.sessions", "WARNING")]
    assert "\n" not in logged[0].getMessage()
    plan.raw_replies["initialize"] = []
    _, result = await run(agent, "look up X-1 (again)")
    assert '"status": "ok"' in reader.read[2]  # the server is still in use


def _page(cursor: str | None) -> RawReply:
    schema = {"type": "object", "properties": {"item": {"type": "string"}}}
    page: dict[str, Any] = {"tools": [{"name": "lookup", "inputSchema": schema}]}
    if cursor is not None:
        page["nextCursor"] = cursor
    return RawReply(200, (JSON,), (_result(page),))


@pytest.mark.parametrize(
    ("pages", "read"),
    [
        ([_page("again")] * 10, 2),  # the cursor it gave before
        ([_page(f"p{i}") for i in range(150)], 100),  # a new cursor on every page
    ],
    ids=["a repeated cursor", "a cursor that never ends"],
)
async def test_a_tool_list_that_does_not_end_is_used_as_far_as_it_came(
    fake: tuple[str, FaultPlan], pages: list[RawReply], read: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Discovery read pages until its timeout (30 s), then left the server out."""
    _, logged = await _read_after_listing(fake, caplog, pages)

    assert len(pages) - len(fake[1].raw_replies["tools/list"]) == read
    assert logged == [
        f"mcp server fake: its tool list does not end ({read} pages); "
        f"the {read} tools listed are used"
    ]


async def test_a_tool_whose_output_schema_is_not_json_schema_is_kept_its_results_unchecked(
    fake: tuple[str, FaultPlan], caplog: pytest.LogCaptureFixture
) -> None:
    """Every result of it failed its check against the schema (a malformed result, each
    call); the result itself is as usable as any."""
    tool = {
        "name": "lookup",
        "inputSchema": {"type": "object", "properties": {"item": {"type": "string"}}},
        "outputSchema": {"type": "object", "properties": {"id": {"type": 5}}},
    }
    listing = [RawReply(200, (JSON,), (_result({"tools": [tool]}),))]

    _, logged = await _read_after_listing(fake, caplog, listing)

    assert len(logged) == 1
    assert logged[0].startswith(
        "mcp server fake: tool 'lookup': its output schema is not valid JSON Schema ("
    )
    assert logged[0].endswith("); its results are not checked")


async def test_a_write_refused_for_a_forgotten_session_runs_once_on_a_new_one(
    fake: tuple[str, FaultPlan],
) -> None:
    """The server took nothing (404), so even a write without an idempotency key is sent
    again; it was "outcome unknown", left to people to check."""
    url, plan = fake
    reader = _Reader("fake_note", item="X-1", text="restarted at 10:02")
    agent = make_agent(url, reader.model)
    plan.raw_replies["note"] = [RawReply(404, (JSON,), (b'{"error": "unknown session"}',))]
    thread, pending = await run(agent, "note on X-1")
    assert isinstance(pending, Interrupt)

    result = await asyncio.wait_for(agent.resume(ALICE, thread, [{"type": "approve"}]), 15)

    assert isinstance(result, Answer)
    assert plan.calls["note"] == 2  # the refused request, then the one that ran
    assert '"text": "restarted at 10:02"' in reader.read[0]
    assert result.actions_taken == ["fake_note (item=X-1, text=restarted at 10:02): done"]


async def test_a_result_of_more_blocks_than_a_result_has_is_cut_before_it_is_parsed(
    fake: tuple[str, FaultPlan],
) -> None:
    """130,000 one-character blocks held the event loop 1.4 s (a model and a LangChain block
    each), for a result no model should read whole."""
    url, plan = fake
    reader = _Reader("fake_lookup", item="X-1")
    agent = make_agent(url, reader.model)
    blocks = [_text("7")] * 5000
    structured = {"id": "X-1", "status": "ok"}
    plan.raw_replies["lookup"] = [
        RawReply(200, (JSON,), (_result({"content": blocks, "structuredContent": structured}),))
    ]

    _, result = await asyncio.wait_for(run(agent, "look up X-1"), 15)

    assert isinstance(result, Answer)
    assert reader.read[0].count("7") == 1000
    assert "[4,000 more content blocks of this result were cut; ask for less]" in reader.read[0]


@pytest.mark.parametrize("depth", [100_000, 900])
async def test_a_result_whose_text_is_json_nested_past_the_stack_still_gets_an_answer(
    fake: tuple[str, FaultPlan], depth: int
) -> None:
    """A well-formed result whose text is JSON nested past Python's stack (100,000 deep: the
    parse fails; 900 deep: it parses, and walking it for ids and links from inside a run goes
    past the stack): the answer's grounding raised ``RecursionError`` and the run failed. Now
    nothing in it grounds the answer, and the run answers."""
    url, plan = fake
    reader = _Reader("fake_lookup", item="X-1")
    agent = make_agent(url, reader.model)
    nested = "[" * depth + "]" * depth
    reply = _result(
        {"content": [_text(nested)], "structuredContent": {"id": "X-1", "status": "ok"}}
    )
    plan.raw_replies["lookup"] = [RawReply(200, (JSON,), (reply,))]

    _, result = await asyncio.wait_for(run(agent, f"look up X-1 ({depth})"), 15)

    assert isinstance(result, Answer)
    assert result.answer == "done"
    assert reader.read
    assert reader.read[0].startswith("[[[")
