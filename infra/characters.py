r"""Characters that ids never hold, and that text cannot take everywhere it goes.

JSON, and so any Slack payload, Teams activity or MCP message, can carry U+0000, other control
characters and lone surrogates (U+D800-U+DFFF alone), and Python decodes them all. No chat
platform or IdP puts a control character in an id; PostgreSQL's text cannot hold a NUL, its
JSON processing refuses a lone surrogate, and UTF-8 (every HTTP body opsbot sends) has none.
So ids with a control character are refused at each edge (``ID_PATTERN``), and text that must
be stored or sent has the unusable characters replaced (``replace_in_strings``).

Example::

    Ident = Annotated[str, StringConstraints(max_length=64, pattern=ID_PATTERN)]
    replace_in_strings({"text": "a\x00b"}, NUL_OR_LONE_SURROGATE)  # {"text": "a\ufffdb"}
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "CONTROL",
    "CONTROL_C0_C1",
    "ID_PATTERN",
    "LONE_SURROGATE",
    "NUL_OR_LONE_SURROGATE",
    "holds_surrogate_escape",
    "replace_in_strings",
]

# C0 control characters and DEL: what an id never holds.
_C0_AND_DEL = r"\x00-\x1f\x7f"
CONTROL = re.compile(f"[{_C0_AND_DEL}]")
# What an id matches (a pydantic ``pattern``; pydantic also refuses a lone surrogate in a
# constrained string: it cannot encode it as UTF-8).
ID_PATTERN = f"^[^{_C0_AND_DEL}]*$"
# With C1's: what text shown to people leaves out.
CONTROL_C0_C1 = re.compile(rf"[{_C0_AND_DEL}\x80-\x9f]")
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
NUL_OR_LONE_SURROGATE = re.compile("[\x00\ud800-\udfff]")
_REPLACEMENT = "\ufffd"


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def holds_surrogate_escape(json_text: str | bytes) -> bool:
    """Whether JSON text escapes a UTF-16 surrogate (lone, or half of a pair such as an
    emoji's): only such text can decode to a lone surrogate, so only it is worth walking."""
    if isinstance(json_text, str):
        return _SURROGATE_ESCAPE.search(json_text) is not None
    return _SURROGATE_ESCAPE_BYTES.search(json_text) is not None


def replace_in_strings(value: Any, unusable: re.Pattern[str]) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with ``unusable`` in every string and key
    replaced by U+FFFD; other values as they are."""
    if isinstance(value, str):
        return unusable.sub(_REPLACEMENT, value)
    if isinstance(value, dict):
        return {
            replace_in_strings(k, unusable): replace_in_strings(v, unusable)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [replace_in_strings(v, unusable) for v in value]
    return value
