"""The loop-nest emitter shared by all targets.

For one fusion it emits ``void kernel(void** bufs, i64 row_begin, i64 row_end)``
(the launch op's ABI), with the fusion's roots computed *elementally*: the
value of any instruction at an index is generated on demand from its operands'
values at mapped indices, XLA-style, and memoised per loop scope so a value
used twice in one iteration is computed once.  Hoisted reductions are emitted
once per row before the row's inner loop; the inner loop then finds them in the
memo (their index is the row index, the same SSA values).

Targets supply only what differs: ``math(b, name, args)`` for transcendental
functions, and ``gpu`` (codegen/nvptx.py): one element per row in flat loops, so
that a warp's threads read neighbouring elements (a CPU thread takes FLAT_BLOCK
of them, for its vector loop), and no row buffer or prefetch (a row buffer is
stack memory per row: per GPU thread it would be local memory, mostly spilled).  Runtime errors are status codes into ``messages``, the module's list
of error texts (``elemental.MESSAGES`` first, then texts kernels add, such as a
gather's bound: ``error_code``).
"""
from __future__ import annotations

import contextlib
import math as _math

import numpy as np
from llvmlite import ir

from tfjit import dtypes as dt
from tfjit.codegen import gather, lanes, loop_rows, segments, stencil, tiles
from tfjit.codegen.argreduce import ArgReductionRows
from tfjit.codegen.elemental import MESSAGES, Elemental, bf16_to_f32, f32_to_bf16
from tfjit.codegen.llvm_types import (F32, I1, I8, I64, PTR, VOID, const, for_range, i64, intrinsic,
                                      interleave, no_vectorize, storage_type, value_type)
from tfjit.codegen.reduction import ReductionRows, across_rows, costly
from tfjit.ir.indexing import ZERO, operand_index, reshape_groups
from tfjit.ir.module import Instr
from tfjit.ir.ops import Kind, Op
from tfjit.passes.cost import element_cycles
from tfjit.passes.fusion import Fusion
from tfjit.passes.kernel_order import reads
from tfjit.passes.kernels import FLAT_BLOCK
from tfjit.runtime import abi

GLOBAL_PTR = ir.PointerType(addrspace=1)   # NVPTX's global memory (LLVM infers the rest)
ROW_CACHE_MAX = 8192     # elements of a per-row stack buffer (32 KiB of f32)


def _uniform(i: Instr) -> bool:
    """Do all elements of constant i have the same bits (so one register holds it)?"""
    flat = i.value.reshape(-1)
    if flat.size <= 1:
        return flat.size == 1
    bits = flat.view(np.uint8).reshape(flat.size, -1)
    return bool((bits == bits[0]).all())


def _index_key(v):
    if v is ZERO:
        return 0
    if isinstance(v, ir.Constant):
        return ("c", v.constant)
    return id(v)


class KernelEmitter(ReductionRows, ArgReductionRows, lanes.SharedRows, tiles.TiledRows,
                    stencil.StencilRows, segments.ConcatSegments, loop_rows.LoopRows):
    def __init__(self, module: ir.Module, math, fusion: Fusion, plan, name: str,
                 messages: list | None = None, gpu: bool = False, reuse: dict | None = None,
                 warp: int = 1):
        self.module = module
        self.warp = warp              # a warp's threads, which may share rows (codegen/lanes.py)
        self.block = 1                # neighbouring outputs per row of a stencil (codegen/stencil.py)
        self.wide = False             # a loop kernel's rows span its last two dims (loop_rows.wide)
        self.group = 1                # threads sharing each row of the body being emitted
        self.rank = None              # this thread's place among them (None: not shared)
        self.elements = None          # [(index, valid)] of a held row this thread takes
        self.aligned = None           # an index whose accesses are wider-aligned (_alignment)
        self.uniform = True           # all of them are here, on the same path
        self.reuse = reuse            # {symbol suffix: body}: call these, emit no body
        self.reported = False         # a body that can report an error (its text is its node's)
        self.gpu = gpu
        self.messages = list(MESSAGES) if messages is None else messages
        self.math = math
        self.f = fusion
        self.plan = plan
        self.name = name
        self.scopes: list = []
        self.ptrs: dict = {}
        self.reads = reads(fusion)    # values loaded from memory; everything else is computed
        self.row_cache: dict = {}     # instr -> (row buffer, row index key) for this row
        self.fill: dict = {}          # hoisted reduction -> row buffer it fills

    # -- entry points --------------------------------------------------------------
    def emit(self) -> list:
        """Emits the kernel's functions; returns [(symbol, rows, cost_per_row)].  On a GPU,
        a function whose rows threads share counts threads (``lanes.threads`` per row,
        recorded for its kernel entry by ``lanes.mark``)."""
        steps = self._emit_steps()
        if self.warp == 1:
            return steps
        return [(s, rows * lanes.threads(self.module, s), cost) for s, rows, cost in steps]

    def _emit_steps(self) -> list:
        f = self.f
        per_element = element_cycles(f.instrs)      # cost per row: estimated cycles
        if f.kind == "loop":
            if f.flat and self.gpu:          # a row per element or few (see above)
                per = lanes.flat_elements(f)
                return [(self._function(self.name, self._loop_row), _math.prod(f.shape) // per,
                         per_element * per)]
            self.tile = None if self.gpu else tiles.transpose_tile(f, self.reads)
            if self.tile is not None:       # a transposed read: blocks of rows (codegen/tiles.py)
                note = (f"{f.name} reads an operand transposed: iterated in blocks of "
                        f"{tiles.TILE_ROWS} along dim {self.tile}, tiles of {tiles.TILE_COLUMNS}"
                        + (", transposed in registers" if self._staged() else ""))
                if note not in f.notes:
                    f.notes.append(note)
                return [(self._function(self.name, self._tiled_row),
                         _math.prod(tiles.tile_blocks(f, self.tile)),
                         tiles.TILE_ROWS * f.shape[-1] * per_element)]
            cost = (FLAT_BLOCK if f.flat else (f.shape[-1] if f.shape else 1)) * per_element
            self.block = 1 if self.gpu else stencil.block_of(f)
            self.wide = loop_rows.wide(f, self.gpu, self.block)
            per_row = f.shape[f.outer - 1] if self.wide else self.block   # outputs' rows per row
            if self.wide:
                note = f"{f.name} has short rows: a row takes its last two dims ({per_row} x {f.shape[-1]})"
                if note not in f.notes:
                    f.notes.append(note)
            return [(self._function(self.name, self._loop_row), f.rows // per_row, cost * per_row)]
        reduced = _math.prod(f.shape[f.outer:])
        arg = f.roots[0].op is Op.ARGREDUCE       # (value, index) pairs: codegen/argreduce.py
        column = self._arg_column_row if arg else self._column_row
        combine = self._arg_combine_row if arg else self._combine_row
        rows, block = f.rows, f.column_block
        if f.column and self.warp > 1 and not arg and lanes.tiled(f):   # a GPU's tiles
            column, rows, block = self._column_tile_row, lanes.tile_rows(f), lanes.TILE_COLUMNS
        if f.column and f.split == 1:
            return [(self._function(self.name, column), rows, reduced * block)]
        if f.column:
            phase1 = self._function(self.name + ".partial", column)
            phase2 = self._function(self.name + ".combine", combine)
            return [(phase1, rows, reduced // f.split * block),
                    (phase2, f.roots[0].size, f.split)]
        if f.split == 1:
            return [(self._function(self.name, self._reduce_row), f.rows, reduced * per_element)]
        phase1 = self._function(self.name + ".partial", self._arg_partial_row if arg else self._partial_row)
        phase2 = self._function(self.name + ".combine", combine)
        return [(phase1, f.rows, max(reduced // f.split, 1) * per_element), (phase2, f.roots[0].size, f.split)]

    def _function(self, symbol: str, row_body) -> str:
        """Outer ABI function that unpacks ``bufs`` into a noalias inner body."""
        slots = {s for i in self.reads | set(self.f.roots) for s in self.plan.slots[i]} | {self.plan.status_slot}
        if self.f in self.plan.scratch:
            slots.add(self.plan.scratch[self.f])
        slots = sorted(slots)
        if self.reuse is not None:          # codegen/body_sharing.py: an equal body exists
            inner = self.reuse[symbol[len(self.name):]]
        else:
            inner_ty = ir.FunctionType(VOID, [GLOBAL_PTR if self.gpu else PTR] * len(slots) + [I64, I64])
            inner = ir.Function(self.module, inner_ty, name=symbol + ".body")
            inner.linkage = "internal"
            inner.attributes.add("alwaysinline")
            for a in inner.args[:len(slots)]:
                a.add_attribute("noalias")
                a.attributes.align = abi.ALIGN   # every buffer the launch hands over (runtime/abi.h)
        outer = ir.Function(self.module, ir.FunctionType(VOID, [PTR, I64, I64]), name=symbol)
        ob = ir.IRBuilder(outer.append_basic_block("entry"))
        bufs, begin, end = outer.args
        args = [ob.load(ob.gep(bufs, [i64(s)], source_etype=PTR), typ=PTR) for s in slots]
        if self.gpu:      # every buffer is global memory: say so, so loads are ld.global
            # and ALIGN-aligned (abi.ALIGN; the inner body's align attributes are lost when
            # it is inlined into the kernel entry): LLVM's load/store vectoriser needs it
            # to make a thread's consecutive elements one 16-byte access (lanes.flat_elements)
            aligned = self.module.add_metadata([ir.Constant(I64, abi.ALIGN)])
            for a in args:
                a.set_metadata("align", aligned)
            args = [ob.addrspacecast(a, GLOBAL_PTR) for a in args]
        ob.call(inner, args + [begin, end])
        ob.ret_void()
        if self.reuse is not None:
            return symbol

        self.b = b = ir.IRBuilder(inner.append_basic_block("entry"))
        self.entry_block = b.block
        body = {self._reduce_row: "reduce", self._partial_row: "partial",
                self._combine_row: "combine", self._loop_row: "loop",
                self._column_tile_row: "tile"}.get(row_body)
        self.rank, self.elements, self.uniform = None, None, True
        self.group, held = lanes.sharing(self.f, body) if self.warp > 1 and body \
            else (1, 0)
        if self.group > 1:
            lanes.mark(self.module, symbol, self.group)
            self.rank = lanes.rank(b, self.group)
            if held:
                self.elements = lanes.elements(b, self.rank, self.group, self.f.shape[-1], held)
        self.ptrs = dict(zip(slots, inner.args))
        self.status = self.ptrs[self.plan.status_slot]
        self.elemental = Elemental(b, self.math, self._raise_status)
        self.allocas: list = []
        # A row of a row reduction reads contiguous memory along its reduced dims: with
        # few of them (65536 rows of 64), LLVM unrolled the row fully and vectorised
        # across rows instead, with gathers (2.6x slower than the vectorised row).
        # Rows of a few elements are the exception (reduction.across_rows).
        across = no_vectorize(self.module) if row_body in (
            self._reduce_row, self._partial_row, self._arg_partial_row) else None
        if row_body == self._reduce_row and across_rows(self.f, self.gpu, self.reads):
            across = None
        if row_body == self._loop_row and loop_rows.long_elements(self.f, self.gpu, self.block, self.reads):
            across = no_vectorize(self.module)
        with for_range(b, inner.args[-2], inner.args[-1], "row", across) as row:
            self.scopes = [{}]
            row_body(row)
        b.ret_void()
        return symbol

    # -- loop kernels (their rows: codegen/loop_rows.py) ---------------------------
    @property
    def interleave_count(self) -> int:
        """Vector iterations a kernel's innermost vectorised loop interleaves (its element
        loop; a column reduction's loop over outputs), 0: LLVM's choice.  LLVM's
        vectoriser interleaves only small loop bodies (or reductions), so a body with a
        transcendental ran one vector at a time, its long dependency chain (a
        polynomial, exp's reduction and scaling) leaving the core waiting: exact GELU
        (erfc) on 4096^2 took 16.2 ms, 8.0 with two; softplus 15.7 -> 7.6, tanh-GELU
        9.9 -> 6.2, log1p 7.4 -> 5.3, and the memory-bound ones 0-10% less.  (Four
        was no better.)  The GPU's loops are a thread's few elements."""
        return 0 if self.gpu else 2

    def _elements_md(self):
        return interleave(self.module, self.interleave_count) if self.interleave_count else None

    def _store_roots(self, idx, valid=None):
        values = [self.value(r, idx) for r in self.f.roots]
        with contextlib.nullcontext() if valid is None else self.b.if_then(valid):
            self._store_values(idx, values)

    def _store_values(self, idx, values):
        """Stores each root's value at ``idx`` to every buffer it goes to."""
        for r, v in zip(self.f.roots, values):
            for slot in self.plan.slots[r]:
                self._store(slot, r, idx, v)

    def _hoist(self, outer):
        """Computes the hoisted reductions of this row, caching reused operands in a row buffer."""
        self.fill, self.row_cache = {}, {}
        if self.f.hoisted and self.f.kind == "loop" and self.f.shape and not self.gpu:
            self._prefetch_next_row(outer)
        for h in self.f.hoisted:
            e = h.operands[0]
            if self._row_cacheable(h, e):
                t = value_type(e.dtype)
                self.fill[h] = self._entry_alloca(t, self.f.shape[-1])
            self.value(h, outer[:h.rank])
            if h in self.fill:     # from now on this row's values of e come from the buffer
                self.row_cache[e] = (self.fill[h], self._index_keys(outer))
        self.fill = {}

    def _prefetch_next_row(self, outer):
        """Asks for the next row of every row-shaped input before this row's passes.

        A row kernel reads its row from memory once, then computes (reductions,
        transcendental math) on cached data; without this, memory sits idle
        during the compute and the next row's first pass waits for DRAM.
        """
        b, f = self.b, self.f
        width = f.shape[-1]
        line = tiles.LINE
        for x in sorted(self.reads, key=lambda i: self.plan.slots[i][0]):   # not by name:
            # equal kernels of repeated blocks then get equal text (codegen/body_sharing.py)
            if x.shape != f.shape or width * x.dtype.itemsize < line:
                continue
            step = line // x.dtype.itemsize
            base = b.add(self._linear(outer + (ZERO,), x.shape), i64(width))
            with for_range(b, 0, width // step, "pf") as k:
                addr = b.gep(self.ptrs[self.plan.slots[x][0]], [b.add(base, b.mul(k, i64(step)))],
                             source_etype=storage_type(x.dtype))
                intrinsic(b, "prefetch", ir.VoidType(),
                          [addr, ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), 3),
                           ir.Constant(ir.IntType(32), 1)], [PTR])

    def _row_cacheable(self, h: Instr, e: Instr) -> bool:
        """Should the values h reduces be kept for the row's output loop (softmax's exp)?

        Only when they are costly to recompute, read again at the same index by
        the row's other instructions, and a row fits comfortably on the stack.
        """
        f = self.f
        if self.gpu:
            return False
        if h.attrs["ndims"] != 1 or h.rank != f.outer or e.shape != f.shape or e not in f.instrs:
            return False
        if not 0 < f.shape[-1] <= ROW_CACHE_MAX or e.op.kind is not Kind.ELEMENTWISE:
            return False
        reused = any(e in i.operands for i in f.instrs if i is not h)
        return reused and costly(e, set(f.instrs))

    # -- reduction kernels ------------------------------------------------------------
    # -- elemental generation ----------------------------------------------------------
    @staticmethod
    def _index_keys(idx: tuple) -> tuple:
        """The memo's key of an index (its values' identities, constants by value)."""
        return tuple(_index_key(v) for v in idx)

    def value(self, i: Instr, idx: tuple):
        key = (i, self._index_keys(idx))
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        if i.op.kind is Kind.ELEMENTWISE and i not in self.reads:
            self._operands_first(i, idx, key[1])
        cached = self.row_cache.get(i)
        if cached is not None and key[1][:-1] == cached[1] and idx and not isinstance(idx[-1], ir.Constant):
            t = value_type(i.dtype)
            v = self.b.load(self.b.gep(cached[0], [self._idx(idx[-1])], source_etype=t), typ=t)
        elif i in self.reads:
            v = self._load(self.plan.slots[i][0], i, idx)
        else:
            v = self._compute(i, idx)
        self.scopes[-1][key] = v
        return v

    def _operands_first(self, root: Instr, idx: tuple, idx_key: tuple) -> None:
        """Emits the elementwise operands of ``root`` at ``idx`` deepest first, with an
        explicit stack: a chain of thousands of fused elementwise ops (``tanh(x) + .5``
        200 times, ``add_n`` of 2000) would otherwise recurse once per op.  Each then
        finds its own operands cached and recurses one level only."""
        def pending(i):
            return (i.op.kind is Kind.ELEMENTWISE and i not in self.reads and i is not root
                    and not any((i, idx_key) in scope for scope in self.scopes))
        order, seen, stack = [], set(), [(root, False)]
        while stack:
            i, expanded = stack.pop()
            if expanded:
                order.append(i)
                continue
            if i in seen:
                continue
            seen.add(i)
            stack.append((i, True))
            stack.extend((o, False) for o in i.operands if o not in seen and pending(o))
        for i in order[:-1]:            # the root itself is computed by the caller
            self.value(i, idx)

    def _compute(self, i: Instr, idx: tuple):
        b = self.b
        op = i.op
        if op.kind is Kind.ELEMENTWISE:
            args = [self.value(o, idx) for o in i.operands]
            in_dtype = i.operands[-1].dtype if op is not Op.CONVERT else i.operands[0].dtype
            return self.elemental.emit(op, in_dtype, i.dtype, args)
        if op is Op.CONSTANT:
            if _uniform(i) and not (i.dtype.is_float and np.isnan(i.value.astype(np.float64)).any()):
                return const(i.dtype, i.value.reshape(-1)[0].item())   # one value: a register
            return self._load_global(i, idx)      # (a NaN keeps its payload bits there)
        if op is Op.IOTA:
            return self.elemental.convert(self._idx(idx[i.attrs["dim"]]), dt.I64, i.dtype)
        mapped = operand_index(i, 0, idx) if op.kind is Kind.MOVEMENT else None
        if mapped is not None:
            return self.value(i.operands[0], mapped)
        if op is Op.RESHAPE:
            x = i.operands[0]
            if x in self.reads:         # a buffer, row-major either way: the same linear
                st = storage_type(x.dtype)   # address, without unravelling (which blocks vectors)
                ptr = b.gep(self.ptrs[self.plan.slots[x][0]], [self._linear(idx, i.shape)],
                            source_etype=st)
                return self._from_storage(b.load(ptr, typ=st), x.dtype)
            if len(idx) != i.rank:      # a flat kernel's index: already linear
                return self.value(x, self._unravel(self._linear(idx, i.shape), x.shape))
            out = [ZERO] * x.rank     # group by group: an unchanged dim maps to itself
            for src, dst in reshape_groups(x.shape, i.shape):
                linear = self._linear(tuple(idx[k] for k in dst), tuple(i.shape[k] for k in dst))
                for k, v in zip(src, self._unravel(linear, tuple(x.shape[k] for k in src))):
                    out[k] = v
            return self.value(x, tuple(out))
        if op is Op.SLICE:
            starts, strides = i.attrs["starts"], i.attrs["strides"]
            return self.value(i.operands[0], tuple(
                b.add(i64(s), b.mul(self._idx(v), i64(st))) for v, s, st in zip(idx, starts, strides)))
        if op is Op.DYNAMIC_SLICE:
            x = i.operands[0]
            starts = self.clamped_starts(x, i.operands[1:], i.shape)
            return self.value(x, tuple(b.add(self._idx(v), s) for v, s in zip(idx, starts)))
        if op is Op.PAD:
            return self._pad(i, idx)
        if op is Op.CONCAT:
            return self._concat(i, idx)
        if op is Op.REDUCE:
            reduced = i.operands[0].shape[i.rank:]
            return self._reduce_loops(i, idx, [(0, n) for n in reduced])
        if op is Op.ARGREDUCE:
            return self._argreduce(i, idx)
        if op is Op.GATHER:
            return gather.value(self, i, idx)
        raise NotImplementedError(op.spelling)

    def clamped_starts(self, x: Instr, starts, sizes) -> list:
        """Run-time window starts (i64), clamped so the window lies inside ``x`` (HLO)."""
        b, out = self.b, []
        for s, dim, size in zip(starts, x.shape, sizes):
            v = self.elemental.convert(self.value(s, ()), s.dtype, dt.I64)
            v = b.select(b.icmp_signed("<", v, i64(0)), i64(0), v)
            out.append(b.select(b.icmp_signed(">", v, i64(dim - size)), i64(dim - size), v))
        return out

    def _pad(self, i: Instr, idx):
        b = self.b
        x, pad_value = i.operands
        inside, inner = ir.Constant(I1, 1), []
        for v, lo, n in zip(idx, i.attrs["low"], x.shape):
            j = b.sub(self._idx(v), i64(lo))
            ok = b.and_(b.icmp_signed(">=", j, i64(0)), b.icmp_signed("<", j, i64(n)))
            inside = b.and_(inside, ok)
            inner.append(b.select(ok, j, i64(0)))
        if x.size == 0:
            return self.value(pad_value, ())
        return b.select(inside, self.value(x, tuple(inner)), self.value(pad_value, ()))

    def _concat(self, i: Instr, idx):
        segment = self.segment_value(i, idx)
        if segment is not None:
            return segment
        b = self.b
        dim = i.attrs["dim"]
        result, offset = None, 0
        pos = self._idx(idx[dim])
        for x in i.operands:
            n = x.shape[dim]
            if n == 0:
                continue
            j = b.sub(pos, i64(offset))
            j = b.select(b.icmp_signed("<", j, i64(0)), i64(0), b.select(b.icmp_signed(">=", j, i64(n)), i64(n - 1), j))
            v = self.value(x, idx[:dim] + (j,) + idx[dim + 1:])
            result = v if result is None else b.select(b.icmp_signed(">=", pos, i64(offset)), v, result)
            offset += n
        return result

    # -- memory ------------------------------------------------------------------------
    def _load(self, slot: int, i: Instr, idx):
        b = self.b
        st = storage_type(i.dtype)
        raw = b.load(b.gep(self.ptrs[slot], [self._linear(idx, i.shape)], source_etype=st), typ=st,
                     align=self._alignment(i, idx))
        return self._from_storage(raw, i.dtype)

    def _store(self, slot: int, i: Instr, idx, v):
        b = self.b
        st = storage_type(i.dtype)
        b.store(self._to_storage(v, i.dtype), b.gep(self.ptrs[slot], [self._linear(idx, i.shape)], source_etype=st),
                align=self._alignment(i, idx))

    def _load_global(self, i: Instr, idx):
        st = storage_type(i.dtype)
        # floats are stored as their bits: a Python float would lose NaN payloads (Bitcast)
        bits_t = ir.IntType(i.dtype.bits) if i.dtype.is_float else st
        name = f"{self.b.function.name}.const.{i.name}"
        g = self.module.globals.get(name)
        if g is None:
            flat = i.value.reshape(-1)
            if i.dtype.is_float:
                flat = flat.view(np.dtype(f"u{i.dtype.itemsize}"))
            elif i.dtype is dt.PRED:
                flat = flat.astype(np.uint8)
            # one byte string (c"..."), not an LLVM constant per element: a 4M-element
            # constant took 39 s to build and parse element by element
            data = bytearray(flat.astype(flat.dtype.newbyteorder("<")).tobytes())
            arr_t = ir.ArrayType(I8, len(data))
            g = ir.GlobalVariable(self.module, arr_t, name=name)
            g.global_constant = True
            g.linkage = "internal"
            g.align = abi.ALIGN
            g.initializer = ir.Constant(arr_t, data)
        b = self.b
        raw = b.load(b.gep(g, [self._linear(idx, i.shape)], source_etype=bits_t), typ=bits_t)
        return self._from_storage(raw if bits_t == st else b.bitcast(raw, st), i.dtype)

    def _from_storage(self, raw, d: dt.DType):
        b = self.b
        if d is dt.PRED:
            return b.icmp_unsigned("!=", raw, ir.Constant(I8, 0))
        if d is dt.F16:
            return b.fpext(raw, F32)
        if d is dt.BF16:
            return bf16_to_f32(b, raw)
        return raw

    def _to_storage(self, v, d: dt.DType):
        b = self.b
        if d is dt.PRED:
            return b.zext(v, I8)
        if d is dt.F16:
            return b.fptrunc(v, storage_type(d))
        if d is dt.BF16:
            return f32_to_bf16(b, v)
        return v

    # -- index arithmetic ----------------------------------------------------------------
    def _idx(self, v):
        return i64(0) if v is ZERO else v

    def _linear(self, idx, shape):
        if self.f.flat and len(idx) == 1:
            return self._idx(idx[0])
        b = self.b
        offset, stride = None, 1
        for v, n in reversed(list(zip(idx, shape))):
            if n != 1 and v is not ZERO:
                term = self._idx(v) if stride == 1 else b.mul(self._idx(v), i64(stride))
                offset = term if offset is None else b.add(offset, term)
            stride *= n
        return offset if offset is not None else i64(0)

    def _unravel(self, linear, shape) -> tuple:
        b = self.b
        out = []
        for k in reversed(range(len(shape))):
            n = shape[k]
            if n == 1:
                out.append(ZERO)
            elif k == 0:
                out.append(linear)
            else:
                out.append(b.srem(linear, i64(n)))
                linear = b.sdiv(linear, i64(n))
        return tuple(reversed(out))

    # -- scopes, allocas, errors ------------------------------------------------------------
    @contextlib.contextmanager
    def _scope(self):
        """A memo scope: values computed inside a loop body do not outlive it."""
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()

    def _entry_alloca(self, t, count: int | None = None):
        """Stack space in the entry block (allocated once per call, not per row)."""
        b = self.b
        with b.goto_block(self.entry_block):
            b.position_at_start(self.entry_block)
            return b.alloca(t, size=None if count is None else i64(count))

    def _alloca(self, t, init):
        """A stack slot holding ``init`` (SROA turns it into SSA)."""
        slot = self._entry_alloca(t)
        self.b.store(init, slot)
        return slot

    def error_code(self, text: str) -> int:
        """The status code that reports ``text`` (added to the module's messages once)."""
        self.reported = True
        if text not in self.messages:
            self.messages.append(text)
        return self.messages.index(text) + 1

    def _raise_status(self, code: int, cond, details=()):
        """Reports error ``code`` where ``cond`` holds.  ``details`` (i64 values, at most
        7) are what the message's ``{i}`` print: the first thread to fail sets the code
        by compare-and-swap and writes them (TfjitStatus, runtime/launch_op.cc)."""
        b = self.b
        code = ir.Constant(ir.IntType(32), code)
        with b.if_then(cond, likely=False):
            if not details:
                b.store(code, self.status)
                return
            first = b.cmpxchg(self.status, ir.Constant(ir.IntType(32), 0), code, "monotonic", "monotonic")
            with b.if_then(b.extract_value(first, 1)):
                for k, v in enumerate(details):
                    b.store(self._idx(v), b.gep(self.status, [i64(8 + 8 * k)], source_etype=I8))
