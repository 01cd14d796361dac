"""Two kinds of text: what the model reads and what people read.

Tool errors, refusals and retry hints are written for the model ("Tell the user…", "do not
retry", LangChain's "a human reviewer replaced this tool call…"). They travel in a
``ToolMessage``'s ``content``. What a person may read about the same call travels beside it,
in ``response_metadata["opsbot"]`` (``people_text``), with the call's ``outcome``; providers
never see that field and people never see ``content``.

``for_people`` is the last guard before text the model wrote reaches a person: it drops any
sentence that speaks to the model, so an LLM that parrots a tool error does not leak it.

Example::

    tool_note(message)        # {"outcome": "failed", "people_text": "…"} or None
    for_people("PAY-1 is closed. Tell the user; do not retry.")   # 'PAY-1 is closed.'
"""

from __future__ import annotations

import logging
import re
from typing import Any, Literal

from langchain_core.messages import ToolMessage

log = logging.getLogger(__name__)

__all__ = [
    "MODEL_DIRECTED_PHRASES",
    "NOTE_KEY",
    "Outcome",
    "for_people",
    "model_directed",
    "note",
    "tool_note",
]

# Lower-case phrases that only ever address the model. The suite-wide Slack scan
# (tests/fixtures/slack_text.py) fails the run if any of them reaches a Slack message.
MODEL_DIRECTED_PHRASES: tuple[str, ...] = (
    "tell the user",
    "do not retry",
    "don't retry",
    "a human reviewer replaced this tool call",
    "the call recorded in your message",
    "do not re-issue your original call",
    "do not propose it again",
    "check with a read tool before retrying",
    "use only the tools you were given",
    "is not an available tool",
)

NOTE_KEY = "opsbot"

# What happened to one tool call: ran and succeeded, ran and failed, may or may not have
# been applied, or was never sent to the server.
Outcome = Literal["succeeded", "failed", "unknown", "not_run"]

_SENTENCE = re.compile(r"[^.!?\n]*(?:[.!?]+|\n|$)")
# LangChain's note on an edited call (every approved write carries one: the idempotency key
# is added by an edit), up to the tool's own response.
_EDIT_NOTICE = re.compile(
    r"Note: a human reviewer replaced this tool call.*?(?:Tool response:\s*|\Z)",
    re.DOTALL | re.IGNORECASE,
)


def model_directed(text: str) -> list[str]:
    """The model-directed phrases found in ``text`` (empty when it is fit for people)."""
    low = text.lower()
    return [p for p in MODEL_DIRECTED_PHRASES if p in low]


def for_people(text: str) -> str:
    """``text`` without the sentences that address the model (logged once when any)."""
    if not model_directed(text):
        return text
    text = _EDIT_NOTICE.sub("", text)
    kept = [s for s in _SENTENCE.findall(text) if s and not model_directed(s)]
    log.warning("dropped model-directed text from an answer for people")
    return re.sub(r"[ \t]{2,}", " ", "".join(kept)).strip()


def note(outcome: Outcome, people_text: str = "", **extra: Any) -> dict[str, Any]:
    """The ``response_metadata`` entry for a tool call's outcome."""
    return {NOTE_KEY: {"outcome": outcome, "people_text": people_text, **extra}}


def tool_note(message: ToolMessage) -> dict[str, Any] | None:
    """What opsbot recorded about the call that produced ``message``, or ``None``."""
    found = (message.response_metadata or {}).get(NOTE_KEY)
    return found if isinstance(found, dict) else None
