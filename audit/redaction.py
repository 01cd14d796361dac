"""Redaction before anything is written to the audit log (or anywhere durable).

Secrets and tokens are removed entirely; emails and phone numbers are masked; a payload
larger than the size limit is replaced by its hash. The detectors here are the single source
for opsbot: the email detector and mask are LangChain ``PIIMiddleware``'s own, and the agent
core's PII middleware should import ``DETECTORS`` from here rather than keep a second copy.

Example::

    redact({"comment": "mail bob@example.com", "token": "eyJ..."})
    # {"comment": "mail bob@****.com", "token": "[REMOVED]"}
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from langchain.agents.middleware._redaction import PIIMatch, apply_strategy, detect_email

REMOVED = "[REMOVED]"
REDACTED_SECRET = "[REDACTED_SECRET]"  # noqa: S105 - a marker, not a secret
DEFAULT_MAX_BYTES = 2048

# Keys whose values are credentials whatever they look like.
_SECRET_KEY = re.compile(
    r"(^|_|-)(token|secret|password|passwd|authorization|api_?key|cookie|credential|"
    r"private_?key|client_secret|refresh_token|access_token|bearer)s?($|_|-)",
    re.IGNORECASE,
)

_SECRET_PATTERNS = (
    # JWTs (access, id and refresh tokens from the IdP)
    r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",
    # Slack tokens: bot, user, app-level, refresh, config
    r"\bxox[abposre]-[A-Za-z0-9-]{8,}",
    r"\bxapp-[A-Za-z0-9-]{8,}",
    # Cloud and forge keys
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",
    r"\bsk-[A-Za-z0-9_-]{20,}",
    r"\bAIza[0-9A-Za-z_-]{35}\b",
    # "Bearer <anything>" in a header copied into text
    r"\b[Bb][Ee][Aa][Rr][Ee][Rr]\s+[A-Za-z0-9._~+/=-]{8,}",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
)
_SECRET = re.compile("|".join(f"(?:{p})" for p in _SECRET_PATTERNS))

# A phone number: optional +country, 9-15 digits with the usual separators.
_PHONE = re.compile(r"(?<![\w+-])\+?\d[\d ().-]{7,}\d(?![\w])")
# Dates, times and IPv4 addresses also look like digit runs: they are not phone numbers.
_NOT_PHONE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|\d:\d")


def detect_secret(content: str) -> list[PIIMatch]:
    """Tokens and keys: Slack, JWT, cloud, forge, bearer headers, private keys."""
    return [
        PIIMatch(type="secret", value=m.group(), start=m.start(), end=m.end())
        for m in _SECRET.finditer(content)
    ]


def detect_phone(content: str) -> list[PIIMatch]:
    """Phone numbers (9-15 digits, optional ``+`` and separators); dates are not phones."""
    found = []
    for m in _PHONE.finditer(content):
        value = m.group()
        digits = sum(c.isdigit() for c in value)
        if 9 <= digits <= 15 and not _NOT_PHONE.search(value):
            found.append(PIIMatch(type="phone", value=value, start=m.start(), end=m.end()))
    return found


# name -> (detector, PIIMiddleware strategy). Secrets go first: a JWT is not an email.
DETECTORS: dict[str, tuple[Callable[[str], list[PIIMatch]], str]] = {
    "secret": (detect_secret, "redact"),
    "email": (detect_email, "mask"),
    "phone": (detect_phone, "mask"),
}


def redact_text(text: str) -> str:
    """``text`` with secrets replaced and emails and phone numbers masked."""
    text = _SECRET.sub(REDACTED_SECRET, text)
    for name in ("email", "phone"):
        detector, strategy = DETECTORS[name]
        text = apply_strategy(text, detector(text), strategy)  # type: ignore[arg-type]
    return text


def redact(value: Any) -> Any:
    """A JSON-able copy of ``value`` with every secret removed and PII masked."""
    if isinstance(value, dict):
        return {
            str(k): REMOVED if _SECRET_KEY.search(str(k)) else redact(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact_text(str(value))


def summarise(value: Any, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """The redacted value, or — above ``max_bytes`` of JSON — its SHA-256 and size.

    The hash is over the redacted form, so it can never confirm a guessed secret.
    """
    cleaned = redact(value)
    encoded = json.dumps(cleaned, sort_keys=True, default=str).encode()
    if len(encoded) <= max_bytes:
        return cleaned
    return {"sha256": hashlib.sha256(encoded).hexdigest(), "bytes": len(encoded)}
