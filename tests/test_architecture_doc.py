"""``docs/architecture.md`` holds in the code: every ``module:function`` it names exists, each
trace reads at most six files, and the README links to it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()
REFERENCE = re.compile(r"`([a-z_][a-z0-9_.]*):([A-Za-z_][A-Za-z0-9_.]*)`")
FILE_STEP = re.compile(r"^\d+\. `([a-z_/]+\.py)`", re.M)
MAX_FILES = 6


def resolve(module: str, qualname: str) -> object:
    """The object ``module:qualname`` names; raises if the module or a name is missing."""
    found: object = importlib.import_module(module)
    for name in qualname.split("."):
        found = getattr(found, name)
    return found


def traces() -> dict[str, str]:
    parts = re.split(r"^## Trace: ", DOC, flags=re.M)[1:]
    return {part.splitlines()[0]: part.split("\n## ", 1)[0] for part in parts}


@pytest.mark.parametrize(("module", "qualname"), sorted(set(REFERENCE.findall(DOC))))
def test_every_named_function_exists(module: str, qualname: str) -> None:
    assert callable(resolve(module, qualname))


def test_the_doc_names_the_three_traces_and_each_reads_at_most_six_files() -> None:
    found = traces()
    assert set(found) == {"an @-mention", "an approval click", "Stop"}
    for name, text in found.items():
        files = FILE_STEP.findall(text)
        assert 3 <= len(set(files)) <= MAX_FILES, (name, files)
        for file in files:
            assert (ROOT / file).is_file(), file
        modules = {file.removesuffix(".py").replace("/", ".") for file in files}
        for step in re.split(r"^\d+\. ", text, flags=re.M)[1:]:
            head = FILE_STEP.match(f"1. {step}")
            assert head is not None
            module = head.group(1).removesuffix(".py").replace("/", ".")
            named = {m for m, _ in REFERENCE.findall(step.split("\n\n")[0])}
            # each step's functions live in the file the step names ...
            assert module in named, (module, named)
            # ... and a step sends the reader to no file outside the trace's six
            assert named <= modules, (name, sorted(named - modules))


def test_a_missing_function_is_caught() -> None:
    with pytest.raises(AttributeError):
        resolve("assistant.service", "Assistant.no_such_method")
    with pytest.raises(ModuleNotFoundError):
        resolve("assistant.no_such_module", "x")


def test_the_readme_links_the_map_not_a_document_outside_the_repository() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/architecture.md)" in readme
    assert "../shared/" not in readme


def _invariant_rows() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Security invariants and the tests that guard them", 1)[1]
    return [line for line in table.split("\n\n", 2)[2].splitlines() if line.startswith("| ")]


def test_every_invariant_has_a_row_and_every_test_it_names_exists() -> None:
    """The README's table of invariants and their tests: one row per invariant of
    docs/security.md, and each ``file::test`` it names is a test in that file (a renamed or
    removed test fails here, not silently in the documentation)."""
    security = (ROOT / "docs" / "security.md").read_text()
    numbered = re.findall(r"^(\d+)\. ", security.split("## Invariants", 1)[1], re.MULTILINE)
    rows = [r for r in _invariant_rows() if re.match(r"\| \d+ \|", r)]
    assert [r.split("|")[1].strip() for r in rows] == numbered[: len(rows)] == numbered
    named = 0
    for row in rows:
        last_file = None
        for ref in re.findall(r"`([^`]*::[^`]*|tests/[^`]*\.py)`", row):
            path, _, name = ref.partition("::")
            if path:
                last_file = ROOT / path
            assert last_file is not None, ref
            assert last_file.is_file(), ref
            if name:
                test = name.split("[")[0]
                source = last_file.read_text()
                assert re.search(rf"^(async )?def {re.escape(test)}\(", source, re.M), ref
                named += 1
    assert named >= 40
