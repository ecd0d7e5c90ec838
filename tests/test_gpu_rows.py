"""Rows shared by a warp or a block on the GPU (codegen/lanes.py), checked without a GPU:
which rows are shared and how, the PTX's shape (one read of a held row, shuffles,
barriers, the declared block size, 16-byte elementwise accesses) and ptxas's
resource report (no spills).  Running them is tools/gpu_check.py's job: on an H200 on
2026-12-04 the op table's, the random graphs' and 595 modules of long rows matched
the interpreter with these kernels."""
from __future__ import annotations

import re
import subprocess
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import tfjit
from tfjit import pipeline
from tfjit.codegen import lanes, nvptx
from tfjit.ir.text import parse_module
from tfjit.runtime import cuda

needs_ptxas = pytest.mark.skipif(nvptx.ptxas() is None, reason="no ptxas (CUDA toolkit) here")


def _ptx(fn, *specs):
    text = tfjit.function(fn, jit_compile=True).experimental_get_compiler_ir(*specs)()
    return pipeline.compile_ptx(parse_module(text), "m", "sm_90")


def _entry(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start:end if end > 0 else len(ptx)]


def _resources(ptx: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        with open(f"{d}/k.ptx", "w") as f:
            f.write(ptx)
        done = subprocess.run([nvptx.ptxas(), "-arch=sm_90", "-v", f"{d}/k.ptx", "-o", f"{d}/k.o"],
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.mark.parametrize("n, want", [
    (1, (1, 0)), (7, (1, 0)), (8, (8, 1)), (20, (8, 3)), (32, (8, 4)), (64, (8, 8)),
    (100, (8, 13)), (129, (16, 9)), (512, (32, 16)), (513, (64, 9)), (4099, (512, 9)),
    (8192, (512, 16)), (8193, (32, 0)), (1 << 20, (32, 0))])
def test_which_rows_are_held_and_by_how_many_threads(n, want):
    assert lanes._row(n, True) == want
    threads, held = want
    if held:                       # every element has a thread, and no thread has more than 16
        assert threads * held >= n > threads * (held - 1) and held <= lanes.HELD_MAX
    assert lanes._row(n, False) == ((1, 0) if n < 32 else (32, 0))


def softmax(x):
    return tf.nn.softmax(x)


def layernorm(x):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-5)


@needs_ptxas
@pytest.mark.parametrize("fn, reads", [(softmax, 1), (layernorm, 1)])
def test_a_held_row_is_read_once_by_a_block(fn, reads):
    c = _ptx(fn, tf.TensorSpec([8192, 8192]))
    program = c.program()
    assert program.entries == [("m_s0", 8192 * 512)] and program.blocks == [512]
    body = _entry(c.ptx, "m_s0")
    assert ".reqntid 512" in body and "bar.sync" in body and "shfl.sync.bfly" in body
    # 16 elements per thread, each loaded once (two more loads read the buffer table)
    assert len(re.findall(r"ld\.global(?!\.nc\.b64)", body)) == 16 * reads
    assert len(re.findall(r"st\.global", body)) == 16
    report = _resources(c.ptx)
    assert "0 bytes spill stores" in report and "0 bytes stack frame" in report


@needs_ptxas
def test_a_long_row_is_shared_by_a_warp_and_a_split_sum_combines_in_a_block():
    c = _ptx(lambda x, y, z: tf.reduce_sum(x + y * z), *[tf.TensorSpec([4096, 4096])] * 3)
    (partial, rows), (combine, one) = c.entries
    # 4096 partial sums of 4096 elements, a warp each; their 4096 results by one block
    assert rows == 4096 * 32 and one == 256 and c.program().blocks == [0, 256]
    assert _entry(c.ptx, partial).count("shfl.sync.bfly") >= 5
    assert "bar.sync" not in _entry(c.ptx, partial) and "bar.sync" in _entry(c.ptx, combine)
    c = _ptx(lambda x: tf.reduce_max(x, axis=-1), tf.TensorSpec([16, 100000]))
    assert c.entries == [("m_s0", 16 * 32)] and "shfl.sync.bfly" in c.ptx


@needs_ptxas
@pytest.mark.parametrize("shape, axes, rows", [
    ([8192, 8192], [0], 8192 // 32),           # a tile of 32 outputs per block
    ([8192, 100], [0], None),                  # 100 outputs: 4 tiles (the last part-empty) by chunks
    ([32, 56, 56, 64], [0, 1, 2], None)])      # batch-norm statistics: chunks of N
def test_a_column_reduction_runs_in_tiles_of_a_block(shape, axes, rows):
    c = _ptx(lambda x: tf.reduce_sum(x, axis=axes), tf.TensorSpec(shape))
    name, threads = c.entries[0]
    assert c.program().blocks[0] == 512 and threads % 512 == 0
    if rows is not None:
        assert threads == rows * 512
    body = _entry(c.ptx, name)
    assert body.count("bar.sync") == 2 and ".reqntid 512" in body
    assert "0 bytes spill stores" in _resources(c.ptx)


@needs_ptxas
@pytest.mark.parametrize("dtype, width", [(tf.float32, "v4.b32"), (tf.float16, "v2.b32"),
                                          (tf.float64, "v2.b64")])
def test_an_elementwise_thread_takes_four_elements_in_wide_accesses(dtype, width):
    """Four elements per thread, in accesses of 16 bytes (8 for halves; two for f64)."""
    c = _ptx(lambda x, y: x * y + x, tf.TensorSpec([1024, 64], dtype), tf.TensorSpec([1024, 64], dtype))
    assert c.entries == [("m_s0", 1024 * 64 // 4)]
    assert f"ld.global.{width}" in c.ptx and f"st.global.{width}" in c.ptx
    assert not re.search(r"(ld|st)\.global\.b(16|32)\b", c.ptx)
    c = _ptx(lambda x: x * 3, tf.TensorSpec([1023], dtype))       # no multiple of 4: one each
    assert c.entries == [("m_s0", 1023)] and "ld.global.v" not in c.ptx


def test_a_short_row_stays_a_threads_and_rows_of_64_take_eight():
    c = _ptx(lambda x: tf.nn.softmax(x), tf.TensorSpec([4096, 7]))
    assert c.entries == [("m_s0", 4096)] and "shfl" not in c.ptx and c.program().blocks == [0]
    c = _ptx(lambda x: tf.reduce_sum(x, axis=-1), tf.TensorSpec([4096, 64]))
    assert c.entries == [("m_s0", 4096 * 8)] and c.program().blocks == [0]
    assert c.ptx.count("shfl.sync.bfly") == 3           # a butterfly over 8 lanes


def test_launches_use_whole_warps_and_a_held_rows_block():
    assert [cuda.whole_warps(b) for b in (1, 31, 32, 33, 100, 1024)] == [32, 32, 32, 32, 96, 1024]


class _View:
    """A CUDA array's DLPack face, at an address of our choosing."""

    def __init__(self, address: int, shape=(4,)):
        self.address, self.shape = address, shape

    def __dlpack__(self):
        raise AssertionError("not read here")


def test_run_dlpack_refuses_a_misaligned_view(monkeypatch):
    program = cuda.Program("p", "sm_90", "ptx", [("p_s0", 1)], [], [(np.float32, (4,))],
                           [(np.float32, (4,))], [-1], [], 0)
    views = {1000: cuda.DLView(1000 + 4, (cuda.KDL_CUDA, 0), "f4", (4,), True, None),
             2000: cuda.DLView(2048, (cuda.KDL_CUDA, 0), "f4", (4,), True, None)}
    monkeypatch.setattr(cuda, "dlpack_view", lambda x: views[x.address])
    with pytest.raises(ValueError, match="input 0 is not 64-byte aligned"):
        cuda.run_dlpack(program, [_View(1000)], [_View(2000)])
