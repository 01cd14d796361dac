"""Bytecode caches for every Python process of a test run: loaded before any other plugin
(``-p tests.bytecode`` in pyproject's ``addopts``), it lets this process and its children
write ``.pyc`` files even where ``PYTHONDONTWRITEBYTECODE`` is set (the Dockerfile sets it;
so do some shells and CI images).

Without them every Python process the suite starts (the xdist workers, each ``opsbot``,
``opsbot dev`` and MCP-server subprocess, the pytest runs inside tests) compiles everything it
imports again, and pytest rewrites the asserts of whole plugin packages (hypothesis,
langsmith, anyio) again, since it caches that only as bytecode too. Measured on 2 cores: a
pytest subprocess that skips one test took 14-18 s of CPU without the caches, 5-6 s with.
Python and pytest write ``.pyc`` files atomically (temp file, then rename), so workers
importing the same module at once are safe; ``__pycache__`` is git-ignored.
"""

from __future__ import annotations

import os
import sys

sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
