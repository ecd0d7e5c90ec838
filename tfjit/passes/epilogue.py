"""A convolution's bias and activation folded into its library call.

A Keras ``Conv2D(..., activation="relu")`` is a convolution, a bias added along the
channels, and a ReLU.  As three instructions, the convolution call writes its whole
output and a loop kernel reads it back, adds the bias, clamps and writes it again:
one more pass over the largest tensor of the layer, out of cache (a [32,16,16,16,16]
f32 3-D convolution's output, 8 MB: 1.15 ms of a 4.8 ms layer on 2 cores of
Sapphire Rapids, where graph mode's whole Conv3D + bias + ReLU took 3.5).  TF's
graph mode has the same problem and its remapper's answer: ``_FusedConv2D``, whose
kernels (Eigen's output kernel, oneDNN's post-ops) add the bias and apply the
activation to each block of the output while it is in cache.  ``FoldConvolutionBias``
rewrites

    activation(reshape*(convolution(x, w)) + broadcast(bias))

into ``reshape(convolution-bias(x, w, bias, activation))`` (runtime/tf_kernels.cc
runs TF's _FusedConv2D), and a 3-D convolution's TF kernel call (``convolution-3d``,
lower/conv3d.py) into ``convolution-3d-bias`` (runtime/tf_conv3d.cc: TF's _FusedConv3D,
oneDNN's only, where TF runs oneDNN; elsewhere the bias and activation follow the
call in the runtime's own loop), where

* every reshape between them keeps the channels last (the bias still varies along
  the last dim: a 3-D convolution's 2-D call reshaped back to 5-D, a 1-D one's
  squeezed);
* the bias is a broadcast of O values along the last dim (BiasAdd's, or Keras 3's
  add of a [1, 1, 1, O] bias);
* the activation is none, ``max(v, 0)`` (Relu), or ``min(max(v, 0), 6)`` (Relu6) --
  the fused_ops TF's kernels take; others (ELU, GELU, swish) stay loop kernels after
  a fused bias;
* each value replaced is read by the next instruction alone (a training step reads
  the ReLU's output, not the sum before it, so its convolutions fold too);
* the result is written to memory anyway (``_materialized``): read by another
  convolution or a dot, by several instructions (a training step's ReLU output: the
  next layer and ReluGrad; a pool's taps), or an output.  Where one reduction or
  elementwise op reads it, fusion already computes the bias and activation in that
  op's kernel.

A NaN before the ReLU: TF's Relu and Eigen's fused kernel keep it, oneDNN's post-op
(a vmaxps against 0) gives 0.  TF's graph mode with its oneDNN rewrite on fuses to
oneDNN's kernel and gives 0; so a fused ReLU runs oneDNN's kernel only where TF's
graph mode runs oneDNN (codegen/library.py tf_kernel), else it is measured among the
default kernel whole and in parts.

The sum and clamps round as the instructions they replace; the convolution's own
sum is the kernel's, as before (the interpreter computes the same steps,
ir/interp.py).  f64 convolutions are left as they were (oneDNN has no f64 kernel, and
Eigen's fused one was not measured); f16 ones compute in f32 between converts (no
f16 call) and are not matched.

A bf16 convolution call (passes/dots.py Bf16Products, which runs before this pass)
is followed by Keras's bf16 arithmetic as the IR spells it: each step widened to f32
and rounded back,

    round(max(widen(round(widen(convolution) + widen(bias))), 0))

and folds the same way into a bf16 ``convolution-bias``, which sums, adds and clamps
in f32 and rounds once: oneDNN's fused bf16 kernel, what TF's graph mode runs for the
same layer (its remapper fuses Conv2D + BiasAdd + Relu in bf16 too).  The instructions
it replaces rounded the convolution before the add: results move by at most one bf16
ulp.  Unfolded, each reader of the activation recomputed the two roundings (about 20
instructions an element) at every one of its reads: the separable layer model's 5x5
stride-2 depthwise kernel after a 1x1 bf16 convolution read each element 6 times and
took 2.14 ms, against 0.48 in f32 (tfjit.kernel_profile; docs/performance.md).
"""
from __future__ import annotations

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import CONV_ACTIVATIONS, Kind, Op
from tfjit.passes.simplify import only_reader, substitute


# each convolution and the call that adds its bias and activation
_FUSED = {Op.CONV: Op.CONV_BIAS, Op.CONV3D: Op.CONV3D_BIAS}


class FoldConvolutionBias:
    name = "fold-convolution-bias"

    def run(self, m: Module) -> bool:
        return any([self._run(c) for c in m.computations() + [m]])

    def _run(self, m: Module) -> bool:
        users, outputs = m.live_users(), set(m.outputs)  # CSE's leftovers read nothing
        # the last instruction of each fold: its activation, else its add
        ends = {}
        for i in m.instrs:
            fold = _fold_at(i, users, outputs)
            if fold is not None:
                ends[fold[-1]] = fold
        if not ends:
            return False
        return substitute(m, lambda i: _rewrite(ends[i]) if i in ends else None)


def _scalar(x: Instr, value: float) -> bool:
    """Is ``x`` ``value`` everywhere, sign of zero included (a constant, broadcast or
    not: lowering folds Relu's zeros into a splat constant)?"""
    while x.op is Op.BROADCAST:
        x = x.operands[0]
    if x.op is not Op.CONSTANT or x.value.size == 0:
        return False
    v = np.asarray(x.value)
    return bool(np.all(v == value) and not np.any(np.signbit(v)))


def _bias(b: Instr, channels: int) -> Instr | None:
    """The [channels] values ``b`` broadcasts along its last dim, or None."""
    if b.op is not Op.BROADCAST or b.shape[-1] != channels:
        return None
    src = b.operands[0]
    varying = [d for d, s in zip(b.attrs["dims"], src.shape) if s != 1]
    if src.size != channels or varying != [b.rank - 1]:
        return None
    return src


def _fold_at(add: Instr, users: dict, outputs: set) -> list | None:
    """[conv, add, bias source, activation, end] for the add of a convolution's bias."""
    if add.op is not Op.ADD or add.dtype is not dt.F32:
        return None
    for k in (0, 1):
        v, b = add.operands[k], add.operands[1 - k]
        reader, widened = add, False
        while (_keeps_channels(v) or not widened and _widens_bf16(v)) \
                and only_reader(v, reader, users, outputs):
            widened = widened or v.op is Op.CONVERT
            reader, v = v, v.operands[0]
        # (a bf16 3-D call stays as it is: its fused bf16 kernel was not measured)
        if v.op not in _FUSED or v.dtype is not (dt.BF16 if widened else dt.F32) \
                or widened and v.op is not Op.CONV or not only_reader(v, reader, users, outputs):
            continue
        bias = _bias(b, v.shape[-1])
        if widened:     # a bf16 bias, widened (Keras casts its f32 variable to bf16)
            bias = bias.operands[0] if bias is not None and _widens_bf16(bias) else None
        if bias is None:
            continue
        activation, end = (_bf16_activation if widened else _activation)(add, users, outputs)
        if end is None or not _materialized(end, users, outputs):
            return None
        return [v, add, bias, activation, end]
    return None


# the step each activation adds to the one before it (CONV_ACTIVATIONS' order)
_CLAMPS = (("relu", Op.MAX, 0.0), ("relu6", Op.MIN, 6.0))


def _activation(v: Instr, users: dict, outputs: set, after: str = "none") -> tuple:
    """(activation, its last instruction) in f32 from ``v``, whose value has had ``after``
    applied: max(v, 0) then min(., 6), each read alone by the next."""
    activation, end = after, v
    for kind, op, bound in _CLAMPS[CONV_ACTIVATIONS.index(after):]:
        clamp = _sole_reader(end, users, outputs)
        if clamp is None or clamp.op is not op or not _clamps(clamp, end, bound):
            break
        activation, end = kind, clamp
    return activation, end


def _bf16_activation(add: Instr, users: dict, outputs: set) -> tuple:
    """The same after the add of a bf16 layer's widened values, where each bf16 step
    rounds its result: ``round(add)``, then ``round(max(widen(.), 0))`` with TF's Relu,
    ``round(min(max(widen(.), 0), 6))`` with Relu6, or a rounded min(widen(.), 6) after a
    rounded ReLU; (none, None) where the add is not rounded alone."""
    activation, end = "none", _round(add, users, outputs)
    while end is not None and activation != "relu6":
        widen = _sole_reader(end, users, outputs)
        if widen is None or not _widens_bf16(widen):
            break
        step, v = _activation(widen, users, outputs, after=activation)
        rounded = _round(v, users, outputs) if step != activation else None
        if rounded is None:
            break
        activation, end = step, rounded
    return activation, end


def _sole_reader(v: Instr, users: dict, outputs: set) -> Instr | None:
    """The one instruction that reads ``v`` (not an output), or None."""
    readers = users[v] if v not in outputs else []
    return readers[0] if len(readers) == 1 else None


def _round(v: Instr, users: dict, outputs: set) -> Instr | None:
    """The convert of f32 ``v`` to bf16 that alone reads it, or None."""
    r = _sole_reader(v, users, outputs)
    return r if r is not None and r.op is Op.CONVERT and r.dtype is dt.BF16 else None


def _widens_bf16(v: Instr) -> bool:
    return v.op is Op.CONVERT and v.dtype is dt.F32 and v.operands[0].dtype is dt.BF16


def _materialized(end: Instr, users: dict, outputs: set) -> bool:
    """Is ``end`` written to memory whatever this pass does: an output, read by several
    instructions, or read (through reshapes) by a library call, which takes dense
    buffers?  Read by one other instruction, fusion puts the bias and activation into
    that reader's kernel (a reduction, an ELU), which reads the convolution's output
    once either way; folding gained nothing there (the resizing and padding layer
    models' predict steps, a ReLU before a global pool or an ELU: within noise or 5-10%
    slower, 2 runs each).  A pool reads it through one slice per tap: several readers;
    a depthwise convolution reads its padded copy so (SAME padding), and its kernel
    then computed the bias and ReLU again for every tap: the separable layer model's
    5x5 stride-2 depthwise kernel after a 1x1 convolution took 1.31 ms per call, 0.72
    with the ReLU in the call (tfjit.kernel_profile; docs/performance.md)."""
    if end in outputs or len(users[end]) != 1:
        return True
    reader = users[end][0]
    while (reader.op in (Op.RESHAPE, Op.PAD) or _widens_bf16(reader)) and reader not in outputs:
        if len(users[reader]) != 1:
            return True
        reader = users[reader][0]
    return reader.op.kind is Kind.LIBRARY


def _keeps_channels(v: Instr) -> bool:
    """A reshape whose result and operand both have the channels as their last dim."""
    return v.op is Op.RESHAPE and v.rank > 0 and v.operands[0].rank > 0 \
        and v.shape[-1] == v.operands[0].shape[-1]


def _clamps(op: Instr, value: Instr, bound: float) -> bool:
    """Is ``op`` max/min(value, bound), in that order (Relu's and Relu6's lowering, whose
    -0 and NaN the fused kernels and the interpreter's convolution-bias follow; the IR's
    max(0, -0) is +0, max(-0, 0) is -0)?"""
    a, b = op.operands
    return a is value and _scalar(b, bound)


def _rewrite(fold: list) -> list:
    conv, add, bias, activation, end = fold
    made = []
    if bias.rank != 1:
        bias = Instr(Op.RESHAPE, bias.dtype, (bias.size,), (bias,), name=f"{end.name}.bias",
                     source=add.source)
        made.append(bias)
    fused = Instr(_FUSED[conv.op], conv.dtype, conv.shape, (*conv.operands, bias),
                  dict(conv.attrs, activation=activation), name=f"{end.name}.conv",
                  source=conv.source)
    made.append(fused)
    if fused.shape != end.shape:        # the reshapes it looked through, as one
        made.append(Instr(Op.RESHAPE, end.dtype, end.shape, (fused,), name=end.name,
                          source=end.source))
    return made
