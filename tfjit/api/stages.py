"""``f.lower(*args).compile()``: the staged introspection API of JAX and TF.

    lowered = f.lower(x, y)            # or TensorSpecs with fully defined shapes
    lowered.as_text()                  # the IR as lowered from the TF graph
    compiled = lowered.compile()
    compiled.as_text()                 # the IR after the passes, with the kernels
    compiled.cost_analysis()           # {"flops", "transcendentals", "bytes accessed", "kernels"}
    compiled(x, y)                     # runs it (same as f(x, y))

tfjit lowers and compiles one signature in a single step (it is cached per
signature and takes milliseconds), so ``lower`` already reports every error a
compile would, and ``compile`` only hands over what that step produced.  Both
stages describe the very executable that ``f(*args)`` runs.
"""
from __future__ import annotations


class Lowered:
    """One signature of a ``tfjit.function``, lowered to tfjit's IR."""

    def __init__(self, function, compiled):
        self._function = function
        self._compiled = compiled        # pipeline.Compiled

    def as_text(self) -> str:
        """The IR as lowered from the TF graph, before any pass (the dumps'
        ``before_optimizations.txt``)."""
        return self._compiled.module_before

    def compile(self) -> "Compiled":
        return Compiled(self._function, self._compiled)

    def cost_analysis(self) -> dict:
        """As ``compile().cost_analysis()`` (JAX offers it at both stages too)."""
        return self.compile().cost_analysis()


class Compiled:
    """The executable of one signature: its optimised IR, its cost, and a callable."""

    def __init__(self, function, compiled):
        self._function = function
        self._compiled = compiled

    def as_text(self) -> str:
        """The IR after the passes, followed by the kernels and their fusion decisions
        (the dumps' ``after_optimizations.txt``)."""
        from tfjit.api import dump
        return self._compiled.module_after + "\n" + dump.kernels_section(self._compiled)

    def cost_analysis(self) -> dict:
        """{"flops", "transcendentals", "bytes accessed", "kernels": [per-kernel dicts]}
        counted from the kernels and the buffer plan (passes/cost.py)."""
        from tfjit.passes import cost
        return cost.analyze(self._compiled.fusions, self._compiled.plan)

    def __call__(self, *args, **kwargs):
        return self._function(*args, **kwargs)
