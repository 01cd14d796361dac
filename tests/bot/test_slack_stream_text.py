"""``LiveAnswer`` with the answer's text streamed: Slack's per-call text limit, the rest of
the answer at the end, and a reply that does not continue the streamed text."""

from __future__ import annotations

import asyncio
from typing import Any

from bot.slack.core import Answer, AnswerDelta, Source, Stopped
from bot.slack.streaming import STREAM_TEXT_LIMIT, LiveAnswer


class Client:
    """Records the streaming calls (a slow Slack: each call takes a moment)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def chat_appendStream(self, **fields: Any) -> dict[str, Any]:
        self.calls.append(("append", fields))
        await asyncio.sleep(0.01)
        return {"ok": True}

    async def chat_stopStream(self, **fields: Any) -> dict[str, Any]:
        self.calls.append(("stop", fields))
        return {"ok": True}


def live(client: Client) -> LiveAnswer:
    return LiveAnswer(client, "C1", "1.0", "T1", "U1", "ops-approvals", ts="2.0")  # type: ignore[arg-type]


def markdown_of(fields: dict[str, Any]) -> list[str]:
    texts = [c["text"] for c in fields.get("chunks") or [] if c["type"] == "markdown_text"]
    return texts + ([fields["markdown_text"]] if fields.get("markdown_text") else [])


async def test_streamed_text_stays_under_slack_s_limit_per_call_and_adds_up_to_the_answer() -> None:
    client = Client()
    stream = live(client)
    sentence = "All is well & nothing <b>changed</b>. "
    shown = ""
    for _ in range(3):
        piece = sentence * (5000 // len(sentence))
        shown += piece
        await stream.event(AnswerDelta(piece, shown))
    answer = Answer(shown + "The end.", sources=[Source("ticketing", "PAY-1", None)])
    assert await stream.finish(stream.answer_markdown(answer), [])
    sizes = [sum(map(len, markdown_of(f))) for _, f in client.calls]
    assert max(sizes) <= STREAM_TEXT_LIMIT
    assert len([k for k, _ in client.calls if k == "append"]) >= 2
    text = "".join(t for _, f in client.calls for t in markdown_of(f))
    # Escaped for Slack, and exactly the answer: the streamed part, then the rest.
    assert text == answer.answer.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


async def test_a_reply_that_does_not_continue_the_streamed_text_comes_after_a_blank_line() -> None:
    client = Client()
    stream = live(client)
    await stream.event(AnswerDelta("PAY-1 is open. ", "PAY-1 is open. "))
    stopped = Stopped("Stopped at your request.")
    assert await stream.finish(stream.after_shown(stopped.text))
    replaced = Answer("Sorry, something else entirely.")
    assert stream.answer_markdown(replaced) == "\n\nSorry, something else entirely."
    text = "".join(t for _, f in client.calls for t in markdown_of(f))
    assert text == "PAY-1 is open. \n\nStopped at your request."
