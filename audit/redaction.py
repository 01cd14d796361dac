"""Redaction before anything is written to the audit log (or anywhere durable).

Secrets and tokens are removed entirely; emails and phone numbers are masked; a payload
larger than the size limit is replaced by its hash. The detectors are the agent core's
(``agent_core.pii``, the same ones its ``PIIMiddleware`` uses): one copy, imported here.

Example::

    redact({"comment": "mail bob@example.com", "token": "eyJ..."})
    # {"comment": "mail b***@example.com", "token": "[REMOVED]"}
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from agent_core.pii import DETECTORS, detect_phone, detect_secret, mask_pii

__all__ = ["DETECTORS", "detect_phone", "detect_secret", "redact", "redact_text", "summarise"]

REMOVED = "[REMOVED]"
DEFAULT_MAX_BYTES = 2048

# Keys whose values are credentials whatever they look like.
_SECRET_KEY = re.compile(
    r"(^|_|-)(token|secret|password|passwd|authorization|api_?key|cookie|credential|"
    r"private_?key|client_secret|refresh_token|access_token|bearer)s?($|_|-)",
    re.IGNORECASE,
)


def redact_text(text: str) -> str:
    """``text`` with secrets and card numbers removed and emails, phones and IPs masked."""
    return mask_pii(text)


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
