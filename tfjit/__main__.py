"""``python -m tfjit build``: builds tfjit's C++ libraries now, not at first use.

For Docker images and shared machines: the op library (TfjitLaunch) and the
host library (linalg.cc, for this CPU's x86-64 level) are built against the
installed TensorFlow into tfjit's cache (``${XDG_CACHE_HOME:-~/.cache}/tfjit``),
where the first compile then finds them.  ``--into DIR`` writes them under DIR
instead (setup.py uses it to put the op library into the package).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time


def build(into: str | None, host: bool) -> list[str]:
    """Builds the libraries; returns their paths."""
    from tfjit import settings
    from tfjit.runtime import build as b
    root = into or os.path.join(settings.cache_root(), "ops")
    paths = [b.op_library_path(root, prebuilt=not into)]
    if host:
        paths.append(b.host_library_path(root))
    if into:     # a package ships the libraries, not their object files or locks
        shutil.rmtree(os.path.join(root, "objects"), ignore_errors=True)
        for path in paths:
            lock = os.path.join(os.path.dirname(path), ".lock")
            if os.path.exists(lock):
                os.unlink(lock)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tfjit", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="build the op library (and the host library) now")
    p.add_argument("--into", help="write the libraries under this folder, not the cache")
    p.add_argument("--no-host", action="store_true",
                   help="only the op library (the host runner's library builds when needed)")
    args = ap.parse_args(argv)
    from tfjit.runtime.build import BuildError
    start = time.perf_counter()
    try:
        paths = build(args.into, not args.no_host)
    except BuildError as e:
        print(f"tfjit: {e}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    from tfjit.runtime.build import gpu_kernel_note
    print(gpu_kernel_note(), file=sys.stderr)
    print(f"tfjit: built in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
