"""TensorFlow's XLA op tests, run against tfjit auto-clustering.

    python tools/xla_op_tests.py --tests-dir ~/src/tensorflow/tensorflow/compiler/tests \\
        unary_ops_test binary_ops_test --json /tmp/xla.json

``--files-from LIST`` reads more file names from LIST (one or more a line, ``#``
comments), e.g. ``tools/xla_op_tests_files.txt``, the files chosen for the 2026-12-04
runs.  ``--logs DIR`` keeps each file's output and records as the file ends.

Where the tests come from: ``tensorflow/compiler/tests/*_test.py`` in the TensorFlow
repository (https://github.com/tensorflow/tensorflow, Apache-2.0), the op tests
TF's XLA runs on its ``XLA_CPU`` device.  They are not part of tfjit: check out (or
download) that folder and pass it as ``--tests-dir``; ``test_utils.py`` and other
helpers the files import from ``tensorflow.compiler.tests`` are read from there too::

    git clone --depth 1 --filter=blob:none --sparse https://github.com/tensorflow/tensorflow
    git -C tensorflow sparse-checkout set tensorflow/compiler/tests

Some files import scipy or absl's parameterized (install them where TF runs).  The
files follow TF's numpy: with numpy 2 a few fail in every mode (``np.NINF``, Python
ints out of a dtype's range); ``--mode xla`` runs the same files under TF's own XLA
auto-clustering, and ``--baseline`` of that run's ``--json`` gives the pass rate over
the tests XLA:CPU passes here.

How they run: ``tools/xla_test_standin.py`` replaces their ``xla_test.XLATestCase``:
the same type sets as TF's cpu backend (``--types=xla_cpu``, the default: f16, f32,
f64, u8, i8, i32, i64, bool, c64, c128 as numpy types; ``core``: the old f32, f64,
i32, i64, bool list; or a ``DT_*`` list), but ``self.session()`` graphs run on TF's
CPU device with tfjit auto-clustering on for every graph (``set_jit("autoclustering")``,
``--tfjit_min_cluster_size=1``, lazy compilation off, no megamorphic cut-off), so that
each op under test is a cluster of its own, as XLA compiles it.

Each file runs in a subprocess of its own (``--timeout`` seconds) through unittest;
each test is recorded as pass / fail / error / skip / timeout, with where it ran:

* ``tfjit``: every launch compiled and ran tfjit's kernels, or raised the op's error
  itself (an operand TF's kernel refuses, e.g. a reduction axis out of range: tfjit
  raises TF's InvalidArgumentError, as XLA does), and no op of the test's graphs was
  left to TF;
* ``partial``: some launch ran tfjit's kernels, but some cluster fell back to TF or
  some op was refused;
* ``tf``: no tfjit kernel ran and tfjit raised no error (nothing clustered, or every
  cluster fell back);
* ``none``: no graph reached the clustering pass: the test ran ops eagerly, raised
  its expected error while building the graph (TF's shape inference), or ran
  nothing (e.g. a dtype loop over an empty set).  No compiler, tfjit or XLA,
  could have run such a test; the table's "tfjit % ran" leaves them out.

The signal: the launch cache is cleared before each test, so every TfjitLaunch node
asks the compile service at its first run, which hands it an executable, makes it
run its original subgraph, or raises the op's error (each counted here), and every
clustering pass run is recorded with the reasons it refused ops.  Eager ops are never clustered (tfjit, as
XLA, leaves them to TF), so tests that run ops eagerly count as ``none``.

Prints a table per file (tests, passed, failed, skipped, in tfjit), the commonest
failure reasons (exception type and first line, numbers folded) and the commonest
reasons that passing tests ran in TF; ``--json`` writes every test's record.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_FILES = ("unary_ops_test", "binary_ops_test", "ternary_ops_test", "reduce_ops_test",
                 "matrix_band_part_test", "segment_reduction_ops_test")
# The types TF's build_defs.bzl gives the cpu backend (--types=...; TF 2.15 and later):
# no bfloat16 on CPU.  Quantized types reach all_tf_types only, as in TF.
XLA_CPU_TYPES = ("DT_HALF,DT_FLOAT,DT_DOUBLE,DT_UINT8,DT_QUINT8,DT_INT8,DT_QINT8,DT_INT32,"
                 "DT_QINT32,DT_INT64,DT_BOOL,DT_COMPLEX64,DT_COMPLEX128")
# The cpu list of TF 1.x-2.2, which the first outside measurement used.
CORE_TYPES = "DT_FLOAT,DT_DOUBLE,DT_INT32,DT_INT64,DT_BOOL"
# What each --mode puts into the child's environment (tfjit's own flags are set from
# code, in Probe.install).  xla: TF's own XLA auto-clustering, the baseline.
MODE_ENV = {"tfjit": {"TF_XLA_FLAGS": "--tf_xla_auto_jit=-1"},
            "xla": {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit "
                    "--tf_xla_min_cluster_size=1 --tf_xla_enable_lazy_compilation=false"},
            "tf": {"TF_XLA_FLAGS": "--tf_xla_auto_jit=-1"}}
# Methods TF's TestCase defines with test-like names; TF's own runs skip them.
NOT_TESTS = ("test_session", "test_scope")
# Ops that compute nothing: their refusal never sends a test to TF.  TfjitRandomReserve
# holds a stateful random node's counter (as VarHandleOp a variable) and hands it to the
# compiled fill (graph/random_state.py).
_QUIET_OPS = frozenset({"NoOp", "Placeholder", "PlaceholderWithDefault", "_Arg", "_Retval",
                        "Const", "Identity", "VarHandleOp", "_Recv", "_Send", "TfjitRandomReserve"})


# -- Child: one test file in this process ------------------------------------------

class Probe:
    """Counts, per test, what tfjit did: clustering passes and what each launch ran."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.graphs = 0
        self.clusters = 0
        self.compiled = 0
        self.raised = 0                          # launches tfjit answered with the op's error
        self.fallbacks = collections.Counter()   # reason -> launches
        self.refused = collections.Counter()     # "Op: reason" -> nodes

    def install(self):
        import tfjit
        from tfjit.api import service
        from tfjit.graph import auto
        from tfjit.runtime import launch
        tfjit.config.set_flags(tfjit_min_cluster_size=1, tfjit_enable_lazy_compilation=False)
        tfjit.config.set_jit("autoclustering")
        # Every test builds new graphs of the same ops: a per-process cut-off would
        # send later tests to TF for what earlier ones compiled.
        service.MEGAMORPHIC_COMPILES = 1 << 60
        self._launch = launch
        on_miss = service.SERVICE.on_miss
        cluster_graph = auto.cluster_graph

        def counting_on_miss(*args, **kwargs):
            try:
                exe = on_miss(*args, **kwargs)
            except launch.Fallback as e:
                self.fallbacks[_fold(str(e))[:160]] += 1
                raise
            except Exception:    # the op's InvalidArgumentError, raised by tfjit (as XLA)
                self.raised += 1
                raise
            self.compiled += 1
            return exe

        def counting_cluster_graph(graph_def, *args, **kwargs):
            result = cluster_graph(graph_def, *args, **kwargs)
            self.graphs += 1
            self.clusters += len(result.specs)
            for name, why in result.marks.items():
                op = result.graph.nodes[name].op
                if why and op not in _QUIET_OPS:
                    self.refused[f"{op}: {why}"[:200]] += 1
            return result

        auto.cluster_graph = counting_cluster_graph
        launch.set_compile_callback(counting_on_miss)

    def start(self):
        self.reset()
        if hasattr(self, "_launch"):
            self._launch.clear_cache()    # every launch node asks the service again

    def where(self) -> str:
        if not (self.compiled or self.raised):
            return "tf" if self.graphs or self.fallbacks else "none"
        return "partial" if self.fallbacks or self.refused else "tfjit"

    def record(self) -> dict:
        if not hasattr(self, "_launch"):     # not installed: --mode xla or tf
            return {"where": "-"}
        return {"where": self.where(), "graphs": self.graphs, "clusters": self.clusters,
                "compiled": self.compiled, "raised": self.raised, "fallbacks": dict(self.fallbacks),
                "refused": dict(self.refused)}


def _fold(text: str) -> str:
    """A message with its numbers and hex addresses folded, for grouping."""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x#", text)
    return re.sub(r"(?<![A-Za-z_])[-+]?\d+(\.\d+)?([eE][-+]?\d+)?", "#", text)


def _reason(exc_info) -> str:
    """``Type: first telling line`` of an exception, numbers folded.  For TF's run-time
    errors that is the op's message, which follows the "Graph execution error" banner
    and the Python trace of where the node was defined, before ``[[{{node ...}}]]``."""
    kind, value, _ = exc_info
    lines = [ln.strip() for ln in str(value).splitlines() if ln.strip()]
    first = next((ln for ln in lines if not ln.startswith("Not equal to tolerance")),
                 lines[0] if lines else "")
    if first.startswith("Graph execution error"):
        node = next((k for k, ln in enumerate(lines) if ln.startswith("[[")), len(lines))
        first = lines[node - 1] if node > 1 else first
    return f"{kind.__name__}: {_fold(first)[:160]}"


def _make_result_class(probe: Probe, out, args_child: str):
    import unittest

    class Recorder(unittest.TestResult):
        """Writes one JSON line per test as it finishes (so a timeout keeps the rest)."""

        def startTest(self, test):
            super().startTest(test)
            self._status, self._why, self._t0 = "pass", "", time.time()
            out.write(json.dumps({"started": test.id().split(args_child + ".", 1)[-1]}) + "\n")
            out.flush()
            probe.start()

        def _set(self, status, err=None, why=""):
            if self._status in ("pass", "skip"):
                self._status, self._why = status, why or (_reason(err) if err else "")

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._set("fail", err)

        def addError(self, test, err):
            super().addError(test, err)
            self._set("error", err)

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            self._set("skip", why=str(reason)[:160])

        def addSubTest(self, test, subtest, err):
            super().addSubTest(test, subtest, err)
            if err is not None:
                failed = issubclass(err[0], test.failureException)
                self._set("fail" if failed else "error", err)

        def stopTest(self, test):
            super().stopTest(test)
            rec = {"test": test.id().split(args_child + ".", 1)[-1], "status": self._status, "why": self._why,
                   "seconds": round(time.time() - self._t0, 3)}
            rec.update(probe.record())
            out.write(json.dumps(rec) + "\n")
            out.flush()

    return Recorder


def run_child(args) -> int:
    """Loads one test file with the stand-in harness and runs it, one JSON line a test."""
    import importlib.util
    import types
    import unittest

    sys.path.insert(0, REPO)
    from absl import flags
    import tensorflow as tf  # noqa: F401  (before the test file, as its imports do)

    from tools import xla_test_standin
    xla_test_standin.configure(args.types)
    package = types.ModuleType("tensorflow.compiler.tests")
    package.__path__ = [os.path.abspath(args.tests_dir)]
    package.xla_test = xla_test_standin
    sys.modules["tensorflow.compiler.tests"] = package
    sys.modules["tensorflow.compiler.tests.xla_test"] = xla_test_standin
    flags.FLAGS.mark_as_parsed()

    probe = Probe()
    if args.mode == "tfjit":
        probe.install()
    path = os.path.join(args.tests_dir, args.child + ".py")
    spec = importlib.util.spec_from_file_location("tensorflow.compiler.tests." + args.child, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    with open(args.out, "w") as out:
        try:
            spec.loader.exec_module(module)
            from absl.testing import absltest
            suite = absltest.TestLoader().loadTestsFromModule(module)
        except Exception as e:   # noqa: BLE001 - an unloadable file is one error row
            out.write(json.dumps({"test": "<load>", "status": "error",
                                  "why": _reason(sys.exc_info()), "where": "tf"}) + "\n")
            print(f"{args.child}: cannot load: {e}", file=sys.stderr)
            return 1
        pattern = re.compile(args.filter) if args.filter else None
        tests = [t for t in _flatten(suite) if t.id().rsplit(".", 1)[-1] not in NOT_TESTS
                 and (pattern is None or pattern.search(t.id()))]
        result = _make_result_class(probe, out, args.child)()
        unittest.TestSuite(tests).run(result)
    return 0


def _flatten(suite):
    for item in suite:
        if hasattr(item, "__iter__"):
            yield from _flatten(item)
        else:
            yield item


# -- Parent: one subprocess per file, then the tables ------------------------------

def run_file(name: str, args) -> list:
    """The records of one file's tests; a timeout marks the running test and stops."""
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as tmp:
        out_path = tmp.name
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--out", out_path,
           "--tests-dir", args.tests_dir, "--types", args.types, "--mode", args.mode]
    if args.filter:
        cmd += ["--filter", args.filter]
    t0 = time.time()
    log = open(os.path.join(args.logs, name + ".log"), "w") if args.logs else subprocess.DEVNULL
    try:
        env = {k: v for k, v in os.environ.items() if k != "TFJIT_FLAGS"}
        env.update(MODE_ENV[args.mode])
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout,
                              cwd=REPO, env=env)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    finally:
        if log is not subprocess.DEVNULL:
            log.close()
    records, started = [], None
    with open(out_path) as f:
        for line in f:
            rec = json.loads(line)
            if "started" in rec:
                started = rec["started"]
            else:
                records.append(rec)
                started = None
    os.unlink(out_path)
    if started is not None:      # the test that was running when the process ended
        status = "timeout" if rc == "timeout" else "error"
        why = (f"timeout: file past {args.timeout} s" if rc == "timeout"
               else f"crash: process exited with {rc}")
        records.append({"test": started, "status": status, "why": why, "where": "tf"})
    elif rc not in (0, "timeout") and not records:
        records.append({"test": "<run>", "status": "error",
                        "why": f"crash: process exited with {rc}", "where": "tf"})
    for rec in records:
        rec["file"] = name
    if args.logs:        # each file's records as it ends: a run stopped early keeps them
        with open(os.path.join(args.logs, name + ".jsonl"), "w") as f:
            f.writelines(json.dumps(rec) + "\n" for rec in records)
    print(f"  {name}: {len(records)} tests in {time.time() - t0:.0f} s", file=sys.stderr)
    return records


def summarize(records: list, top: int, baseline: dict | None = None) -> str:
    """The per-file table and the grouped reasons.  ``baseline``: {(file, test): status}
    of another run; "base ok" counts the tests that passed there, "of base" the
    share of those that pass here."""
    files = list(dict.fromkeys(r["file"] for r in records))
    head = ["file", "tests", "passed", "failed", "skipped", "pass %", "tfjit", "partial",
            "none", "tfjit %", "tfjit % ran", "any %"]
    rows = [tuple(head + (["base ok", "of base"] if baseline is not None else []))]
    totals = collections.Counter()
    for name in files + ["TOTAL"]:
        mine = [r for r in records if name == "TOTAL" or r["file"] == name]
        c = collections.Counter(r["status"] for r in mine)
        w = collections.Counter(r.get("where") for r in mine if r["status"] == "pass")
        row = [name, len(mine), c["pass"], c["fail"] + c["error"] + c["timeout"], c["skip"],
               _pct(c["pass"], len(mine) - c["skip"]), w["tfjit"], w["partial"], w["none"],
               _pct(w["tfjit"], c["pass"]), _pct(w["tfjit"], c["pass"] - w["none"]),
               _pct(w["tfjit"] + w["partial"], c["pass"])]
        if baseline is not None:
            base = [r for r in mine if baseline.get((r["file"], r["test"])) == "pass"]
            row += [len(base), _pct(sum(r["status"] == "pass" for r in base), len(base))]
        rows.append(tuple(row))
        totals = c
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(v).rjust(w) if i else str(v).ljust(w)
                       for i, (v, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(-1, "-" * len(lines[0]))
    lines.append(f"pass %: of the tests run (skips excluded); tfjit: passing tests whose every "
                 f"launch ran tfjit kernels (or raised the op's error), no op left to TF; "
                 f"partial: some did; none: no graph reached the clustering pass; tfjit % ran: "
                 f"tfjit / (passed - none); any %: (tfjit + partial) / passed; "
                 f"{totals['timeout']} timeouts")
    failing = [r for r in records if r["status"] in ("fail", "error", "timeout")]
    lines += ["", f"Failure reasons (top {top} of {len(failing)} failing tests):"]
    lines += _grouped(failing, lambda r: [f"[{r.get('where', '?')}] {r['why']}"], top)
    in_tf = [r for r in records if r["status"] == "pass"
             and r.get("where") in ("tf", "partial", "none")]
    lines += ["", f"Why passing tests ran (partly) in TF ({len(in_tf)} tests; a test may "
              "count under several reasons):"]
    lines += _grouped(in_tf, _tf_reasons, top)
    return "\n".join(lines)


def _tf_reasons(r: dict) -> list:
    out = [f"refused {k}" for k in r.get("refused", {})]
    out += [f"fallback: {k}" for k in r.get("fallbacks", {})]
    if not out:
        out = ["no graph reached the clustering pass (eager ops, an error while building "
               "the graph, or nothing run)" if not r.get("graphs")
               else "nothing clustered in the test's graphs"]
    return out


def _grouped(records: list, keys, top: int) -> list:
    counts, example = collections.Counter(), {}
    for r in records:
        for k in dict.fromkeys(keys(r)):
            counts[k] += 1
            example.setdefault(k, f"{r['file']}: {r['test']}")
    return [f"  {n:5d}  {k}\n         e.g. {example[k]}" for k, n in counts.most_common(top)]


def _pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f}" if b else "-"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", help="test files by name (unary_ops_test or "
                   "unary_ops_test.py); 'all': every *_test.py in --tests-dir; default: "
                   + ", ".join(DEFAULT_FILES))
    p.add_argument("--files-from", help="a text file naming test files, one a line "
                   "(# starts a comment); added to those on the command line")
    p.add_argument("--tests-dir", required=True, help="a copy of tensorflow/compiler/tests")
    p.add_argument("--types", default="xla_cpu", help="xla_cpu (default), core, or DT_* list")
    p.add_argument("--timeout", type=float, default=900, help="seconds per file")
    p.add_argument("--mode", choices=sorted(MODE_ENV), default="tfjit",
                   help="tfjit (default); xla: TF's XLA auto-clustering; tf: TF's executor")
    p.add_argument("--baseline", help="a --json file of another run (e.g. --mode xla): "
                   "adds the pass rate over the tests that passed there")
    p.add_argument("--filter", help="regex on test ids (Class.method)")
    p.add_argument("--json", help="write every test's record here")
    p.add_argument("--logs", help="directory for each file's stdout/stderr (NAME.log) and "
                   "records (NAME.jsonl, written as the file ends)")
    p.add_argument("--top", type=int, default=15, help="reasons listed")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.types = {"xla_cpu": XLA_CPU_TYPES, "core": CORE_TYPES}.get(args.types, args.types)
    if args.child:
        return run_child(args)
    listed = list(args.files)
    if args.files_from:
        with open(args.files_from) as f:
            listed += [w for line in f for w in line.split("#", 1)[0].split()]
    names = [f[:-3] if f.endswith(".py") else f for f in listed] or list(DEFAULT_FILES)
    if names == ["all"]:
        names = sorted(f[:-3] for f in os.listdir(args.tests_dir) if f.endswith("_test.py"))
    missing = [n for n in names if not os.path.exists(os.path.join(args.tests_dir, n + ".py"))]
    if missing:
        p.error(f"not in {args.tests_dir}: {', '.join(missing)}")
    if args.logs:
        os.makedirs(args.logs, exist_ok=True)
    records = []
    for name in names:
        records += run_file(name, args)
    baseline = None
    if args.baseline:
        with open(args.baseline) as f:
            baseline = {(r["file"], r["test"]): r["status"] for r in json.load(f)["records"]}
    print(summarize(records, args.top, baseline))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"types": args.types, "mode": args.mode, "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    sys.exit(main())
