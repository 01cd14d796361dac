"""opsbot benchmarks: ``uv run python -m bench NAME`` runs ``bench/NAME.py``.

A bench module defines ``async def run(args) -> dict`` (JSON-ready) and, optionally,
``add_arguments(parser)`` for its own options. ``python -m bench NAME`` prints the one JSON
object ``run`` returns; ``python -m bench all`` runs every module with default options and
prints a summary table; ``python -m bench list`` names them. Timings belong here, never in tests.
"""

__all__: list[str] = []
