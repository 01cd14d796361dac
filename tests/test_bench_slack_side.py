"""``bench approval``'s Slack side (``bench/_slack_side.py``) and the sending it shares
(``bench/_sender.py``): the cards part run quickly in both shapes, and the warm-up that
keeps the timed clicks from opening connections."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from bench._sender import ConnectionCount, Prepared, send_timed, warm_up
from infra.serving import bind_socket, serve_aiohttp
from tests.bench_run import run_bench

# The keys the cards part reported before the Slack side moved (kept, for older figures)
CARD_KEYS = {
    "cards",
    "click_to_card_updated_ms_p50",
    "click_to_card_updated_ms_p99",
    "click_to_write_done_ms_p50",
    "click_to_write_done_ms_p99",
    "cards_executions",
    "cards_audit_rows",
    "audit_rows_equal_executions",
    "stages",
    "app_loop_cpu_ms_per_click",
    "servers_cpu_ms_per_click",
    "token_endpoint_per_click_until_writes_done",
    "app_sql_transactions_per_click",
}


def _check_cards(part: dict[str, object], n: int) -> None:
    assert part.keys() >= CARD_KEYS, CARD_KEYS - part.keys()
    assert part["cards"] == n
    assert part["cards_audit_rows"] == part["cards_executions"] == n
    assert part["audit_rows_equal_executions"] is True
    # The sender opened its connections before the clicks, as Slack keeps its own open
    assert part["click_connections_opened"] == 0
    cpu = part["slack_side_cpu_ms_per_click"]
    assert isinstance(cpu, float)
    assert cpu > 0
    card_p50, card_p99 = part["click_to_card_updated_ms_p50"], part["click_to_card_updated_ms_p99"]
    assert isinstance(card_p50, float)
    assert isinstance(card_p99, float)
    assert 0 < card_p50 <= card_p99


@pytest.mark.parametrize(
    ("flags", "shape"),
    [(["--paced-ms", "5"], "process"), (["--slack-in-process"], "thread")],
)
def test_cards_in_both_shapes(flags: list[str], shape: str) -> None:
    """Three cards, the Slack side in its own process (the default; paced clicks too, so a
    second child starts and stops) or on a thread: the old keys and the new ones."""
    result = run_bench("approval", "--only-cards", "--cards", "3", *flags)
    assert result["slack_side"] == shape
    assert result["servers"] == "process"
    _check_cards(result, 3)
    if shape == "process":
        _check_cards(result["paced"], 3)


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _closing(_request: web.Request) -> web.Response:
    response = web.Response(text="ok")
    response.force_close()  # "Connection: close": nothing to keep
    return response


async def test_warmed_up_connections_carry_the_timed_posts() -> None:
    app = web.Application()
    app.router.add_get("/healthz", _ok)
    app.router.add_post("/click", _ok)
    async with serve_aiohttp(app, bind_socket("127.0.0.1", 0)) as base:
        posts = [Prepared(f"{base}/click", "{}", {}) for _ in range(6)]
        cold, warm = ConnectionCount(), ConnectionCount()
        async with aiohttp.ClientSession(trace_configs=[cold.trace]) as http:
            sent = await send_timed(http, posts)
        assert cold.opened == 6  # at once, cold: a connection each
        async with aiohttp.ClientSession(trace_configs=[warm.trace]) as http:
            assert await warm_up(http, f"{base}/healthz", 6, warm) == 6
            sent = await send_timed(http, posts)
            assert warm.opened == 6  # none more for the timed posts
            paced = await send_timed(http, posts[:3], paced_ms=30)
        assert [s.status for s in sent + paced] == [200] * 9
        assert all(s.answered >= s.started for s in sent + paced)
        starts = [s.started for s in paced]
        assert starts == sorted(starts)
        assert starts[-1] - starts[0] >= 0.03  # two gaps of 30 ms, give or take the loop


async def test_warm_up_refuses_a_server_that_keeps_no_connection() -> None:
    app = web.Application()
    app.router.add_get("/healthz", _closing)
    async with serve_aiohttp(app, bind_socket("127.0.0.1", 0)) as base:
        count = ConnectionCount()
        async with aiohttp.ClientSession(trace_configs=[count.trace]) as http:
            with pytest.raises(RuntimeError, match="still opened"):
                await warm_up(http, f"{base}/healthz", 3, count)
        assert count.opened == 15  # five rounds, three each
