"""Start-up cost: what a process that does not use a heavy dependency never imports.

``opsbot migrate`` and the user-memory store need ``agent_core.checkpointer`` and
``agent_core.pii`` only, not the agent (``agent_core``'s names load on first use); a process
without an OTLP endpoint never loads the OTLP exporter (and protobuf). Checked in a fresh
interpreter: this test process has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import json, sys
import agent_core.checkpointer, memory.store, opsbot.observability
from infra.observability.tracing import Tracing
from infra.settings import ObservabilitySettings
Tracing.from_settings(ObservabilitySettings())
loaded = [m for m in (
    "agent_core.agent", "agent_core.factory",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter", "google.protobuf",
) if m in sys.modules]
from agent_core import Agent, ToolPolicy
print(json.dumps({"loaded": loaded, "agent": Agent.__module__, "policy": ToolPolicy.__module__}))
"""


def test_light_modules_leave_the_agent_and_the_otlp_exporter_unloaded() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout.strip().splitlines()[-1])
    assert probe["loaded"] == []
    # the package's names still resolve, on first use
    assert probe["agent"] == "agent_core.agent"
    assert probe["policy"] == "agent_core.policy"
