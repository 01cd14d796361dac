"""What one read turn costs (issue 21): supersteps, checkpoint writes, SQL statements, and
output-schema validators compiled once — counted, so a regression fails here."""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from typing import Any

import anyio
import jsonschema
import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.memory import InMemorySaver
from mcp.types import CallToolResult, TextContent

from agent_core import grounding, results, validation
from agent_core.answer import Answer, Interrupt
from agent_core.threads import PlatformRef
from infra.json_input import parse_json
from testing.agent import AgentEnv, FunctionChatModel, call, final, new_thread, tool_results
from testing.sql import count_statements
from testing.turns import open_sql_agent, reads_then_answer

MAX_SUPERSTEPS = 8
MAX_SQL_STATEMENTS = 12


class CountingSaver(InMemorySaver):
    """Counts checkpoint writes and pending-write batches; keeps each checkpoint's step."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[int] = []
        self.write_batches = 0
        self.reads = 0

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self.reads += 1
        return await super().aget_tuple(config)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self.steps.append(int(metadata.get("step", -1)))
        return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        self.write_batches += 1
        await super().aput_writes(*args, **kwargs)


class SlowSaver(CountingSaver):
    """A ``CountingSaver`` whose checkpoint writes take a little while, as a database's do:
    a step that starts before the last one's write was awaited does not find it saved."""

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        await asyncio.sleep(0.01)
        return await super().aput(config, checkpoint, metadata, new_versions)


async def test_a_one_read_turn_is_at_most_eight_supersteps_and_one_checkpoint_write(
    agent_env: AgentEnv,
) -> None:
    saver = CountingSaver()
    agent = agent_env.agent(FunctionChatModel(fn=reads_then_answer(1)), checkpointer=saver)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)

    first = await agent.run(alice, thread, "show PAY-101")
    second = await agent.run(alice, thread, "show PAY-101 again")

    assert first.kind == second.kind == "answer"
    # Reads checkpoint once, at exit (the acked message is durable in the job table).
    assert len(saver.steps) == 2
    assert saver.write_batches == 0
    # A checkpoint's step counts the supersteps since the thread began, each turn's input
    # being one step of its own: a turn is the steps between two checkpoints, less its input.
    first_turn = saver.steps[0] + 1  # a new thread starts at step -1, its input
    second_turn = saver.steps[1] - saver.steps[0] - 1
    assert first_turn == second_turn
    assert first_turn <= MAX_SUPERSTEPS, saver.steps


async def test_a_new_threads_first_run_reads_its_checkpoint_once(agent_env: AgentEnv) -> None:
    """A thread the store just created has no checkpoint: its first run does not look for
    an interrupted turn before it starts (the graph's own read is the one read); a later
    run on it, or a run again after a failure, does."""
    saver = CountingSaver()
    agent = agent_env.agent(FunctionChatModel(fn=reads_then_answer(1)), checkpointer=saver)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)

    assert (await agent.run(alice, thread, "show PAY-101")).kind == "answer"
    assert saver.reads == 1
    assert (await agent.run(alice, thread, "show PAY-102")).kind == "answer"
    assert saver.reads == 3  # the look for an interrupted turn, then the graph's own


async def test_each_further_read_adds_the_tool_step_and_one_model_step(
    agent_env: AgentEnv,
) -> None:
    """A read is three supersteps: the model (its before hooks inside), after it, the tool."""
    steps = {}
    for k in (1, 3):
        saver = CountingSaver()
        agent = agent_env.agent(FunctionChatModel(fn=reads_then_answer(k)), checkpointer=saver)
        alice = await agent_env.user("alice")
        await agent.run(alice, await new_thread(agent, alice), f"show {k} tickets")
        steps[k] = saver.steps[-1] + 1
    assert steps[3] - steps[1] == 2 * 3


async def test_a_one_read_turn_sends_at_most_twelve_sql_statements(
    agent_env: AgentEnv, database_url: str
) -> None:
    """Thread creation, checkpoint read and write, audit record: statements and
    commits, counted at the driver for this turn's tasks only (not the MCP server's own
    database), at most twelve on either database (the owner check reuses the row just
    read). The pools' liveness checks on checkout are counted apart."""
    model = FunctionChatModel(fn=reads_then_answer(1))
    async with open_sql_agent(agent_env, model, database_url, migrated=True) as agent:
        alice = await agent_env.user("alice")
        counts = []
        for i in range(3):  # the first turn opens the connections and discovers the tools
            ref = PlatformRef("slack", "T-COST", "C-COST", f"17000000{i}.000100")
            with count_statements() as sql:
                thread = await agent.threads.get_or_create(ref, alice.subject)
                result = await agent.run(alice, thread.thread_id, "show PAY-101")
            assert result.kind == "answer", result
            counts.append(sql)
    warm = counts[1:]
    assert all(c.executes > 0 for c in warm)  # the counter sees this backend's driver
    postgres = database_url.startswith("postgresql")
    assert max(c.total for c in warm) <= MAX_SQL_STATEMENTS, counts
    # A new conversation's thread is one INSERT, never read back: neither before the write
    # (no select-then-insert) nor by the owner check (it reuses the row just written).
    reads = [sum(sql.startswith("SELECT threads.") for sql in c.log) for c in warm]
    assert reads == [0] * len(warm), [c.log for c in warm]
    inserts = [sum(sql.startswith("INSERT INTO threads") for sql in c.log) for c in warm]
    assert inserts == [1] * len(warm), [c.log for c in warm]
    assert max(c.pings for c in warm) <= (7 if postgres else 0), counts


async def test_output_validators_are_compiled_once_per_schema(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = agent_env.agent(FunctionChatModel(fn=reads_then_answer(2)))
    alice = await agent_env.user("alice")
    await agent.run(alice, await new_thread(agent, alice), "warm up")
    compiled = validation.compiled_count()
    # A schema checked against its metaschema is a validator built (what ``jsonschema``
    # does before building one); warm runs build none, whatever the cache's size says.
    checked: list[object] = []
    drafts = (
        jsonschema.Draft4Validator,
        jsonschema.Draft6Validator,
        jsonschema.Draft7Validator,
        jsonschema.Draft201909Validator,
        jsonschema.Draft202012Validator,
    )

    def counted(check: Any) -> Any:
        def check_schema(schema: object) -> None:
            checked.append(schema)
            check(schema)

        return check_schema

    for cls in drafts:
        monkeypatch.setattr(cls, "check_schema", counted(cls.check_schema))
    # The SDK's own check (``ClientSession._validate_tool_result``: ``jsonschema.validate``
    # on every result) never runs: opsbot's session checks with the compiled validators.
    sdk_checks: list[str] = []
    original_validate = jsonschema.validate

    def validate(*args: Any, **kwargs: Any) -> None:
        caller = sys._getframe(1).f_globals.get("__name__")
        if caller == "mcp.client.session":
            sdk_checks.append(caller)
            raise AssertionError("mcp's ClientSession validated a tool result itself")
        original_validate(*args, **kwargs)

    monkeypatch.setattr(jsonschema, "validate", validate)
    calls = agent.stats.tool_calls
    for i in range(3):
        result = await agent.run(alice, await new_thread(agent, alice), f"show tickets {i}")
        assert result.kind == "answer"
    assert validation.compiled_count() == compiled
    assert agent.stats.tool_calls - calls >= 6  # the checks above ran on real results
    assert checked == []
    assert sdk_checks == []


class _Streams:
    """A session's two memory streams (a ``ValidatingSession`` that never sends)."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[Any](1)

    def close(self) -> None:
        self.send.close()
        self.receive.close()


def _schema(kind: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"key": {"type": "string"}, "n": {"type": kind}},
        "required": ["key", "n"],
        "title": f"changing-{uuid.uuid4()}",  # this test's own schemas: never compiled yet
    }


async def test_a_tools_new_output_schema_gets_its_own_validator() -> None:
    """A new listing of the same tool with another output schema (the discovery cache's
    ``tools_max_age``, a server's new version) checks results against the new schema, even
    in a session that already checked one of that tool's results against the old one."""
    streams = _Streams()
    session = validation.ValidatingSession(streams.receive, streams.send)
    try:
        old, new = _schema("integer"), _schema("string")
        schemas = session._tool_output_schemas
        schemas["t_get"] = old
        await session._validate_tool_result("t_get", _result({"key": "A-1", "n": 1}))
        with pytest.raises(validation.MalformedResultError):
            await session._validate_tool_result("t_get", _result({"key": "A-1", "n": "one"}))

        schemas["t_get"] = new  # what RunSessions._prime or the SDK's list_tools records
        await session._validate_tool_result("t_get", _result({"key": "A-1", "n": "one"}))
        with pytest.raises(validation.MalformedResultError):
            await session._validate_tool_result("t_get", _result({"key": "A-1", "n": 1}))

        # The same schema listed again (an equal copy) reuses its compiled validator.
        compiled = validation.compiled_count()
        schemas["t_get"] = dict(new)
        await session._validate_tool_result("t_get", _result({"key": "A-1", "n": "two"}))
        assert validation.compiled_count() == compiled
    finally:
        streams.close()


def _result(structured: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[], structuredContent=structured)


async def test_a_large_result_is_checked_off_the_event_loop_and_a_small_one_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 21: checking a 130 KB result took ~28 ms of the loop; above
    ``VALIDATE_IN_THREAD_CHARS`` of result text it runs in a worker thread, with the same
    verdict."""
    threads: list[int] = []
    original = validation.compiled

    def recording(schema: Any, key: str | None = None) -> Any:
        validator = original(schema, key)

        class Recording:
            def validate(self, instance: Any) -> None:
                threads.append(threading.get_ident())
                validator.validate(instance)

        return Recording()

    monkeypatch.setattr(validation, "compiled", recording)
    streams = _Streams()
    session = validation.ValidatingSession(streams.receive, streams.send)
    try:
        session._tool_output_schemas["t_get"] = _schema("integer")
        for chars, off_loop in ((100, False), (validation.VALIDATE_IN_THREAD_CHARS + 1, True)):
            threads.clear()
            text = [TextContent(type="text", text="x" * chars)]
            good = CallToolResult(content=text, structuredContent={"key": "A-1", "n": 1})
            await session._validate_tool_result("t_get", good)
            bad = CallToolResult(content=text, structuredContent={"key": "A-1", "n": "one"})
            with pytest.raises(validation.MalformedResultError):
                await session._validate_tool_result("t_get", bad)
            assert len(threads) == 2
            assert all((t != threading.get_ident()) is off_loop for t in threads), chars
    finally:
        streams.close()


async def test_a_resume_saves_the_writes_step_before_the_next_model_step(
    agent_env: AgentEnv,
) -> None:
    """A resume runs approved writes: the step that ran one is checkpointed before the next
    step starts (``durability="sync"``), so a crash after the write never loses its result
    (and the model's next step, which may interrupt again, starts from a saved state)."""
    saver = SlowSaver()
    thread = ""
    saved_at_model: list[list[str | None]] = []

    def saved_tool_calls() -> list[str | None]:
        # What a crash now would leave: the thread's last saved checkpoint's tool results.
        saved = saver.get_tuple({"configurable": {"thread_id": thread}})
        messages = saved.checkpoint["channel_values"].get("messages", []) if saved else []
        return [m.name for m in messages if isinstance(m, ToolMessage)]

    def step(messages: list[BaseMessage]) -> AIMessage:
        if not tool_results(messages):
            return call("ticketing_close_ticket", key="PAY-104", resolution="Alert fixed")
        saved_at_model.append(saved_tool_calls())
        return final("closed", [("ticketing", "PAY-104")])

    agent = agent_env.agent(FunctionChatModel(fn=step), checkpointer=saver)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    assert isinstance(await agent.run(alice, thread, "close PAY-104"), Interrupt)
    before = len(saver.steps)

    done = await agent.resume(alice, thread, [{"type": "approve"}], approval_id="apr-sync")

    assert isinstance(done, Answer), done
    assert [a.endswith(": done") for a in done.actions_taken] == [True], done.actions_taken
    # The model's step after the write found the write's result already saved.
    assert saved_at_model == [["ticketing_close_ticket"]]
    # Every superstep of the resume was saved as it ended, not once at exit.
    steps = saver.steps[before:]
    assert steps == list(range(steps[0], steps[0] + len(steps))), saver.steps
    assert len(steps) >= 3, saver.steps


async def test_each_tool_result_of_a_turn_is_parsed_once(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's answer reads each tool result's JSON text once for its ids and its links
    (``agent_core.results``), not once per walk: a further read adds at most one parse."""
    parses = 0

    def counting(text: str | bytes) -> Any:
        nonlocal parses
        parses += 1
        return parse_json(text)

    for module in (results, grounding):  # the answer's parse, and the walks' own
        monkeypatch.setattr(module, "parse_json", counting)
    counts = {}
    for k in (1, 8):
        agent = agent_env.agent(FunctionChatModel(fn=reads_then_answer(k)))
        alice = await agent_env.user("alice")
        parses = 0
        result = await agent.run(alice, await new_thread(agent, alice), f"show {k} tickets")
        assert result.kind == "answer"
        counts[k] = parses
    assert counts[1] >= 1  # the count sees the results' parse
    assert counts[8] - counts[1] <= 8 - 1, counts
