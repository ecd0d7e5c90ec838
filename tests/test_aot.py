"""tfjit-aot: object + header compiled by g++ into programs whose results equal TF's.

Each test builds a TF graph (or SavedModel), runs ``tfjit-aot`` (in process, and
once as a subprocess), compiles a small C++ or C program against the header and
object, runs it on inputs written to files, and compares its outputs with the
same graph run by TensorFlow (tests/oracle.py).
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.oracle import assert_matches

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nm") is None,
                                reason="AOT tests need g++ and nm (binutils) to build and inspect "
                                       "the programs")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Reads argK.bin into the class's argument buffers, runs, writes resultK.bin and
# prints the class's metadata; exit 4 (with the error text) when Run() fails.
RUNNER = r"""
#include HEADER
#include <cstdio>
#include <string>
int main(int argc, char** argv) {
  CLASS m;
  for (int i = 0; i < CLASS::kNumArgs; ++i) {
    std::string path = std::string(argv[1]) + "/arg" + std::to_string(i) + ".bin";
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return 2;
    size_t n = std::fread(m.arg_data(i), 1, CLASS::arg_size(i), f);
    std::fclose(f);
    if (n != CLASS::arg_size(i)) return 3;
  }
  for (int i = 0; i < CLASS::kNumArgs; ++i) {
    std::printf("arg %d %s %s", i, CLASS::arg_name(i), CLASS::arg_type(i));
    for (int d = 0; d < CLASS::arg_rank(i); ++d) std::printf(" %lld", (long long)CLASS::arg_shape(i)[d]);
    std::printf("\n");
  }
  for (int i = 0; i < CLASS::kNumResults; ++i) {
    std::printf("result %d %s %s", i, CLASS::result_name(i), CLASS::result_type(i));
    for (int d = 0; d < CLASS::result_rank(i); ++d) std::printf(" %lld", (long long)CLASS::result_shape(i)[d]);
    std::printf("\n");
  }
  if (!m.Run()) { std::printf("error %d %s\n", (int)m.status(), m.error_msg()); return 4; }
  for (int i = 0; i < CLASS::kNumResults; ++i) {
    std::string path = std::string(argv[1]) + "/result" + std::to_string(i) + ".bin";
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(m.result_data(i), 1, CLASS::result_size(i), f);
    std::fclose(f);
  }
  return 0;
}
"""


def _aot(argv) -> int:
    from tfjit.aot.cli import main
    return main([str(a) for a in argv])


def _build(tmp_path, prefix, cpp_class, source=RUNNER, lang="c++") -> str:
    src = tmp_path / ("main.cc" if lang == "c++" else "main.c")
    src.write_text(source)
    exe = str(tmp_path / "prog")
    compiler = ["g++", "-std=c++17"] if lang == "c++" else ["gcc", "-std=c11"]
    cmd = compiler + ["-O1", "-Wall", "-Werror", f'-DHEADER="{prefix}.h"', f"-DCLASS={cpp_class}",
                      str(src), f"{prefix}.o", "-lm", "-o", exe]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return exe


def _run(exe, workdir, inputs) -> subprocess.CompletedProcess:
    for k, x in enumerate(inputs):
        np.ascontiguousarray(x).tofile(os.path.join(workdir, f"arg{k}.bin"))
    return subprocess.run([exe, str(workdir)], capture_output=True, text=True, timeout=60)


def _results(workdir, expected) -> list:
    return [np.fromfile(os.path.join(workdir, f"result{k}.bin"), e.dtype).reshape(e.shape)
            for k, e in enumerate(expected)]


def _undefined(obj: str) -> list:
    out = subprocess.run(["nm", "-u", obj], check=True, capture_output=True, text=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def _assert_only_libc_libm(obj: str) -> None:
    libc, libm = ctypes.CDLL("libc.so.6"), ctypes.CDLL("libm.so.6")
    for sym in _undefined(obj):
        assert hasattr(libc, sym) or hasattr(libm, sym), f"{obj} needs {sym}, not in libc/libm"


def _save(tmp_path, graph, config: str):
    (tmp_path / "g.pb").write_bytes(graph.as_graph_def().SerializeToString())
    (tmp_path / "g.config.pbtxt").write_text(config)
    return tmp_path / "g.pb", tmp_path / "g.config.pbtxt"


def _session_run(tf, graph, fetches, feeds):
    with tf.compat.v1.Session(graph=graph) as s:
        return s.run(fetches, feeds)


SEED_CONFIG = """
feed { id { node_name: "x" } shape { dim { size: 37 } dim { size: 130 } } name: "x" }
feed { id { node_name: "y" } shape { dim { size: 37 } dim { size: 130 } } name: "y" }
feed { id { node_name: "z" } shape { dim { size: 37 } dim { size: 130 } } }
fetch { id { node_name: "total" } name: "total" }
fetch { id { node_name: "probs" } name: "probs" }
fetch { id { node_name: "x" } name: "x_again" }
fetch { id { node_name: "rows" output_index: 1 } name: "second_row" }
fetch { id { node_name: "tiny" } name: "tiny" }
"""


def _seed_graph(tf):
    """reduce_sum(x + y*z), a softmax, a fed tensor fetched back, an output_index != 0."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 130], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [None, 130], name="y")
        z = tf.compat.v1.placeholder(tf.float32, [None, 130], name="z")
        tf.reduce_sum(x + y * z, name="total")
        tf.nn.softmax(x * 2.0 - y, name="probs")
        tf.unstack(tf.reshape(tf.exp(y) + z, [-1, 2, 65]), axis=1, name="rows")
        tf.multiply(z, 4.0, name="tiny")
    return g, ["total:0", "probs:0", "x:0", "rows:1", "tiny:0"]


def test_graph_matches_tf(tf, tmp_path, rng):
    g, fetches = _seed_graph(tf)
    pb, cfg = _save(tmp_path, g, SEED_CONFIG)
    prefix = tmp_path / "out" / "seed"
    assert _aot(["--graph", pb, "--config", cfg, "--cpp_class", "demo::models::Seed",
                 "--out_prefix", prefix]) == 0
    _assert_only_libc_libm(f"{prefix}.o")
    # position-independent: the linker refuses absolute relocations in a shared library
    subprocess.run(["g++", "-shared", f"{prefix}.o", "-o", str(tmp_path / "libseed.so")],
                   check=True, capture_output=True)
    exe = _build(tmp_path, prefix, "demo::models::Seed")
    inputs = [rng.standard_normal((37, 130)).astype(np.float32) for _ in range(3)]
    inputs[2][0, :4] = [np.inf, -0.0, np.nan, 0.0]   # z: not in the softmax, whose NaN rows
    inputs[2][1, :3] = [-np.inf, -0.0, -0.0]         # tfjit's JIT already differs from oneDNN on
    inputs[2][2, :3] = [1e-40, -1e-39, 1e-38]        # denormals: TF's threads flush them to zero
    want = _session_run(tf, g, fetches, dict(zip(["x:0", "y:0", "z:0"], inputs)))
    proc = _run(exe, tmp_path, inputs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[:8] == [
        "arg 0 x float32 37 130", "arg 1 y float32 37 130", "arg 2 arg2 float32 37 130",
        "result 0 total float32", "result 1 probs float32 37 130",
        "result 2 x_again float32 37 130", "result 3 second_row float32 37 65",
        "result 4 tiny float32 37 130"]
    got = _results(tmp_path, want)
    for k, (g_k, exp) in enumerate(zip(got, want)):
        assert_matches(g_k, exp, what=f"result {k}", rtol=1e-4 if k == 0 else None)
    assert (want[4][2, :3] == 0).all()                # the driver sets FTZ/DAZ as TF does:
    assert np.array_equal(got[4][2].view(np.uint32), want[4][2].view(np.uint32))   # bit-exact


TYPED = r"""
#include HEADER
#include <cstdio>
#include <cstdint>
#include <cstdlib>
int main() {
  CLASS m;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) { m.arg_a(i, j) = 7 * i - 3 * j - 6; m.arg_b(i, j) = j - 2; }
  if (m.Run()) return 1;                                   // b has zeros: division by zero
  std::printf("status %d: %s\n", (int)m.status(), m.error_msg());
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) m.arg_b(i, j) = (j % 2 ? 1 : -1) * (j + 1 + i);
  if (!m.Run()) return 2;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) std::printf("%d %d\n", (int)m.result_q(i, j), (int)m.result_r(i, j));
  alignas(64) static int32_t outside[64];                  // caller memory, misaligned by 4 bytes
  m.set_arg_data(0, outside + 1);
  if (m.Run()) return 3;
  std::printf("status %d: %s\n", (int)m.status(), m.error_msg());
  return 0;
}
"""


def test_int_ops_typed_accessors_and_runtime_errors(tf, tmp_path):
    g = tf.Graph()
    with g.as_default():
        a = tf.compat.v1.placeholder(tf.int32, [4, 5], name="a")
        b = tf.compat.v1.placeholder(tf.int32, [4, 5], name="b")
        tf.math.floordiv(a, b, name="q")
        tf.math.floormod(a, b, name="r")
    pb, cfg = _save(tmp_path, g, """
feed { id { node_name: "a" } shape { dim { size: 4 } dim { size: 5 } } name: "a" }
feed { id { node_name: "b" } shape { dim { size: 4 } dim { size: 5 } } name: "b" type: DT_INT32 }
fetch { id { node_name: "q" } name: "q" }
fetch { id { node_name: "r" } name: "r" }
""")
    prefix = tmp_path / "idiv"
    assert _aot(["--graph", pb, "--config", cfg, "--cpp_class", "IntDiv", "--out_prefix", prefix]) == 0
    exe = _build(tmp_path, prefix, "IntDiv", TYPED)
    proc = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "status 1: Integer division by zero"
    assert lines[-1] == "status 5: tfjit AOT: an argument, result or temp buffer is not 64-byte aligned"
    i, j = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
    av = (7 * i - 3 * j - 6).astype(np.int32)
    bv = (np.where(j % 2, 1, -1) * (j + 1 + i)).astype(np.int32)
    q, r = _session_run(tf, g, ["q:0", "r:0"], {"a:0": av, "b:0": bv})
    got = np.array([[int(v) for v in line.split()] for line in lines[1:-1]], np.int32)
    assert_matches(got[:, 0].reshape(4, 5), q, what="floordiv")
    assert_matches(got[:, 1].reshape(4, 5), r, what="floormod")


C_PROGRAM = r"""
#include HEADER
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* Plain C: the run() entry point with malloc'd temps, buffers from aligned_alloc. */
int main(int argc, char** argv) {
  (void)argc;
  static const size_t arg_bytes[] = {DEMO_WIDE_ARG0_BYTES, DEMO_WIDE_ARG1_BYTES};
  static const size_t res_bytes[] = {DEMO_WIDE_RESULT0_BYTES, DEMO_WIDE_RESULT1_BYTES};
  void* args[2]; void* results[2];
  char path[4096];
  for (int i = 0; i < 2; ++i) {
    args[i] = aligned_alloc(64, (arg_bytes[i] + 63) / 64 * 64);
    snprintf(path, sizeof path, "%s/arg%d.bin", argv[1], i);
    FILE* f = fopen(path, "rb");
    if (!f || fread(args[i], 1, arg_bytes[i], f) != arg_bytes[i]) return 2;
    fclose(f);
  }
  for (int i = 0; i < 2; ++i) results[i] = aligned_alloc(64, (res_bytes[i] + 63) / 64 * 64);
  if (demo_wide_temp_bytes() != DEMO_WIDE_TEMP_BYTES || DEMO_WIDE_TEMP_BYTES == 0) return 5;
  int32_t status = demo_wide_run(args, results);
  if (status != 0) { printf("%s\n", demo_wide_error_message(status)); return 3; }
  if (demo_wide_run(NULL, results) != 4) return 6;
  if (strcmp(demo_wide_error_message(99), "unknown tfjit AOT status code") != 0) return 7;
  for (int i = 0; i < 2; ++i) {
    snprintf(path, sizeof path, "%s/result%d.bin", argv[1], i);
    FILE* f = fopen(path, "wb");
    fwrite(results[i], 1, res_bytes[i], f);
    fclose(f);
  }
  return 0;
}
"""


def test_console_script_generic_cpu_and_c_entry_point(tf, tmp_path, rng):
    """A subprocess run of the command, generic x86-64 code, f64 libm math, temps, plain C."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float64, [64, 3000], name="x")
        w = tf.compat.v1.placeholder(tf.float64, [3000], name="w")
        t = tf.tanh(x) * w
        tf.identity(tf.reduce_sum(tf.exp(t - tf.reduce_max(t, axis=1, keepdims=True))), name="s")
        tf.math.log1p(tf.abs(t), name="l")
    pb, cfg = _save(tmp_path, g, """
feed { id { node_name: "x" } shape { dim { size: 64 } dim { size: 3000 } } name: "x" }
feed { id { node_name: "w" } shape { dim { size: 3000 } } name: "w" }
fetch { id { node_name: "s" } name: "s" }
fetch { id { node_name: "l" } name: "l" }
""")
    prefix = tmp_path / "wide"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "aot.py"), f"--graph={pb}",
                           f"--config={cfg}", "--cpp_class=demo::Wide", f"--out_prefix={prefix}",
                           "--target_cpu=x86-64"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "entry points demo_wide_*" in proc.stdout
    header = open(f"{prefix}.h").read()
    assert "cpu x86-64" in header
    _assert_only_libc_libm(f"{prefix}.o")
    assert "malloc" in _undefined(f"{prefix}.o")
    exe = _build(tmp_path, prefix, "unused", C_PROGRAM, lang="c")
    inputs = [rng.standard_normal((64, 3000)), rng.standard_normal(3000)]
    want = _session_run(tf, g, ["s:0", "l:0"], {"x:0": inputs[0], "w:0": inputs[1]})
    run = _run(exe, tmp_path, inputs)
    assert run.returncode == 0, run.stdout + run.stderr
    for k, (got, exp) in enumerate(zip(_results(tmp_path, want), want)):
        assert_matches(got, exp, what=f"result {k}", rtol=1e-10, atol=1e-12)


def test_saved_model(tf, tmp_path, rng):
    class Model(tf.Module):
        def __init__(self):
            self.w = tf.Variable(rng.standard_normal((6,)).astype(np.float32))
            self.b = tf.Variable(np.float32(0.5))

        @tf.function(input_signature=[tf.TensorSpec([5, 6], tf.float32, name="features"),
                                      tf.TensorSpec([5, 6], tf.float32, name="scale")])
        def serve(self, features, scale):
            h = tf.nn.relu(features * self.w + self.b) * scale
            return {"logits": h, "mean": tf.reduce_mean(h, axis=1)}

    model = Model()
    model_dir = str(tmp_path / "model")
    tf.saved_model.save(model, model_dir, signatures={"serving_default": model.serve})
    prefix = tmp_path / "sm" / "model"
    assert _aot(["saved_model", "--dir", model_dir, "--tag_set", "serve", "--signature_def_key",
                 "serving_default", "--cpp_class", "sm::Model", "--output_prefix", prefix]) == 0
    _assert_only_libc_libm(f"{prefix}.o")
    exe = _build(tmp_path, prefix, "sm::Model")
    inputs = [rng.standard_normal((5, 6)).astype(np.float32) for _ in range(2)]
    out = model.serve(tf.constant(inputs[0]), tf.constant(inputs[1]))
    want = [out["logits"].numpy(), out["mean"].numpy()]       # fetches sorted by key
    proc = _run(exe, tmp_path, inputs)                        # feeds sorted by key
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[:4] == ["arg 0 features float32 5 6", "arg 1 scale float32 5 6",
                                            "result 0 logits float32 5 6", "result 1 mean float32 5"]
    for k, (got, exp) in enumerate(zip(_results(tmp_path, want), want)):
        assert_matches(got, exp, what=f"result {k}")


def _error(tmp_path, capsys, argv) -> str:
    assert _aot(argv) == 1
    return capsys.readouterr().err


ERROR_CASES = [
    # (config text, graph maker name, words the message must contain)
    ('feed { id { node_name: "x" } shape { dim { size: 2 } } }\nfetch { id { node_name: "nope" } }',
     "plain", ["fetch 'nope:0'", "no node named 'nope'"]),
    ('feed { id { node_name: "x" } shape { dim { size: -1 } } name: "x" }\nfetch { id { node_name: "y" } }',
     "plain", ["feed 'x:0'", "not fully known"]),
    ('feed { id { node_name: "x" } shape { dim { size: 2 } } }\nfetch { id { node_name: "u" } }',
     "unique", ["Unique", "{{node u}}", "output shape depends on input values"]),
    ('fetch { id { node_name: "y" } }', "plain", ["placeholder 'x'", "not fed"]),
    ('feed { id { node_name: "x" } shape { dim { size: 2 } } }', "plain", ["no fetch"]),
    ('feed { id { node_name: "x" } shape { dim { size: 3 } } }\nfetch { id { node_name: "y" } }',
     "plain", ["feed 'x:0'", "does not match"]),
    ('feed { id { node_name: "x" } shape { dim { size: 2 } } type: DT_INT32 }\nfetch { id { node_name: "y" } }',
     "plain", ["feed 'x:0'", "the config says i32", "f32"]),
    ('feed { id { node_name: "x" } shape { dim { size: 2 } } name: "not valid" }\nfetch { id { node_name: "y" } }',
     "plain", ["not a valid C identifier"]),
    ('feed { id { node_name: "x" } shape { dim { size: 2 } }\nfetch {', "plain", ["g.config.pbtxt", "neither"]),
    ('feed { id { node_name: "x" } shape { dim { size: 2 } } name: "shape" }\nfetch { id { node_name: "y" } }',
     "plain", ["feed 'x:0'", "'shape' is reserved"]),
    ('feed { id { node_name: "x" } shape { dim { size: 2 } } }\nfetch { id { node_name: "y" output_index: 1 } }',
     "plain", ["fetch 'y:1'", "1 output(s)"]),
    ('feed { id { node_name: "x" } shape { dim { size: 2 } } }\nfetch { id { node_name: "c" } }',
     "complex", ["fetch 'c:0'", "does not take or return complex64"]),
    ('feed { id { node_name: "x" } shape { dim { size: 2 } } }\nfetch { id { node_name: "r" } }',
     "random", ["{{node RandomUniform}}", "stateful random number generation", "never by tfjit-aot"]),
]


@pytest.mark.parametrize("config,graph,words", ERROR_CASES)
def test_errors_name_the_culprit(tf, tmp_path, capsys, config, graph, words):
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
        if graph == "unique":
            tf.unique(x * 2.0, name="u")
        if graph == "complex":
            tf.complex(x, x * 2.0, name="c")
        if graph == "random":      # its state would need TF's kernel (graph/random_state.py)
            tf.add(x, tf.raw_ops.RandomUniform(shape=[2], dtype=tf.float32, seed=1, seed2=2), name="r")
        tf.identity(x + 1.0, name="y")
    pb, cfg = _save(tmp_path, g, config)
    err = _error(tmp_path, capsys, ["--graph", pb, "--config", cfg, "--cpp_class", "E",
                                    "--out_prefix", tmp_path / "e"])
    for w in words:
        assert w in err, err
    assert not (tmp_path / "e.o").exists() and not (tmp_path / "e.h").exists()


def test_usage_and_saved_model_errors(tf, tmp_path, capsys):
    assert _aot(["--graph", "g.pb"]) == 2                       # missing flags: argparse usage
    assert "required" in capsys.readouterr().err
    err = _error(tmp_path, capsys, ["saved_model", "--dir", tmp_path / "missing", "--cpp_class", "M",
                                    "--output_prefix", tmp_path / "m"])
    assert "does not exist" in err

    class Dynamic(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="batch")])
        def serve(self, batch):
            return {"y": batch * 2.0}

    model_dir = str(tmp_path / "dynamic")
    module = Dynamic()
    tf.saved_model.save(module, model_dir, signatures={"serving_default": module.serve})
    base = ["saved_model", "--dir", model_dir, "--cpp_class", "M", "--output_prefix", tmp_path / "m"]
    err = _error(tmp_path, capsys, base)
    assert "signature input 'batch'" in err and "not fully known" in err, err
    err = _error(tmp_path, capsys, base + ["--signature_def_key", "predict"])
    assert "no signature 'predict'" in err and "serving_default" in err, err
    g = tf.Graph()
    with g.as_default():
        tf.identity(tf.compat.v1.placeholder(tf.float32, [2], name="x"), name="y")
    pb, cfg = _save(tmp_path, g, 'feed { id { node_name: "x" } shape { dim { size: 2 } } }\n'
                                 'fetch { id { node_name: "y" } }')
    err = _error(tmp_path, capsys, ["--graph", pb, "--config", cfg, "--cpp_class", "1bad",
                                    "--out_prefix", tmp_path / "e"])
    assert "--cpp_class='1bad'" in err
    for name, why in [("ns::class", "'class' is a C++ keyword"), ("new::M", "'new' is a C++ keyword"),
                      ("a::b::and_eq", "'and_eq' is a C++ keyword"), ("x__y", "reserved in C++"),
                      ("ns::_Model", "reserved in C++")]:
        assert _aot(["--graph", pb, "--config", cfg, "--cpp_class", name,
                     "--out_prefix", tmp_path / "e"]) == 1
        err = capsys.readouterr().err
        assert why in err and not os.path.exists(tmp_path / "e.h"), (name, err)
    err = _error(tmp_path, capsys, ["--graph", pb, "--config", cfg, "--cpp_class", "M",
                                    "--out_prefix", tmp_path / "e", "--target_triple", "aarch64-linux-gnu"])
    assert "x86-64 code only" in err


EXP_CONFIG = """
feed { id { node_name: "x" } shape { dim { size: 8 } dim { size: 300 } } name: "x" }
fetch { id { node_name: "e" } name: "e" }
"""


@pytest.mark.parametrize("cpu,features,scalef", [("x86-64", "+avx2,+fma", False),
                                                  ("skylake-avx512", "", True)],
                         ids=["avx2", "avx512"])
def test_exp_scaling_follows_the_requested_target(tf, tmp_path, rng, cpu, features, scalef):
    """f32 exp's 2^n: one vscalefps where the requested target has AVX-512, integer
    operations elsewhere, never a call to libm's ldexpf (llvm.ldexp without AVX-512).
    The choice follows --target_cpu/--target_features, not the host; the object runs
    where the host has the target's instructions (decided here, at run time)."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [8, 300], name="x")
        tf.identity(tf.exp(x) * 0.5 + x, name="e")
    pb, cfg = _save(tmp_path, g, EXP_CONFIG)
    prefix = tmp_path / "expo"
    args = [f"--graph={pb}", f"--config={cfg}", "--cpp_class=Expo", f"--out_prefix={prefix}",
            f"--target_cpu={cpu}"] + ([f"--target_features={features}"] if features else [])
    assert _aot(args) == 0
    text = subprocess.run(["objdump", "-d", f"{prefix}.o"], check=True, capture_output=True,
                          text=True).stdout
    assert ("vscalefps" in text) == scalef
    assert not any(s.startswith("ldexp") for s in _undefined(f"{prefix}.o"))
    from tfjit.codegen import llvm_target
    host = llvm_target.features()
    if not llvm_target.has_feature(host, "avx512f" if scalef else "avx2"):
        return
    exe = _build(tmp_path, prefix, "Expo")
    data = rng.standard_normal((8, 300)).astype(np.float32) * 40
    data[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    want = _session_run(tf, g, ["e:0"], {"x:0": data})
    run = _run(exe, tmp_path, [data])
    assert run.returncode == 0, run.stdout + run.stderr
    assert_matches(_results(tmp_path, want)[0], want[0], what=f"exp for {cpu}")


DEPTHWISE_CONFIG = """
feed { id { node_name: "x" } shape { dim { size: 2 } dim { size: 9 } dim { size: 12 } dim { size: 16 } } name: "x" }
feed { id { node_name: "w" } shape { dim { size: 3 } dim { size: 3 } dim { size: 16 } dim { size: 1 } } name: "w" }
fetch { id { node_name: "y" } name: "y" }
"""


@pytest.mark.parametrize("features,instruction", [("+avx2,+fma", True), ("", False)],
                         ids=["fma", "generic"])
def test_depthwise_fma_follows_the_requested_target(tf, tmp_path, rng, features, instruction):
    """A depthwise convolution's taps are the IR's FMA: vfmadd where the requested target
    has it, libm's fmaf on generic x86-64 (same value: one rounding either way)."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 9, 12, 16], name="x")
        w = tf.compat.v1.placeholder(tf.float32, [3, 3, 16, 1], name="w")
        tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME", name="y")
    pb, cfg = _save(tmp_path, g, DEPTHWISE_CONFIG)
    prefix = tmp_path / "dw"
    args = [f"--graph={pb}", f"--config={cfg}", "--cpp_class=Dw", f"--out_prefix={prefix}",
            "--target_cpu=x86-64"] + ([f"--target_features={features}"] if features else [])
    assert _aot(args) == 0
    text = subprocess.run(["objdump", "-d", f"{prefix}.o"], check=True, capture_output=True,
                          text=True).stdout
    assert ("vfmadd" in text) == instruction
    assert ("fmaf" in _undefined(f"{prefix}.o")) != instruction
    _assert_only_libc_libm(f"{prefix}.o")
    from tfjit.codegen import llvm_target
    if instruction and not llvm_target.has_feature(llvm_target.features(), "fma"):
        return
    exe = _build(tmp_path, prefix, "Dw")
    data = [rng.uniform(-1, 1, (2, 9, 12, 16)).astype(np.float32),
            rng.uniform(-1, 1, (3, 3, 16, 1)).astype(np.float32)]
    want = _session_run(tf, g, ["y:0"], {"x:0": data[0], "w:0": data[1]})
    run = _run(exe, tmp_path, data)
    assert run.returncode == 0, run.stdout + run.stderr
    assert_matches(_results(tmp_path, want)[0], want[0], rtol=1e-5, atol=1e-5, what="depthwise")
