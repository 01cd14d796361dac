"""What an operator deploys: ``deploy/kubernetes/*.yaml`` and the ``Dockerfile``.

The manifests are plain YAML: each document is validated against the Kubernetes JSON
schemas (``kubernetes-validate``, strict: unknown fields fail; offline, the schemas ship with
the package) for the oldest and newest versions we support, then checked for what opsbot
needs: the Procfile's processes with arguments the real CLI accepts, probes on ``/healthz``
and ``/readyz``, secrets only from the Secret object, settings opsbot accepts, non-root pods.
Docker is not available here, so the Dockerfile is parsed and its rules checked.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from opsbot.cli import build_parser
from opsbot.config_check import load_settings, require_link_key, require_slack

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
SECRET_NAME = "opsbot-secrets"
CONFIG_NAME = "opsbot-config"
SECRET_LOOKING = re.compile(r"SECRET|TOKEN|PASSWORD|_KEY$|DATABASE_URL")


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((path.name, doc))
    return found


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _f, d in documents() if d["kind"] == kind}


def workloads() -> dict[str, dict[str, Any]]:
    """Deployments and Jobs by name: their pod specs."""
    return {
        name: doc["spec"]["template"]["spec"]
        for kind in ("Deployment", "Job")
        for name, doc in by_kind(kind).items()
    }


def container(name: str) -> dict[str, Any]:
    (only,) = workloads()[name]["containers"]
    return dict(only)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("doc", [pytest.param(d, id=f"{f}:{d['kind']}") for f, d in documents()])
def test_each_manifest_is_a_valid_kubernetes_object(doc: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_catches_a_broken_manifest() -> None:
    broken = json.loads(json.dumps(by_kind("Deployment")["opsbot-web"]))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["pth"] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[0], strict=True)


def test_web_worker_sweeper_and_a_migrate_job_run_the_procfiles_commands() -> None:
    procfile = dict(
        line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line
    )
    parser = build_parser()
    deployed = {name: parser.parse_args(container(name)["args"]) for name in workloads()}
    assert set(deployed) == {"opsbot-web", "opsbot-worker", "opsbot-sweeper", "opsbot-migrate"}
    assert deployed["opsbot-migrate"].command == "migrate" == procfile["release"].split()[1]
    web = parser.parse_args(shlex.split(procfile["web"].replace("$PORT", "3000"))[1:])
    assert vars(deployed["opsbot-web"]) == vars(web)
    assert (deployed["opsbot-worker"].command, deployed["opsbot-worker"].socket_mode) == (
        "slack",
        False,
    )  # HTTP mode, not behind the Service: it takes queued runs (see worker.yaml)
    sweeper = parser.parse_args(shlex.split(procfile["sweeper"])[1:])
    assert vars(deployed["opsbot-sweeper"]) == vars(sweeper)
    job = by_kind("Job")["opsbot-migrate"]["spec"]["template"]["spec"]
    assert job["restartPolicy"] == "Never"


@pytest.mark.parametrize("name", ["opsbot-web", "opsbot-worker"])
def test_the_slack_app_is_probed_on_healthz_and_readyz_on_the_port_it_serves(name: str) -> None:
    spec = container(name)
    (port,) = spec["ports"]
    served = build_parser().parse_args(spec["args"]).port
    assert port["containerPort"] == served == int(by_kind("ConfigMap")[CONFIG_NAME]["data"]["PORT"])
    paths = {
        probe: (spec[probe]["httpGet"]["path"], spec[probe]["httpGet"]["port"])
        for probe in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert paths == {
        "startupProbe": ("/healthz", port["name"]),
        "livenessProbe": ("/healthz", port["name"]),
        "readinessProbe": ("/readyz", port["name"]),
    }


def test_the_service_sends_slack_to_the_web_pods_only() -> None:
    service = by_kind("Service")["opsbot-web"]
    web = by_kind("Deployment")["opsbot-web"]
    assert service["spec"]["selector"] == web["spec"]["selector"]["matchLabels"]
    worker = by_kind("Deployment")["opsbot-worker"]["spec"]["template"]["metadata"]["labels"]
    assert not all(worker.get(k) == v for k, v in service["spec"]["selector"].items())
    assert service["spec"]["ports"][0]["targetPort"] == container("opsbot-web")["ports"][0]["name"]


def test_secrets_come_only_from_the_secret_object() -> None:
    config = by_kind("ConfigMap")[CONFIG_NAME]["data"]
    assert [k for k in config if SECRET_LOOKING.search(k)] == []
    secret = by_kind("Secret")[SECRET_NAME]["stringData"]
    assert {"OPSBOT_DATABASE_URL", "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"} <= set(secret)
    assert "OPSBOT_BROKER__LINK_ENCRYPTION_KEY" in secret
    for name in workloads():
        spec = container(name)
        assert "env" not in spec, f"{name}: literal env values; use the ConfigMap or Secret"
        assert spec["envFrom"] == [
            {"configMapRef": {"name": CONFIG_NAME}},
            {"secretRef": {"name": SECRET_NAME}},
        ]


def test_opsbot_accepts_the_shipped_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ConfigMap and the example Secret pass opsbot's own start-up checks, and every key
    is a documented variable (``.env.example``)."""
    values = {
        **by_kind("ConfigMap")[CONFIG_NAME]["data"],
        **by_kind("Secret")[SECRET_NAME]["stringData"],
    }
    documented = (ROOT / ".env.example").read_text()
    for key, value in values.items():
        provider_key = key.endswith("_API_KEY")  # read by the model provider's package
        assert (
            re.search(rf"^#? ?{re.escape(key)}=", documented, re.M) or key == "PORT" or provider_key
        ), key
        monkeypatch.setenv(key, str(value))
    monkeypatch.chdir(MANIFESTS)  # no .env file here
    settings = load_settings()
    require_slack(settings, socket_mode=False)
    require_link_key(settings)
    assert settings.resolved_database_url.startswith("postgresql://")
    assert [s.name for s in settings.mcp_servers] == ["ticketing", "docs", "database"]
    assert str(settings.data_dir) == dockerfile_env()["OPSBOT_DATA_DIR"]


def test_pods_run_as_the_images_non_root_user_with_a_read_only_root() -> None:
    uid = int(dockerfile_stage("runtime")["USER"][-1].split(":")[0])
    images = set()
    for name, pod in workloads().items():
        assert pod["automountServiceAccountToken"] is False
        assert pod["serviceAccountName"] == "opsbot"
        context = pod["securityContext"]
        assert (context["runAsNonRoot"], context["runAsUser"]) == (True, uid), name
        spec = container(name)
        images.add(spec["image"])
        sc = spec["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert "memory" in spec["resources"]["limits"]
        assert spec["resources"]["requests"]
        mounts = {m["mountPath"] for m in spec["volumeMounts"]}
        assert {dockerfile_env()["OPSBOT_DATA_DIR"], "/tmp"} <= mounts, name  # noqa: S108
    (image,) = images  # one image, every process
    assert not image.endswith(":latest")
    assert ":" in image


# --- the Dockerfile ------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order; continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    steps = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            steps.append((word.upper(), " ".join(rest.split())))
    return steps


def dockerfile_stage(name: str) -> dict[str, list[str]]:
    """The instructions of one build stage, by instruction."""
    stage: dict[str, list[str]] | None = None
    stages: dict[str, dict[str, list[str]]] = {}
    for word, rest in dockerfile():
        if word == "FROM":
            stage = stages.setdefault(rest.split(" AS ")[-1].strip(), {"FROM": [rest]})
        elif stage is not None:
            stage.setdefault(word, []).append(rest)
    return stages[name]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for line in dockerfile_stage("runtime").get("ENV", []):
        for word in shlex.split(line):
            key, _, value = word.partition("=")
            env[key] = value
    return env


def test_the_dockerfile_builds_with_uv_in_stages_and_runs_opsbot_as_non_root() -> None:
    steps = dockerfile()
    args = {rest.split("=")[0]: rest.split("=", 1)[1] for word, rest in steps if word == "ARG"}
    froms = [rest for word, rest in steps if word == "FROM"]
    assert [f.split(" AS ")[-1] for f in froms] == ["uv", "build", "runtime"]
    uv_image = froms[0].split(" AS ")[0]
    assert re.fullmatch(r"ghcr\.io/astral-sh/uv:\d+\.\d+\.\d+", uv_image), uv_image
    python = args["PYTHON_IMAGE"]
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert re.fullmatch(r"python:3\.\d+-slim-\w+", python), python
    assert python.split(":")[1].split("-")[0] >= requires.removeprefix(">=")

    build = dockerfile_stage("build")
    syncs = [r for r in build["RUN"] if "uv sync" in r]
    assert len(syncs) == 2
    assert all("--locked" in r and "--no-dev" in r for r in syncs)
    assert "--no-install-project" in syncs[0]
    assert "MODEL_PACKAGES" in " ".join(build["ARG"])  # the provider integration, by build arg
    assert "--no-editable" in syncs[1]
    for mounted in re.findall(r"source=([^,\s]+)", " ".join(build["RUN"])):
        assert (ROOT / mounted).exists(), mounted

    runtime = dockerfile_stage("runtime")
    assert runtime["COPY"] == ["--from=build /app/.venv /app/.venv"]  # no sources, no uv
    user = runtime["USER"][-1]
    assert user.split(":")[0] not in {"0", "root"}
    assert dockerfile().index(("USER", user)) > max(
        i for i, (word, _r) in enumerate(dockerfile()) if word in {"RUN", "COPY"}
    )  # nothing runs as root after the switch, and the switch is last
    assert json.loads(runtime["ENTRYPOINT"][-1]) == ["opsbot"]
    assert build_parser().parse_args(json.loads(runtime["CMD"][-1])).command == "slack"
    env = dockerfile_env()
    assert env["PATH"].startswith("/app/.venv/bin:")
    assert runtime["EXPOSE"] == [env["PORT"]]
    assert f"-m 0700 {env['OPSBOT_DATA_DIR']}" in " ".join(runtime["RUN"])


def test_the_docker_build_context_keeps_what_the_build_needs() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {
        "pyproject.toml",
        "uv.lock",
        project["project"]["readme"],
        *project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"],
    }
    assert needed.isdisjoint(ignored), needed & ignored
    assert {".git", ".venv", ".opsbot", ".env"} <= ignored
