"""tfjit-aot: compile a frozen TF graph or a SavedModel signature into an object file + header.

    tfjit-aot --graph=g.pb --config=g.config.pbtxt --cpp_class=ns::Name --out_prefix=out/name
    tfjit-aot saved_model --dir=model --tag_set=serve --signature_def_key=serving_default \\
              --cpp_class=ns::Name --output_prefix=out/name

The first form reads tfcompile's flags and ``tf2xla.Config`` (see config.py), the
second ``saved_model_cli aot_compile_cpu``'s.  Both write ``<prefix>.o`` (a
relocatable x86-64 object) and ``<prefix>.h``, and for a graph with a matmul or a
convolution ``<prefix>_runtime.a`` (their code: aot/runtime.py), which the program
links after the object.  Exit status: 0 written, 1 the
graph/config/model cannot be compiled (the message says why), 2 bad usage.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

from tfjit.aot import compile as aot_compile
from tfjit.aot import runtime as aot_runtime
from tfjit.aot import config, frontend, header
from tfjit.aot.config import AotError


def _target_flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--target_triple", default="", help="LLVM target triple (default: the host's; x86-64 only)")
    ap.add_argument("--target_cpu", default="", help="LLVM CPU name, e.g. x86-64, skylake-avx512 "
                    "(default: this machine's CPU)")
    ap.add_argument("--target_features", default="", help="LLVM features, e.g. +avx2,+fma "
                    "(default: this machine's when the CPU is defaulted)")
    ap.add_argument("--cpp_class", required=True, help="C++ class to generate, e.g. ns::Name")
    ap.add_argument("--entry_point", default="", help="prefix of the C entry points "
                    "(default: the class name with '::' as '_', lower case)")


def _graph_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tfjit-aot", description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", required=True, help="frozen GraphDef (binary, or text for .pbtxt)")
    ap.add_argument("--config", required=True, help="tf2xla.Config (text or binary)")
    ap.add_argument("--out_prefix", required=True, help="writes <prefix>.o and <prefix>.h")
    _target_flags(ap)
    return ap


def _saved_model_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tfjit-aot saved_model",
                                 description="compile one SavedModel signature (like "
                                             "saved_model_cli aot_compile_cpu)")
    ap.add_argument("--dir", required=True, help="SavedModel directory")
    ap.add_argument("--tag_set", default="serve", help="comma-separated MetaGraph tags")
    ap.add_argument("--signature_def_key", default="serving_default")
    ap.add_argument("--output_prefix", "--out_prefix", dest="out_prefix", required=True,
                    help="writes <prefix>.o and <prefix>.h")
    _target_flags(ap)
    return ap


def entry_prefix(cpp_class: str, given: str = "") -> str:
    if given:
        if not config._IDENT.match(given):
            raise AotError(f"--entry_point={given!r} is not a C identifier")
        return given
    namespaces, cls = header.split_class(cpp_class)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", "_".join(namespaces + [cls])).lower()


def build(graph_def, spec: config.Spec, args, source: str) -> aot_compile.Artifact:
    """Compiles and writes ``<out_prefix>.o`` and ``.h``; returns the artifact."""
    prefix = entry_prefix(args.cpp_class, args.entry_point)
    cluster = frontend.from_graph_def(graph_def, spec)
    target = aot_compile.Target(args.target_triple, args.target_cpu, args.target_features)
    artifact = aot_compile.compile_cluster(cluster, prefix, target)
    out_dir = os.path.dirname(args.out_prefix)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    if artifact.runtime:          # a dot or convolution: the static runtime beside the object
        path = args.out_prefix + "_runtime.a"
        artifact.runtime_level = aot_runtime.build_library(path, artifact.cpu)
        artifact.runtime_library = os.path.basename(path)
    text = header.render(artifact, args.cpp_class, source)
    for suffix, data in ((".o", artifact.object_code), (".h", text.encode())):
        path = args.out_prefix + suffix
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)          # never leave a half-written artefact behind
    return artifact


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    saved = bool(argv) and argv[0] == "saved_model"
    ap = _saved_model_parser() if saved else _graph_parser()
    try:
        args = ap.parse_args(argv[1:] if saved else argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        if saved:
            graph_def, spec = frontend.from_saved_model(args.dir, args.tag_set, args.signature_def_key)
            source = f"SavedModel {args.dir} [{args.tag_set}] signature {args.signature_def_key}"
        else:
            spec = config.read(args.config)
            graph_def = frontend.read_graph_def(args.graph)
            source = f"{os.path.basename(args.graph)} with {os.path.basename(args.config)}"
        artifact = build(graph_def, spec, args, source)
    except AotError as e:
        print(f"tfjit-aot: error: {e}", file=sys.stderr)
        return 1
    extra = f" and {args.out_prefix}_runtime.a" if artifact.runtime_library else ""
    print(f"tfjit-aot: wrote {args.out_prefix}.o, {args.out_prefix}.h{extra} "
          f"({artifact.num_kernels} kernel(s), entry points {artifact.prefix}_*)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
