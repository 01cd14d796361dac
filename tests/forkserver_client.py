"""``opsbot ARGS`` through the test process's fork server (tests/forkserver.py).

Run as ``python -I -S forkserver_client.py SOCKET ARGS...`` (``SOCKET -m MODULE ARGS...`` for
``python -m MODULE ARGS``): standard library only, so it starts in ~10 ms. It hands the server
its stdin, stdout and stderr, argv, environment, working directory and umask; forwards the
signals it gets to the child; and exits as the child did.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)


def main() -> None:
    path, args = sys.argv[1], sys.argv[2:]
    module = None
    if args[:1] == ["-m"]:  # python -m MODULE ARGS, not opsbot ARGS (opsbot has no -m)
        module, args = args[1], args[2:]
    umask = os.umask(0)
    os.umask(umask)
    request = {"args": args, "env": dict(os.environ), "cwd": os.getcwd(), "umask": umask}
    if module is not None:
        request["module"] = module
    body = json.dumps(request).encode()
    child: list[int] = []
    pending: list[int] = []

    def forward(sig: int, _frame: object) -> None:
        if child:
            os.kill(child[0], sig)
        else:
            pending.append(sig)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    socket.send_fds(conn, [struct.pack("!I", len(body)) + body], [0, 1, 2])
    lines = conn.makefile("rb")
    kind, value = lines.readline().split()
    assert kind == b"pid", kind
    child.append(int(value))
    for sig in pending:
        os.kill(child[0], sig)
    reply = lines.readline().split()
    if len(reply) != 2:
        sys.exit(f"forkserver_client: the fork server went away: {reply!r}")
    status = int(reply[1])
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        # Die of it too (SIGPIPE is ignored here, as in any Python process); SIGKILL and
        # SIGSTOP have no disposition to set.
        with contextlib.suppress(OSError):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
