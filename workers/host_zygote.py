"""A pre-imported parent for replica hosts on the CPU: forks a host instead of starting an interpreter.

    python -m workers.host_zygote --socket PATH --parent-pid N

A replica host of a torch family spends seconds of CPU importing torch and transformers before it
reads a byte of weights (3-6 s of CPU for a stage of a tiny model, most of its start). The zygote imports
them once, then listens on a Unix socket; for each request (a host's command line, environment and
working directory) it forks a child that becomes that host (`workers.replica_host.main`) and
answers with the child's pid. `workers.zygote_spawn` starts one per Celery worker and asks it.

The child is the host the command line describes, as if started from it:
- its own session, stdin from /dev/null, the requested environment and working directory;
- `/proc/<pid>/cmdline` rewritten to that command line (the zygote's own command line holds
  `--room`, spare bytes for it), so the worker finds its hosts by their command line
  (`workers.processes`) whichever way they started. A command line that does not fit makes the
  child exec it instead: a fresh interpreter, as without the zygote;
- the zygote answers only once the child's command line is in place (or it has exec'd), so no
  one can look for the host in between and miss it.

Only the CPU: CUDA does not survive a fork, so GPU replicas keep starting fresh interpreters. The
zygote never initialises CUDA, configures no logging (the host does) and runs one thread. It exits
when the worker whose pid it was given does; the hosts it forked watch that worker themselves.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
import traceback
from pathlib import Path

from workers.processes import HOST_MODULE, pid_alive

PRELOAD = ("torch", "transformers", "transformers.modeling_utils", "transformers.activations")
"""What every torch replica host imports first: most of its start."""
ROOM_BYTES = 32768
"""Spare command-line bytes each forked host can rewrite into its own command line."""
MAX_REQUEST_BYTES = 1 << 20
PARENT_CHECK_S = 1.0


def preload() -> None:
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception as error:  # a host imports what it needs itself; this only saves time
            print(f"host zygote: preloading {name} failed: {error}", file=sys.stderr, flush=True)


def serve(path: str, parent_pid: int) -> int:
    preload()
    listener = _listen(path)
    try:
        while pid_alive(parent_pid):
            _reap()
            ready, _, _ = select.select([listener], [], [], PARENT_CHECK_S)
            if ready:
                connection, _ = listener.accept()
                with connection:
                    _answer(listener, connection)
    finally:
        listener.close()
        Path(path).unlink(missing_ok=True)
    return 0


def _listen(path: str) -> socket.socket:
    """Bound and listening under a temporary name, then renamed into place: a client that can connect
    finds the zygote ready."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staging = f"{path}.{os.getpid()}"
    Path(staging).unlink(missing_ok=True)
    listener.bind(staging)
    os.chmod(staging, 0o600)
    listener.listen(16)
    os.rename(staging, path)
    return listener


def _answer(listener: socket.socket, connection: socket.socket) -> None:
    connection.settimeout(10)
    try:
        if _peer_uid(connection) != os.getuid():
            _reply(connection, {"error": "refused: another user"})
            return
        request = json.loads(_read_line(connection))
        argv, env, cwd = list(request["argv"]), dict(request["env"]), str(request["cwd"])
        if argv[1:3] != ["-m", HOST_MODULE]:
            raise ValueError(f"not a replica host's command line: {argv[:3]}")
    except (OSError, ValueError, KeyError, TypeError) as error:
        _reply(connection, {"error": f"bad request: {error}"})
        return
    try:
        pid = _fork_host(listener, connection, argv, env, cwd)
    except OSError as error:  # no memory or processes left for a fork: the launcher starts the host itself
        _reply(connection, {"error": f"fork failed: {error}"})
        return
    _reply(connection, {"pid": pid})


def _fork_host(listener: socket.socket, connection: socket.socket, argv: list[str], env: dict, cwd: str) -> int:
    """The pid of a child that runs `argv` (`python -m workers.replica_host ...`), once its command
    line shows it: the child writes a byte when it has rewritten it, and an exec closes the pipe."""
    ready_read, ready_write = os.pipe()
    os.set_inheritable(ready_write, False)  # closed by an exec: the exec'd host's command line is its own
    pid = os.fork()
    if pid == 0:
        os.close(ready_read)
        listener.close()
        connection.close()
        _become_host(argv, env, cwd, ready_write)
    os.close(ready_write)
    try:
        select.select([ready_read], [], [], 10)
    finally:
        os.close(ready_read)
    return pid


def _become_host(argv: list[str], env: dict, cwd: str, ready_write: int) -> None:
    """Never returns: runs the host in this child and exits with its code."""
    code = 1
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        if not set_command_line(argv):
            os.execve(argv[0], argv, env)  # too long to show: a fresh interpreter instead
        os.write(ready_write, b"1")
        os.close(ready_write)
        _reseed()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.argv = [HOST_MODULE, *argv[3:]]
        from workers.replica_host import main

        code = main(argv[3:])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def set_command_line(argv: list[str]) -> bool:
    """Rewrite this process's command line (what /proc/self/cmdline and `ps` show) to `argv`, in place
    over the memory the kernel reads it from; False when it does not fit there."""
    try:
        fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end: fields 48 and 49 of stat
    except (OSError, IndexError, ValueError):
        return False
    encoded = b"".join(os.fsencode(part) + b"\0" for part in argv)
    if not start or len(encoded) > end - start:
        return False
    ctypes.memmove(start, encoded.ljust(end - start, b"\0"), end - start)
    return True


def _reseed() -> None:
    """A forked child starts with its zygote's random state: give it its own."""
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _peer_uid(connection: socket.socket) -> int:
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", credentials)[1]


def _read_line(connection: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            raise ValueError("request too large")
    return data


def _reply(connection: socket.socket, message: dict) -> None:
    try:
        connection.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass  # the launcher gave up waiting: it starts the host itself


def _reap() -> None:
    """Collect the hosts that exited (they are this process's children), and say how each ended."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        print(f"host zygote: host pid {pid} exited with code {os.waitstatus_to_exitcode(status)}",
              file=sys.stderr, flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--room", default="", help="spare bytes for the command lines of forked hosts")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is for the worker, which then exits
    started = time.monotonic()
    code = serve(args.socket, args.parent_pid)
    print(f"host zygote: exiting after {time.monotonic() - started:.0f} s (worker {args.parent_pid} gone)",
          file=sys.stderr, flush=True)  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main())
