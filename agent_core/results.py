"""Turning a run's final graph state into a ``RunResult``: a checked ``Answer`` or an
``Interrupt`` carrying the actions to review and the chain of reads that led to them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolCall, ToolMessage
from pydantic import ValidationError

from agent_core.answer import ActionRequest, Answer, FinalAnswer, Interrupt, ReadStep, ReviewConfig
from agent_core.errors import not_responding_text
from agent_core.grounding import collect_ids, collect_links, fallback_answer, unlink, verify_sources
from agent_core.guards import BULK_KEY
from agent_core.policy import ToolPolicy
from agent_core.texts import for_people, tool_note
from infra.json_input import parse_json

LIMIT_TEXT = "Model call limits exceeded"
# Per server: id → the URL a tool result carried for it.
Links = dict[str, dict[str, str]]


class Results:
    """Builds run results for one agent (its servers, policy and bulk threshold)."""

    def __init__(
        self, servers: Sequence[str], policy: ToolPolicy, bulk_write_threshold: int
    ) -> None:
        self._servers = list(servers)
        self.policy = policy
        self.bulk_write_threshold = bulk_write_threshold

    def turn(self, values: Mapping[str, Any]) -> list[AnyMessage]:
        messages: list[AnyMessage] = list(values.get("messages", []))
        start = 0
        for i, m in enumerate(messages):
            if isinstance(m, HumanMessage):
                start = i
        return messages[start:]

    def _server_of(self, tool_name: str) -> str | None:
        for server in sorted(self._servers, key=len, reverse=True):
            if tool_name.startswith(f"{server}_"):
                return server
        return None

    def _grounds(self, turn: list[AnyMessage]) -> tuple[dict[str, set[str]], Links]:
        """Per server: the ids this turn's tool results carried, and id → the URL they
        carried for it. Each result's JSON text is parsed once, for both."""
        seen: dict[str, set[str]] = {}
        links: Links = {}
        for m in turn:
            if isinstance(m, ToolMessage) and m.status != "error" and m.name:
                server = self._server_of(m.name)
                if server is None:
                    continue
                ids = seen.setdefault(server, set())
                found = links.setdefault(server, {})
                for value in (m.artifact, _parsed(m.content)):
                    try:
                        collect_ids(value, ids)
                        collect_links(value, found)
                    except RecursionError:
                        # Nested past Python's stack (a hostile or broken server): nothing
                        # in it grounds an answer, and the run still answers.
                        continue
        return seen, links

    def allowed_links(self, values: Mapping[str, Any]) -> set[str]:
        """Every URL the tool results of the state's last turn carried (what an answer to
        that turn may link to)."""
        _, links = self._grounds(self.turn(values))
        return {url for found in links.values() for url in found.values()}

    def actions(self, turn: list[AnyMessage]) -> tuple[list[str], list[str]]:
        """What this run really did, from its own tool-call records (never the model's
        text): the write calls that reached a server, each with its arguments and outcome;
        and, as caveats, writes that were not run and why. People's words only."""
        actions: list[str] = []
        caveats: list[str] = []
        for m in turn:
            if not isinstance(m, ToolMessage) or not m.name or self._server_of(m.name) is None:
                continue
            info = tool_note(m)
            if info is None or not self.policy.classify(m.name).is_write:
                continue  # a read, or a call that never got as far as opsbot's tool layer
            outcome = str(info.get("outcome"))
            people = str(info.get("people_text") or "")
            if outcome == "not_run":
                caveats.append(people or f"{m.name} was not run.")
                continue
            args = info.get("args")
            what = f"{m.name} ({_summary(args)})" if isinstance(args, dict) else m.name
            if outcome == "succeeded":
                actions.append(f"{what}: done")
            elif outcome == "failed":
                actions.append(f"{what}: failed — {people}" if people else f"{what}: failed")
            else:
                actions.append(f"{what}: outcome unknown — being reconciled")
        return actions, caveats

    def answer(
        self,
        values: Mapping[str, Any],
        unavailable: Sequence[str],
        no_access: Sequence[str],
        used: str,
        *,
        stopped: bool = False,
        not_connected: Sequence[str] = (),
    ) -> Answer:
        turn = self.turn(values)
        caveats = [
            f"{not_responding_text(s)}: the {s} server is unavailable and its data is not included."
            for s in unavailable
        ]
        caveats += [
            f"You have no access to the {s} server; its data is not included." for s in no_access
        ]
        caveats += [
            f"You have not connected opsbot to {s} yet; its data is not included."
            for s in not_connected
        ]
        actions, not_run = self.actions(turn)
        caveats += not_run
        draft = self._final_answer(turn)
        if draft is not None:
            seen, links = self._grounds(turn)
            answer = verify_sources(draft, seen, model_used=used, links=links)
            allowed = {url for found in links.values() for url in found.values()}
            # The model's text is for people only after model-directed sentences are gone;
            # a URL no tool result carried is never a link. What ran comes from the records:
            # a finished run has nothing waiting for approval.
            answer.answer = unlink(for_people(answer.answer), allowed)
            answer.caveats = [unlink(for_people(c), allowed) for c in answer.caveats]
            answer.caveats = [c for c in answer.caveats if c]
            answer.actions_taken = actions
            answer.pending_approvals = []
            answer.caveats = [*answer.caveats, *(c for c in caveats if c not in answer.caveats)]
            return answer
        last = next((m for m in reversed(turn) if isinstance(m, AIMessage)), None)
        if stopped or (last is not None and LIMIT_TEXT in last.text):
            stop = fallback_answer(
                "I stopped: this request took more steps than allowed. Nothing further was "
                "run; please narrow the request or try again.",
                model_used=used,
                caveats=[*caveats, "The model call limit was reached."],
            )
            stop.actions_taken = actions
            return stop
        fallback = fallback_answer(
            "Sorry — I could not produce a well-formed answer for this request.",
            model_used=used,
            caveats=[*caveats, "The model's answer did not match the expected format."],
        )
        fallback.actions_taken = actions
        return fallback

    @staticmethod
    def _final_answer(turn: list[AnyMessage]) -> FinalAnswer | None:
        # From this turn's last model message only: `structured_response` outlives the
        # run in the thread's state and would replay an earlier answer.
        last = next((m for m in reversed(turn) if isinstance(m, AIMessage)), None)
        for tc in last.tool_calls if last is not None else []:
            if tc["name"] == FinalAnswer.__name__:
                try:
                    return FinalAnswer.model_validate(tc["args"])
                except ValidationError:
                    return None
        return None

    def interrupt(
        self, thread_id: str, values: Mapping[str, Any], value: Any, *, model_used: str
    ) -> Interrupt:
        turn = self.turn(values)
        calls: dict[str, ToolCall] = {}
        for m in turn:
            if isinstance(m, AIMessage):
                for call in m.tool_calls:
                    calls[str(call.get("id"))] = call
        reads: list[ReadStep] = []
        for m in turn:
            if isinstance(m, ToolMessage) and m.name and self.policy.is_read(m.name):
                found = calls.get(m.tool_call_id)
                ids = collect_ids(m.artifact) | collect_ids(m.content)
                reads.append(
                    ReadStep(
                        tool=m.name, args=dict(found["args"]) if found else {}, ids=sorted(ids)
                    )
                )
        last = next((m for m in reversed(turn) if isinstance(m, AIMessage)), None)
        pending_ids = [c.get("id") for c in (last.tool_calls if last else [])]
        actions: list[ActionRequest] = []
        for i, req in enumerate(value.get("action_requests", [])):
            call_id = next(
                (
                    str(cid)
                    for cid in pending_ids
                    if cid in calls
                    and calls[str(cid)]["name"] == req["name"]
                    and calls[str(cid)]["args"] == req["args"]
                ),
                str(pending_ids[i]) if i < len(pending_ids) else "",
            )
            actions.append(
                ActionRequest(
                    name=req["name"],
                    args=dict(req["args"]),
                    description=req.get("description", ""),
                    tool_call_id=call_id,
                    server=self._server_of(req["name"]) or "",
                )
            )
        bulk = values.get(BULK_KEY) or None
        return Interrupt(
            thread_id=thread_id,
            action_requests=actions,
            review_configs=[
                ReviewConfig(
                    action_name=r["action_name"], allowed_decisions=list(r["allowed_decisions"])
                )
                for r in value.get("review_configs", [])
            ],
            reads=reads,
            bulk_write=bool(bulk) or len(actions) >= self.bulk_write_threshold,
            bulk_reason=(bulk or {}).get("reason"),
            answer_so_far=for_people(last.text) if last is not None else "",
            model_used=model_used,
        )


def _summary(args: dict[str, Any], limit: int = 120) -> str:
    """``key=value, …`` on one line for an action line (no idempotency key)."""
    parts = [f"{k}={' '.join(str(v).split())}" for k, v in args.items() if k != "idempotency_key"]
    line = ", ".join(parts)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _parsed(content: Any) -> Any:
    """A tool result's content as ``collect_ids`` and ``collect_links`` read it, its JSON
    text parsed here once (each walk would parse a string again); text that is not JSON
    holds nothing either walk finds."""
    if not isinstance(content, str):
        return content
    text = content.strip()
    if text[:1] not in ("[", "{"):
        return None
    try:
        return parse_json(text)
    except ValueError:  # not JSON, or nested too deeply to parse
        return None
