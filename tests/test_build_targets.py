"""The C++ libraries build on every x86-64 CPU, and the host library's level is chosen
at run time (runtime/build.py).

The compile matrix runs the real build commands -- TF's flags, tfjit's per-source
flags -- that a machine with each CPU would run, whatever CPU runs this test: g++
compiles for a CPU it is not running on.  The build's flags do not name this CPU, so
one matrix covers every machine kind (Sapphire Rapids' AVX512-FP16 and AMX, EPYC's
AVX-512 among them).  A command a build already ran is not compiled again: the op
library this session runs, and every object in the cache (this CPU's level and the
baseline, which the host runner's test builds), each keyed by its exact sources and
flags; the rest compile with -fsyntax-only (that took 107 of the suite's 1275 s
when every command compiled, Sapphire Rapids, 2 cores)."""
import concurrent.futures
import os
import subprocess

import numpy as np
import pytest

from oracle import assert_matches
from tfjit.runtime import build

V2 = {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}
V3 = V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
V4 = V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
# The /proc/cpuinfo flags (those the build looks at, and the AVX-512 and AMX ones that
# broke earlier builds) of each CPU in the matrix, and the level each must get.
TARGETS = {
    "x86-64": (set(), "x86-64"),
    "x86-64-v2": (V2, "x86-64-v2"),
    "x86-64-v3": (V3, "x86-64-v3"),
    "x86-64-v4": (V4, "x86-64-v3"),
    "skylake-avx512": (V4 | {"clwb"}, "x86-64-v3"),
    "icelake-server": (V4 | {"avx512vbmi", "avx512_vnni", "avx512_vbmi2", "gfni"}, "x86-64-v3"),
    "sapphirerapids": (V4 | {"avx512_fp16", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"},
                       "x86-64-v3"),
    "graniterapids": (V4 | {"avx512_fp16", "avx512_bf16", "amx_tile", "amx_fp16"}, "x86-64-v3"),
    "znver3": (V3 | {"vaes", "vpclmulqdq"}, "x86-64-v3"),
    "znver4": (V4 | {"avx512_bf16", "avx512_vnni", "avx512vbmi"}, "x86-64-v3"),
}

# gcc's predefined macros for the flags above (where this gcc knows the CPU, the
# table is checked against it: a wrong row cannot pass silently).
MACROS = {"__SSSE3__": "ssse3", "__SSE4_1__": "sse4_1", "__SSE4_2__": "sse4_2",
          "__POPCNT__": "popcnt", "__AVX__": "avx", "__AVX2__": "avx2", "__BMI__": "bmi1",
          "__BMI2__": "bmi2", "__F16C__": "f16c", "__FMA__": "fma", "__LZCNT__": "abm",
          "__MOVBE__": "movbe", "__XSAVE__": "xsave", "__AVX512F__": "avx512f",
          "__AVX512BW__": "avx512bw", "__AVX512FP16__": "avx512_fp16",
          "__AMX_TILE__": "amx_tile"}


def _gcc_flags(target: str) -> set | None:
    """The MACROS flags gcc enables for -march=target; None where gcc does not know it."""
    r = subprocess.run(["g++", f"-march={target}", "-dM", "-E", "-x", "c++", os.devnull],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    defined = {line.split()[1] for line in r.stdout.splitlines() if line.startswith("#define")}
    return {flag for macro, flag in MACROS.items() if macro in defined}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_each_cpu_gets_a_level_of_the_fixed_list(target):
    flags, level = TARGETS[target]
    assert build.host_level(frozenset(flags), "x86_64") == level
    known = _gcc_flags(target)
    if known is not None:      # the table agrees with the compiler's idea of the CPU
        assert known == {f for f in flags if f in MACROS.values()}, target


def test_levels_off_x86_and_of_this_cpu():
    assert build.host_level(frozenset(V4), "aarch64") is None
    assert build.host_level() in {level for level, _ in build.HOST_LEVELS} | {None}
    assert all("-march=" not in f for p in build.launch_sources()
               for f in build.source_flags(p, build.host_level()))


def test_the_host_runner_gives_the_same_results_at_every_level(tf, tfjit):
    # The level is a run-time choice: each level's host library runs the same
    # matmul and convolution as TF's kernels (here: this CPU's level and the baseline).
    from tfjit.runtime import host, launch
    rng = np.random.default_rng(11)
    x = tf.constant(rng.standard_normal((2, 9, 9, 5), dtype=np.float32))
    w = tf.constant(rng.standard_normal((3, 3, 5, 7), dtype=np.float32))
    m = tf.constant(rng.standard_normal((7, 13), dtype=np.float64))

    def fn(x, w, m):
        y = tf.nn.conv2d(x, w, 1, "SAME")
        return y, tf.matmul(tf.cast(tf.reshape(y, [-1, 7]), tf.float64), m)
    compiled = tfjit.function(fn).compiled(x, w, m)
    assert compiled.executable.needs_host_library
    want = [t.numpy() for t in tf.function(fn)(x, w, m)]
    levels = sorted({build.host_level() or "x86-64", "x86-64"})
    try:
        for level in levels:
            path = launch.load_host_library(level)
            assert launch.host_library_in_use() == path
            got = host.run_compiled(compiled, [x.numpy(), w.numpy(), m.numpy()])
            for g, ref in zip(got, want):
                assert_matches(g, ref, rtol=1e-4, atol=1e-4, what=level)
    finally:
        launch.load_host_library()
    assert len({build.host_library_path(level=lv) for lv in levels}) == len(levels)


def _commands() -> dict:
    """{(source, level, flags): [targets]}: every real compile command of the matrix
    (level None for the op library's sources, whose flags name no CPU)."""
    _, compile_flags, _ = build._tf_flags()
    commands = {}
    for target, (flags, _) in TARGETS.items():
        level = build.host_level(frozenset(flags), "x86_64")
        for path in build.sources():
            own = path not in build.launch_sources()
            cmd = tuple(f for f in build._BASE_FLAGS + compile_flags + build.source_flags(path, level)
                        if f != "-shared")
            commands.setdefault((path, level if own else None, cmd), []).append(target)
    return commands


def test_every_source_compiles_for_every_cpu_in_the_matrix(tf, tfjit):
    # After the host runner's test (file order): a command some build of this session or
    # an earlier one already ran needs no second compile.
    from tfjit import settings
    from tfjit.runtime import launch
    commands = _commands()
    assert all(len(targets) == len(TARGETS) for (_, level, _), targets in commands.items()
               if level is None)     # the op library's flags name no CPU
    assert not any("native" in f for _, _, cmd in commands for f in cmd)
    assert len(commands) == len(build.launch_sources()) + len(build.HOST_LEVELS) * len(
        build.HOST_SOURCES + build.AOT_SOURCES)     # the host and AOT runtimes at each level
    # The op library's sources: the one command above built the library this session runs
    # (its folder is the digest of exactly those sources and flags; prebuilt or cached).
    cache = os.path.join(settings.cache_root(), "ops")
    assert launch.library_path() == build.op_library_path(cache)
    todo = {key: targets for key, targets in commands.items()
            if key[1] is not None and build.cached_object(key[0], key[1], cache) is None}

    def compile_one(item):
        (path, _, cmd), targets = item
        r = subprocess.run([build.find_compiler(), *cmd, "-fsyntax-only", path],
                           capture_output=True, text=True)
        return path, targets, r.returncode, build._error_text(r.stderr)

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        results = list(pool.map(compile_one, todo.items()))
    failed = [f"{os.path.basename(p)} for {t}: {err[:600]}" for p, t, rc, err in results if rc]
    assert not failed, "\n".join(failed)
    print(f"\n{len(commands)} commands: {len(todo)} compiled now (syntax only), the rest "
          "built before")
