"""Done-when: spans reach an in-test OTLP collector (OTLP/HTTP protobuf on loopback) tagged with
``thread_id`` and the pseudonymous user id, with no identity in clear."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from infra.serving import bind_socket, socket_url
from infra.settings import ObservabilitySettings
from opsbot.observability import pseudonymous_id
from testing.slack import APPROVALS_CHANNEL_ID, block_action, mention
from tests.bot.test_slack_events import _texts
from tests.ops.conftest import OpsApp


@dataclass
class Collector:
    url: str
    bodies: list[bytes] = field(default_factory=list)

    def spans(self) -> list[Any]:
        found = []
        for body in self.bodies:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    found.extend(scope_spans.spans)
        return found


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attributes(span: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in span.attributes}


@pytest.fixture
async def collector() -> AsyncIterator[Collector]:
    sock = bind_socket("127.0.0.1", 0)
    found = Collector(f"{socket_url(sock)}/v1/traces")

    async def traces(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        found.bodies.append(await request.read())
        return web.Response(
            body=b"", content_type="application/x-protobuf"
        )  # an empty ExportTraceServiceResponse

    application = web.Application()
    application.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(application, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        yield found
    finally:
        await runner.cleanup()


@pytest.fixture
def otlp_endpoint(collector: Collector) -> str:
    return collector.url


async def test_spans_are_exported_with_thread_and_pseudonymous_user(
    ops_app: OpsApp, collector: Collector
) -> None:
    app, fake = ops_app, ops_app.fake_slack
    await app.link("U0ALICE", "alice")
    await app.link("U0BOB", "bob")
    await app.sender.post_event(mention("U0ALICE", "show ticket PAY-101", ts="8.1"))
    answer = (await fake.wait_for("chat.update", wait=60))[0]
    assert "PAY-101" in _texts(answer["blocks"])
    await app.sender.post_event(mention("U0ALICE", "close ticket PAY-103 as resolved", ts="8.2"))
    await fake.wait_for(
        "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals", wait=60
    )
    await fake.settle()
    (card_key,) = [k for k in fake.messages if k[0] == APPROVALS_CHANNEL_ID]
    approval_id = fake.messages[card_key]["blocks"][-1]["elements"][0]["value"]
    await app.sender.post_interaction(block_action("U0BOB", "approval_approve", approval_id))
    await fake.wait_for(
        "chat.postMessage", where=lambda p: "approved" in p.get("text", ""), wait=60
    )
    await fake.settle()
    await app.stop_app()  # shutdown flushes the batch exporter

    spans = collector.spans()
    names = [s.name for s in spans]
    assert names.count("opsbot.run") == 2
    assert names.count("opsbot.resume") == 1
    # the approved write runs at its decision, traced on its own, its tool span inside it
    assert names.count("opsbot.execute") == 1
    assert "tool ticketing_get_ticket" in names
    (close,) = [s for s in spans if s.name == "tool ticketing_close_ticket"]
    assert {s.span_id: s.name for s in spans}[close.parent_span_id] == "opsbot.execute"
    assert "model demo" in names
    assert any(n == "middleware HumanInTheLoopMiddleware.after_model" for n in names)

    key = ObservabilitySettings().pseudonym_key.get_secret_value()
    alice = pseudonymous_id(key, "alice")
    bob = pseudonymous_id(key, "bob")
    runs = [s for s in spans if s.name.startswith("opsbot.")]
    thread_ids = {attributes(s)["thread_id"] for s in runs}
    assert len(thread_ids) == 2  # the read's thread and the write's thread (resumed)
    for span in spans:
        attrs = attributes(span)
        # every span carries the run's thread and the requester's pseudonym — the resume
        # runs for alice (the requester), never bob (the approver)
        assert attrs["thread_id"] in thread_ids
        assert attrs["opsbot.user"] == alice
        assert attrs["opsbot.user"] != bob
    # the run decided by HITL is tagged as interrupted; every span hangs off a run span
    outcomes = sorted(attributes(s).get("opsbot.outcome") for s in runs)
    assert outcomes == ["completed", "completed", "completed", "interrupted"]
    run_ids = {s.span_id for s in runs}
    by_id = {s.span_id: s for s in spans}
    for span in spans:
        top = span
        while top.parent_span_id:
            top = by_id[top.parent_span_id]
        assert top.span_id in run_ids
    # no identity in clear anywhere in what left the process
    raw = b"".join(collector.bodies)
    for secret in (b"alice", b"alice@example.com", b"U0ALICE", b"bob", b"U0BOB"):
        assert secret not in raw
