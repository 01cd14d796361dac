"""Run results: a structured ``Answer`` or an ``Interrupt`` waiting for approval.

The model fills ``FinalAnswer`` (the agent's ``response_format``); opsbot then checks every
cited source against the ids that actually appeared in this run's tool results (``grounding``),
drops the rest with a caveat, and adds what it knows itself (the model that served, down
servers).
"""

from __future__ import annotations

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
