"""Grounding: an answer cites only what this run's tool results carried.

``collect_ids`` and ``collect_links`` gather the ids and URLs a run's tool results held;
``verify_sources`` keeps the model's cited sources that are among them (the rest are dropped
with a caveat) and ``unlink`` strips any other URL from text shown to people.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from agent_core.answer import Answer, FinalAnswer, Source
from infra.json_input import parse_json

ID_KEYS = frozenset({"id", "key", "slug", "ticket", "doc_id", "job_id", "order_id"})


def _is_id(key: object, value: object) -> bool:
    """``value`` is an id: a string or number under an id-like key."""
    if not isinstance(value, str | int) or isinstance(value, bool):
        return False
    k = str(key).lower()
    return k in ID_KEYS or k.endswith(("_id", "_key"))


def _inside(value: Any) -> Iterator[Any]:
    """What a tool result holds one level down, for the walks below: a list's items, or the
    value a string of JSON stands for (tools often return their result as JSON text)."""
    if isinstance(value, list | tuple):
        yield from value
    elif isinstance(value, str):
        text = value.strip()
        if text[:1] in "[{":
            try:
                parsed = parse_json(text)
            except ValueError:  # not JSON, or nested too deeply to parse
                return
            yield parsed


def collect_ids(value: Any, out: set[str] | None = None) -> set[str]:
    """Every value under an id-like key (``id``, ``key``, ``*_id``, ...) in a tool result."""
    found = out if out is not None else set()
    if isinstance(value, Mapping):
        for k, v in value.items():
            if _is_id(k, v):
                found.add(str(v))
            else:
                collect_ids(v, found)
    for item in _inside(value):
        collect_ids(item, found)
    return found


URL_KEYS = ("url", "link", "html_url", "web_url", "href", "permalink")
_URL = re.compile(r"https?://[^\s<>()\[\]`]+")
_MD_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")


def collect_links(value: Any, out: dict[str, str] | None = None) -> dict[str, str]:
    """Record id → URL for every item of a tool result that carries both (``url``, ``link``…
    beside an id-like key): the only URLs an answer may link to."""
    found = out if out is not None else {}
    if isinstance(value, Mapping):
        url = next(
            (v for k in URL_KEYS if isinstance(v := value.get(k), str) and _URL.fullmatch(v)),
            None,
        )
        if url is not None:
            for k, v in value.items():
                if _is_id(k, v):
                    found.setdefault(str(v), url)
        for v in value.values():
            if isinstance(v, Mapping | list | tuple | str):
                collect_links(v, found)
    for item in _inside(value):
        collect_links(item, found)
    return found


def unlink(text: str, allowed: set[str]) -> str:
    """``text`` with every URL a tool result did not carry made inert: a Markdown link keeps
    only its label, a bare URL becomes code (shown, never clickable)."""
    text = _MD_LINK.sub(lambda m: m.group(0) if m.group(2) in allowed else m.group(1), text)
    parts = re.split(r"(\[[^\]\n]+\]\(https?://[^)\s]+\))", text)
    for i in range(0, len(parts), 2):  # outside the kept Markdown links
        parts[i] = _URL.sub(
            lambda m: m.group(0) if m.group(0) in allowed else f"`{m.group(0)}`", parts[i]
        )
    return "".join(parts)


def verify_sources(
    draft: FinalAnswer,
    seen: Mapping[str, set[str]],
    *,
    model_used: str,
    links: Mapping[str, Mapping[str, str]] | None = None,
) -> Answer:
    """Keep only sources whose id appeared in this run's results from that system; each
    link is the URL that result carried for that id (``links``), never the model's."""
    kept: list[Source] = []
    dropped: list[str] = []
    for s in draft.sources:
        if s.id in seen.get(s.system, set()):
            if all((k.system, k.id) != (s.system, s.id) for k in kept):
                link = (links or {}).get(s.system, {}).get(s.id)
                kept.append(Source(system=s.system, id=s.id, link=link))
        else:
            dropped.append(f"{s.system}:{s.id}")
    caveats = list(draft.caveats)
    if dropped:
        caveats.append(
            "Removed sources that did not appear in this run's tool results: " + ", ".join(dropped)
        )
    return Answer(
        answer=draft.answer,
        sources=kept,
        actions_taken=list(draft.actions_taken),
        pending_approvals=list(draft.pending_approvals),
        caveats=caveats,
        confidence="low" if dropped and draft.confidence == "high" else draft.confidence,
        model_used=model_used,
    )


def fallback_answer(text: str, *, model_used: str, caveats: Iterable[str] = ()) -> Answer:
    """A safe answer when the model produced no valid structured answer."""
    return Answer(
        answer=text,
        sources=[],
        caveats=list(caveats),
        confidence="low",
        model_used=model_used,
    )
