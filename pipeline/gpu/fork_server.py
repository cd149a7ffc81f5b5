"""A fork server for profile workers (profile.fork_workers): one process imports torch, Dynamo, inductor and the
harness once, and every worker is a fork of it, so a worker is ready in the time its CUDA context takes instead of
a fresh interpreter's imports.

Why: 20 fresh workers importing torch, Dynamo and inductor at once on 16 host cores kept the H200 idle for the
first 16.5 s of every profile call (call 57: the first CUDA context appeared 16.5 s after the call started, 10 s
after the MPS daemon; 4% of a 7-minute call). PyTorch's DataLoader forks workers after torch is imported the same
way; what a fork must not follow is an initialised CUDA, and the server checks it never initialised it.

Protocol, over a Unix SEQPACKET socket pair (the server's end is the fd in its argv):
- server -> client, once: {"ready": true, "import_s": seconds} or {"failed": "<why>"} (an import failed, CUDA was initialised).
- client -> server: {"spawn": n, "env": {...}, "module": "pipeline.gpu.harness"} with three fds attached (the
  worker's stdin, stdout, stderr); the server answers {"spawned": n, "pid": p} or {"spawned": n, "error": "..."}.
- server -> client, whenever one of its workers exits: {"exit": pid, "rc": rc} (rc as subprocess gives it:
  negative for a signal), since only the server, their parent, can collect it.
A forked worker starts its own session (its process group is what the executor stops), takes the three fds as
0, 1 and 2, replaces its environment with the one sent (GPU, MPS folders, threads) and runs the module as
`__main__`, as `python -m` would. The server exits when the client's end closes; its workers run on until their
stdin closes. Stdlib only on the client side; the server imports what its argv names.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import IO

from pipeline.gpu.bytecode import compile_ahead_from_env

MAX_MESSAGE = 1 << 20  # a spawn request carries the worker's whole environment
READY_TIMEOUT_S = 300.0  # the server's imports on a cold machine, as a worker's own start-up allows


def _send(sock: socket.socket, msg: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(msg).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


# ---- the server process ------------------------------------------------------------------------------------------

def _become_worker(fds: list[int], env: dict[str, str], module: str, closing: list[int]) -> None:
    """In the forked child: never returns into the server's loop."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        for fd in closing:
            with contextlib.suppress(OSError):
                os.close(fd)
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [module]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:  # as the interpreter reports it: a message goes to stderr, with code 1
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the worker's own failure, reported as a fresh interpreter would
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exit": pid, "rc": os.waitstatus_to_exitcode(status)})


def serve(sock_fd: int, preload: list[str]) -> None:
    """The server's loop (`python -m pipeline.gpu.fork_server FD MODULE...`)."""
    sock = socket.socket(fileno=sock_fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the client stops the run; a terminal's Ctrl-C is its to handle
    # before the imports it speeds up, before any thread exists (it forks), with Ctrl-C ignored in its processes
    compiled = compile_ahead_from_env()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up fd gets a byte; the loop reaps
    # is_available() by NVML, never by initialising CUDA, if anything imported asks
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    t0 = time.perf_counter()
    try:
        for name in preload:
            __import__(name)
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            _send(sock, {"failed": "CUDA was initialised while importing " + ", ".join(preload)})
            return
    except BaseException as e:  # noqa: BLE001 - said to the client in one line; it starts workers itself then
        _send(sock, {"failed": f"importing {', '.join(preload)}: {type(e).__name__}: {e}"[:300]})
        return
    gc.collect()
    gc.freeze()  # what the imports made stays in shared pages: a collection in a worker does not copy them
    # torch's import leaves one idle native thread; forking then is what DataLoader does on every epoch
    warnings.filterwarnings("ignore", message=".*use of fork\\(\\) may lead to deadlocks.*")
    with contextlib.suppress(OSError):  # a client gone meanwhile: nothing to serve
        _send(sock, {"ready": True, "import_s": round(time.perf_counter() - t0, 2), "compile_ahead": compiled})
        _loop(sock, wake_r, wake_w)


def _loop(sock: socket.socket, wake_r: int, wake_w: int) -> None:
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
            _reap(sock)
        if sock not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
        except OSError:
            data, fds = b"", []
        if not data:
            return  # the client is gone
        msg = json.loads(data)
        try:
            pid = os.fork()
        except OSError as e:
            for fd in fds:
                os.close(fd)
            _send(sock, {"spawned": msg["spawn"], "error": f"fork failed: {e}"})
            continue
        if pid == 0:
            _become_worker(fds, msg["env"], msg["module"], [sock.fileno(), wake_r, wake_w])
        for fd in fds:
            os.close(fd)
        _send(sock, {"spawned": msg["spawn"], "pid": pid})


# ---- the client side ---------------------------------------------------------------------------------------------

class ForkedProc:
    """A worker forked by the server, with what the executor uses of subprocess.Popen: pid, stdin, stdout,
    returncode and wait(timeout)."""

    def __init__(self, server: ForkServer, pid: int, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.server, self.pid, self.stdin, self.stdout = server, pid, stdin, stdout
        self.args = [f"forked worker {pid}"]

    @property
    def returncode(self) -> int | None:
        return self.server.exit_code(self.pid)

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self.server.pump(0.5 if left is None else min(0.5, left))
        return self.returncode  # type: ignore[return-value]


class ForkServer:
    """The client: `start` it early (the imports take seconds), `wait_ready` for a problem line or None, `spawn`
    workers, `close` after the last worker is gone."""

    def __init__(self, env: dict[str, str], preload: list[str]) -> None:
        self.exits: dict[int, int] = {}
        self.problem: str | None = None
        self.ready = False
        self.started = time.monotonic()
        self.ready_s: float | None = None  # seconds from its start until it could fork
        self.import_s: float | None = None  # of which its imports
        self.compile_ahead: dict | None = None  # of which compiling bytecode ahead (pipeline.gpu.bytecode), when it did
        self.gone = False  # the server exited (or never started)
        self._serial = 0
        self._pending: dict[int, dict] = {}  # answers to spawn requests, by request number
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # its own output (a failed import's traceback); removed when it closes
        self._log = tempfile.NamedTemporaryFile(prefix="opsynth-fork-server-", suffix=".log", delete=False)  # noqa: SIM115
        try:
            self.proc = subprocess.Popen([sys.executable, "-P", "-m", __name__, str(theirs.fileno()), *preload],
                                         pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=self._log, env=env)
        except OSError as e:
            self.proc, self.gone = None, True
            self.problem = f"the fork server did not start ({type(e).__name__}: {e})"
        theirs.close()

    def _handle(self, msg: dict) -> None:
        if "exit" in msg:
            self.exits[int(msg["exit"])] = int(msg["rc"])
        elif "spawned" in msg:
            self._pending[int(msg["spawned"])] = msg
        elif msg.get("ready"):
            self.ready, self.ready_s = True, time.monotonic() - self.started
            self.import_s = msg.get("import_s")
            self.compile_ahead = msg.get("compile_ahead")
        elif "failed" in msg:
            self.problem = str(msg["failed"])

    def pump(self, timeout: float) -> bool:
        """Read what the server said within `timeout` seconds; False once it is gone."""
        if self.gone:
            return False
        end = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                return True
            try:
                data = self.sock.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                self._gone()
                return False
            self._handle(json.loads(data))
            timeout, end = 0.0, time.monotonic()  # take what else is queued, without waiting more

    def _gone(self) -> None:
        if not self.ready and self.problem is None:
            tail = self._log_tail()
            self.problem = "the fork server exited before it was ready" + (f": {tail}" if tail else "")
        self.ready, self.gone = False, True
        with contextlib.suppress(OSError):
            self.sock.close()

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            lines = [ln for ln in Path(self._log.name).read_text(errors="replace").splitlines() if ln.strip()]
            return lines[-1].strip()[:200] if lines else ""
        return ""

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> str | None:
        """None once the server can fork workers; else why not, in one line (the executor then starts fresh
        interpreters)."""
        end = time.monotonic() + timeout_s
        while not self.ready and self.problem is None:
            left = end - time.monotonic()
            if left <= 0:
                self.problem = f"the fork server was not ready after {timeout_s:g}s"
                break
            self.pump(min(1.0, left))
        return None if self.ready else self.problem

    def exit_code(self, pid: int) -> int | None:
        """The worker's exit code once the server reported it; after the server itself is gone, 1 for a worker that
        no longer exists (its status went with the server)."""
        if pid in self.exits:
            return self.exits[pid]
        if self.gone:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                self.exits[pid] = 1
                return 1
            except PermissionError:
                pass
        return None

    def spawn(self, env: dict[str, str], module: str, stderr: IO[bytes]) -> ForkedProc:
        """A worker running `module` with this environment, its stderr to `stderr`; raises OSError when the
        server cannot fork one (the caller starts a fresh interpreter instead)."""
        if self.wait_ready() is not None:
            raise OSError(self.problem)
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        self._serial += 1
        n = self._serial
        try:
            _send(self.sock, {"spawn": n, "env": env, "module": module}, [in_r, out_w, stderr.fileno()])
        except OSError:
            os.close(in_w)
            os.close(out_r)
            self._gone()
            raise
        finally:
            os.close(in_r)  # the worker's ends: the server holds its own copies now
            os.close(out_w)
        while n not in self._pending:
            if not self.pump(1.0):
                os.close(in_w)
                os.close(out_r)
                raise OSError(self.problem or "the fork server exited")
        answer = self._pending.pop(n)
        if "error" in answer:
            os.close(in_w)
            os.close(out_r)
            raise OSError(answer["error"])
        return ForkedProc(self, int(answer["pid"]), open(in_w, "wb"), open(out_r, "rb", buffering=0))  # noqa: SIM115

    def close(self) -> None:
        """Stop the server (after its workers: their exit codes come through it)."""
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.proc is not None and not self.ready and self.proc.poll() is None:
            self.proc.kill()  # still importing, so no worker of its own: no need to wait out the imports
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        with contextlib.suppress(OSError):
            os.unlink(self._log.name)


def _main(argv: list[str]) -> None:
    serve(int(argv[0]), argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the interpreter's teardown of torch's modules takes half a second and frees nothing a worker needs


if __name__ == "__main__":
    _main(sys.argv[1:])

