"""Slack's Web API rules that need no workspace state, stated once for the fake Slack
(``testing.slack_webapi``, which the sandbox and ``testing.slack.FakeSlack`` both serve).

Limits as Slack enforces them: 50 blocks a message, 100 in a view, 3,000 characters of
section text, 75 of button text, 2,000 of a button value, 3,000 of a modal's
``private_metadata``. A fake that accepts what Slack refuses would hide a bug until
production.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from infra.json_input import parse_json

# Parameters a form-encoded call sends as JSON strings.
JSON_FIELDS = ("blocks", "attachments", "view", "prompts", "metadata", "chunks")
Params = dict[str, Any]


def decode_params(params: Params, query: dict[str, str]) -> Params:
    """A call's parameters: the body's, then the query string's; JSON fields decoded."""
    params.update({k: v for k, v in query.items() if k not in params})
    for key in JSON_FIELDS:
        if isinstance(params.get(key), str):
            with contextlib.suppress(ValueError):  # left as text: the checks refuse it
                params[key] = parse_json(params[key])
    return params


def check_message(p: Params) -> str | None:
    """Slack's error for a ``chat.*`` message body, or ``None`` when Slack would accept it."""
    blocks = p.get("blocks")
    if not p.get("text") and not blocks:
        return "no_text"
    if blocks is None:
        return None
    if not isinstance(blocks, list) or len(blocks) > 50:
        return "invalid_blocks"
    return check_blocks(blocks)


def check_view(view: Any, kind: str) -> str | None:
    """Slack's error for a ``views.*`` view of ``kind`` (``modal`` or ``home``)."""
    if not isinstance(view, dict) or view.get("type") != kind:
        return "invalid_arguments"
    blocks = view.get("blocks")
    if not isinstance(blocks, list) or len(blocks) > 100:
        return "invalid_arguments"
    if kind == "modal" and len(str(view.get("private_metadata", ""))) > 3000:
        return "invalid_arguments"
    return check_blocks(blocks)


def check_blocks(blocks: list[Any]) -> str | None:
    """``invalid_blocks`` for a block Slack would refuse: not an object with a type, a text
    object that is not one, elements that are not a list of objects, or past a limit."""
    for block in blocks:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return "invalid_blocks"
        text = block.get("text")
        if text is not None and not _is_text(text):
            return "invalid_blocks"
        if block["type"] == "section" and text is not None and len(text["text"]) > 3000:
            return "invalid_blocks"
        elements = block.get("elements", [])
        if not isinstance(elements, list) or not all(isinstance(e, dict) for e in elements):
            return "invalid_blocks"
        for element in elements if block["type"] == "actions" else []:
            label = element.get("text")
            if label is not None and not _is_text(label):
                return "invalid_blocks"
            if len(str(element.get("value", ""))) > 2000:
                return "invalid_blocks"
            if label is not None and len(label["text"]) > 75:
                return "invalid_blocks"
    return None


def _is_text(value: Any) -> bool:
    """A Block Kit text object: ``{"type": ..., "text": "..."}``."""
    return isinstance(value, dict) and isinstance(value.get("text"), str)


# -- streaming (chat.startStream / appendStream / stopStream) and agent sessions -----------

STREAM_TEXT_LIMIT = 12_000
TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})
CHUNK_TYPES = frozenset({"markdown_text", "task_update", "plan_update", "blocks"})
SESSION_STATUSES = frozenset({"active", "processing", "suspended", "closed"})


def check_stream_call(p: Params) -> str | None:
    """Slack's error for a ``chat.*Stream`` body's text and chunks, or ``None``."""
    if len(str(p.get("markdown_text") or "")) > STREAM_TEXT_LIMIT:
        return "msg_too_long"
    chunks = p.get("chunks")
    if chunks is None:
        return None
    if not isinstance(chunks, list):
        return "invalid_chunks"
    for chunk in chunks:
        if not isinstance(chunk, dict) or chunk.get("type") not in CHUNK_TYPES:
            return "invalid_chunks"
        if chunk["type"] == "markdown_text" and (
            not isinstance(chunk.get("text"), str) or len(chunk["text"]) > STREAM_TEXT_LIMIT
        ):
            return "invalid_chunks"
        if chunk["type"] == "task_update" and (
            not chunk.get("id")
            or not chunk.get("title")
            or chunk.get("status") not in TASK_STATUSES
        ):
            return "invalid_chunks"
    blocks = p.get("blocks")
    if blocks is not None and (not isinstance(blocks, list) or len(blocks) > 50):
        return "invalid_blocks"
    return check_blocks(blocks) if blocks else None


# -- every method's refusals that need no workspace state, in the order Slack checks them ---


def _post_message(p: Params) -> str | None:
    return "channel_not_found" if not p.get("channel") else check_message(p)


def _start_stream(p: Params) -> str | None:
    if not p.get("channel") or not p.get("thread_ts"):
        return "invalid_arguments"
    return check_stream_call(p)


def _set_title(p: Params) -> str | None:
    if not p.get("thread_ts") or not str(p.get("title") or "").strip():
        return "invalid_arguments"
    return None


def _set_suggested_prompts(p: Params) -> str | None:
    prompts = p.get("prompts")
    if not p.get("channel_id") or not isinstance(prompts, list) or not 0 < len(prompts) <= 4:
        return "invalid_arguments"
    if any(not (isinstance(x, dict) and x.get("title") and x.get("message")) for x in prompts):
        return "invalid_arguments"
    return None


def _set_session_status(p: Params) -> str | None:
    if not p.get("channel_id"):
        return "channel_not_found"
    return None if p.get("status") in SESSION_STATUSES else "invalid_status"


_CHECKS: dict[str, Callable[[Params], str | None]] = {
    "chat.postMessage": _post_message,
    "chat.update": check_message,
    "chat.postEphemeral": check_message,
    "views.open": lambda p: check_view(p.get("view"), "modal"),
    "views.push": lambda p: check_view(p.get("view"), "modal"),
    "views.update": lambda p: check_view(p.get("view"), "modal"),
    "views.publish": lambda p: check_view(p.get("view"), "home"),
    "chat.startStream": _start_stream,
    "chat.appendStream": check_stream_call,
    "chat.stopStream": check_stream_call,
    "assistant.threads.setTitle": _set_title,
    "assistant.threads.setSuggestedPrompts": _set_suggested_prompts,
    "agents.sessions.setStatus": _set_session_status,
}


def check_call(method: str, p: Params) -> str | None:
    """Slack's error for a call of ``method`` that is wrong whatever the workspace holds
    (``WebApi`` asks this before its handlers look at channels, messages or views)."""
    check = _CHECKS.get(method)
    return None if check is None else check(p)
