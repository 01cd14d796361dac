"""Run results: a structured ``Answer`` or an ``Interrupt`` waiting for approval.

The model fills ``FinalAnswer`` (the agent's ``response_format``); opsbot then checks every
cited source against the ids that actually appeared in this run's tool results, drops the
rest with a caveat, and adds what it knows itself (the model that served, down servers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Confidence = Literal["low", "medium", "high"]


class Source(BaseModel):
    """A record the answer relies on: the system it came from, its id, a link if known."""

    system: str = Field(description="Server name the record came from, e.g. 'ticketing'.")
    id: str = Field(description="The record's id exactly as a tool returned it.")
    link: str | None = Field(default=None, description="URL of the record, if a tool gave one.")


class FinalAnswer(BaseModel):
    """Your final answer to the user. Cite only ids that tools returned in this conversation."""

    answer: str = Field(description="The answer, in plain language.")
    sources: list[Source] = Field(default_factory=list)
    actions_taken: list[str] = Field(default_factory=list, description="Writes that ran.")
    pending_approvals: list[str] = Field(
        default_factory=list, description="Writes waiting for an approver."
    )
    caveats: list[str] = Field(default_factory=list)
    confidence: Confidence = "medium"


class Answer(FinalAnswer):
    """What a run returns when it finished: the model's answer, checked, plus the model used."""

    model_config = ConfigDict(frozen=False)

    model_used: str = ""
    kind: Literal["answer"] = "answer"
    # ``oauth`` servers the user must connect before their data can be included: server →
    # the URL that connects it (for the person, never for the model).
    connect: dict[str, str] = Field(default_factory=dict)


class ActionRequest(BaseModel):
    """One proposed write: the prefixed tool name, its arguments and a description."""

    name: str
    args: dict[str, Any]
    description: str = ""
    tool_call_id: str = ""
    server: str = ""


class ReviewConfig(BaseModel):
    action_name: str
    allowed_decisions: list[str]


class ReadStep(BaseModel):
    """A read call made earlier in the run: what led to the proposal."""

    tool: str
    args: dict[str, Any]
    ids: list[str] = Field(default_factory=list)


class Interrupt(BaseModel):
    """A run paused before writes: decide each action (approve / edit / reject), in order."""

    kind: Literal["interrupt"] = "interrupt"
    thread_id: str
    action_requests: list[ActionRequest]
    review_configs: list[ReviewConfig]
    reads: list[ReadStep] = Field(default_factory=list)
    bulk_write: bool = False
    bulk_reason: str | None = None
    answer_so_far: str = ""
    model_used: str = ""


RunResult = Answer | Interrupt

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
                parsed = json.loads(text)
            except ValueError:
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
