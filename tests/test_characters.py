"""``infra.characters``: the one rule for ids' characters and for text that must be stored or
sent (the edges, the job inbox and the MCP client use it)."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, StringConstraints, ValidationError

from infra.characters import (
    CONTROL_C0_C1,
    ID_PATTERN,
    LONE_SURROGATE,
    NUL_OR_LONE_SURROGATE,
    replace_in_strings,
)


class _Ids(BaseModel):
    id: Annotated[str, StringConstraints(max_length=64, pattern=ID_PATTERN)]


@pytest.mark.parametrize("bad", ["U\x00", "U\x1b[1m", "\x7f", "C\n", "a\ud800b"])
def test_an_id_with_a_control_character_or_a_lone_surrogate_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError):
        _Ids(id=bad)


@pytest.mark.parametrize("good", ["U0ALICE", "19:abc@thread.tacv2;messageid=1", "é😀", ""])
def test_ids_of_every_platform_pass(good: str) -> None:
    assert _Ids(id=good).id == good


def test_strings_and_keys_are_replaced_at_every_depth_and_nothing_else_changes() -> None:
    value = {"a\x00": ["x\ud800", ("\udfff", 1)], "n": None, "f": 1.5, "ok": "😀 \\u0000"}
    assert replace_in_strings(value, NUL_OR_LONE_SURROGATE) == {
        "a\ufffd": ["x\ufffd", ["\ufffd", 1]],
        "n": None,
        "f": 1.5,
        "ok": "😀 \\u0000",
    }
    assert replace_in_strings("a\x00\ud800", LONE_SURROGATE) == "a\x00\ufffd"


def test_text_for_people_loses_c0_and_c1_controls() -> None:
    assert CONTROL_C0_C1.sub("", "a\x00b\x1bc\x85d\x9fe\x7ff") == "abcdef"


def test_a_surrogate_escape_is_found_in_json_text_of_either_kind() -> None:
    from infra.characters import holds_surrogate_escape

    for text in ('"a\\ud800"', '"\\uDFFF"', '"\\ud83d\\ude00"'):  # lone, upper case, a pair
        assert holds_surrogate_escape(text)
        assert holds_surrogate_escape(text.encode())
    for text in ('"\\u00e9"', '"\\u0d80"', '"plain"'):
        assert not holds_surrogate_escape(text)
