"""A per-test-process fork server for the ``opsbot`` command: the real CLI in a real, separate
process, without paying its imports again on every start.

Most of an ``opsbot`` start is imports (langchain, langgraph, sqlalchemy, alembic, starlette:
~2.5-3.5 s of CPU per start, measured), and the suite starts the command dozens of times. The
server (``python -m tests.forkserver SOCKET``) imports the whole product once, then forks one
child per start. Each child takes the caller's stdin/stdout/stderr (passed over a Unix socket),
its argv, environment, working directory and umask, and runs ``opsbot.cli.main`` as the
installed ``opsbot`` script does: a separate process that speaks real HTTP and exits with
``main``'s code.

The caller starts ``python -I -S tests/forkserver_client.py SOCKET ARGS...`` (``command()``
gives that argv; a stdlib-only start of ~10 ms of CPU) in place of ``opsbot ARGS...``. The
client forwards the signals a test sends (SIGINT, SIGTERM, ...) to the child and exits as the
child did, with its code or by its signal, so ``subprocess`` and asyncio see the same return
codes. A SIGKILL of the client cannot be forwarded: the server then kills the child at once,
but after the client is gone, so the crash tests (``tests/reliability``) keep starting the real
command from scratch, as do the tests that check what a start imports or how long it takes.

``module_command`` does the same for ``python -m MODULE ARGS``: a test helper process (the
crash tests' Slack app) or a pytest run inside a test, whose product imports the server has
already done.

The server stays single-threaded (one ``selectors`` loop, SIGCHLD through a wakeup pipe): a
fork of a threaded process could inherit a lock held by another thread.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import pkgutil
import runpy
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent.parent
CLIENT = Path(__file__).resolve().with_name("forkserver_client.py")
OPSBOT_SCRIPT = str(Path(sys.executable).parent / "opsbot")
# Everything an ``opsbot`` command may import, imported once in the server.
PRODUCT_PACKAGES = (
    "infra",
    "audit",
    "memory",
    "broker",
    "approvals",
    "agent_core",
    "assistant",
    "mcp_servers",
    "bot",
    "sandbox",
    "opsbot",
)
HEADER = struct.Struct("!I")
START_TIMEOUT = 120.0


def _preload() -> None:
    # As ``opsbot.cli.main`` does outside a development terminal (every test start): no rich,
    # so structlog and httpx take the same plain paths as in a started-from-scratch process.
    if "rich" not in sys.modules:
        sys.modules["rich"] = None  # type: ignore[assignment]
    for name in PRODUCT_PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if module.name.endswith("__main__"):
                continue
            with contextlib.suppress(ImportError):
                importlib.import_module(module.name)
    if threading.active_count() != 1:
        raise RuntimeError(f"an import started a thread: {threading.enumerate()}")
    # The imported objects move to a generation the collector never scans: a child's
    # collections would otherwise touch (and so copy) every page the server imported.
    gc.collect()
    gc.freeze()


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
    (size,) = HEADER.unpack_from(data)
    body = data[HEADER.size :]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("the client went away mid-request")
        body += chunk
    request: dict[str, object] = json.loads(body)
    return request, fds


def _run_child(request: dict[str, object], fds: list[int]) -> int:
    """In the forked child: become the ``opsbot`` process the client asked for."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # The dispositions a fresh interpreter starts with (SIGPIPE and SIGXFSZ stay ignored, as
    # Python sets them at start-up: a write to a closed socket is an EPIPE error, not death).
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(str(request["cwd"]))
    os.umask(int(str(request["umask"])))
    os.environ.clear()
    os.environ.update(dict(request["env"]))  # type: ignore[call-overload]
    args = [str(arg) for arg in request["args"]]  # type: ignore[attr-defined]
    module = request.get("module")
    sys.argv = [OPSBOT_SCRIPT if module is None else "-m", *args]
    # Buffer stdout as a fresh interpreter would for this stdout and environment: a test that
    # reads lines as they come sets PYTHONUNBUFFERED, as it would for a real process.
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdout.reconfigure(line_buffering=os.isatty(1) and not unbuffered, write_through=unbuffered)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True, write_through=unbuffered)  # type: ignore[union-attr]
    if module is not None:
        return _run_module(str(module))
    sys.path[0] = str(Path(sys.executable).parent)  # as the installed script has it
    from opsbot.cli import main

    return main()


def _run_module(module: str) -> int:
    """As ``python -m MODULE`` runs it: ``__main__`` of that name, the working directory first
    on ``sys.path`` (runpy sets ``sys.argv[0]`` to the module's file)."""
    sys.path[0] = os.getcwd()
    # The placeholder that kept ``rich`` out of the preload: modules imported from here on
    # find it if it is installed, as in a fresh interpreter.
    if sys.modules.get("rich", False) is None:
        del sys.modules["rich"]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def _exit(run: Callable[[dict[str, object], list[int]], int], *args: Any) -> NoReturn:
    """Run the child and end it as the interpreter would, minus the teardown of every module
    the server imported (~1 s of CPU per child, all copy-on-write page faults): atexit
    handlers run and output is flushed; an exception prints its traceback and exits 1."""
    try:
        code: object = run(*args)
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:
        # As the interpreter ends on an uncaught Ctrl-C: killed by SIGINT.
        atexit._run_exitfuncs()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code or 0)


def serve(path: str) -> None:
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    parent = os.getppid()
    reader, writer = os.pipe()
    os.set_blocking(reader, False)
    os.set_blocking(writer, False)
    signal.set_wakeup_fd(writer)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(reader, selectors.EVENT_READ, "sigchld")
    children: dict[int, socket.socket] = {}  # pid -> its client's connection
    print("ready", flush=True)
    while True:
        if os.getppid() != parent:
            return  # the test process is gone (killed, or it skipped its atexit handlers)
        for key, _events in selector.select(timeout=1.0):
            if key.data == "accept":
                conn, _ = listener.accept()
                request, fds = _receive(conn)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    conn.close()
                    for fd in (reader, writer):
                        os.close(fd)
                    signal.set_wakeup_fd(-1)
                    _exit(_run_child, request, fds)
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"pid {pid}\n".encode())
                children[pid] = conn
                selector.register(conn, selectors.EVENT_READ, pid)
            elif key.data == "sigchld":
                with contextlib.suppress(BlockingIOError):
                    os.read(reader, 512)
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    conn = children.pop(pid)
                    selector.unregister(conn)
                    with contextlib.suppress(OSError):
                        conn.sendall(f"status {status}\n".encode())
                    conn.close()
            else:
                # The client spoke or hung up before its child exited: it was killed
                # (SIGKILL cannot be forwarded), so its child goes too.
                conn = key.fileobj  # type: ignore[assignment]
                if not conn.recv(1):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(key.data, signal.SIGKILL)


class _Server:
    """This test process's fork server, started on first use, stopped at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._path = ""

    def socket_path(self) -> str:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
            return self._path

    def _start(self) -> None:
        directory = tempfile.mkdtemp(prefix="opsbot-forkserver-")
        self._path = os.path.join(directory, "socket")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPSBOT_", "SLACK_"))}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.forkserver", self._path],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        atexit.register(self._stop, self._process, self._path)
        assert self._process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT
        line = self._process.stdout.readline()
        if line != b"ready\n" or time.monotonic() > deadline:
            raise RuntimeError(f"the opsbot fork server did not start: {line!r}")

    @staticmethod
    def _stop(process: subprocess.Popen[bytes], path: str) -> None:
        if process.poll() is None:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)

    def pid(self) -> int:
        self.socket_path()
        assert self._process is not None
        return self._process.pid


_SERVER = _Server()


def server_pid() -> int:
    """The fork server's pid (started if need be): its children are the forked commands."""
    return _SERVER.pid()


def command(*args: str) -> list[str]:
    """The argv that runs ``opsbot ARGS`` in a child of this process's fork server: use it in
    place of ``[opsbot, *args]`` with ``subprocess`` or ``asyncio.create_subprocess_exec``."""
    return [sys.executable, "-I", "-S", str(CLIENT), _SERVER.socket_path(), *args]


def module_command(module: str, *args: str) -> list[str]:
    """The argv that runs ``python -m MODULE ARGS`` in a child of this process's fork server
    (a test helper process, or a pytest run inside a test): in place of
    ``[sys.executable, "-m", module, *args]``. The module and what it imports beyond the
    product are imported in the child, fresh."""
    return [sys.executable, "-I", "-S", str(CLIENT), _SERVER.socket_path(), "-m", module, *args]


if __name__ == "__main__":
    serve(sys.argv[1])
