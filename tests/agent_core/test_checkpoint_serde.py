"""Checkpoints hold opsbot's structured answer; loading one logs no LangGraph "Deserializing
unregistered type" warning (the answer types are registered with the serializer), and the
answer comes back as itself, not as a dict."""

from __future__ import annotations

import logging
import secrets
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agent_core.answer import FinalAnswer, Source
from agent_core.checkpointer import open_checkpointer

UNREGISTERED = "Deserializing unregistered type"


class State(TypedDict, total=False):
    # Typed ``Any`` like the agent's ``structured_response``: the graph cannot register it.
    answer: Any


def _graph(saver: object) -> CompiledStateGraph[State, None, State, State]:
    def respond(_: State) -> State:
        answer = FinalAnswer(answer="PAY-101 is open", sources=[Source(system="t", id="PAY-101")])
        return {"answer": answer}

    builder = StateGraph(State)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    return builder.compile(checkpointer=saver)  # type: ignore[arg-type]


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    # LangGraph warns once per type per process: start from a clean slate, so an earlier
    # test cannot hide (or cause) the warning.
    monkeypatch.setattr(jsonplus, "_warned_unregistered_types", set())


@pytest.mark.usefixtures("fresh_warnings")
async def test_a_checkpointed_answer_loads_without_the_unregistered_type_warning(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = {"configurable": {"thread_id": secrets.token_hex(8)}}
    async with open_checkpointer(database_url) as saver:
        await _graph(saver).ainvoke({}, config)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="langgraph"):
        async with open_checkpointer(database_url) as fresh:
            state = await _graph(fresh).aget_state(config)  # type: ignore[arg-type]
    loaded = state.values["answer"]
    assert isinstance(loaded, FinalAnswer)
    assert loaded.sources == [Source(system="t", id="PAY-101")]
    assert not [r for r in caplog.records if UNREGISTERED in r.getMessage()]


@pytest.mark.usefixtures("fresh_warnings")
async def test_the_default_serializer_would_warn(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The control: LangGraph's default serializer logs the warning for the same state."""
    import aiosqlite

    config = {"configurable": {"thread_id": "t"}}
    async with aiosqlite.connect(str(tmp_path / "cp.db")) as conn:
        saver = AsyncSqliteSaver(conn)
        await saver.setup()
        await _graph(saver).ainvoke({}, config)  # type: ignore[arg-type]
        with caplog.at_level(logging.WARNING, logger="langgraph"):
            await _graph(saver).aget_state(config)  # type: ignore[arg-type]
    assert [r for r in caplog.records if UNREGISTERED in r.getMessage()]
