"""Drivers for control flow: one generated function per while/conditional.

A driver has the kernels' ABI (``void f(void** bufs, i64 begin, i64 end)``) and
runs as one step of one row, so the launch op, the host runner and AOT objects
run it like any kernel.  It calls the kernels of its computations in order (over
all their rows), checks the status word after each (a kernel's error ends the
loop at once), and moves loop state as passes/buffers.py planned it: pointer
swaps for double-buffered values, copies for initial values and for values a
computation passes through unchanged.

Why generated drivers rather than control steps interpreted by the launch op:
the executable ABI, the launch op, the host runner and the AOT driver stay as
they are (AOT objects support loops for free), and an iteration costs a few
loads and calls: measured on this project's 2-core machine, 6-7 ns per iteration
of a scalar loop (TF's executor: 8.5-15.7 us), a Keras LSTM (batch 8, 32 units, 20
steps) 0.31-0.33 ms against tf.function's 1.9-5.2 ms.  What interpreting would add is
sharding a loop body's kernels over TF's pool; with ``parallel`` the driver
does the same (``tfjit_rt_parallel_for``, runtime/parallel.cc, shards a step
whose rows x cost reach the launch op's inline threshold, as the launch op
does), so a big training-loop body still uses every core while an LSTM step's
small kernels run inline, and runs a body's concurrent groups
(passes/concurrency.py ``schedule_loops``) through ``tfjit_rt_run_group`` as the
launch op runs the top level's.  (On the 2-core machine, shared with other work, a
10-iteration loop over 2048x2048 f32 took 59-76 ms sharded, 73-77 ms inline and
83-131 ms in TF when a core was free; at a load of 4 sharding bought nothing and
cost nothing: 110-139 ms against 107-130.)
"""
from __future__ import annotations

from llvmlite import ir

from tfjit.codegen.llvm_types import I1, I8, I32, I64, PTR, VOID, i64
from tfjit.passes import concurrency
from tfjit.runtime import launch

PARALLEL_FOR = launch.PARALLEL_FOR
RUN_GROUP = launch.RUN_GROUP
_STEP = ir.LiteralStructType([PTR, I64, I64, I32, I32])   # runtime/abi.h TfjitStep
INLINE_COST = 50000      # as runtime/parallel.cc's kInlineCost: below this, a step runs inline


def _memcpy(b: ir.IRBuilder, dst, src, nbytes: int) -> None:
    if nbytes <= 0:
        return
    name = "llvm.memcpy.p0.p0.i64"
    fn = b.module.globals.get(name) or ir.Function(
        b.module, ir.FunctionType(VOID, [PTR, PTR, I64, I1]), name=name)
    b.call(fn, [dst, src, i64(nbytes), ir.Constant(I1, 0)])


class _Driver:
    def __init__(self, module: ir.Module, name: str, plan, parallel: bool):
        self.module, self.plan, self.parallel = module, plan, parallel
        self.fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64, I64]), name=name)
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.bufs = self.fn.args[0]
        self.exit = self.fn.append_basic_block("error")
        with self.b.goto_block(self.exit):
            self.b.ret_void()

    def slot(self, k: int):
        return self.b.gep(self.bufs, [i64(k)], source_etype=PTR)

    def load(self, k: int):
        return self.b.load(self.slot(k), typ=PTR)

    def copy(self, copies) -> None:
        for dst, src, n in copies:
            if dst != src:
                _memcpy(self.b, self.load(dst), self.load(src), n)

    def run(self, steps, marks=None) -> None:
        """Calls each step over all its rows; leaves through ``exit`` on an error.
        ``marks``: per step, its (group, task) (abi.h): a concurrent group's steps run
        through the op library's run_group, its tasks at once (passes/concurrency.py)."""
        s = 0
        while s < len(steps):
            if marks and self.parallel and marks[s][0] > 1:
                n = marks[s][0]
                self._group(steps[s:s + n], marks[s:s + n])
                s += n
                continue
            self._step(*steps[s])
            s += 1

    def _group(self, steps, marks) -> None:
        """One call of run_group over the group's TfjitStep array, filled on the stack
        (the driver names every kernel it runs, as codegen/ir_split.py needs)."""
        b = self.b
        with b.goto_entry_block():
            array = b.alloca(ir.ArrayType(_STEP, len(steps)))
        for k, ((symbol, rows, cost), (group, task)) in enumerate(zip(steps, marks)):
            fields = [b.bitcast(self.module.globals[symbol], PTR), i64(rows), i64(cost),
                      ir.Constant(I32, group), ir.Constant(I32, task)]
            for n, v in enumerate(fields):
                b.store(v, b.gep(array, [ir.Constant(I32, 0), ir.Constant(I32, k), ir.Constant(I32, n)]))
        run = self.module.globals.get(RUN_GROUP) or ir.Function(
            self.module, ir.FunctionType(VOID, [PTR, PTR, PTR, I64]), name=RUN_GROUP)
        b.call(run, [self.load(self.plan.device_slot), array, self.bufs, i64(self.plan.device_slot + 1)])
        self._check(f"group{len(self.fn.blocks)}")

    def _check(self, label: str) -> None:
        b = self.b
        status = b.load(self.load(self.plan.status_slot), typ=I32)
        ok = self.fn.append_basic_block(f"{label}.ok")
        b.cbranch(b.icmp_unsigned("!=", status, ir.Constant(I32, 0)), self.exit, ok)
        b.position_at_end(ok)

    def _step(self, symbol: str, rows: int, cost: int) -> None:
        b = self.b
        if rows <= 0:
            return
        kernel = self.module.globals[symbol]
        if self.parallel and rows > 1 and rows * max(cost, 1) >= INLINE_COST:
            shard = self.module.globals.get(PARALLEL_FOR) or ir.Function(
                self.module, ir.FunctionType(VOID, [PTR, PTR, PTR, I64, I64]), name=PARALLEL_FOR)
            b.call(shard, [self.load(self.plan.device_slot), kernel, self.bufs, i64(rows),
                           i64(cost)])
        else:
            b.call(kernel, [self.bufs, i64(0), i64(rows)])
        self._check(symbol)


def emit_while(module: ir.Module, f, plan, name: str, emit_kernels, parallel: bool) -> list:
    """The driver of while fusion ``f``; ``emit_kernels(fusions, prefix) -> steps``."""
    lp = plan.control[f]
    cond_steps = emit_kernels(f.called[0], f"{name}.cond")
    per_kernel: list = []
    body_steps = emit_kernels(f.called[1], f"{name}.body", per_kernel)
    marks = concurrency.step_marks(lp.groups, per_kernel) if lp.groups else None
    d = _Driver(module, name, plan, parallel)
    b = d.b
    for slot, source in lp.pointers:
        b.store(d.load(source), d.slot(slot))
    d.copy(lp.init)
    test = d.fn.append_basic_block("cond")
    b.branch(test)
    b.position_at_end(test)
    d.run(cond_steps)
    pred = b.load(d.load(lp.pred_slot), typ=I8)
    body = d.fn.append_basic_block("body")
    done = d.fn.append_basic_block("done")
    b.cbranch(b.icmp_unsigned("!=", pred, ir.Constant(I8, 0)), body, done)
    b.position_at_end(body)
    d.run(body_steps, marks)
    d.copy(lp.copies)
    for x, y in lp.swaps:
        px, py = d.load(x), d.load(y)
        b.store(py, d.slot(x))
        b.store(px, d.slot(y))
    b.branch(test)
    b.position_at_end(done)
    d.copy(lp.finals)
    b.ret_void()
    return [(name, 1, 1)]


def emit_conditional(module: ir.Module, f, plan, name: str, emit_kernels, parallel: bool) -> list:
    """The driver of conditional fusion ``f``: runs only the branch its selector picks."""
    bp = plan.control[f]
    c = f.instrs[0]
    steps = [emit_kernels(fs, f"{name}.branch{k}") for k, fs in enumerate(f.called)]
    d = _Driver(module, name, plan, parallel)
    b = d.b
    n = len(steps)
    if c.operands[0].dtype.name == "pred":
        taken = b.load(d.load(bp.selector_slot), typ=I8)
        index = b.select(b.icmp_unsigned("!=", taken, ir.Constant(I8, 0)),
                         ir.Constant(I32, 0), ir.Constant(I32, 1))
    else:   # TF's Case: an index out of range runs the last branch
        index = b.load(d.load(bp.selector_slot), typ=I32)
    blocks = [d.fn.append_basic_block(f"branch{k}") for k in range(n)]
    end = d.fn.append_basic_block("end")
    switch = b.switch(index, blocks[-1])
    for k in range(n - 1):
        switch.add_case(ir.Constant(I32, k), blocks[k])
    for k in range(n):
        b.position_at_end(blocks[k])
        d.run(steps[k])
        d.copy(bp.copies[k])
        b.branch(end)
    b.position_at_end(end)
    d.copy(bp.finals)
    b.ret_void()
    return [(name, 1, 1)]
