"""Kernels for runtime-library instructions (``Kind.LIBRARY``: dot, convolution).

A library kernel has the launch op's kernel ABI, ``void k(void** bufs, i64 begin,
i64 end)``, and runs as a single row: it loads its operands' and result's
buffers from ``bufs`` and calls the runtime library (runtime/linalg.cc), which
parallelises over TF's intra-op pool itself (the pool is ``bufs[device_slot]``).
The fusion pass guarantees every operand is a dense buffer (a parameter or
another kernel's root, possibly seen through reshapes, which do not move data).
"""
from __future__ import annotations

from llvmlite import ir

from tfjit.codegen.llvm_types import I32, I64, PTR, VOID, i64
from tfjit.ir.ops import Op
from tfjit.passes.cost import library_flops
from tfjit.passes.fusion import library_source

_SUFFIX = {"f32": "f32", "f64": "f64"}

# name -> argument types after (device, out, a, b); all but the flags are i64.
SIGNATURES = {
    "dot": [I64] * 6 + [I32, I32],
    "conv2d": [I64] * 17,
}


def symbol(kind: str, dtype) -> str:
    return f"tfjit_rt_{kind}_{_SUFFIX[dtype.name]}"


def runtime_symbols() -> list[str]:
    """Every runtime-library function a kernel may call (runtime/linalg.cc exports them)."""
    return [f"tfjit_rt_{k}_{s}" for k in SIGNATURES for s in _SUFFIX.values()]


def _dot_args(i) -> list:
    lhs, rhs = i.operands
    m, n = i.shape[-2:]
    k = lhs.shape[-2] if i.attrs["transpose_lhs"] else lhs.shape[-1]
    batch = i.shape[0] if i.rank == 3 else 1

    def stride(x):
        return 0 if x.rank == 2 or x.shape[0] == 1 else x.shape[1] * x.shape[2]

    return [i64(v) for v in (batch, stride(lhs), stride(rhs), m, n, k)] + \
        [ir.Constant(I32, i.attrs["transpose_lhs"]), ir.Constant(I32, i.attrs["transpose_rhs"])]


def _conv_args(i) -> list:
    x, w = i.operands
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    _, ho, wo, _ = i.shape
    values = (n, h, wd, c, kh, kw, o, ho, wo, *i.attrs["strides"], *i.attrs["dilations"],
              *i.attrs["padding"])
    return [i64(v) for v in values]


_CALLS = {Op.DOT: ("dot", _dot_args), Op.CONV: ("conv2d", _conv_args)}


def emit(module: ir.Module, fusion, plan, name: str) -> list:
    """Emits the kernel of one library fusion; returns [(symbol, rows=1, cost)]."""
    (root,) = fusion.roots
    kind, make_args = _CALLS[root.op]
    callee_name = symbol(kind, root.dtype)
    callee = module.globals.get(callee_name)
    if callee is None:
        callee = ir.Function(module, ir.FunctionType(VOID, [PTR] * 4 + SIGNATURES[kind]),
                             name=callee_name)
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64, I64]), name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    bufs = fn.args[0]

    def slot(k):
        return b.load(b.gep(bufs, [i64(k)], source_etype=PTR), typ=PTR)

    slots = plan.slots[root]
    out = slot(slots[0])
    operands = [slot(plan.slots[library_source(fusion, o)][0]) for o in root.operands]
    b.call(callee, [slot(plan.device_slot), out, *operands, *make_args(root)])
    nbytes = i64(root.size * root.dtype.itemsize)
    for other in slots[1:]:       # the same value is several outputs: copy it
        b.call(_memcpy(module), [slot(other), out, nbytes, ir.Constant(ir.IntType(1), 0)])
    b.ret_void()
    return [(name, 1 if root.size else 0, max(library_flops(root), 1))]   # 0 rows: never called


def _memcpy(module: ir.Module) -> ir.Function:
    name = "llvm.memcpy.p0.p0.i64"
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, I64, ir.IntType(1)]), name=name)
    return fn
