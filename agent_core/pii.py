"""PII and secret detectors, shared by the PII middleware and the audit redactor.

LangChain's built-in detectors cover email, credit card and IP; opsbot adds phone numbers
and secrets (Slack tokens, cloud keys, JWTs, private keys, bearer tokens). Every detector has
LangChain's ``Detector`` shape: ``(text) -> list[PIIMatch]``.

Example::

    from agent_core.pii import redact, mask_pii
    redact("token xoxb-123-456-abc")     # 'token [REDACTED_SECRET]'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, PIIMiddleware, hook_config
from langchain.agents.middleware._redaction import (
    PIIMatch,
    detect_credit_card,
    detect_email,
    detect_ip,
)
from langgraph.runtime import Runtime

from agent_core.fold import run_hooks

Detector = Callable[[str], list[PIIMatch]]

# Above this many characters, a user message's PII scan runs in a worker thread: the five
# rules take ~1.7 ms of CPU at 4,000 characters and ~19 ms at Slack's 40,000, which held the
# event loop (every other run's steps, lease renewals) for as long.
SCAN_IN_THREAD_CHARS = 8_000

_SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("slack_token", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{8,}")),
    ("slack_app_token", re.compile(r"\bxapp-\d-[A-Za-z0-9-]{8,}")),
    (
        "slack_webhook",
        re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"),
    ),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    (
        "aws_secret_key",
        re.compile(r"(?i)aws(.{0,20})?(secret|key)[\"'\s:=]+[A-Za-z0-9/+=]{40}\b"),
    ),
    ("gcp_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("github_token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}")),
    (
        "private_key",
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"
        ),
    ),
    ("bearer", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{16,}")),
)

# International (+44 20 7946 0958) or North American ((555) 123-4567, 555-123-4567) numbers:
# 9-15 digits in total, with separators; bare digit runs are left alone (ids, timestamps).
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)[\s.-]?|\d{2,4}[\s.-])\d{3,4}[\s.-]\d{3,4}\b"
)


def detect_secret(content: str) -> list[PIIMatch]:
    """Slack tokens, cloud keys, JWTs, private keys and bearer tokens."""
    matches: list[PIIMatch] = []
    for _kind, pattern in _SECRET_PATTERNS:
        for m in pattern.finditer(content):
            if any(x["start"] <= m.start() < x["end"] for x in matches):
                continue
            matches.append(PIIMatch(type="secret", value=m.group(), start=m.start(), end=m.end()))
    return sorted(matches, key=lambda x: x["start"])


def detect_phone(content: str) -> list[PIIMatch]:
    """Phone numbers with separators and 9-15 digits."""
    out: list[PIIMatch] = []
    for m in _PHONE.finditer(content):
        digits = sum(ch.isdigit() for ch in m.group())
        if 9 <= digits <= 15:
            out.append(PIIMatch(type="phone", value=m.group(), start=m.start(), end=m.end()))
    return out


DETECTORS: dict[str, Detector] = {
    "secret": detect_secret,
    "email": detect_email,
    "credit_card": detect_credit_card,
    "phone": detect_phone,
    "ip": detect_ip,
}
"""Every detector opsbot uses, by PII type (secrets first: they are removed, not masked)."""


def _replace(text: str, matches: list[PIIMatch], render: Callable[[PIIMatch], str]) -> str:
    for m in sorted(matches, key=lambda x: x["start"], reverse=True):
        text = text[: m["start"]] + render(m) + text[m["end"] :]
    return text


def redact(text: str, types: tuple[str, ...] = tuple(DETECTORS)) -> str:
    """Replace every detected value with ``[REDACTED_<TYPE>]``."""
    for kind in types:
        text = _replace(text, DETECTORS[kind](text), lambda m: f"[REDACTED_{m['type'].upper()}]")
    return text


def mask_pii(text: str) -> str:
    """For audit records: secrets and cards removed; emails, phones and IPs masked."""
    text = redact(text, ("secret", "credit_card"))
    for kind in ("email", "phone", "ip"):
        text = _replace(text, DETECTORS[kind](text), _mask)
    return text


def _mask(match: PIIMatch) -> str:
    value = match["value"]
    if match["type"] == "email" and "@" in value:
        local, _, domain = value.partition("@")
        return f"{local[:1]}***@{domain}"
    return "*" * max(len(value) - 4, 3) + value[-4:]


class PiiRules(AgentMiddleware[Any, Any, Any]):
    """Every PII rule on user input, in one hook: secrets, cards and phones redacted,
    emails and IPs masked, in that order (LangChain's ``PIIMiddleware``, one per type)."""

    def __init__(self) -> None:
        super().__init__()
        self.rules = [
            PIIMiddleware("secret", detector=detect_secret, strategy="redact"),
            PIIMiddleware("credit_card", strategy="redact"),
            PIIMiddleware("phone", detector=detect_phone, strategy="redact"),
            PIIMiddleware("email", strategy="mask"),
            PIIMiddleware("ip", strategy="mask"),
        ]

    @property
    def name(self) -> str:
        return "PiiRules"

    @hook_config(can_jump_to=["end"])
    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        long = _last_user_text_chars(state) > SCAN_IN_THREAD_CHARS
        return await run_hooks(self.rules, "before_model", state, runtime, in_thread=long)


def _last_user_text_chars(state: AgentState[Any]) -> int:
    """The length of the last user message (what the rules scan), 0 without one."""
    for message in reversed(state.get("messages") or []):
        if getattr(message, "type", None) == "human":
            content = message.content
            return len(content) if isinstance(content, str) else len(str(content))
    return 0


def pii_middleware() -> list[AgentMiddleware[Any, Any, Any]]:
    """The PII middleware on user input (one ``PiiRules``; a list, to splice into a stack)."""
    return [PiiRules()]
