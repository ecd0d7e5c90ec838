"""LLVM in its own process (codegen/jit_server.py) and code loaded by dlopen (runtime/loader.py).

The process that runs TensorFlow never loads LLVM: checked in a fresh process
through /proc/self/maps.  A server that dies is a compile error (auto mode then
falls back to TensorFlow) and the next compile starts a new one; without a
system linker, or with ``--tfjit_compile_in_process``, LLVM runs in-process.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from oracle import assert_matches
from tfjit import config, pipeline
from tfjit.codegen import jit_server, llvm_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fn(scale):
    # a matmul (the op library's kernel, a dependency of the loaded code) and a fused loop
    return lambda a, b: tf.nn.relu(tf.matmul(a, b) * scale + 1.0)


def _inputs():
    rng = np.random.default_rng(5)
    return [tf.constant(rng.standard_normal((6, 5), dtype=np.float32)),
            tf.constant(rng.standard_normal((5, 7), dtype=np.float32))]


def _check(fn):
    xs = _inputs()
    f = tfjit.function(fn, jit_compile=True)
    assert_matches(f(*xs).numpy(), tf.function(fn)(*xs).numpy(), rtol=1e-5, atol=1e-5)
    return f.compiled(*xs).code


FRESH = '''
import numpy as np, tensorflow as tf, tfjit, sys
f = tfjit.function(lambda a, b: tf.reduce_sum(tf.matmul(a, b) + 1.0, axis=1), jit_compile=True)
a = np.arange(12, dtype=np.float32).reshape(3, 4)
got = f(a, a.T).numpy()
np.testing.assert_allclose(got, tf.reduce_sum(tf.matmul(a, a.T) + 1.0, axis=1).numpy(), rtol=1e-6)
mapped = sorted({line.split()[-1] for line in open("/proc/self/maps") if "llvm" in line.lower()})
print("MAPPED", mapped, "BINDING", "llvmlite.binding" in sys.modules)
'''


def test_the_tensorflow_process_never_loads_llvm():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TFJIT_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MAPPED [] BINDING False" in proc.stdout, proc.stdout


def test_code_is_a_loaded_shared_library():
    code = _check(_fn(2.0))
    assert code.engine.__class__.__name__ == "CDLL"
    assert ".text" in code.asm()          # the server prints assembly too


def test_a_server_that_dies_is_an_error_and_the_next_compile_starts_another():
    client = llvm_cpu.server(pipeline.jit_compiler())
    _check(_fn(3.0))
    first = client.pid
    with pytest.raises(jit_server.ServerDied, match=r"ended \(exit code 7\) while running 'exit'"):
        client.request("exit", 7)
    code = _check(_fn(4.0))               # a new server
    assert client.pid not in (None, first)
    os.kill(client.pid, signal.SIGKILL)   # killed between compiles: noticed before sending
    # the client's pid reads None once its poll() has seen the death (and reaped it):
    # reading the pid again for waitpid raced with that (CI, 2026-12-05: TypeError)
    deadline = time.monotonic() + 60
    while client.pid is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.pid is None
    _check(_fn(5.0))


def test_a_server_crash_is_a_must_compile_error_and_an_auto_mode_fallback(monkeypatch, caplog):
    original = jit_server.Client.request

    def request(self, *message):
        if message[0] == "compile":
            raise jit_server.ServerDied("tfjit's LLVM compile server ended (signal 11) while "
                                        "running 'compile'")
        return original(self, *message)
    monkeypatch.setattr(jit_server.Client, "request", request)
    xs = _inputs()
    with pytest.raises(Exception, match="signal 11"):
        tfjit.function(_fn(6.0), jit_compile=True)(*xs)
    with caplog.at_level(logging.WARNING, logger="tfjit"):
        got = tfjit.function(_fn(7.0), jit_compile=None)(*xs)     # auto mode: TF runs it
    assert any("signal 11" in r.getMessage() for r in caplog.records), caplog.text
    assert_matches(got.numpy(), tf.function(_fn(7.0))(*xs).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("why", ["flag", "no linker"])
def test_llvm_in_process(why, monkeypatch):
    from tfjit.runtime import loader
    monkeypatch.setattr(llvm_cpu, "_client", None)
    if why == "flag":
        monkeypatch.setattr(config.flags(), "tfjit_compile_in_process", True)
        assert pipeline.jit_target().compiler.in_process     # the Target carries the choice
    else:
        monkeypatch.setattr(loader, "linker", lambda: None)
    code = _check(_fn(8.0 if why == "flag" else 9.0))
    assert code.engine.__class__.__name__ != "CDLL"       # MCJIT's engine
    assert llvm_cpu.target_env(pipeline.jit_compiler())["loader"] == "mcjit"


def test_code_that_cannot_be_loaded_moves_llvm_into_this_process(monkeypatch, caplog):
    # e.g. a /tmp mounted noexec: said once, and compiling goes on in-process
    from tfjit.runtime import loader

    def refuse(*args, **kwargs):
        raise loader.LinkError("loading compiled code failed: failed to map segment")
    monkeypatch.setattr(llvm_cpu, "_client", llvm_cpu.server(pipeline.jit_compiler()))
    monkeypatch.setattr(loader, "load", refuse)
    with caplog.at_level(logging.WARNING, logger="tfjit"):
        code = _check(_fn(10.0))
    assert code.engine.__class__.__name__ != "CDLL"
    assert "failed to map segment; LLVM runs in this process from now on" in caplog.text
    assert llvm_cpu.server(pipeline.jit_compiler()) is None
    _check(_fn(11.0))


def test_an_idle_server_leaves_and_the_next_request_starts_another():
    import time
    client = jit_server.Client(idle_seconds=0.3)
    try:
        assert client.request("env")["triple"]
        time.sleep(1.0)                       # idle: it exits by itself
        assert client.pid is None and client._proc.poll() == jit_server.IDLE_EXIT
        assert client.request("env")["triple"] and client.starts == 2
        # a server that leaves idle just as a request comes: the request is sent again,
        # once (here the request itself makes every server leave so)
        with pytest.raises(jit_server.ServerDied, match="exit code 75"):
            client.request("exit", jit_server.IDLE_EXIT)
        assert client.starts == 3
    finally:
        client.close()


def test_a_stopped_server_is_a_timeout_not_a_hang_and_is_replaced():
    client = jit_server.Client(timeout=1.5)
    try:
        client.request("env")
        stopped = client.pid
        os.kill(stopped, signal.SIGSTOP)
        with pytest.raises(jit_server.ServerTimeout, match=r"did not answer 'env' within 1.5 s"):
            client.request("env")
        assert not os.path.exists(f"/proc/{stopped}") or \
            open(f"/proc/{stopped}/stat").read().split()[2] in "ZX"    # killed, not left stopped
        assert client.request("env")["triple"] and client.pid not in (None, stopped)
    finally:
        client.close()


def test_a_stopped_server_is_an_auto_mode_fallback(monkeypatch, caplog):
    client = llvm_cpu.server(pipeline.jit_compiler())
    _check(_fn(21.0))            # scales no other test compiles: nothing cached
    monkeypatch.setattr(client, "timeout", 1.0)
    os.kill(client.pid, signal.SIGSTOP)
    xs = _inputs()
    with caplog.at_level(logging.WARNING, logger="tfjit"):
        got = tfjit.function(_fn(22.0), jit_compile=None)(*xs)     # auto mode: TF runs it
    assert any("did not answer" in r.getMessage() for r in caplog.records), caplog.text
    assert_matches(got.numpy(), tf.function(_fn(22.0))(*xs).numpy(), rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(client, "timeout", 300.0)
    _check(_fn(23.0))                       # a new server compiles the next one


def test_what_the_server_prints_does_not_reach_the_protocol(tmp_path, monkeypatch, capfd):
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nprint('hello from sitecustomize ' * 100)\n"
        "sys.stdout.flush()\nprint('and on stderr', file=sys.stderr)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    client = jit_server.Client()
    try:
        assert client.request("env")["triple"]
        assert client.request("asm", "define i32 @f() {\n  ret i32 7\n}\n").count("ret") >= 1
    finally:
        client.close()
    assert "hello from sitecustomize" in capfd.readouterr().err      # logs, on stderr


def test_the_compile_timeout_flag():
    assert config.parse_flags("--tfjit_compile_timeout=2.5").tfjit_compile_timeout == 2.5
    for bad in ("0", "-1", "soon"):
        with pytest.raises(config.FlagError, match="expects a positive number"):
            config.parse_flags(f"--tfjit_compile_timeout={bad}")


def test_a_client_gone_mid_request_ends_the_server_quietly():
    """A program may exit while its optimised tier is still being built
    (codegen/tiering.py): the server's reply then finds no reader, and the server ends
    without a traceback (it would print into the user's terminal)."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(write_fd, "wb") as w:
        jit_server._send(w, ("no-such-request",))     # answered with an error reply

    class Gone:
        def write(self, data):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

    with os.fdopen(read_fd, "rb") as r:
        assert jit_server._serve(r, Gone(), 5.0) == 0


def test_a_client_that_exits_with_a_reply_unread_ends_the_server_quietly():
    """A client that ends (an uncaught exception in the user's program) with one of
    the server's replies unread in its socket resets the connection: the server's next
    read fails with ECONNRESET, not EOF, and must end as quietly."""
    import socket
    client, server = socket.socketpair()
    with server.makefile("wb") as out:
        jit_server._send(out, ("ok", None))        # a reply the client never reads
    client.close()
    with server.makefile("rb") as inp, server.makefile("wb") as out:
        assert jit_server._serve(inp, out, 5.0) == 0
    server.close()
