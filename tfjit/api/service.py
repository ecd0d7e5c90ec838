"""The compile service: what the launch op calls back on a cache miss.

It owns the process-wide compile cache, keyed by cluster key + input signature
+ the values of the cluster's constant arguments (the cluster key is a hash of
the cluster definition, which contains every other compile-time constant),
bounded LRU.  Front doors register cluster definitions
and may compile ahead (shapes fully known); the launch op compiles lazily
through ``on_miss`` otherwise.  The runtime never imports the compiler: this
module hands ``on_miss`` to it.

Nodes that auto mode made carry their original subgraph, so for them
``on_miss`` applies XLA's compile policy (see ``_policy``): lazy compilation,
megamorphic clusters and compile failures all run the original subgraph.

Constant arguments (graph/const_args.py: a Reshape's shape or reduction axes
fed at run time) are compiled once per value, as XLA does, up to
``--tfjit_max_constant_argument_variants`` values per cluster; past that, auto
mode runs a new value in TensorFlow (warned once) and must-compile is an error.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import os
import threading

import numpy as np

from tfjit import settings
from tfjit.runtime import launch, launch_gpu

log = logging.getLogger("tfjit")

MEGAMORPHIC_COMPILES = 10       # a cluster compiled more often than this ...
MEGAMORPHIC_RUNS_PER_COMPILE = 50   # ... and run fewer times per compile stays on the fallback


@dataclasses.dataclass
class _ClusterState:
    """What auto mode's compile policy remembers about one cluster."""
    compiles: int = 0
    requests: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    last_signature: tuple | None = None
    megamorphic: bool = False
    failed: bool = False
    too_many_variants: bool = False     # warned that new constant values run in TensorFlow


class TooManyVariants(Exception):
    """A cluster has compiled as many values of its constant arguments as it may."""


class CompileService:
    def __init__(self):
        self._lock = threading.RLock()
        self._compiled = collections.OrderedDict()   # (key, signature) -> pipeline.Compiled
        self._defs: dict = {}                         # key -> cluster_def bytes
        self.names: dict = {}                         # key -> cluster name (for logs)
        self._describers: dict = {}                   # key -> fn(LoweringError) -> message
        self.latest: dict = {}                        # key -> its latest pipeline.Compiled
        self.compile_counts = collections.Counter()   # key -> compilations
        self.variants: dict = collections.defaultdict(set)   # key -> constant values compiled
        self.fallbacks = collections.Counter()        # key -> times the fallback was chosen
        self._states: dict = collections.defaultdict(_ClusterState)
        self.installed = False

    def install(self) -> None:
        with self._lock:
            if not self.installed:
                from tfjit import pipeline
                from tfjit.codegen import llvm_cpu
                llvm_cpu.start_server(pipeline.jit_compiler())      # it starts up while the op library loads
                launch.load(os.path.join(settings.cache_root(), "ops"))
                launch.set_compile_callback(self.on_miss)
                launch_gpu.set_gpu_compile_callback(self.on_miss_gpu)   # a CUDA build only
                self.installed = True

    def register(self, key: str, cluster_def: bytes, name: str | None = None,
                 describe=None) -> None:
        """``describe(LoweringError) -> str``: the user's message when a must-compile
        node of this cluster fails to lower at run time (it can name the source line)."""
        self._defs[key] = cluster_def
        if name:
            self.names.setdefault(key, name)
        if describe is not None:
            self._describers[key] = describe

    def definition(self, key: str) -> bytes | None:
        """The registered cluster definition (serialised GraphDef), if any."""
        return self._defs.get(key)

    def get(self, key: str, signature: tuple, name: str = "cluster", constants: dict | None = None,
            max_kernels: int = 0):
        """The compiled cluster for ``signature`` ((DType, shape) pairs), compiling on a miss
        (``pipeline.TooLarge`` past ``max_kernels`` kernels, when given).

        ``constants`` {input: numpy value}: the values of its constant arguments; a value
        not compiled before, once the cluster has compiled
        ``--tfjit_max_constant_argument_variants`` of them, raises TooManyVariants."""
        from tfjit import pipeline   # the compiler, imported only when compiling
        from tfjit.api import dump
        values = _values_key(constants)
        entry = (key, signature, values)
        with self._lock:
            hit = self._compiled.get(entry)
            if hit is not None:
                self._compiled.move_to_end(entry)
                return hit
            bound = settings.flags().tfjit_max_constant_argument_variants
            if values and values not in self.variants[key] and len(self.variants[key]) >= bound:
                raise TooManyVariants(
                    f"tfjit cluster {self.names.get(key, key)}: its constant arguments (inputs "
                    f"{', '.join(str(v[0]) for v in values)}: values that fix shapes, axes or "
                    f"bounds, fed at run time) have taken more than {bound} values, and each "
                    "value is compiled separately (--tfjit_max_constant_argument_variants)")
            passes = dump.pass_hook()      # None unless --tfjit_dump_pass_re asks for it
            compiled = pipeline.compile_cluster(self._defs[key], list(signature), name,
                                                after_pass=passes, constants=constants,
                                                max_kernels=max_kernels)
            if values:
                self.variants[key].add(values)
            self._compiled[entry] = compiled
            self.latest[key] = compiled
            self.compile_counts[key] += 1
            dump.maybe_dump(compiled, passes)
            while len(self._compiled) > max(settings.flags().tfjit_compile_cache_size, 1):
                # Only the introspection record goes: the runtime keeps every executable it
                # has handed to the launch op alive, since kernels may still be running it.
                self._compiled.popitem(last=False)
            return compiled

    def compiled_with(self, key: str, constants: dict):
        """The compiled cluster ``key`` for these values of its constant arguments (the
        latest of any signature), or None when none is in the in-memory cache."""
        values = _values_key(constants)
        with self._lock:
            found = [c for (k, _, v), c in self._compiled.items() if k == key and v == values]
        return found[-1] if found else None

    def forget_compiled(self) -> None:
        """Empties the in-memory cache so the next ``get`` compiles again (through the
        persistent cache, when one is on); executables already handed out stay alive."""
        with self._lock:
            self._compiled.clear()

    def on_miss(self, cluster: str, cluster_def: bytes, signature: list, *, executions: int = 0,
                can_fall_back: bool = False, constants: dict | None = None):
        """Runtime callback: signature is [(dtype_enum, dims)] from the launch op,
        ``constants`` {input: bytes} the values of its constant arguments."""
        from tfjit.pipeline import signature_of
        if cluster not in self._defs:
            if not cluster_def:
                raise KeyError(f"unknown tfjit cluster {cluster} and no definition in the node")
            self.register(cluster, cluster_def)
        sig = tuple(signature_of([d for d, _ in signature], [s for _, s in signature]))
        values = _constant_values(sig, constants or {})
        if not can_fall_back:      # must-compile: every failure is the user's error
            from tfjit.lower.graph_to_ir import LoweringError
            try:
                return self.get(cluster, sig, name=self.names.get(cluster, "cluster"),
                                constants=values).executable
            except TooManyVariants as e:
                raise launch.CompileError(f"{e}; pass such values as Python numbers or "
                                          "constants, or raise the bound") from None
            except LoweringError as e:
                describe = self._describers.get(cluster)
                if describe is None:
                    raise
                raise launch.CompileError(describe(e)) from None
        with self._lock:
            return self._policy(cluster, signature, executions, values)

    def on_miss_gpu(self, cluster: str, cluster_def: bytes, signature: list, *, arch: str,
                    executions: int = 0, can_fall_back: bool = False,
                    constants: dict | None = None):
        """The GPU kernel's callback (launch_op_gpu.cc; not yet run on a GPU): the cluster
        as PTX for ``arch``.  A cluster the GPU target refuses is the user's error in
        must-compile and runs the original subgraph in auto mode (warned once, not
        retried); auto mode's lazy and megamorphic policy is the CPU's alone so far."""
        from tfjit import pipeline
        if cluster not in self._defs:
            if not cluster_def:
                raise KeyError(f"unknown tfjit cluster {cluster} and no definition in the node")
            self.register(cluster, cluster_def)
        sig = tuple(pipeline.signature_of([d for d, _ in signature], [s for _, s in signature]))
        name = self.names.get(cluster, "cluster")
        try:
            compiled = pipeline.compile_cluster_gpu(self._defs[cluster], list(sig), name, arch,
                                                    _constant_values(sig, constants or {}))
            return compiled.executable()
        except Exception as e:   # noqa: BLE001 - every failure is the user's or a fallback
            if not can_fall_back:
                raise launch.CompileError(f"tfjit cluster {name} cannot run on the GPU "
                                          f"({arch}): {e}") from None
            state = self._states[cluster]
            if not state.failed:
                log.warning("tfjit: cluster %s runs in TensorFlow on the GPU (%s: %s)", name,
                            type(e).__name__, e)
            state.failed = True
            return self._fall_back(cluster, f"the GPU cannot run it: {e}", remember=True)

    def _policy(self, key: str, signature: list, executions: int, constants: dict | None = None):
        """Auto mode: compile, or run the original subgraph (``launch.Fallback``).

        As XLA: the first signature compiles at its first run; later new
        signatures compile at their second request (lazy compilation, so a shape
        seen once costs no compile); a cluster compiled more than
        ``MEGAMORPHIC_COMPILES`` times with fewer than
        ``MEGAMORPHIC_RUNS_PER_COMPILE`` runs per compile is megamorphic and
        stays on the fallback. Any compile failure falls back for that
        signature, warned once per cluster, and is not retried; so does a value
        of the constant arguments past the bound (``get``'s TooManyVariants).
        """
        from tfjit.pipeline import signature_of
        flags = settings.flags()
        state = self._states[key]
        name = self.names.get(key, key[:12])
        sig = tuple((d, tuple(s)) for d, s in signature) + _values_key(constants)
        state.requests[sig] += 1
        if state.megamorphic:
            return self._fall_back(key, "megamorphic", remember=True)
        if (state.compiles > MEGAMORPHIC_COMPILES
                and executions < MEGAMORPHIC_RUNS_PER_COMPILE * state.compiles):
            state.megamorphic = True
            log.warning("tfjit: cluster %s is megamorphic (%d compiles, %d runs): it runs in "
                        "TensorFlow from now on", name, state.compiles, executions)
            return self._fall_back(key, "megamorphic", remember=True)
        if flags.tfjit_enable_lazy_compilation and state.compiles and state.requests[sig] < 2:
            return self._fall_back(key, "lazy compilation: compiled on the next request",
                                   remember=False)
        from tfjit.lower.graph_to_ir import LoweringError
        from tfjit.pipeline import TooLarge
        try:
            compiled = self.get(key, tuple(signature_of([d for d, _ in signature],
                                                        [s for _, s in signature])), name=name,
                                constants=constants, max_kernels=flags.tfjit_auto_max_kernels)
        except TooManyVariants as e:
            if not state.too_many_variants:
                log.warning("%s: new values run in TensorFlow", e)
            state.too_many_variants = True
            return self._fall_back(key, str(e), remember=True)
        except LoweringError as e:
            if not e.invalid:
                return self._compile_failed(key, state, name, e, flags)
            # TF's kernel would raise this error too: raise it, as XLA does, in TF's words.
            raise launch.CompileError(f"{e.reason}\n\t [[{{{{node {e.node}}}}}]]") from None
        except TooLarge as e:    # not a failure: the flags' bound (not tfjit_fallback's business)
            if not state.failed:
                log.warning("tfjit: cluster %s runs in TensorFlow: %s", name, e)
            state.failed = True
            return self._fall_back(key, f"too large: {e}", remember=True)
        except Exception as e:   # noqa: BLE001 - auto mode: any failure falls back
            return self._compile_failed(key, state, name, e, flags)
        if state.compiles == 0:
            log.info("tfjit: Compiled cluster using tfjit! (%s, %d kernels, %.1f ms)",
                     name, compiled.num_kernels, 1e3 * compiled.seconds)
        else:
            log.info("tfjit: recompiled cluster %s: %s", name, _why_recompile(state.last_signature, sig))
        state.compiles += 1
        state.last_signature = sig
        return compiled.executable

    def _compile_failed(self, key: str, state, name: str, e: Exception, flags):
        """Auto mode's answer to a failed compile: the original subgraph, warned once."""
        if not flags.tfjit_fallback:
            raise e
        if not state.failed:
            log.warning("tfjit: cluster %s runs in TensorFlow (compilation failed: %s: %s)",
                        name, type(e).__name__, e)
        state.failed = True
        return self._fall_back(key, f"compilation failed: {e}", remember=True)

    def _fall_back(self, key: str, reason: str, remember: bool):
        self.fallbacks[key] += 1
        raise launch.Fallback(reason, remember)

    def cluster_state(self, key: str) -> _ClusterState:
        return self._states[key]


def _values_key(constants: dict | None) -> tuple:
    """A hashable key of constant arguments' values: ((input, dtype, shape, bytes), ...)."""
    return tuple((k, str(v.dtype), v.shape, v.tobytes()) for k, v in sorted((constants or {}).items()))


def _constant_values(signature: tuple, constants: dict) -> dict:
    """{input: numpy value} from the launch op's {input: bytes}, typed by the signature."""
    out = {}
    for k, data in constants.items():
        dtype, shape = signature[k]
        out[k] = np.frombuffer(data, dtype=dtype.numpy()).reshape(shape).copy()
    return out


def _why_recompile(old, new) -> str:
    if old is None:
        return "first signature"
    for k, (a, b) in enumerate(zip(old, new)):
        if len(a) == 4:          # constant arguments' values (_values_key) follow the inputs
            if a != b:
                return f"constant argument {a[0]} changed value"
            continue
        (d0, s0), (d1, s1) = a, b
        if d0 != d1:
            return f"input {k} dtype changed from enum {d0} to {d1}"
        if s0 != s1:
            return f"input {k} shape changed from {list(s0)} to {list(s1)}"
    if len(old) != len(new):
        return f"{len(new)} inputs instead of {len(old)}"
    return "same signature"


SERVICE = CompileService()
