"""A bench run as a user runs it (``python -m bench NAME ...``): its one JSON object."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_bench(*args: str, timeout: float = 110) -> dict[str, Any]:
    """``python -m bench *args`` in the repository; fails the test on a non-zero exit (with
    the end of its stderr) or output that is not one JSON object."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)
    assert isinstance(result, dict)
    return result
