"""JSON from outside (a request body, a value a person typed, a peer's answer): every way it
can be malformed is one ``ValueError``.

``json.loads`` fails in four ways on hostile input: ``JSONDecodeError`` and
``UnicodeDecodeError`` (both ``ValueError``), ``ValueError`` for an integer past Python's
4,300-digit limit, and ``RecursionError`` for nesting deeper than the interpreter's stack
(``[`` × 100,000). The last is not a ``ValueError``, so an edge that caught ``ValueError``
answered such a body with a 500 and a traceback.
"""

from __future__ import annotations

import json
from typing import Any


def parse_json(data: str | bytes | bytearray) -> Any:
    """``json.loads(data)``; ``ValueError`` whatever is wrong with it."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
