"""Buffer assignment: where every value that lives in memory is stored.

The launch op hands each kernel one pointer array, laid out as
``[inputs..., outputs..., temps..., status, device]`` (see runtime/launch_op.cc).  This
pass decides the slot of every parameter and kernel root, the scratch space of
split reductions and of top-k kernels (their heaps), and which outputs are plain copies of inputs (returned by the
launch op without running any code).
"""
from __future__ import annotations

import dataclasses

from tfjit.ir.module import Module
from tfjit.ir.ops import Op
from tfjit.passes import fusion
from tfjit.passes.fusion import topk_merges


@dataclasses.dataclass
class BufferPlan:
    num_inputs: int
    num_outputs: int
    slots: dict                    # instr -> slots it is written to / read from (first is the read slot)
    temp_bytes: list               # per temp slot, in order after the outputs
    scratch: dict                  # fusion -> slot of its partial results (or top-k heaps)
    output_source: list            # per output: input index it aliases, or -1
    update_in_place: list = dataclasses.field(default_factory=list)   # per variable update

    @property
    def status_slot(self) -> int:
        return self.num_inputs + self.num_outputs + len(self.temp_bytes)

    @property
    def device_slot(self) -> int:
        """The launch's runtime context, for runtime-library calls (runtime/runtime.h;
        null: they run their own Eigen code inline)."""
        return self.status_slot + 1


def assign(m: Module, fusions: list) -> BufferPlan:
    n_in, n_out = len(m.params), len(m.outputs)
    slots = {p: [p.index] for p in m.params}
    output_source = [-1] * n_out
    for k, o in enumerate(m.outputs):
        if o.op is Op.PARAMETER:
            output_source[k] = o.index
        else:
            slots.setdefault(o, []).append(n_in + k)
    temp_bytes, scratch = [], {}

    def new_temp(nbytes: int) -> int:
        temp_bytes.append(max(int(nbytes), 1))
        return n_in + n_out + len(temp_bytes) - 1

    for f in fusions:
        for r in f.roots:
            if r not in slots:
                slots[r] = [new_temp(r.size * r.dtype.itemsize)]
        if f.split > 1:
            r = f.roots[0]
            scratch[f] = new_temp(r.size * f.split * max(r.dtype.itemsize, 1) * len(f.roots))
        if f.kind == "sort" and f.rows:
            scratch[f] = new_temp(f.rows * topk_row_bytes(f.roots[0]))
    plan = BufferPlan(n_in, n_out, slots, temp_bytes, scratch, output_source)
    plan.update_in_place = [_in_place(m, fusions, k, m.outputs[n_out - len(m.updates) + u])
                            for u, k in enumerate(m.updates)]
    return plan


def _in_place(m: Module, fusions: list, param: int, value) -> bool:
    """May the new value of variable ``param`` be written over its old value?

    Yes when the old value is dead once the kernel writing the new one has
    read it: no later kernel reads it, and that kernel reads it only at the
    index it writes (a flat elementwise kernel), so no thread overwrites an
    element another still needs.  The launch op still writes a fresh buffer
    when someone else holds the variable's tensor (runtime/launch_op.cc).
    """
    p = m.params[param]
    if value.shape != p.shape or value.dtype is not p.dtype:
        return False
    writer = next((f for f in fusions if value in f.roots), None)
    if writer is None:
        return False
    position = fusions.index(writer)
    for n, f in enumerate(fusions):
        if p in fusion.reads(f) and (n > position or (f is writer and not f.flat)):
            return False
    return True


def topk_key_bytes(x) -> int:
    """Bytes of one top-k sort key (codegen/indexing.py): a value's monotonic bits over
    the complemented index, 32 + 32 bits, or 64 + 64 for 64-bit values."""
    return 16 if x.dtype.bits == 64 else 8


def topk_row_bytes(root) -> int:
    """Scratch of one top-k kernel row (a chunk of vectors, done one after another):
    a heap of k keys, or two arrays of n keys for a merge sort (``fusion.topk_merges``)."""
    x = root.operands[0]
    return topk_key_bytes(x) * (2 * x.shape[-1] if topk_merges(root) else root.attrs["k"])
