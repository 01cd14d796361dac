"""The offline demo model (``OPSBOT_MODEL=demo``): a DEMO, not an LLM.

It lets opsbot run end to end without an API key. It understands only these phrasings
(case-insensitive) and answers anything else with this list:

- ``show ticket PAY-101`` (or ``show PAY-101``)          → ticketing get_ticket
- ``search tickets <words>`` / ``find tickets about <words>`` → ticketing search_tickets
- ``close ticket PAY-104 because <resolution>``          → ticketing close_ticket (approval)
- ``comment on PAY-101: <text>``                          → ticketing add_comment (approval)
- ``search runbooks <words>`` / ``runbook for <words>``   → docs search_docs
- ``failed jobs``                                         → database list_failed_jobs
- ``recent deploys`` (optionally ``of <service>``)        → database recent_deploys

It emits real tool calls (with the server prefixes) and then a ``FinalAnswer`` built from the
tool results, citing the ids they contained.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from pydantic import Field

HELP = (
    "I'm opsbot's offline demo model and understand only a few phrasings: "
    "'show ticket PAY-101', 'search tickets <words>', 'close ticket PAY-104 because <reason>', "
    "'comment on PAY-101: <text>', 'search runbooks <words>', 'failed jobs', 'recent deploys'. "
    "Configure a real model with OPSBOT_MODEL for anything else."
)

_KEY = r"([A-Za-z]{2,10}-\d{1,6})"


def _intent(text: str) -> tuple[str, dict[str, Any]] | None:
    t = text.strip()
    low = t.lower()
    if m := re.search(
        rf"\bclose\s+(?:ticket\s+)?{_KEY}(?:\s+(?:because|with|as)\s+(.+))?", t, re.I
    ):
        reason = (m.group(2) or "Closed on request").strip()
        return "ticketing_close_ticket", {"key": m.group(1).upper(), "resolution": reason}
    if m := re.search(rf"\bcomment\s+on\s+(?:ticket\s+)?{_KEY}\s*[:,-]?\s*(.+)", t, re.I):
        return "ticketing_add_comment", {"key": m.group(1).upper(), "body": m.group(2).strip()}
    if m := re.search(rf"\b(?:show|get|open)\s+(?:me\s+)?(?:ticket\s+)?{_KEY}", t, re.I):
        return "ticketing_get_ticket", {"key": m.group(1).upper()}
    if m := re.search(r"\b(?:search|find)\s+tickets?\s+(?:about\s+|for\s+|on\s+)?(.*)", t, re.I):
        return "ticketing_search_tickets", {"query": m.group(1).strip()[:200]}
    if m := re.search(r"\b(?:search\s+runbooks?|runbooks?\s+(?:for|about|on))\s+(.+)", t, re.I):
        return "docs_search_docs", {"query": m.group(1).strip()[:300]}
    if "failed jobs" in low or "failed job" in low:
        return "database_list_failed_jobs", {"since_hours": 24 * 30}
    if "recent deploy" in low:
        args: dict[str, Any] = {}
        if m := re.search(r"deploys?\s+(?:of|for)\s+([\w.-]+)", t, re.I):
            args["service"] = m.group(1)
        return "database_recent_deploys", args
    return None


def _turn(messages: Sequence[BaseMessage]) -> tuple[str, list[ToolMessage]]:
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    question = str(messages[start].content) if start >= 0 else ""
    return question, [m for m in messages[start + 1 :] if isinstance(m, ToolMessage)]


def _items(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, dict):
        if _record_id(data) is not None:
            return [data]
        for value in data.values():
            if isinstance(value, list):
                return [v for v in value if isinstance(v, dict)]
        return []
    if isinstance(data, list):
        return [d for d in data if isinstance(d, dict)]
    return []


def _record_id(item: dict[str, Any]) -> str | None:
    for key in ("key", "id", "doc_id", "order_id"):
        if isinstance(item.get(key), str | int):
            return str(item[key])
    return None


def _summary(item: dict[str, Any]) -> str:
    rid = _record_id(item) or "?"
    label = item.get("title") or item.get("name") or item.get("service") or ""
    status = item.get("status")
    extra = f" [{status}]" if status else ""
    return f"{rid}: {label}{extra}".strip()


def _final(question: str, results: list[ToolMessage]) -> dict[str, Any]:
    lines: list[str] = []
    sources: list[dict[str, Any]] = []
    actions: list[str] = []
    caveats: list[str] = []
    for msg in results:
        system = (msg.name or "").split("_", 1)[0]
        text = msg.text
        if msg.status == "error":
            # The error text is written for the model; the answer only says what failed
            # (opsbot adds the reason for people from the call's record).
            lines.append(f"{msg.name} did not succeed.")
            caveats.append(f"{msg.name} did not succeed.")
            continue
        data = msg.artifact if msg.artifact is not None else _loads(text)
        items = _items(data)
        if msg.name in {"ticketing_close_ticket", "ticketing_add_comment"}:
            actions.append(f"{msg.name} on {_record_id(items[0]) if items else '?'}")
        if not items:
            lines.append("Nothing found.")
        for item in items[:10]:
            lines.append("- " + _summary(item))
            rid = _record_id(item)
            if rid is not None:
                sources.append({"system": system, "id": rid, "link": item.get("url")})
    return {
        "answer": "\n".join(lines) or "Nothing found.",
        "sources": sources,
        "actions_taken": actions,
        "pending_approvals": [],
        "caveats": [*caveats, "Answered by the offline demo model."],
        "confidence": "medium",
    }


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


class DemoChatModel(BaseChatModel):
    """Deterministic, offline, phrase-matching: see the module docstring."""

    model_name: str = "demo"
    tool_names: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "opsbot-demo"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, Any]:
        names = [
            getattr(t, "name", None) or str(getattr(t, "get", lambda _k: "")("name")) for t in tools
        ]
        return self.model_copy(update={"tool_names": names})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if not self.tool_names:
            # Called without tools: a summarisation request. Keep the user's own lines.
            said = [str(m.content)[:200] for m in messages if isinstance(m, HumanMessage)]
            summary = "Earlier in this conversation (demo summary): " + " | ".join(said[-10:])
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=summary))])
        question, results = _turn(messages)
        if results:
            args = _final(question, results)
        else:
            intent = _intent(question)
            if intent is None:
                args = {"answer": HELP, "sources": [], "caveats": [], "confidence": "high"}
            elif intent[0] not in self.tool_names:
                server = intent[0].split("_", 1)[0]
                args = {
                    "answer": f"I can't do that right now: the {server} tools are unavailable.",
                    "sources": [],
                    "caveats": [f"{server} unavailable"],
                    "confidence": "low",
                }
            else:
                return self._reply(intent[0], intent[1])
        return self._reply("FinalAnswer", args)

    @staticmethod
    def _reply(name: str, args: dict[str, Any]) -> ChatResult:
        call = {
            "name": name,
            "args": args,
            "id": f"demo_{uuid.uuid4().hex[:16]}",
            "type": "tool_call",
        }
        message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])
