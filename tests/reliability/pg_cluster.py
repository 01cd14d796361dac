"""A throwaway PostgreSQL cluster of the test's own, so it can be restarted without touching
the machine's shared server (other people's tests run on it).

``initdb``/``pg_ctl`` come from ``OPSBOT_PG_BIN``, ``/usr/lib/postgresql/<major>/bin`` or PATH.
As root (CI), they run as the ``postgres`` user via ``runuser``; the data directory is a temp
dir owned by that user. The cluster listens on 127.0.0.1 on a free port, trust auth.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from infra.serving import bind_socket

_DEFAULT_BIN = Path("/usr/lib/postgresql/15/bin")


def _bin(name: str) -> str:
    # Any installed server version (Debian: /usr/lib/postgresql/<major>/bin), newest first.
    installed = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for candidate in (
        os.environ.get("OPSBOT_PG_BIN"),
        str(_DEFAULT_BIN),
        *(str(p) for p in installed),
    ):
        if candidate and (Path(candidate) / name).exists():
            return str(Path(candidate) / name)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: install PostgreSQL server binaries")
    return found


@dataclass
class PgCluster:
    data: Path
    port: int
    as_user: str | None

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        cmd = list(args)
        if self.as_user:
            cmd = ["runuser", "-u", self.as_user, "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)

    def _ctl(self, action: str) -> None:
        opts = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            _bin("pg_ctl"), "-D", str(self.data / "db"), "-l", str(self.data / "log"),
            "-o", opts, "-w", "-t", "30", "-m", "fast", action,
        )  # fmt: skip

    def start(self) -> None:
        self._ctl("start")

    def stop(self) -> None:
        self._ctl("stop")

    def restart(self) -> None:
        self._ctl("restart")

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[PgCluster]:
    as_user = "postgres" if os.geteuid() == 0 else None
    tmp = Path(tempfile.mkdtemp(prefix="opsbot-pg-"))
    if as_user:
        pw = pwd.getpwnam(as_user)
        os.chown(tmp, pw.pw_uid, pw.pw_gid)
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()  # PostgreSQL binds it itself; a tiny window another process could take it
    cluster = PgCluster(tmp, port, as_user)
    try:
        cluster._run(
            _bin("initdb"), "-D", str(tmp / "db"), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--no-sync",
        )  # fmt: skip
        cluster.start()
        try:
            yield cluster
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):
                cluster._run(
                    _bin("pg_ctl"), "-D", str(tmp / "db"), "-w", "-m", "immediate", "stop"
                )  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
