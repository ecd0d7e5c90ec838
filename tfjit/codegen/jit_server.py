"""LLVM in a process of its own: optimisation and code generation for the JIT.

Why: LLVM is about 80 MB of the JIT process's peak memory (its library's pages,
38 MB of them touched just to set up the target, more while generating code),
TensorFlow programs often run close to their memory limit, and an LLVM abort
on some unusual IR would end the user's program.  So the process that runs
TensorFlow never loads LLVM: it builds the LLVM IR text (llvmlite.ir is plain
Python), sends it here, gets back a position-independent object file and the
optimised IR, links the object into a shared library with the system linker
and loads that (``runtime/loader.py``).  A crash here is a compile error there
(auto mode falls back; must-compile reports it), and the next compile starts
a new server.

Protocol: length-prefixed pickles on a socket pair of their own (the server's
end is the descriptor named by ``--fd``), one request and one reply at a time;
the server's stdin is /dev/null and its stdout and stderr are this process's
stderr, for logs: whatever prints there (a ``sitecustomize``, a library) never
reaches the replies.  Every request has a bounded wait (``timeout``,
``--tfjit_compile_timeout``): a server that does not answer in time (stopped,
hung) is killed and the request fails with ``ServerTimeout``.  Requests: ``("env",)`` -> ``{"triple", "data_layout",
"cpu", "llvm"}``; ``("compile", ir_text[, pipeline])`` -> ``(object bytes, optimised IR)``
(``pipeline``: a name of ``llvm_target.PIPELINES``, "default" when not given);
``("asm", optimised_ir)`` -> assembly text; ``("ptx", ir_text, arch)`` -> (PTX, optimised
IR) for an NVIDIA GPU (codegen/nvptx.py).  A reply is ``("ok", value)`` or
``("error", message)``.  The server imports llvmlite and ``llvm_target`` (not
TensorFlow, nor the rest of the compiler: it is up in about 0.1 s); it ends with
its client's process, or after ``IDLE_SECONDS`` without a request (the next
request starts a new one).
"""
from __future__ import annotations

import os
import pickle
import select
import socket
import struct
import subprocess
import sys
import threading

_HEADER = struct.Struct("<Q")


def _send(stream, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream):
    """The next message, or raises EOFError when the other side is gone."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    size, = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


class ServerDied(RuntimeError):
    """The compile server ended while compiling (an LLVM crash, or it was killed)."""


class ServerTimeout(ServerDied):
    """The compile server did not answer within the timeout (it was stopped or hung)."""


# A server idle this long exits (its ~100 MB go back; a model compiles at its start, then
# trains for hours), and the next request starts a new one (~0.1 s).
IDLE_SECONDS = 60.0
IDLE_EXIT = 75          # the exit code of a server that left because it was idle


class Client:
    """The JIT process's end: starts the server on first use and again after it ended."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS, timeout: float = 300.0,
                 nice: int = 0):
        self._lock = threading.Lock()
        self._proc = None
        self._sock = None         # this end of the socket pair; _file reads and writes it
        self._file = None
        self._pid = None          # the process that started the server (a fork needs its own)
        self._env = None
        self.idle_seconds = idle_seconds
        self.timeout = timeout    # seconds a request may wait for its reply
        self.starts = 0           # servers started so far
        self.nice = nice          # the server's niceness: >0 for work nobody waits for

    def _start(self):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)    # the server imports tfjit from where this process does
        env.pop("TFJIT_FLAGS", None)   # it is no user program: no auto mode, no hook warning
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tfjit.codegen.jit_server", str(self.idle_seconds),
                 "--fd", str(theirs.fileno()), "--nice", str(self.nice)],
                stdin=subprocess.DEVNULL, stdout=2, pass_fds=(theirs.fileno(),),
                env=env)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock, self._file = ours, ours.makefile("rwb")
        self._pid = os.getpid()
        self.starts += 1

    def _stop(self, kill: bool) -> int:
        """Ends this side's connection (killing the server first when ``kill``); the
        server's exit code."""
        if kill:
            self._proc.kill()
        for f in (self._file, self._sock):
            try:
                f.close()
            except OSError:
                pass
        code = self._proc.wait()
        self._proc = self._file = self._sock = None
        return code

    def _running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self._pid == os.getpid()

    def start(self) -> None:
        """Starts the server unless it runs (returns at once: it starts up meanwhile)."""
        with self._lock:
            if not self._running():
                self._start()

    def request(self, *message):
        with self._lock:
            for attempt in (1, 2):
                if not self._running():
                    self._start()
                try:
                    self._sock.settimeout(self.timeout)
                    _send(self._file, message)
                    status, value = _receive(self._file)
                    break
                except TimeoutError:
                    self._stop(kill=True)
                    raise ServerTimeout(f"tfjit's LLVM compile server did not answer {message[0]!r} "
                                        f"within {self.timeout:g} s (--tfjit_compile_timeout); it "
                                        "was stopped, and the next compile starts a new one") from None
                except (EOFError, OSError):
                    code = self._stop(kill=False)
                    if code == IDLE_EXIT and attempt == 1:   # it left as the request came
                        continue
                    how = f"signal {-code}" if code < 0 else f"exit code {code}"
                    raise ServerDied(f"tfjit's LLVM compile server ended ({how}) while running "
                                     f"{message[0]!r}; the next compile starts a new one") from None
        if status == "error":
            raise RuntimeError(value)
        return value

    def env(self) -> dict:
        """Triple, data layout, CPU fingerprint and LLVM version of the server's target."""
        if self._env is None:
            self._env = self.request("env")
        return self._env

    def close(self) -> None:
        with self._lock:
            if self._running():
                self._stop(kill=False)     # the server sees end-of-file and exits
            self._proc = None

    @property
    def pid(self) -> int | None:
        """The server's process id while one runs (for tests)."""
        return self._proc.pid if self._running() else None


def _serve(inp, out, idle_seconds: float) -> int:
    """Answers requests until the client closes the pipe or is gone when a reply is sent
    (returns 0), or none comes for ``idle_seconds`` (returns IDLE_EXIT)."""
    from tfjit.codegen import llvm_target       # LLVM, and nothing else of the compiler
    llvm = llvm_target.binding()
    tm = llvm_target.shared_object_target_machine()

    def handle(kind, *args):
        if kind == "env":
            return llvm_target.env(tm)
        if kind == "compile":
            pipeline = args[1] if len(args) > 1 else "default"
            machine = llvm_target.shared_object_target_machine(
                llvm_target.codegen_level(pipeline))
            mod = llvm.parse_assembly(args[0])
            mod.verify()
            llvm_target.optimise(mod, machine, pipeline)
            return machine.emit_object(mod), str(mod)
        if kind == "asm":
            llvm_target.use_options()      # a PTX request since may have set others
            return tm.emit_assembly(llvm.parse_assembly(args[0]))
        if kind == "ptx":
            return llvm_target.emit_ptx(*args)
        if kind == "exit":                 # tests: a server that dies mid-request
            os._exit(int(args[0]))
        raise ValueError(f"unknown request {kind!r}")

    while True:
        ready, _, _ = select.select([inp], [], [], idle_seconds)
        if not ready:
            return IDLE_EXIT
        try:
            message = _receive(inp)
        except (EOFError, ConnectionResetError):
            # the client is gone: a reset, not an EOF, when it exited (an uncaught
            # exception included) with a reply of ours still unread in its socket
            return 0
        try:
            reply = ("ok", handle(*message))
        except Exception as e:    # noqa: BLE001 - every failure goes back as a reply
            reply = ("error", f"{type(e).__name__}: {e}")
        try:
            _send(out, reply)
        except (BrokenPipeError, ConnectionResetError):
            # the client has exited mid-request: a program that ends while the
            # optimised tier of its code is still being built (codegen/tiering.py)
            return 0


if __name__ == "__main__":
    channel = socket.socket(fileno=int(sys.argv[sys.argv.index("--fd") + 1]))
    if "--nice" in sys.argv and int(sys.argv[sys.argv.index("--nice") + 1]) > 0:
        os.nice(int(sys.argv[sys.argv.index("--nice") + 1]))
    sys.exit(_serve(channel.makefile("rb"), channel.makefile("wb"), float(sys.argv[1])))
