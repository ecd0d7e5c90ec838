"""The GPU target without a GPU: PTX from LLVM's NVPTX backend, assembled by ptxas.

* every kernel the op-table and random-graph tests compiled for the CPU in this
  session is emitted for sm_90 and assembled, every third batch of them for sm_80 too
  (the counts are asserted, so the check cannot pass by checking nothing);
* ``f.experimental_get_compiler_ir(...)(stage="ptx")``, refusals with reasons;
* the CUDA runtime's errors where there is no GPU, and its DLPack reader.

Running PTX on a GPU is tools/gpu_check.py's job (a machine with one).
"""
from __future__ import annotations

import collections
import concurrent.futures
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import ptx_collect
import tfjit
from tfjit import pipeline
from tfjit.codegen import jit_server, nvptx
from tfjit.codegen.target import NotForTarget
from tfjit.runtime import cuda

BATCH = 50          # modules per PTX file: one LLVM request and one ptxas run each
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_ptxas = pytest.mark.skipif(nvptx.ptxas() is None, reason="no ptxas (CUDA toolkit) here")


def seed(x, y, z):
    return tf.reduce_sum(x + y * z)


def softmax_layernorm(x):
    s = tf.nn.softmax(x)
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return s, (x - mean) * tf.math.rsqrt(var + 1e-5)


def test_the_data_layout_is_llvms():
    out = subprocess.run([sys.executable, "-c", "from tfjit.codegen import llvm_target as t; "
                          "print(t.nvptx_target_machine('sm_90').target_data)"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == nvptx.DATA_LAYOUT


@needs_ptxas
def test_seed_ptx_has_an_entry_per_step_and_assembles():
    x = tf.random.normal([1024, 1024], seed=1)
    f = tfjit.function(seed, jit_compile=True)
    assert len(f.compiled(x, x, x).fusions) == 1     # one fused kernel, as on the CPU
    for arch in nvptx.ARCHS:
        ptx = f.experimental_get_compiler_ir(x, x, x)(stage="ptx", arch=arch)
        assert f".target {arch}" in ptx and ".version 8.0" in ptx
        assert ptx.count(".entry") == 2              # the split sum: partials, then combine
        assert "call" not in ptx                     # row bodies inlined into the entries
        assert nvptx.assemble(ptx, arch)[:4] == b"\x7fELF"


@needs_ptxas
def test_row_kernels_are_one_entry_and_use_tfjits_own_math():
    x = tf.random.normal([64, 256], seed=2)
    f = tfjit.function(softmax_layernorm, jit_compile=True)
    ptx = f.experimental_get_compiler_ir(x)(stage="ptx")
    assert ptx.count(".entry") == len(f.compiled(x).fusions)
    assert "ex2.approx" not in ptx and ".extern" not in ptx   # mathlib's polynomials
    nvptx.assemble(ptx, "sm_90")


@pytest.mark.parametrize("fn, dtype, reason", [
    (lambda x: x @ x, tf.float32, "dot, convolution, QR and the solvers call a runtime library"),
    (tf.exp, tf.float64, "calls the C library's exp"),
    (tf.math.sinh, tf.float16, "sinh is the C library's on the CPU, as TF's kernel calls it"),
    (lambda x: tf.math.cumsum(x, axis=1), tf.float32, "scan kernels have no GPU emitter"),
    (lambda x: tf.math.igamma(x, x) * 2.0, tf.float32, "igamma is TF's CPU code"),
    (tf.math.lgamma, tf.float32, "lgamma is TF's CPU code (the C library's lgamma_r)"),
    (tf.math.digamma, tf.float32, "digamma is TF's CPU code (Cephes' psi"),
    (lambda x: tf.math.erfinv(x) + 1.0, tf.float32, "erfinv is TF's CPU code (Eigen's code"),
    (tf.math.ndtri, tf.float64, "over the C library's log in f64"),
    (tf.math.special.bessel_i0e, tf.float32, "bessel-i0e is TF's CPU code"),
    (tf.math.special.bessel_i1e, tf.float16, "x86's rcpps/rsqrtps approximations in f32"),
])
def test_what_the_gpu_cannot_run_is_refused_with_a_reason(fn, dtype, reason):
    x = tf.ones([8, 8], dtype)
    f = tfjit.function(fn, jit_compile=True)
    with pytest.raises(ValueError, match=re.escape(reason)) as e:
        f.experimental_get_compiler_ir(x)(stage="ptx")
    assert "nvptx-sm_90" in str(e.value)
    assert f(x).shape == fn(x).shape                 # the CPU path is unaffected


def test_run_module_on_cuda_without_a_gpu_is_one_clear_error(tmp_path):
    m = tmp_path / "m.txt"
    x = tf.ones([16, 16])
    m.write_text(tfjit.function(seed, jit_compile=True).experimental_get_compiler_ir(x, x, x)())
    out = subprocess.run([sys.executable, "-m", "tfjit.api.run_module", str(m), "--platform=cuda"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 2, out.stdout + out.stderr
    assert re.search(r"error: .*(cuda-python|no CUDA driver or GPU)", out.stdout), out.stdout
    cpu = subprocess.run([sys.executable, "-m", "tfjit.api.run_module", str(m)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert cpu.returncode == 0 and "0/1 runs miscompared" in cpu.stdout, cpu.stdout + cpu.stderr


def test_the_dlpack_reader_reads_what_numpy_exports():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    v = cuda.dlpack_view(x)
    assert (v.pointer, v.device[0], v.dtype, v.shape, v.contiguous) == \
        (x.ctypes.data, cuda.KDL_CPU, "f4", (2, 3, 4), True)
    assert not cuda.dlpack_view(x[:, :, ::2]).contiguous
    assert cuda.dlpack_view(np.zeros(3, np.int64)).dtype == "i8"
    program = pipeline.compile_ptx(
        _module(seed, [tf.TensorSpec([4, 4])] * 3), "seed").program()
    with pytest.raises(ValueError, match="input 0 is not on a CUDA device"):
        cuda.run_dlpack(program, [x, x, x], [np.zeros((), np.float32)])


def _module(fn, specs):
    from tfjit.ir.text import parse_module
    f = tfjit.function(fn, jit_compile=True)
    return parse_module(f.experimental_get_compiler_ir(*specs)())


def _emit_all(arch: str):
    """(LLVM IR texts, refusal reasons) for every module collected this session."""
    texts, refused = [], collections.Counter()
    target = nvptx.target(arch)
    for k, (_, o) in enumerate(ptx_collect.SEEN):
        try:
            texts.append(str(pipeline.emit(o, target, f"m{k}").llvm_module))
        except NotForTarget as e:
            refused[e.reason.split(": ", 1)[1][:48]] += 1
    return texts, refused


@needs_ptxas
@pytest.mark.after_all
def test_every_kernel_the_op_and_random_graph_tests_compiled_assembles_for_the_gpu(request):
    ran = {str(i.path.relative_to(ROOT)) for i in request.session.items} & set(ptx_collect.SOURCES)
    if not ran:
        pytest.skip("checks what tests/test_ops.py and test_random_graphs.py compile: "
                    "run it in the same session as they")
    seen = collections.Counter(f for f, _ in ptx_collect.SEEN)
    assert set(seen) == ran, (seen, ran)         # both files compiled modules for the CPU
    start = time.perf_counter()
    texts, refused = _emit_all("sm_90")     # the LLVM IR is the same for every arch
    emitted = time.perf_counter()
    checked, seconds = collections.Counter(), collections.defaultdict(list)
    batches = [texts[i:i + BATCH] for i in range(0, len(texts), BATCH)]
    # sm_90 (the H100/H200 the GPU backend runs on) every batch, in two halves; sm_80 every
    # third: the same IR through the other arch's PTX, at a third of the cost (both archs
    # every batch took 50 s of the suite on two cores, Sapphire Rapids).
    jobs = [("sm_90", batches[0::2]), ("sm_90", batches[1::2]), ("sm_80", batches[0::3])]

    def check(job):      # each job in a compile server of its own: two run at once
        arch, mine = job
        client = jit_server.Client()
        try:
            t0 = time.perf_counter()
            ptx = [client.request("ptx", b, arch)[0] for b in mine]   # one module a batch
            t1 = time.perf_counter()
            for p in ptx:
                nvptx.assemble(p, arch)
        finally:
            client.close()
        checked[arch] += sum(p.count(".entry") for p in ptx)
        seconds[arch].append(f"LLVM {t1 - t0:.1f} s, ptxas {time.perf_counter() - t1:.1f} s")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(check, jobs))
    total = len(ptx_collect.SEEN)
    print(f"\nptxas: {total} modules from {dict(seen)}; {len(texts)} emitted, "
          f"{sum(refused.values())} refused {dict(refused)}; kernel entries assembled "
          f"{dict(checked)} in {time.perf_counter() - start:.1f} s (emitting "
          f"{emitted - start:.1f} s; {dict(seconds)})")
    assert checked["sm_90"] >= len(texts) > 0
    assert checked["sm_80"] >= len(batches[0::3][0]) > 0
    # refusals are kinds without a GPU emitter or libm calls, and they stay a minority
    assert sum(refused.values()) < total // 3, refused


def test_the_dumps_write_ptx_next_to_the_ll(tmp_path):
    from tfjit import config
    config.set_flags(tfjit_dump_to=str(tmp_path), tfjit_dump_ptx="sm_90")
    try:
        tfjit.function(lambda x: x * 2.0 + 1.0, jit_compile=True)(tf.ones([8]))
        tfjit.function(lambda x: x @ x, jit_compile=True)(tf.ones([4, 4]))
    finally:
        config.set_flags(tfjit_dump_to="", tfjit_dump_ptx="")
    ptx = sorted(p for p in os.listdir(tmp_path) if p.endswith(".ptx"))
    assert len(ptx) == 2, os.listdir(tmp_path)
    assert all(os.path.exists(tmp_path / p.replace(".ptx", ".ir-no-opt.ll")) for p in ptx)
    texts = [(tmp_path / p).read_text() for p in ptx]
    assert ".entry" in texts[0] and texts[1].startswith("// no PTX: nvptx-sm_90: dot")
