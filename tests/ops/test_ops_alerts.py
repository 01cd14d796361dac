"""The Prometheus alert rules: valid for promtool, firing (and staying quiet) on the series in
ops/alerts_test.yml, and naming only metrics opsbot really exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

import opsbot.observability.runtime  # noqa: F401  (registers the broker collector)
from opsbot.observability import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "ops" / "alerts.yml"
RULE_TESTS = ROOT / "ops" / "alerts_test.yml"
REQUIRED = {
    "OpsbotAuthFailures",
    "OpsbotRejectRateSpike",
    "OpsbotBulkWriteProposal",
    "OpsbotModelCallLimitHits",
}
_NAME = re.compile(r"\b(opsbot_[a-z_]+)\b")


def _promtool() -> str:
    # CI installs it (.ci/run: Debian's `prometheus` package); a missing promtool fails here.
    path = shutil.which("promtool")
    assert path is not None, "promtool not found: apt-get install prometheus"
    return path


def _exported_names() -> set[str]:
    names: set[str] = set()
    for family in REGISTRY.collect():
        names.add(family.name)
        for sample in family.samples:
            names.add(sample.name)
        if family.type == "counter":
            names.add(f"{family.name}_total")
        if family.type == "histogram":
            names.update(f"{family.name}_{s}" for s in ("bucket", "count", "sum"))
    return names


def test_rules_cover_the_required_alerts_and_name_real_metrics() -> None:
    doc = yaml.safe_load(RULES.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} >= REQUIRED
    exported = _exported_names()
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]
        used = set(_NAME.findall(rule["expr"]))
        assert used, rule["alert"]
        assert used <= exported, f"{rule['alert']} uses unknown metrics {used - exported}"


def test_promtool_checks_the_rules() -> None:
    done = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_unit_tests_fire_and_stay_quiet() -> None:
    done = subprocess.run(
        [_promtool(), "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        check=False,
        cwd=RULE_TESTS.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
