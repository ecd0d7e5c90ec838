"""The compile service: what the launch op calls back on a cache miss.

It owns the process-wide compile cache, keyed by cluster key + input signature
(the cluster key is a hash of the cluster definition, which contains every
compile-time constant), bounded LRU.  Front doors register cluster definitions
and may compile ahead (shapes fully known); the launch op compiles lazily
through ``on_miss`` otherwise.  The runtime never imports the compiler: this
module hands ``on_miss`` to it.
"""
from __future__ import annotations

import collections
import os
import threading

from tfjit import config
from tfjit.runtime import launch


class CompileService:
    def __init__(self):
        self._lock = threading.RLock()
        self._compiled = collections.OrderedDict()   # (key, signature) -> pipeline.Compiled
        self._defs: dict = {}                         # key -> cluster_def bytes
        self.compile_counts = collections.Counter()   # key -> compilations
        self.installed = False

    def install(self) -> None:
        with self._lock:
            if not self.installed:
                launch.load(os.path.join(config.cache_root(), "ops"))
                launch.set_compile_callback(self.on_miss)
                self.installed = True

    def register(self, key: str, cluster_def: bytes) -> None:
        self._defs[key] = cluster_def

    def get(self, key: str, signature: tuple, name: str = "cluster"):
        """The compiled cluster for ``signature`` ((DType, shape) pairs), compiling on a miss."""
        from tfjit import pipeline   # the compiler, imported only when compiling
        from tfjit.api import dump
        entry = (key, signature)
        with self._lock:
            hit = self._compiled.get(entry)
            if hit is not None:
                self._compiled.move_to_end(entry)
                return hit
            compiled = pipeline.compile_cluster(self._defs[key], list(signature), name)
            self._compiled[entry] = compiled
            self.compile_counts[key] += 1
            dump.maybe_dump(compiled)
            while len(self._compiled) > max(config.flags().tfjit_compile_cache_size, 1):
                # Only the introspection record goes: the runtime keeps every executable it
                # has handed to the launch op alive, since kernels may still be running it.
                self._compiled.popitem(last=False)
            return compiled

    def forget_compiled(self) -> None:
        """Empties the in-memory cache so the next ``get`` compiles again (through the
        persistent cache, when one is on); executables already handed out stay alive."""
        with self._lock:
            self._compiled.clear()

    def on_miss(self, cluster: str, cluster_def: bytes, signature: list):
        """Runtime callback: signature is [(dtype_enum, dims)] from the launch op."""
        from tfjit.pipeline import signature_of
        if cluster not in self._defs:
            if not cluster_def:
                raise KeyError(f"unknown tfjit cluster {cluster} and no definition in the node")
            self.register(cluster, cluster_def)
        sig = tuple(signature_of([d for d, _ in signature], [s for _, s in signature]))
        return self.get(cluster, sig).executable


SERVICE = CompileService()
