"""Fusion: group instructions into kernels that each read inputs once.

Mechanism and policy are separate.  The mechanism (``Fusion``) is a set of
instructions computed by one loop nest, its roots (the values it writes to
memory), its iteration space and the reductions it *hoists* (computes once per
row, before the row's inner loop).  The policy (``fuse``) walks the module from
outputs to inputs and puts a producer into its consumers' kernel when all its
consumers are in one kernel and that kernel can compute it (an elementwise value
read by several kernels may be an extra root of one of them); every "no" is
recorded with a reason (``Fusion.notes``), in the spirit of XLA's
FusionDecision.

The kernel kinds:
* ``loop``    roots share one shape; a parallel loop over rows (all dims but the
              last) and an inner, vectorisable loop over the last dim.
* ``reduce``  roots are reductions of one operand shape; a parallel loop over
              output elements and an inner loop over the reduced dims.  Column
              reductions of one shape that read a common input share a kernel,
              and one may also compute and write the loop kernel it reads
              (``Fusion.elementwise_at``; ``_merge_producers``).
* ``library`` one runtime-library call (dot, convolution: ``Kind.LIBRARY``).  Its
              operands must be dense buffers, so each is a parameter or a kernel
              root of its own -- cheap values included, which are otherwise never
              materialised -- seen through reshapes and windows of whole rows,
              which the call reads in place (``aliases``;
              passes/library_operands.py).
* ``update``  one dynamic-update-slice: reads its operand and update from memory
              (dense buffers, as a library call's), computes its start indices
              in the kernel, and writes the window -- in place when buffer
              assignment lets the result share the operand's buffer.
* ``while``, ``conditional``  control flow: one while/conditional instruction whose
              operands are dense buffers; its roots are the get-tuple-elements
              that read its results (buffers too).  ``called`` holds the kernels
              of each called computation (condition and body, or the branches),
              fused by the same policy; codegen/control.py runs them.
* ``scatter`` one IR ``scatter`` (segment sum): rows are (scatter, segment range,
              column block); each row zeroes its part of the result, then walks all
              ids in input order, so every sum adds in TF's order.
* ``scan``    one IR ``scan`` (cumulative sum): rows are (outer index, column block);
              each walks the scanned dim serially, the block's columns vectorised.
* ``sort``    one IR ``top-k``: rows are chunks of the vectors along the last dim (a
              heap of k per vector, or a merge sort of the whole vector for large k).
              These three, like library calls, root their own kernel; unlike
              them, their operands are computed inside it (elementally, at the
              data-dependent indices they read), so ``scatter(x * 2, ids)`` is
              one kernel.  A gather (``Kind.GATHER``) is elemental and fuses
              like movement, its operands read at "opaque" indices.

Cheap instructions (constants, iota, data movement of parameters) are never
materialised: every kernel that needs them recomputes them from the source.
"""
from __future__ import annotations

import math

from tfjit.ir.indexing import operand_index
from tfjit.ir.module import Instr, Module
from tfjit.ir.ops import Kind, Op
from tfjit.passes.iteration import (SPLIT_MAX_OUTPUTS, SPLIT_MIN_ELEMENTS, choose_iteration,
                                    column_candidate, symbolic_reads)
from tfjit.passes.kernel_graph import KernelGraph, reads_any
# the kernel data model (passes/kernels.py), which later stages also read as fusion.X
from tfjit.passes import windows
from tfjit.passes.kernel_order import reads, schedule
from tfjit.passes.library_operands import library_window
from tfjit.passes.kernels import (CONTROL, OWN_KERNEL, Fusion, KernelKind, in_memory, is_cheap, reductions,
                                  row_names)

MAX_OPERANDS_AND_OUTPUTS = 64   # buffers a merge of sibling kernels may read and write (as XLA)
PRODUCER_MIN_ELEMENTS = 1 << 15  # loop kernels merged into a column reduction that reads them
INLINE_REDUCE_MAX = 8           # elements an output of a reduction computed where it is read
VIEW_MIN_ROW = 64               # elements per row of a kernel that writes an output's reshape


_OWN_KERNEL_WHY = {
    Kind.SCATTER: "a scatter adds rows into its result in input order",
    Kind.SCAN: "a scan carries a running value along its dim",
    Kind.SORT: "a top-k selects along its last dim",
}


class _Builder:
    """The state of one policy run: which kernel owns which instruction."""

    def __init__(self, m: Module):
        self.m = m
        self.users = m.users()
        self.order = {i: n for n, i in enumerate(m.instrs)}
        self.owner: dict = {}
        self.sym: dict = {}           # instr -> set of symbolic indices it is read at
        self.maps: dict = {}          # instr -> {index map: share of points} (passes/windows.py)
        self.fusions: list = []
        self.read_in_place: dict = {}   # reshape or window -> the library kernels reading it

    def library_readers(self, i: Instr) -> set:
        """The library kernels that read ``i`` as an operand, directly or through values
        they read in place; not as the start of a window (the call computes that)."""
        out = set()
        for u in self.users[i]:
            if u in self.read_in_place:
                if u.op is not Op.DYNAMIC_SLICE or i is u.operands[0]:
                    out |= self.read_in_place[u]
            elif self.owner.get(u) is not None and self.owner[u].kind == "library":
                out.add(self.owner[u])
        return out

    def start(self, root: Instr, why: str) -> Fusion:
        kind = {Kind.REDUCE: KernelKind.REDUCE, Kind.LIBRARY: KernelKind.LIBRARY,
                Kind.UPDATE: KernelKind.UPDATE, **OWN_KERNEL}.get(root.op.kind, KernelKind.LOOP)
        if kind == "reduce":
            operand = root.operands[0]
            shape, outer = operand.shape, root.rank
        elif kind == "update":       # iterates over the window; its starts are scalars
            shape, outer = root.operands[1].shape, 0
        else:
            shape, outer = root.shape, max(root.rank - 1, 0)
        f = Fusion(f"fusion.{len(self.fusions)}", kind, [root], [root], shape, outer)
        f.notes.append(f"{root!r} starts a {kind} kernel: {why}")
        self.fusions.append(f)
        self.owner[root] = f
        idx = row_names(root.rank)
        self.sym[root] = {idx}
        self.maps[root] = {0: 1.0}
        self._propagate(root, f)
        return f

    def _propagate(self, i: Instr, f: Fusion) -> None:
        """Records the symbolic indices (and index maps) at which i's operands are read
        inside f."""
        windows.add_maps(self.maps, i)
        for idx in self.sym[i]:
            for k, o in enumerate(i.operands):
                if idx == "opaque":
                    mapped = None
                elif i.op.kind is Kind.REDUCE:
                    extra = i.attrs.get("ndims", 1)
                    mapped = idx + tuple(f"r{o.rank - extra + n}" for n in range(extra))
                else:
                    mapped = operand_index(i, k, idx)
                self.sym.setdefault(o, set()).add(mapped if mapped is not None else "opaque")

    def control(self, i: Instr) -> Fusion:
        """A while/conditional: its own step, owning the get-tuple-elements of its result."""
        elements = [u for u in self.users[i] if u.op is Op.GET_TUPLE_ELEMENT]
        kind = KernelKind.WHILE if i.op is Op.WHILE else KernelKind.CONDITIONAL
        f = Fusion(f"fusion.{len(self.fusions)}", kind, elements, [i] + elements, (), 0)
        f.called = [fuse(c, loop_body=i.op is Op.WHILE and n == 1, views=False)
                    for n, c in enumerate(i.called)]
        f.notes.append(f"{i!r} is a {kind}: its computations run as kernels of their own")
        self.fusions.append(f)
        for x in f.instrs:
            self.owner[x] = f
        return f

    def join(self, i: Instr, f: Fusion) -> None:
        self.owner[i] = f
        f.instrs.append(i)
        self._propagate(i, f)

    def extra_root_home(self, i: Instr, owners: set) -> Fusion | None:
        """A loop kernel among ``owners`` that can also write elementwise ``i``: a value
        read by several kernels is written once either way, and as an extra root of a
        same-shape consumer (multi-output fusion) it is not read back there and its chain
        can join too (SwiGLU's train step wrote silu's beta * x, sigmoid and product as
        one-instruction kernels between its GEMMs: 1.05x).  The home reads ``i`` at its
        loop's index only and does not depend on the other owners (a cycle)."""
        if i.op.kind is not Kind.ELEMENTWISE:
            return None
        identity = row_names(i.rank)
        for f in sorted(owners, key=lambda f: self.order[f.roots[0]]):
            if f.kind != "loop" or f.shape != i.shape or f.hoisted:
                continue
            inside = [u for u in self.users[i] if self.owner[u] is f]
            if any(u.shape != i.shape or self.sym.get(u) != {identity}
                   or u.op.kind is not Kind.ELEMENTWISE for u in inside):
                continue
            if not reads_any(f, owners - {f}, self.owner):    # only later instrs are owned yet
                return f
        return None

    def add_root(self, i: Instr, f: Fusion, why: str) -> None:
        f.roots.append(i)
        f.notes.append(f"{i!r} is also a root of {f.name}: {why}")
        self.sym[i] = {row_names(i.rank)}
        self.maps[i] = {0: 1.0}
        self.join(i, f)

    def inlined(self, i: Instr, f: Fusion) -> bool:
        """Whether reduction i, not hoistable into reduction kernel f, is computed where f
        reads it: at most ``INLINE_REDUCE_MAX`` elements an output, each output read once.
        UpSampling2D's gradient sums each 2x2 block as a sum over the repeated columns,
        then one over the repeated rows: apart, the first wrote [16, 112, 56, 64] for the
        second to read (3.4 ms against XLA's 2.7)."""
        extent = i.operands[0].size // max(i.size, 1)
        points = sum(self.maps.get(i, {0: 1.0}).values()) * math.prod(f.shape)
        return f.kind == "reduce" and i.op is Op.REDUCE and extent <= INLINE_REDUCE_MAX \
            and points <= i.size

    def hoistable(self, i: Instr, f: Fusion) -> str | None:
        """None when reduction i can be computed once per row of f, else why not."""
        wanted = row_names(i.rank)
        if i.rank > f.outer:
            return f"{i!r} has more dims ({i.rank}) than {f.name}'s rows ({f.outer})"
        if self.sym.get(i) != {wanted}:
            return f"{i!r} is read at indices that are not a prefix of {f.name}'s rows"
        rows, elements = math.prod(f.shape[:f.outer]), i.operands[0].size
        outputs, row = max(i.size, 1), math.prod(f.shape[f.outer:])
        if rows > outputs and elements // outputs > row:
            # Each row computes its own copy of the statistic: x * min(1, c / norm(x)) on
            # [4096, 4096] summed all 16M elements once per row, 3.6 s against TF's 13 ms.
            # A statistic of at most a row's length per row (a short vector's sum) stays.
            return (f"{i!r} gets a kernel of its own: hoisted, each of its outputs would be "
                    f"recomputed by {rows // outputs} rows of {f.name}, {elements // outputs} "
                    "elements each time")
        if rows <= SPLIT_MAX_OUTPUTS and elements >= SPLIT_MIN_ELEMENTS:
            # reduce_mean of a whole tensor: hoisted into the scalar division's kernel,
            # its 4M elements ran on one core; alone it splits into chunks (3x faster)
            return (f"{i!r} gets a kernel of its own: hoisted into {f.name}'s {rows} row(s), "
                    f"its {elements} elements would be read by one thread")
        if column_candidate(f):
            # A column statistic behind a column reduction (the variance over axis 0:
            # mean, then mean of squares about it): hoisted, each output would walk its
            # column with a stride of a row, both passes; apart, both kernels run the
            # column layout, vectorised across outputs (9-11x faster on [8192, 2048]).
            return (f"{i!r} gets a kernel of its own: hoisted, it would keep {f.name} from "
                    "reducing across rows of contiguous memory")
        return None


def _update_reading_reshape(b: _Builder, i: Instr, outputs: set) -> Fusion | None:
    """The update kernel that writes reshape ``i`` into its window, where that is all
    ``i`` is read for: the kernel reads i's operand through the reshape's index.  Keras's
    recurrent layers save each step's activations for the gradient as updates of a
    stack by a reshape of the value; written to a buffer of its own first, each was
    copied twice (2 MB a gate a step in a ConvLSTM2D(64) train step)."""
    if i.op is not Op.RESHAPE or i in outputs or not b.users[i]:
        return None
    kernels = {b.owner.get(u) for u in b.users[i]}
    if len(kernels) != 1:
        return None
    (f,) = kernels
    if f is None or f.kind != "update" or any(
            u.op is not Op.DYNAMIC_UPDATE_SLICE or u.operands[1] is not i
            or i in u.operands[:1] + u.operands[2:] for u in b.users[i]):
        return None
    return f


def fuse(m: Module, loop_body: bool = False, views: bool = True) -> list:
    """Partitions the module's non-cheap instructions into kernels, in execution order.

    ``loop_body``: ``m`` is a while body (output k is the next value of parameter k);
    kernels that write a next value are scheduled after the kernels that read the
    current one where dependencies allow, so the value can be updated in place
    (passes/buffers.py).  ``views``: outputs that are reshapes of a computed value
    (``output_views``) get no kernel; the value's kernel writes the output (the top-level
    module only: buffers.assign places them)."""
    b = _Builder(m)
    outputs = set(m.outputs)
    view_of = output_views(m) if views else {}
    viewed = set(view_of.values())
    for i in reversed(m.instrs):
        if in_memory(i):           # an output among them is copied by its producer (buffers.py)
            continue
        if i in view_of:
            continue
        if i.op in (Op.WHILE, Op.CONDITIONAL):
            b.control(i)
            continue
        if i.op.kind is Kind.LIBRARY:
            b.start(i, "a runtime-library call")
            continue
        if i.op.kind is Kind.UPDATE:
            b.start(i, "a dynamic-update-slice writes its window in memory")
            continue
        if i.op.kind in OWN_KERNEL:
            b.start(i, _OWN_KERNEL_WHY[i.op.kind])
            continue
        library = b.library_readers(i)
        if library and i not in outputs and (i.op is Op.RESHAPE or library_window(i)) \
                and all(u in b.read_in_place or b.owner.get(u) in library for u in b.users[i]):
            for f in sorted(library, key=lambda f: f.name):
                f.aliases[i] = i.operands[0]
                f.notes.append(f"{i!r} is read in place by {f.name}: " + (
                    "a reshape moves no data" if i.op is Op.RESHAPE else
                    "a window of whole rows of a buffer, at a start the call computes"))
            b.owner[i] = min(library, key=lambda f: f.name)
            b.read_in_place[i] = library
            continue
        if library:
            b.start(i, "it is an operand of a runtime-library call (read from memory)")
            continue
        update = _update_reading_reshape(b, i, outputs)
        if update is not None:
            # (its operand is then read from memory: the dense rule below, for the reshape)
            b.join(i, update)
            update.notes.append(f"{i!r} is read in place by {update.name}: a reshape moves no data")
            continue
        dense = [u for u in b.users[i] if u in b.owner and (
            b.owner[u].kind in CONTROL or b.owner[u].kind == "update" and i in u.operands[:2]
            and (not is_cheap(i) or i is u.operands[0] and u.op is Op.DYNAMIC_UPDATE_SLICE))]
        # (a cheap update, such as the zeros a gradient loop writes into the output
        # sequence's gradient each step, is computed by the update kernel: written by a
        # kernel of its own first, it was 2 MB more a step of ConvLSTM2D(64))
        if dense:
            b.start(i, f"it is an operand of {dense[0]!r} (read from memory)")
            continue
        if i in viewed:         # (a cheap one too: a transpose written as an output)
            b.start(i, "it is a module output, seen through a reshape (which moves no data)")
            continue
        if is_cheap(i) and i not in outputs:
            continue
        if i in outputs:        # checked first: a cheap output's users may be cheap (no kernel)
            b.start(i, "it is a module output")
            continue
        owners = {b.owner[u] for u in b.users[i]}
        if len(owners) != 1:
            home = b.extra_root_home(i, owners)
            if home is None:
                b.start(i, f"its users are in {len(owners)} kernels")
            else:
                b.add_root(i, home, f"its users are in {len(owners)} kernels, and {home.name} "
                           "computes it at every point of its own loop")
            continue
        (f,) = owners
        if i.op.kind is Kind.ELEMENTWISE and f.kind in ("loop", "reduce"):
            maps = b.maps.get(i, {0: 1.0})
            why = windows.duplicated_window(i, maps, f.shape, b.order) \
                or windows.duplicated_rounding(i, maps, f.shape)
            if why:
                b.start(i, why)
                continue
        if i.op.kind is Kind.REDUCE:
            why = b.hoistable(i, f)
            if why and b.inlined(i, f):
                f.notes.append(f"{i!r} reduced where {f.name} reads it: a few elements for each "
                               "output, and each output read once")
            elif why:
                b.start(i, why)
                continue
            else:
                f.hoisted.insert(0, i)
                f.notes.append(f"{i!r} hoisted into {f.name}: computed once per row")
        b.join(i, f)
    for f in b.fusions:
        f.instrs.sort(key=b.order.get)
        f.hoisted.sort(key=b.order.get)
    fusions = _merge_producers(b, _merge_siblings(b))
    for f in fusions:
        choose_iteration(f)
    overwrites: dict = {}       # loop body: kernel -> the parameters whose next value it writes
    if loop_body:
        for f in fusions:
            nexts = {m.params[k] for k, o in enumerate(m.outputs) if o in f.roots}
            if nexts:
                overwrites[f] = nexts
    return schedule(fusions, b.order, overwrites)


def output_views(m: Module) -> dict:
    """{output reshape: the value it reshapes}: outputs that are a row-major reshape of a
    computed value (not a parameter or a while's result) that no instruction reads.  The
    value's kernel writes the output's buffer, as the reshape's bytes are the value's
    (passes/collapse.py makes such outputs).  Outputs with views (rows that depend on
    the data, variable updates, complex and quantized values) are not."""
    special, users, out = m.outputs_with_views(), None, {}
    for j, o in enumerate(m.outputs):
        if o.op is not Op.RESHAPE or j in special or m.outputs.count(o) > 1:
            continue
        x = o.operands[0]
        if in_memory(x) or x.is_tuple or x in m.outputs:
            continue
        if x.shape and o.shape and x.shape[-1] < min(o.shape[-1], VIEW_MIN_ROW):
            # The kernel iterates the value's shape, in rows of its last dim: group norm's
            # [8, 32, 32, 64] output of [8, 32, 32, 8, 8] ran rows of 8 (its train step
            # 1.3x slower).  Rows of 1024 are long enough: tf.tile([1024, 1024], (2, 2)) as
            # [2, 1024, 2, 1024] reads its operand's rows whole (1.34 -> 0.81 ms), where
            # the output's rows of 2048 took each element's index apart.
            continue
        users = users if users is not None else m.users()
        if not users[o]:
            out[o] = x
    return out


def _merge_siblings(b: _Builder) -> list:
    """Merges loop kernels of one shape that read a common input (multi-output kernels),
    and column reductions of one shape that do (sibling reductions: one pass over the
    input computes them all).

    Greedy, in kernel order: each kernel takes in, one at a time, the first kernel of
    the list that shares a read with it and that neither depends on, until none is
    left (a kernel that found no partner never finds one later: merging only adds
    reads and dependencies).  A merge that would make a kernel read and write more
    than ``MAX_OPERANDS_AND_OUTPUTS`` buffers is refused, as XLA caps a fusion's
    operands plus outputs: 952 Adam updates of one shape (NASNetMobile's) all read
    the learning rate, and one kernel of them all is one enormous LLVM function.

    Cost: reads are computed once per kernel and unioned on a merge; candidates come
    from an index of readers per (buffer, shape); "depends" walks producers only down
    to the other kernel's level (``kernel_graph.py``).  The former restart-from-the-start
    scan with fresh walks was cubic: NASNetMobile's train step (7541 kernels) ran
    for more than 30 minutes."""
    fusions = list(b.fusions)
    position = {f: k for k, f in enumerate(fusions)}
    rd = {f: reads(f) for f in fusions}
    levels = KernelGraph(fusions, rd, b.owner)
    readers: dict = {}          # (buffer, kind, shape) -> candidate kernels that read it
    alive = set(fusions)
    candidates = {f for f in fusions if f.kind == "loop" and not f.hoisted or _column_sibling(f)}

    for f in candidates:
        for r in rd[f]:
            readers.setdefault((r, f.kind, f.shape), set()).add(f)
    for x in fusions:
        if x not in alive or x not in candidates:
            continue
        refused = {x}        # never mergeable with x from now on
        while True:
            siblings = {y for r in rd[x] for y in readers.get((r, x.kind, x.shape), ())} - refused
            for y in sorted(siblings, key=position.get):
                refused.add(y)
                if levels.depends(x, y) or levels.depends(y, x):
                    continue
                if x.kind == "reduce" and not _column_sibling(x, y):
                    continue
                size = len(rd[x] | rd[y]) + len(x.roots) + len(y.roots)
                if size > MAX_OPERANDS_AND_OUTPUTS:
                    x.notes.append(f"{y.name} not merged into {x.name}: together they would "
                                   f"read and write {size} buffers (at most "
                                   f"{MAX_OPERANDS_AND_OUTPUTS})")
                    continue
                x.roots += y.roots
                x.instrs += y.instrs         # disjoint: every instruction has one owner
                x.notes += y.notes + [f"{y.name} merged into {x.name}: siblings reading a common input"]
                for i in y.instrs:
                    b.owner[i] = x
                for r in rd[y]:
                    readers[(r, y.kind, y.shape)].discard(y)
                    readers[(r, x.kind, x.shape)].add(x)
                rd[x] |= rd.pop(y)
                levels.merge(x, y)
                alive.discard(y)
                break
            else:
                break
    fusions = [f for f in fusions if f in alive]
    for f in fusions:
        f.instrs.sort(key=b.order.get)
    return fusions


def _merge_producers(b: _Builder, fusions: list) -> list:
    """Merges a loop kernel into a column reduction that reads its result at each of
    its points once, in an order that keeps its reads and writes contiguous along the
    reduction's outputs: the reduction computes the loop's roots where it visits them
    and writes them (multi-output fusion of producer and consumer, as XLA's).  The
    loop kernel wrote its result and the reduction read it back: batch norm's
    gradient writes dy (through the relu's mask) for the input's gradient and sums it
    per channel, and a dense layer's bias gradient sums the gradient its product
    reads.  One producer per reduction (its roots are computed at one index), of at
    least ``PRODUCER_MIN_ELEMENTS``: a small one costs less to read back than the
    wait its other readers then have for the whole reduction (group normalisation's
    per-group values, 512 of them, merged made its train step 7-11% slower)."""
    rd = {f: reads(f) for f in fusions}
    levels = KernelGraph(fusions, rd, b.owner)
    position = {f: k for k, f in enumerate(fusions)}
    gone: set = set()
    for r in fusions:
        if r in gone or not _column_sibling(r):
            continue
        sym = symbolic_reads(r)
        for p in sorted({b.owner[x] for x in rd[r] if x in b.owner} - {r} - gone, key=position.get):
            at = _visited_once(r, p, sym)
            if at is None or any(levels.depends(k, p) for k in levels.producers[r] - {p}):
                continue                    # (another kernel r reads needs p's result)
            size = len((rd[r] | rd[p]) - set(p.roots)) + len(r.roots) + len(p.roots)
            merged = Fusion(r.name, r.kind, r.roots + p.roots, r.instrs + p.instrs, r.shape,
                            r.outer, elementwise_at=at)
            if size > MAX_OPERANDS_AND_OUTPUTS or not column_candidate(merged):
                continue
            r.elementwise_at = at
            _absorb(b, r, p, merged.roots, rd, levels, f"it computes {p.name}'s roots where "
                    f"its loops visit them, at {at}")
            gone.add(p)
            break
    for r in fusions:           # reductions of the values r now computes, where it does
        if not r.elementwise_at or r in gone:
            continue
        for c in sorted(levels.consumers[r], key=position.get):
            if c in gone or c.elementwise_at or not _column_sibling(c, r) or any(
                    levels.depends(k, r) for k in levels.producers[c] - {r}):
                continue
            seen = {x: idxs for x, idxs in symbolic_reads(c).items() if x in r.roots}
            if any(x.op.kind is Kind.REDUCE or idxs != {r.elementwise_at} for x, idxs in seen.items()):
                continue                # (r's reductions are known only when r ends)
            if len((rd[r] | rd[c]) - set(r.roots)) + len(r.roots) + len(c.roots) > MAX_OPERANDS_AND_OUTPUTS:
                continue
            sums = reductions(r)
            _absorb(b, r, c, sums + c.roots + [x for x in r.roots if x not in sums], rd, levels,
                    f"it reduces values {r.name} computes, at the points it computes them")
            gone.add(c)
    fusions = [f for f in fusions if f not in gone]
    for f in fusions:
        f.instrs.sort(key=b.order.get)
    return fusions


def _absorb(b: _Builder, r: Fusion, y: Fusion, roots: list, rd: dict, levels: KernelGraph,
            why: str) -> None:
    """Kernel y's instructions now belong to r, whose roots become ``roots``."""
    r.roots = roots
    r.instrs += y.instrs
    r.notes += y.notes + [f"{y.name} merged into {r.name}: {why}"]
    for i in y.instrs:
        b.owner[i] = r
    rd[r] = (rd[r] | rd.pop(y)) - set(roots)
    levels.merge(r, y)


def _visited_once(r: Fusion, p: Fusion, sym: dict) -> tuple | None:
    """The index, in the names of column reduction r's dims, at which r reads loop
    kernel p's roots (``sym``: r's symbolic reads), where it is one for all of them,
    names each of r's dims once (each of p's points read once) and ends in r's last
    output dim (p's result is written along the outputs, as the reduction reads);
    else None."""
    if p.kind != "loop" or p.hoisted or math.prod(p.shape) != math.prod(r.shape) \
            or math.prod(p.shape) < PRODUCER_MIN_ELEMENTS:
        return None
    names = row_names(r.outer) + tuple(f"r{k}" for k in range(len(r.shape) - r.outer))
    at = {idx for x, idxs in sym.items() if x in p.roots for idx in idxs}
    if len(at) != 1:
        return None
    (at,) = at
    if at == "opaque" or len(at) != len(names) or set(at) != set(names) or at[-1] != names[r.outer - 1]:
        return None
    return at


def _column_sibling(f: Fusion, other: Fusion | None = None) -> bool:
    """May reduce kernel f (merged with ``other``, of the same shape) be a column
    reduction with several roots?  Its roots are plain reductions of one operand
    shape and nothing is hoisted: a column row then accumulates each root's block of
    outputs in the same pass over the reduced rows, reading what they share once.
    Batch normalisation's gradient sums dy and dy * (x - mean) per channel: two
    column kernels read dy twice.  Row reductions are left apart: each root's row
    would be its own loop over the row, a second read either way."""
    if f.kind != "reduce" or f.hoisted or other is not None and (
            other.hoisted or other.outer != f.outer or other.shape != f.shape):
        return False
    both = [f] + ([other] if other is not None else [])
    sums = [r for g in both for r in reductions(g)]
    if any(r.op is not Op.REDUCE for r in sums):
        return False
    merged = Fusion(f.name, f.kind, sums + [r for g in both for r in g.roots if r not in sums],
                    [i for g in both for i in g.instrs], f.shape, f.outer,
                    elementwise_at=f.elementwise_at or (other.elementwise_at if other else ()))
    return column_candidate(merged)
