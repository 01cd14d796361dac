"""Untrusted JSON fails one way (``infra.json_input``)."""

from __future__ import annotations

import pytest

from infra.json_input import parse_json

HOSTILE = {
    "not JSON": b"{",
    "not UTF-8": b'{"a": "\xff"}',
    "an integer of 5,000 digits": b"[" + b"9" * 5000 + b"]",
    "arrays nested 100,000 deep": b"[" * 100_000,
    "objects nested 60,000 deep": b'{"a":' * 60_000,
}


@pytest.mark.parametrize("body", HOSTILE.values(), ids=HOSTILE.keys())
def test_every_malformed_body_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError, match=r"."):  # any kind of ValueError
        parse_json(body)
    if body.isascii():  # the same as text
        with pytest.raises(ValueError, match=r"."):  # any kind of ValueError
            parse_json(body.decode())


def test_json_is_parsed() -> None:
    assert parse_json('{"a": [1, "é"]}') == {"a": [1, "é"]}
    assert parse_json(b"[" * 500 + b"]" * 500) is not None  # nesting a person could write
