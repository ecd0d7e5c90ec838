"""TfjitLaunch op: builds against the installed TF and runs llvmlite kernels.

The kernels here are written with llvmlite directly (no tfjit compiler), with
the ABI signature ``void fn(void** bufs, int64 row_begin, int64 row_end)``.
"""
import os
import re
import subprocess
import sys
import threading

import llvmlite.binding as llvm
import numpy as np
import pytest
import tensorflow as tf
from llvmlite import ir

from tfjit.runtime import build, launch

F32, I32, I64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
VOIDPP = ir.IntType(8).as_pointer().as_pointer()
DT_FLOAT, DT_INT32, DT_INT64 = (d.as_datatype_enum for d in (tf.float32, tf.int32, tf.int64))


# -- Kernels written with llvmlite ------------------------------------------

class Rows:
    """What a row kernel's body sees: the builder, buffer access, the row index."""

    def __init__(self, builder, fn):
        self.b = builder
        self.bufs, self.begin, self.end = fn.args
        self._ptrs = {}

    def ptr(self, k, ty):
        """bufs[k] as ``ty*``, loaded once in the entry block."""
        if (k, ty) not in self._ptrs:
            with self.b.goto_entry_block():
                slot = self.b.load(self.b.gep(self.bufs, [I64(k)]))
                self._ptrs[k, ty] = self.b.bitcast(slot, ty.as_pointer())
        return self._ptrs[k, ty]

    def load(self, k, ty, i):
        return self.b.load(self.b.gep(self.ptr(k, ty), [i]))

    def store(self, k, ty, i, value):
        self.b.store(value, self.b.gep(self.ptr(k, ty), [i]))

    def fail(self, status_slot, code):
        """Stores ``code`` into *status and returns from the kernel."""
        self.store(status_slot, I32, I64(0), I32(code))
        self.b.ret_void()


def add_row_kernel(module, name, body):
    """Defines ``name`` running ``body(rows, i)`` for i in [row_begin, row_end)."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [VOIDPP, I64, I64]), name)
    entry, head, loop, done = (fn.append_basic_block(n) for n in ("entry", "head", "loop", "done"))
    b = ir.IRBuilder(entry)
    rows = Rows(b, fn)
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(rows.begin, entry)
    b.cbranch(b.icmp_signed("<", i, rows.end), loop, done)
    b.position_at_end(loop)
    body(rows, i)
    i.add_incoming(b.add(i, I64(1)), b.block)
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()


class Jit:
    def __init__(self):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.tm = llvm.Target.from_default_triple().create_target_machine(opt=2)

    def compile(self, kernels):
        """kernels: {name: body}; returns (engine, {name: address})."""
        module = ir.Module(name="test")
        module.triple = llvm.get_process_triple()
        for name, body in kernels.items():
            add_row_kernel(module, name, body)
        parsed = llvm.parse_assembly(str(module))
        pto = llvm.create_pipeline_tuning_options(speed_level=2)
        passes = llvm.create_pass_builder(self.tm, pto)
        passes.getModulePassManager().run(parsed, passes)
        engine = llvm.create_mcjit_compiler(parsed, self.tm)
        engine.finalize_object()
        return engine, {name: engine.get_function_address(name) for name in kernels}


def add_f32(r, i):                  # bufs: a, b, out
    r.store(2, F32, i, r.b.fadd(r.load(0, F32, i), r.load(1, F32, i)))


def div_i32(r, i):                  # bufs: a, b, out, status
    denominator = r.load(1, I32, i)
    with r.b.if_then(r.b.icmp_signed("==", denominator, I32(0))):
        r.fail(3, 1)
    r.store(2, I32, i, r.b.sdiv(r.load(0, I32, i), denominator))


def record_begin(r, i):             # bufs: x, out_i64 = row_begin of the shard
    r.store(1, I64, i, r.begin)


def double_into_temp(r, i):         # bufs: a, out, same, temp, status
    r.store(3, F32, i, r.b.fmul(r.load(0, F32, i), F32(2.0)))


def temp_plus_one(r, i):
    address = r.b.ptrtoint(r.ptr(3, F32), I64)
    with r.b.if_then(r.b.icmp_unsigned("!=", r.b.and_(address, I64(63)), I64(0))):
        r.fail(4, 1)
    r.store(1, F32, i, r.b.fadd(r.load(3, F32, i), F32(1.0)))


# -- Fixtures ---------------------------------------------------------------

class Compiler:
    """The test's compile callback: cluster name -> factory(signature)."""

    def __init__(self):
        self.factories = {}
        self.calls = []
        self.lock = threading.Lock()

    def __call__(self, cluster, cluster_def, signature, executions=0, can_fall_back=False):
        with self.lock:
            self.calls.append((cluster, cluster_def, signature))
        return self.factories[cluster](signature)

    def count(self, cluster):
        with self.lock:
            return sum(1 for c in self.calls if c[0] == cluster)


@pytest.fixture(scope="module")
def jit():
    return Jit()


@pytest.fixture(scope="module")
def compiler():
    """This module's own compile callback; tfjit's compile service gets the op back after."""
    launch.load()
    compiler = Compiler()
    launch.set_compile_callback(compiler)
    yield compiler
    from tfjit.api.service import SERVICE
    if SERVICE.installed:
        launch.set_compile_callback(SERVICE.on_miss)


def elementwise_exe(engine, fn, signature, *, out_dtype=DT_FLOAT, messages=(), cost=1, **kw):
    dtypes = [d for d, _ in signature]
    dims = signature[0][1]
    return launch.make_executable(
        input_dtypes=dtypes, output_dtypes=[out_dtype], output_shapes=[dims],
        output_source=[-1], output_forward=kw.get("forward", [-1]), temp_bytes=[],
        steps=[(fn, int(np.prod(dims)), cost)], messages=list(messages), keepalive=engine)


@pytest.fixture(scope="module")
def add_cluster(jit, compiler):
    engine, fns = jit.compile({"add": add_f32})
    compiler.factories["add"] = lambda sig: elementwise_exe(engine, fns["add"], sig)
    return fns["add"], engine


def run_add(a, b, cluster="add"):
    return launch.launch([a, b], cluster=cluster, cluster_def=b"def:" + cluster.encode(),
                         Tout=[tf.float32], output_shapes=[[None] * len(np.shape(a))])[0]


# -- Tests ------------------------------------------------------------------

def test_eager_add_and_cache(compiler, add_cluster):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 5), np.float32), rng.standard_normal((3, 5), np.float32)
    before, calls = launch.stats(), compiler.count("add")
    np.testing.assert_array_equal(run_add(a, b).numpy(), a + b)
    assert compiler.count("add") == calls + 1
    assert compiler.calls[-1][1] == b"def:add"
    assert compiler.calls[-1][2] == [(DT_FLOAT, (3, 5)), (DT_FLOAT, (3, 5))]
    np.testing.assert_array_equal(run_add(b, a).numpy(), a + b)
    assert compiler.count("add") == calls + 1          # same shapes: cache hit
    np.testing.assert_array_equal(run_add(a[:2], b[:2]).numpy(), a[:2] + b[:2])
    assert compiler.count("add") == calls + 2          # new shape: compiled
    after = launch.stats()
    assert after["misses"] - before["misses"] == 2 and after["hits"] - before["hits"] == 1
    empty = np.zeros((0, 5), np.float32)
    assert run_add(empty, empty).shape == (0, 5)        # rows == 0: no step runs


def test_tf_function_with_unknown_dims(compiler, add_cluster):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)] * 2)
    def f(a, b):
        out = run_add(a * 2.0, b, cluster="add_fn")
        assert out.shape.as_list() == [None]
        return out

    fn, engine = add_cluster        # out may reuse a's buffer (a * 2.0 is a temporary)
    compiler.factories["add_fn"] = lambda sig: elementwise_exe(engine, fn, sig, forward=[0])
    for n in (7, 1000, 7):
        a, b = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
        np.testing.assert_array_equal(f(a, b).numpy(), 2 * a + b)
    assert compiler.count("add_fn") == 2


def test_session_run(compiler, add_cluster):
    graph = tf.Graph()
    with graph.as_default():
        a = tf.compat.v1.placeholder(tf.float32, [None])
        out = run_add(a, a, cluster="add_session")
    compiler.factories["add_session"] = compiler.factories["add"]
    with tf.compat.v1.Session(graph=graph) as sess:
        np.testing.assert_array_equal(sess.run(out, {a: [1.0, 2.5]}), [2.0, 5.0])


def test_kernel_error_status(jit, compiler):
    engine, fns = jit.compile({"div": div_i32})
    compiler.factories["div"] = lambda sig: elementwise_exe(
        engine, fns["div"], sig, out_dtype=DT_INT32, messages=["integer division by zero"])
    a, b = np.array([6, 9, 4], np.int32), np.array([3, 3, 2], np.int32)
    run = lambda a, b: launch.launch([a, b], cluster="div", cluster_def=b"", Tout=[tf.int32],
                                     output_shapes=[[None]])[0]
    np.testing.assert_array_equal(run(a, b).numpy(), [2, 3, 2])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"integer division by zero \(in tfjit cluster div\)"):
        run(a, np.array([3, 0, 2], np.int32))


def test_callback_errors_become_invalid_argument(compiler, add_cluster):
    def boom(signature):
        raise ValueError("cannot lower op Foo")

    compiler.factories["boom"] = boom
    compiler.factories["not_exe"] = lambda sig: 42
    x = np.ones(3, np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="ValueError: cannot lower op Foo"):
        run_add(x, x, cluster="boom")
    with pytest.raises(tf.errors.InvalidArgumentError, match="TypeError: compile callback returned int"):
        run_add(x, x, cluster="not_exe")
    with pytest.raises(tf.errors.InvalidArgumentError, match="KeyError: 'unknown'"):
        run_add(x, x, cluster="unknown")
    np.testing.assert_array_equal(run_add(x, x).numpy(), 2 * x)   # still usable


def test_bad_executables_are_rejected(compiler, add_cluster):
    fn, engine = add_cluster
    x = np.ones(4, np.float32)
    make = lambda **kw: launch.make_executable(**{
        "input_dtypes": [DT_FLOAT] * 2, "output_dtypes": [DT_FLOAT], "output_shapes": [(4,)],
        "output_source": [-1], "output_forward": [-1], "temp_bytes": [],
        "steps": [], "messages": [], **kw})
    compiler.factories["huge"] = lambda sig: make(output_shapes=[(1 << 40, 1 << 40)])
    compiler.factories["one_input"] = lambda sig: make(input_dtypes=[DT_FLOAT])
    compiler.factories["int_out"] = lambda sig: make(output_dtypes=[DT_INT32])
    with pytest.raises(tf.errors.InvalidArgumentError, match="invalid shape for output 0"):
        run_add(x, x, cluster="huge")
    with pytest.raises(tf.errors.InvalidArgumentError, match="cluster one_input has 1 inputs"):
        run_add(x, x, cluster="one_input")
    with pytest.raises(tf.errors.InvalidArgumentError, match="output 0 is int32, Tout has float"):
        run_add(x, x, cluster="int_out")
    with pytest.raises(ValueError):
        make(output_source=[2])


def test_no_callback(compiler, add_cluster):
    launch.set_compile_callback(None)
    try:
        x = np.ones(2, np.float32)
        with pytest.raises(tf.errors.FailedPreconditionError, match="import tfjit first"):
            run_add(x, x, cluster="nobody_home")
    finally:
        launch.set_compile_callback(compiler)


def test_temps_steps_and_source_outputs(jit, compiler):
    engine, fns = jit.compile({"double": double_into_temp, "plus1": temp_plus_one})

    def factory(signature):
        (dtype, dims), = signature
        n = int(np.prod(dims))
        return launch.make_executable(
            input_dtypes=[DT_FLOAT], output_dtypes=[DT_FLOAT, DT_FLOAT],
            output_shapes=[dims, dims], output_source=[-1, 0], output_forward=[0, -1],
            temp_bytes=[4 * n], steps=[(fns["double"], n, 1), (fns["plus1"], n, 1)],
            messages=["temp buffer misaligned"], keepalive=engine)

    compiler.factories["two_steps"] = factory
    a = np.linspace(-1, 1, 3000, dtype=np.float32).reshape(30, 100)
    out, same = launch.launch([a], cluster="two_steps", cluster_def=b"",
                              Tout=[tf.float32, tf.float32], output_shapes=[[30, 100]] * 2)
    np.testing.assert_array_equal(out.numpy(), 2 * a + 1)
    np.testing.assert_array_equal(same.numpy(), a)


def test_sharding_splits_rows(jit, compiler):
    engine, fns = jit.compile({"record": record_begin})
    compiler.factories["record"] = lambda sig: elementwise_exe(
        engine, fns["record"], sig, out_dtype=DT_INT64, cost=1000)
    rows = 1 << 20
    out = launch.launch([np.zeros(rows, np.float32)], cluster="record", cluster_def=b"",
                        Tout=[tf.int64], output_shapes=[[rows]])[0].numpy()
    begins = np.unique(out)
    assert begins[0] == 0 and np.all(out[begins] == begins)     # each shard starts at its begin
    assert np.all(np.diff(out) >= 0) and np.all(out <= np.arange(rows))
    if (os.cpu_count() or 1) > 1:
        assert len(begins) > 1, "a 1M-row step with cost 1000/row was not sharded"


def record_block(r, i):             # bufs: x (int64 row numbers), out: [row_begin, x + 1]
    r.store(1, I64, r.b.mul(i, I64(2)), r.begin)
    r.store(1, I64, r.b.add(r.b.mul(i, I64(2)), I64(1)), r.b.add(r.load(0, I64, i), I64(1)))


# parallel.cc's split of a step (RunSplit): inline below INLINE_COST cycles, else blocks of at
# least BLOCK_COST cycles (and at most four per thread)
INLINE_COST, BLOCK_COST = 50000, 20000


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_split_steps_pinned_to_one_core_run_every_row_once():
    """Pinned to one core with a 2-thread pool, every helper that RunSplit wakes starts on
    the caller's core, so each wakes one more (parallel.cc Help): the split-step test
    below, run so, must still find every row run exactly once in contiguous blocks."""
    cpu = min(os.sched_getaffinity(0))
    env = dict(os.environ, TF_NUM_INTRAOP_THREADS="2", TF_NUM_INTEROP_THREADS="2")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
         "-k", "a_split_step_runs_every_row_once"], env=env, capture_output=True, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), timeout=600,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert run.returncode == 0 and re.search(r"\b7 passed", run.stdout), \
        run.stdout[-3000:] + run.stderr[-2000:]


@pytest.mark.parametrize("rows,cost", [(49, 1000), (50, 1000), (97, 1000), (1 << 16, 1),
                                       (3, 10 ** 6), (7919, 25), (1 << 20, 1000)])
def test_a_split_step_runs_every_row_once_in_contiguous_blocks(jit, compiler, rows, cost):
    """Every row runs exactly once, in equal contiguous blocks (sizes differing by at
    most one) whose number follows the step's estimated cost."""
    engine, fns = jit.compile({"blocks": record_block})
    compiler.factories[f"blocks_{rows}_{cost}"] = lambda sig: launch.make_executable(
        input_dtypes=[DT_INT64], output_dtypes=[DT_INT64], output_shapes=[[rows, 2]],
        output_source=[-1], output_forward=[-1], temp_bytes=[],
        steps=[(fns["blocks"], rows, cost)], messages=[], keepalive=engine)
    x = np.arange(rows, dtype=np.int64)
    out = launch.launch([x], cluster=f"blocks_{rows}_{cost}", cluster_def=b"", Tout=[tf.int64],
                        output_shapes=[[rows, 2]])[0].numpy()
    np.testing.assert_array_equal(out[:, 1], x + 1)              # each row ran
    begins = out[:, 0]
    starts = np.unique(begins)
    assert starts[0] == 0 and np.all(begins[starts] == starts)  # contiguous blocks
    sizes = np.diff(np.append(starts, rows))
    assert sizes.max() - sizes.min() <= 1, sizes
    if rows * cost < INLINE_COST:
        assert len(starts) == 1
    else:
        assert len(starts) <= max(1, rows // max(1, BLOCK_COST // cost))
        if (os.cpu_count() or 1) > 1:
            assert len(starts) > 1, "a step of at least INLINE_COST cycles was not split"


def test_threads_with_different_shapes(compiler, add_cluster):
    compiler.factories["add_mt"] = compiler.factories["add"]
    barrier, errors = threading.Barrier(4), []

    def worker(n):
        try:
            a, b = np.full(n, n, np.float32), np.arange(n, dtype=np.float32)
            barrier.wait()
            for _ in range(25):
                np.testing.assert_array_equal(run_add(a, b, cluster="add_mt").numpy(), a + b)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in (1, 17, 4096, 300_000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert compiler.count("add_mt") == 4


def test_concurrent_misses_on_one_key(compiler, add_cluster):
    compiler.factories["add_race"] = compiler.factories["add"]
    barrier, results = threading.Barrier(4), []
    a = np.arange(1000, dtype=np.float32)

    def worker():
        barrier.wait()
        results.append(run_add(a, a, cluster="add_race").numpy())

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(np.array_equal(r, 2 * a) for r in results)
    assert 1 <= compiler.count("add_race") <= 4


def test_build_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(build.BuildError, match=r"no C\+\+ compiler \(g\+\+/c\+\+\) found"):
        build.op_library_path(str(tmp_path / "ops"), prebuilt=False)   # (an editable install has one)
    monkeypatch.undo()
    bad = tmp_path / "bad" / "bad.cc"
    bad.parent.mkdir()
    bad.write_text("int f() { return not_declared; }\n")
    with pytest.raises(build.BuildError, match="not_declared"):
        build.compile_library(build.find_compiler(), [str(bad)], str(bad.parent / "bad.so"),
                              ["-shared", "-fPIC"], [])
    assert [p.name for p in bad.parent.iterdir()] == ["bad.cc"]   # no temp file left behind


# -- the ABI handshake (runtime/abi.py, abi.h) --------------------------------------------

def _layout_library(tmp_path, body: str) -> str:
    src, lib = tmp_path / "layout.cc", tmp_path / "liblayout.so"
    src.write_text('#include <cstdint>\nextern "C" void TfjitAbiLayout(int64_t* out) {' + body + '}\n')
    import subprocess
    subprocess.run([build.find_compiler(), "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return str(lib)


def test_the_loaded_library_has_this_tfjits_abi_layout():
    import ctypes
    from tfjit.runtime import abi
    launch.load()
    out = (ctypes.c_int64 * 7)()
    launch._lib().c.TfjitAbiLayout(out)
    assert tuple(out) == abi.layout()
    assert abi.layout()[2] == abi.STATUS_BYTES == 64 and abi.layout()[1] == abi.ALIGN


@pytest.mark.parametrize("body, what", [
    ("for (int k = 0; k < 7; ++k) out[k] = 0;", "another layout"),
    ("", "a library that writes nothing"),
])
def test_a_library_with_another_abi_layout_is_refused(tmp_path, body, what):
    import ctypes
    from tfjit.runtime import abi
    path = _layout_library(tmp_path, body)
    with pytest.raises(abi.AbiMismatch, match="was built for another tfjit runtime"):
        abi.check(ctypes.CDLL(path), path)


def test_a_library_without_the_layout_symbol_is_refused(tmp_path):
    import ctypes
    from tfjit.runtime import abi
    src, lib = tmp_path / "old.cc", tmp_path / "libold.so"
    src.write_text('extern "C" int TfjitSomethingElse() { return 1; }\n')
    import subprocess
    subprocess.run([build.find_compiler(), "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    with pytest.raises(abi.AbiMismatch, match=r"ABI layout None"):
        abi.check(ctypes.CDLL(str(lib)), str(lib))
