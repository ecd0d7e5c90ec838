"""Two tiers of the JIT's machine code: quick code for the first calls, optimised behind.

A module of at least ``TIER_BYTES`` of LLVM IR compiled through the compile server,
with no persistent-cache entry, is compiled first with ``llvm_target``'s "quick"
pipeline (O1 with the vectorisers, code generation at O0: about two thirds of LLVM's
time on the train steps measured, kernels up to 16% slower; docs/performance.md), so
its first call runs that much sooner.  The default pipeline's build is then made by a
compile server of its own (``llvm_cpu.background_servers``: at a lower priority, so
no first call of another cluster waits behind it) in a thread of this module, and
swapped into the executable once loaded: later calls run it.

The swap (``launch.Executable.swap_code``) rewrites each step's function address,
one aligned 8-byte store per step; the launch op reads a step's address once per
run of that step (launch_op.cc ``RunStep``), so a call in flight during the swap may
run some steps of each tier.  Both tiers compile the same module, so every step
reads and writes the same buffers and computes the same values, within floating-
point rounding (a reduction vectorised differently sums in another order).  The
quick code stays loaded while its executable lives: a call may still be in it.  The
persistent cache (``objcache``) stores only the optimised build.

Off with ``--tfjit_tiered_compile=false``; never with LLVM in this process, nor for
AOT objects or GPU code (their compile paths do not come here).  ``wait`` blocks until
a compiled cluster has its optimised code (introspection and dumps show that code).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading

from tfjit.codegen import llvm_cpu

log = logging.getLogger("tfjit")

# Modules smaller than this compile in the default pipeline at once: under ~100 ms of
# LLVM, where a quick tier saves a few tens of ms and costs a second compile.
TIER_BYTES = 32768
QUICK = "quick"          # the first tier's pipeline (llvm_target.PIPELINES)

_lock = threading.Lock()
_jobs: queue.Queue = queue.Queue()
_worker = [None, 0]      # the worker thread and the process it runs in (a fork has none)
_counts = {"quick": 0, "optimised": 0, "failed": 0}


@dataclasses.dataclass
class Upgrade:
    """The optimised build of one quick-tier module, pending or done."""
    build: object            # () -> llvm_cpu.MachineCode: the default pipeline's build
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    error: BaseException | None = None


def applies(text: str, compiler, enabled: bool) -> bool:
    """Whether a module of LLVM IR ``text`` gets a quick tier first: tiering ``enabled``
    (--tfjit_tiered_compile), big enough, and compiled by the compile server."""
    return enabled and len(text) >= TIER_BYTES and llvm_cpu.server(compiler) is not None


def compile_quick(text: str, symbols: list, compiler, runtime, phases, store) -> object:
    """Quick-tier code of ``text`` (``llvm_cpu.MachineCode``, pipeline "quick") whose
    ``upgrade`` builds the default pipeline's code with the background server, handing
    its object to ``store(obj, optimized_ir)`` (the persistent cache; None: none)."""
    code = llvm_cpu.compile_ir(text, symbols, compiler, runtime=runtime, phases=phases,
                               pipeline=QUICK)

    def build():
        objects: list = []
        optimised = llvm_cpu.compile_ir(text, symbols, compiler, on_object=objects.append,
                                        runtime=runtime,
                                        clients=llvm_cpu.background_servers(compiler))
        if store is not None and len(objects) == 1:
            store(objects[0], optimised.optimized_ir)
        return optimised
    code.upgrade = Upgrade(build)
    with _lock:
        _counts["quick"] += 1
    return code


def start(compiled, step_symbols: list) -> None:
    """Queues the optimised build of ``compiled`` (a ``pipeline.Compiled`` whose code is
    quick-tier), which then replaces its executable's step addresses (``step_symbols``
    name them in run order) and its ``code``."""
    upgrade = compiled.code.upgrade
    compiled.upgrade = upgrade
    with _lock:
        if _worker[0] is None or _worker[1] != os.getpid() or not _worker[0].is_alive():
            _worker[0] = threading.Thread(target=_work, name="tfjit-tiering", daemon=True)
            _worker[1] = os.getpid()
            _worker[0].start()
    _jobs.put((compiled, step_symbols, upgrade))


def _work() -> None:
    while True:
        compiled, step_symbols, upgrade = _jobs.get()
        try:
            code = upgrade.build()
            compiled.executable.swap_code([code.addresses[s] for s in step_symbols], code)
            compiled.code = code
            with _lock:
                _counts["optimised"] += 1
        except Exception as e:    # noqa: BLE001 - the quick code stays; it is correct
            upgrade.error = e
            with _lock:
                _counts["failed"] += 1
            log.warning("tfjit: the optimised build of cluster %s failed (%s); its quick "
                        "code keeps running", getattr(compiled, "name", "?"), e)
        finally:
            upgrade.done.set()
            _jobs.task_done()


def wait(compiled, timeout: float | None = None) -> bool:
    """Waits until ``compiled`` runs its optimised code (or its build failed); True once
    it is done, at once for code that was never quick-tier."""
    upgrade = getattr(compiled, "upgrade", None)
    return upgrade is None or upgrade.done.wait(timeout)


def wait_all() -> None:
    """Waits until every optimised build queued so far in this process is done."""
    with _lock:
        running = _worker[0] is not None and _worker[1] == os.getpid() and _worker[0].is_alive()
    if running:
        _jobs.join()


def stats() -> dict:
    """{"quick": modules compiled quick-tier, "optimised": swapped to optimised code,
    "failed": optimised builds that failed} in this process so far."""
    with _lock:
        return dict(_counts)
