"""The official MCP conformance suite (``@modelcontextprotocol/conformance``) against each
reference server, over streamable HTTP on loopback (issue 19).

The suite is pinned in ``tests/conformance/package.json`` (+ lock) and installed with
``npm ci --prefix tests/conformance`` (``.ci/run`` does it; this test does it too when
``node_modules`` is missing). Without node/npm or the npm registry it skips with the reason
— except under ``CI=true``, where it fails.

Auth: the suite's server mode connects without credentials, so each server is reached
through ``testing.bearer_proxy``, which forwards requests unchanged (``Host`` and
``Origin`` included) plus a real token for that server from the test issuer. The servers'
own auth path is exactly the production one.

Which scenarios apply: those for what a server claims. Every server claims ``tools`` only
(``test_tool_schemas`` checks that), so ``CORE`` applies; a claimed ``logging``,
``completions``, ``resources`` or ``prompts`` capability adds its generic scenarios
(``BY_CAPABILITY``: all scenarios of that capability), which then must pass too. The rest
exercise fixture tools of the SDKs' "everything" test servers (``test_image_content``,
``test_sampling``, ``test_reconnection``, ``json_schema_2020_12_tool``...) and apply to no
other server.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from infra.settings import Settings
from mcp_servers import ReferenceServers, RunningServer
from testing.bearer_proxy import bearer_proxy
from testing.mcp import MintToken, mcp_session
from tests.fixtures.node import npm_ci

pytestmark = pytest.mark.conformance

SUITE_DIR = Path(__file__).resolve().parents[1] / "conformance"
CLI = SUITE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

# Apply to every streamable-HTTP server with tools on localhost.
CORE = (
    "server-initialize",
    "ping",
    "tools-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
)
# A capability's scenarios, required once a server claims it (as issue 19 reads "apply").
# Most need the suite's fixture prompts and resources, so in practice: claim only what you have.
BY_CAPABILITY = {
    "logging": ("logging-set-level", "tools-call-with-logging"),
    "completions": ("completion-complete",),
    "resources": (
        "resources-list",
        "resources-read-text",
        "resources-read-binary",
        "resources-templates-read",
        "resources-subscribe",
        "resources-unsubscribe",
    ),
    "prompts": (
        "prompts-list",
        "prompts-get-simple",
        "prompts-get-with-args",
        "prompts-get-embedded-resource",
        "prompts-get-with-image",
    ),
}


def _unavailable(reason: str) -> None:
    if Settings(_env_file=None).ci:  # type: ignore[call-arg]
        pytest.fail(f"{reason} (CI=true: the conformance suite must run)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def conformance_cli() -> list[str]:
    """The command that runs the pinned suite, installing it first if needed."""
    node = shutil.which("node")
    if node is None:
        _unavailable("node is not installed (Debian: apt-get install nodejs npm)")
    assert node is not None
    if not CLI.exists():
        npm_ci(SUITE_DIR, "the conformance suite", _unavailable)
    return [node, str(CLI)]


async def _run_scenario(cli: list[str], url: str, scenario: str, out: Path) -> list[dict[str, Any]]:
    """The suite's checks for one scenario (read from the ``checks.json`` it writes)."""
    process = await asyncio.create_subprocess_exec(
        *cli,
        "server",
        "--url",
        url,
        "--scenario",
        scenario,
        "--output-dir",
        str(out),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    stdout, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    files = await asyncio.to_thread(lambda: sorted(out.rglob("checks.json")))
    tail = stdout.decode(errors="replace")[-2000:]
    assert files, f"{scenario}: no checks.json (exit {process.returncode}): {tail}"
    checks: list[dict[str, Any]] = json.loads(await asyncio.to_thread(files[-1].read_text))
    return checks


async def _claimed(server: RunningServer, token: str) -> set[str]:
    async with mcp_session(server, token) as session:
        capabilities = session.get_server_capabilities()
    assert capabilities is not None
    return {name for name, value in capabilities.model_dump().items() if value is not None}


async def test_reference_servers_pass_every_conformance_scenario_that_applies(
    conformance_cli: list[str],
    reference_servers: ReferenceServers,
    mcp_token: MintToken,
    tmp_path: Path,
) -> None:
    results: dict[str, dict[str, str]] = {}
    for server in reference_servers:
        token = mcp_token("alice", server.name, expires_in=900)
        claimed = await _claimed(server, token)
        scenarios = list(CORE)
        for capability in sorted(claimed & set(BY_CAPABILITY)):
            scenarios += BY_CAPABILITY[capability]
        async with bearer_proxy(server.url.removesuffix("/mcp"), token) as base:
            # "localhost": the DNS-rebinding scenario needs a localhost URL and sends its
            # own Host and Origin, which the proxy passes through to the server.
            url = base.replace("127.0.0.1", "localhost") + "/mcp"
            for scenario in scenarios:
                out = tmp_path / server.name / scenario
                checks = await _run_scenario(conformance_cli, url, scenario, out)
                failed = [c for c in checks if c.get("status") == "FAILURE"]
                passed = [c for c in checks if c.get("status") == "SUCCESS"]
                verdict = "pass" if passed and not failed else "FAIL"
                if failed:
                    verdict += ": " + "; ".join(
                        f"{c.get('id')}: {c.get('errorMessage')}" for c in failed
                    )
                results.setdefault(server.name, {})[scenario] = verdict
    print(json.dumps(results, indent=2))  # the record of what ran (pytest -s shows it)
    failures = {
        f"{server}/{scenario}": verdict
        for server, by_scenario in results.items()
        for scenario, verdict in by_scenario.items()
        if verdict != "pass"
    }
    assert failures == {}
    assert len(results) == 3
    assert all(len(by) >= len(CORE) for by in results.values())
