"""``python -m bench NAME [options]`` | ``python -m bench all`` | ``python -m bench list``."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent


def available() -> list[str]:
    return sorted(p.stem for p in BENCH_DIR.glob("*.py") if not p.stem.startswith("_"))


def load(name: str) -> ModuleType:
    if name not in available():
        raise SystemExit(f"no bench named {name!r}; available: {', '.join(available())}")
    module = importlib.import_module(f"bench.{name}")
    if not callable(getattr(module, "run", None)):
        raise SystemExit(f"bench/{name}.py has no run(args) coroutine function")
    return module


def parse_args(module: ModuleType, name: str, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m bench {name}")
    add = getattr(module, "add_arguments", None)
    if callable(add):
        add(parser)
    return parser.parse_args(argv)


def run_one(name: str, argv: list[str]) -> dict[str, Any]:
    module = load(name)
    result = asyncio.run(module.run(parse_args(module, name, argv)))
    if not isinstance(result, dict):
        raise TypeError(f"bench {name}: run() returned {type(result).__name__}, not a dict")
    return result


def _headline(result: dict[str, Any], width: int = 90) -> str:
    parts = [
        f"{k}={round(v, 3) if isinstance(v, float) else v}"
        for k, v in result.items()
        if isinstance(v, int | float | str | bool)
    ]
    text = " ".join(parts)
    return text if len(text) <= width else text[: width - 1] + "…"


def run_all() -> int:
    rows: list[tuple[str, str, float, str]] = []
    for name in available():
        started = time.perf_counter()
        try:
            result = run_one(name, [])
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            rows.append((name, "FAILED", time.perf_counter() - started, f"{exc!r}"[:90]))
            continue
        rows.append((name, "ok", time.perf_counter() - started, _headline(result)))
        print(json.dumps({"bench": name, **result}, default=str), file=sys.stderr)
    width = max((len(r[0]) for r in rows), default=5)
    print(f"{'bench':{width}}  status  seconds  headline")
    for name, status, seconds, headline in rows:
        print(f"{name:{width}}  {status:6}  {seconds:7.1f}  {headline}")
    return 0 if all(r[1] == "ok" for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        print("available:", ", ".join(available()))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name == "list":
        print("\n".join(available()))
        return 0
    if name == "all":
        return run_all()
    print(json.dumps(run_one(name, rest), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
