"""The checkpointer factory: state written through one saver is read back through a fresh one."""

from __future__ import annotations

import operator
import secrets
from typing import Annotated, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agent_core.checkpointer import MEMORY_URL, open_checkpointer


class Notes(TypedDict):
    notes: Annotated[list[str], operator.add]


def _graph(saver: object) -> CompiledStateGraph[Notes, None, Notes, Notes]:
    builder = StateGraph(Notes)
    builder.add_node("echo", lambda state: {"notes": [f"seen {len(state['notes'])}"]})
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    return builder.compile(checkpointer=saver)  # type: ignore[arg-type]


async def test_state_survives_a_fresh_saver_on_the_same_database(database_url: str) -> None:
    config = {"configurable": {"thread_id": secrets.token_hex(8)}}
    async with open_checkpointer(database_url) as saver:
        await _graph(saver).ainvoke({"notes": ["first"]}, config)  # type: ignore[arg-type]

    async with open_checkpointer(database_url) as fresh:
        graph = _graph(fresh)
        state = await graph.aget_state(config)  # type: ignore[arg-type]
        assert state.values["notes"] == ["first", "seen 1"]
        await graph.ainvoke({"notes": ["second"]}, config)  # type: ignore[arg-type]
        state = await graph.aget_state(config)  # type: ignore[arg-type]
        assert state.values["notes"] == ["first", "seen 1", "second", "seen 3"]


async def test_threads_are_kept_apart(database_url: str) -> None:
    async with open_checkpointer(database_url) as saver:
        graph = _graph(saver)
        first, second = secrets.token_hex(8), secrets.token_hex(8)
        await graph.ainvoke({"notes": ["a"]}, {"configurable": {"thread_id": first}})
        state = await graph.aget_state({"configurable": {"thread_id": second}})
        assert state.values == {}


async def test_memory_saver_for_unit_tests() -> None:
    async with open_checkpointer(MEMORY_URL) as saver:
        result = await _graph(saver).ainvoke({"notes": []}, {"configurable": {"thread_id": "t"}})
    assert result["notes"] == ["seen 0"]


async def test_unknown_url_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="cannot open a checkpointer"):
        async with open_checkpointer("mysql://x/y"):
            pass
