"""The fork server (tests/forkserver.py) stands in for the installed ``opsbot`` script: same
output, exit codes, environment, working directory and umask; signals reach the command; a
killed client takes its command down; and the command is a process of its own."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from infra.tls import shared_ssl_context
from tests import forkserver

OPSBOT = str(Path(sys.executable).parent / "opsbot")


def _both(*args: str, env: dict[str, str], cwd: Path) -> list[subprocess.CompletedProcess[str]]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPSBOT_", "SLACK_"))}
    return [
        subprocess.run(
            argv, env={**clean, **env}, cwd=cwd, capture_output=True, text=True, timeout=120
        )
        for argv in ([OPSBOT, *args], forkserver.command(*args))
    ]


def test_it_answers_as_the_installed_script_does(tmp_path: Path) -> None:
    for args, env in [
        (("--version",), {}),
        (("no-such-command",), {}),  # argparse: exit 2, usage on stderr
        (("migrate",), {"PORT": "web"}),  # a configuration error: exit 2, one line
    ]:
        real, forked = _both(*args, env=env, cwd=tmp_path)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            real.returncode,
            real.stdout,
            real.stderr,
        ), args
    assert real.returncode == 2


def test_it_runs_in_the_callers_directory_environment_and_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        env = {**os.environ, "OPSBOT_DATA_DIR": "here", "OPSBOT_DATABASE_URL": ""}
        forked = subprocess.run(
            forkserver.command("migrate"), env=env, cwd=tmp_path, capture_output=True, text=True
        )
    finally:
        os.umask(previous)
    assert forked.returncode == 0, forked.stderr
    assert "migrated database from empty" in forked.stdout
    data = tmp_path / "here"  # relative to the caller's working directory
    assert data.is_dir()
    assert (os.stat(data).st_mode & 0o777) == 0o700  # opsbot's own umask, set by its main


PROBE = """
import json, os, sys
print(json.dumps([__name__, sys.argv, sys.path[0], os.getcwd(), os.environ.get("PROBE_VAR")]))
sys.exit(int(sys.argv[-1]))
"""


def test_a_module_runs_as_python_m_runs_it(tmp_path: Path) -> None:
    # A module only the caller's directory has: found as python -m finds it (sys.path[0]).
    (tmp_path / "probe_module.py").write_text(PROBE)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPSBOT_", "SLACK_"))}
    real, forked = (
        subprocess.run(
            argv,
            env={**clean, "PROBE_VAR": "from the caller"},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for argv in (
            [sys.executable, "-m", "probe_module", "one", "3"],
            forkserver.module_command("probe_module", "one", "3"),
        )
    )
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )
    assert real.returncode == 3
    name, argv, path0, cwd, var = json.loads(real.stdout)
    assert (name, argv[1:], path0, cwd, var) == (
        "__main__",
        ["one", "3"],
        str(tmp_path),
        str(tmp_path),
        "from the caller",
    )


async def _serving(argv: list[str], env: dict[str, str]) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )
    assert proc.stdout is not None
    for _ in range(20):
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout=60)).decode()
        if found := re.search(r"http://127\.0\.0\.1:\d+", line):
            return proc, found.group(0)
        assert line, "the command exited before it served"
    raise AssertionError("no URL printed")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


async def test_a_signal_reaches_the_command_and_a_killed_client_takes_it_down(
    tmp_path: Path,
) -> None:
    env = {"OPSBOT_DATA_DIR": str(tmp_path), "OPSBOT_DATABASE_URL": ""}
    args = ("idp", "serve", "--port", "0")
    codes, ignores = [], []
    for argv in ([OPSBOT, *args], forkserver.command(*args)):
        proc, url = await _serving(argv, env)
        ignores.append(_ignored(proc.pid))  # the real script's; then the forked one's client
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            assert (await http.get(f"{url}/.well-known/openid-configuration")).status_code == 200
        proc.send_signal(signal.SIGINT)
        codes.append(await asyncio.wait_for(proc.wait(), 60))
    assert codes[1] == codes[0], codes  # Ctrl-C ends both the same way

    proc, url = await _serving(forkserver.command(*args), env)
    served_by = [pid for pid in _children_of_the_server() if _alive(pid)]
    assert served_by
    assert proc.pid not in served_by  # a process of its own, not the client
    for pid in served_by:  # signals ignored as in a fresh interpreter: SIGPIPE, for one
        assert _ignored(pid) == ignores[0]
    for pid in served_by:  # a command killed (as a crash test's kills itself): so is the client
        os.kill(pid, signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), 60) == -signal.SIGKILL

    proc, url = await _serving(forkserver.command(*args), env)
    served_by = [pid for pid in _children_of_the_server() if _alive(pid)]
    proc.kill()
    await proc.wait()
    for _ in range(600):  # SIGKILL cannot be forwarded: the server kills the command
        if not any(_alive(pid) for pid in served_by):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"the command outlived its killed client: {served_by}")


def _ignored(pid: int) -> set[int]:
    """The signals process ``pid`` ignores (``SigIgn`` in /proc)."""
    with open(f"/proc/{pid}/status") as status:
        mask = int(next(line for line in status if line.startswith("SigIgn:")).split()[1], 16)
    return {sig for sig in range(1, 65) if mask & (1 << (sig - 1))}


def _children_of_the_server() -> list[int]:
    server = forkserver.server_pid()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if parent == server:
                found.append(int(entry))
    return found
