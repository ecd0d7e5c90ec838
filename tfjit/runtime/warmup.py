"""oneDNN's GEMM code, generated while LLVM compiles instead of in the first run.

TF's CPU MatMul and convolution kernels, which tfjit's dots and convolutions run
(codegen/library.py), reach oneDNN's f32 GEMM (Eigen's contraction kernel calls
``dnnl_sgemm``), and oneDNN generates that GEMM's machine code (xbyak) once per
process, at its first call.  By ``perf`` of the softmax regression step's first run
(Intel Sapphire Rapids, 2 cores), 23% of its samples were
``avx512_common_gemm_f32::get_xbyak_gemm`` and most of the rest the page faults of
fresh memory.  XLA's own dots do not pay it, so its first call did not either.

So when the JIT compiles a module that calls such a kernel
(``codegen/library.py``: ``runs_onednn_gemm``), a thread (once per
process) runs the small products then: its cost overlaps the module's code
generation and LLVM, which run on the calling thread and in the compile server.
The products are tiny and their results dropped; a failure there is ignored (the
first run then pays the cost, as before).  TF's eager kernels are thread-safe, and
the thread holds the GIL only to dispatch each op.  ``train_bench.py --compile-profile``
(2026-12-05, same machine): the first run of four train steps 16-20 ms shorter, their
first call only 5-15 ms (on 2 cores the thread slows the LLVM and emit phases it
overlaps; docs/performance.md).
"""
from __future__ import annotations

import sys
import threading

_lock = threading.Lock()
_thread: threading.Thread | None = None


def start() -> threading.Thread | None:
    """Starts the warm-up thread unless it was started before in this process; returns it.
    Not in a process that has not imported TensorFlow (tools/run_module.py's own paths):
    importing it there would cost more than it saves."""
    global _thread
    if "tensorflow" not in sys.modules:
        return None
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_run, name="tfjit-gemm-warmup", daemon=True)
            _thread.start()
        return _thread


def _run() -> None:
    """The plain product and the two transposed ones a train step's gradients run
    (whether fewer would do was not measured); the measured effect is the module
    docstring's."""
    try:
        import tensorflow as tf
        with tf.device("/CPU:0"):
            x = tf.ones([64, 64])
            for ta, tb in ((False, False), (True, False), (False, True)):
                tf.linalg.matmul(x, x, transpose_a=ta, transpose_b=tb)
    except Exception:      # noqa: BLE001 - only a cost moved; the first run pays it instead
        pass
