"""Resource variables inside a cluster: reads, assignments and optimizer updates.

A cluster reads every variable it uses at its start and writes the variables
it assigns at its end (as XLA does): a resource input becomes a ``Variable``
whose ``value`` is an IR parameter holding the variable's value; each read
returns the current value and each assignment replaces it, in the cluster's
topological order (control edges included), so a read after a write in the
same cluster sees the write.  ``lower_cluster`` turns the final value of every
assigned variable into a trailing output that the launch op writes back
(runtime/launch_op.cc).

Optimizer ops follow TF's formulas (tensorflow/core/kernels/training_ops.cc);
their scalar hyper-parameters are broadcast to the variable's shape.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tfjit import dtypes as dt
from tfjit.ir.module import Instr
from tfjit.ir.ops import Op
from tfjit.lower.registry import ALL, Unsupported, broadcast_to, register

_OPTIMIZER_DTYPES = (dt.F32, dt.F64)   # f16/bf16 updates round per op in TF: not matched yet


@dataclasses.dataclass(eq=False)
class Variable:
    """A resource input of the cluster: which parameter it is and its current value."""
    param: int
    value: Instr
    assigned: bool = False

    @property
    def dtype(self):          # lets generic code (e.g. half-precision checks) look at it
        return self.value.dtype

    def assign(self, value: Instr) -> None:
        self.value = value
        self.assigned = True


def _var(ctx, i: int = 0) -> Variable:
    v = ctx.inputs[i]
    if not isinstance(v, Variable):
        raise Unsupported(f"input {i} of {ctx.node.op} must be a resource variable")
    return v


def _declared(ctx, v: Variable, attr: str = "dtype"):
    t = ctx.attr(attr)
    if t is not None and t.ir is not v.value.dtype:
        raise Unsupported(f"{ctx.node.op} expects a {t.name} variable, the variable holds "
                          f"{v.value.dtype}")


def _value_like(ctx, v: Variable, x: Instr) -> Instr:
    """``x`` (the same dtype as the variable) broadcast to the variable's shape."""
    if x.dtype is not v.value.dtype:
        raise Unsupported(f"{ctx.node.op}: a {x.dtype} operand for a {v.value.dtype} variable")
    if x.shape != v.value.shape and x.rank != 0:
        raise Unsupported(f"{ctx.node.op}: operand shape {list(x.shape)} does not match the "
                          f"variable's {list(v.value.shape)}")
    return broadcast_to(ctx.m, x, v.value.shape)


@register("ReadVariableOp", dtypes=ALL)
def _read(ctx):
    v = _var(ctx)
    _declared(ctx, v)
    return v.value


@register("AssignVariableOp", dtypes=ALL)
def _assign_op(ctx):
    v, x = _var(ctx), ctx.inputs[1]
    _declared(ctx, v)
    if x.dtype is not v.value.dtype:
        raise Unsupported(f"AssignVariableOp: a {x.dtype} value for a {v.value.dtype} variable")
    v.assign(x)
    return []


def _arith(op):
    def rule(ctx):
        v = _var(ctx)
        _declared(ctx, v)
        if ctx.inputs[1].shape != v.value.shape:
            raise Unsupported(f"{ctx.node.op}: value shape {list(ctx.inputs[1].shape)} does not "
                              f"match the variable's {list(v.value.shape)}")
        v.assign(ctx.m.elementwise(op, v.value, _value_like(ctx, v, ctx.inputs[1])))
        return []
    return rule


@register("VariableShape", dtypes=(dt.I32, dt.I64))
def _variable_shape(ctx):
    """The shape of the variable's value: static in every compilation."""
    return ctx.m.constant(np.asarray(_var(ctx).value.shape, np.int64), ctx.attr("out_type").ir)


register("AssignAddVariableOp")(_arith(Op.ADD))
register("AssignSubVariableOp")(_arith(Op.SUB))


# -- optimizers (TF's ApplyXxx functors) --------------------------------------------------

def _ew(ctx, op, *xs):
    return ctx.m.elementwise(op, *xs)


def _scalar(ctx, v: Variable, i: int) -> Instr:
    return _value_like(ctx, v, ctx.inputs[i])


def _one(ctx, v: Variable) -> Instr:
    return broadcast_to(ctx.m, ctx.m.scalar(1, v.value.dtype), v.value.shape)


def _moved(ctx, old: Instr, target: Instr, rate: Instr) -> Instr:
    """old + (target - old) * rate: the moving averages of training_ops.cc's functors."""
    return _ew(ctx, Op.ADD, old, _ew(ctx, Op.MUL, _ew(ctx, Op.SUB, target, old), rate))


@register("ResourceApplyGradientDescent", dtypes=_OPTIMIZER_DTYPES)
def _sgd(ctx):
    """var -= alpha * delta"""
    v = _var(ctx)
    alpha, delta = _scalar(ctx, v, 1), _value_like(ctx, v, ctx.inputs[2])
    v.assign(_ew(ctx, Op.SUB, v.value, _ew(ctx, Op.MUL, alpha, delta)))
    return []


@register("ResourceApplyMomentum", dtypes=_OPTIMIZER_DTYPES)
def _momentum(ctx):
    """accum = accum * momentum + grad; var -= lr * accum
    (nesterov: var -= grad * lr + accum * momentum * lr)"""
    v, a = _var(ctx, 0), _var(ctx, 1)
    lr, grad, mom = _scalar(ctx, v, 2), _value_like(ctx, v, ctx.inputs[3]), _scalar(ctx, v, 4)
    accum = _ew(ctx, Op.ADD, _ew(ctx, Op.MUL, a.value, mom), grad)
    a.assign(accum)
    if ctx.attr("use_nesterov"):
        step = _ew(ctx, Op.ADD, _ew(ctx, Op.MUL, grad, lr),
                   _ew(ctx, Op.MUL, _ew(ctx, Op.MUL, accum, mom), lr))
    else:
        step = _ew(ctx, Op.MUL, lr, accum)
    v.assign(_ew(ctx, Op.SUB, v.value, step))
    return []


@register("ResourceApplyKerasMomentum", dtypes=_OPTIMIZER_DTYPES)
def _keras_momentum(ctx):
    """accum = accum * momentum - lr * grad; var += accum
    (nesterov: var += accum * momentum - lr * grad)"""
    v, a = _var(ctx, 0), _var(ctx, 1)
    lr, grad, mom = _scalar(ctx, v, 2), _value_like(ctx, v, ctx.inputs[3]), _scalar(ctx, v, 4)
    lr_grad = _ew(ctx, Op.MUL, lr, grad)
    accum = _ew(ctx, Op.SUB, _ew(ctx, Op.MUL, a.value, mom), lr_grad)
    a.assign(accum)
    step = _ew(ctx, Op.SUB, _ew(ctx, Op.MUL, accum, mom), lr_grad) if ctx.attr("use_nesterov") \
        else accum
    v.assign(_ew(ctx, Op.ADD, v.value, step))
    return []


@register("ResourceApplyAdam", "ResourceApplyAdamWithAmsgrad", dtypes=_OPTIMIZER_DTYPES)
def _adam(ctx):
    """lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t); m += (g - m) * (1 - beta1);
    v += (g^2 - v) * (1 - beta2); var -= lr_t * m / (sqrt(v) + eps)
    (nesterov: var -= lr_t * (m * beta1 + (1 - beta1) * g) / (sqrt(v) + eps);
    AMSGrad: vhat = max(vhat, v) takes v's place in the step)"""
    amsgrad = ctx.node.op == "ResourceApplyAdamWithAmsgrad"
    var, m, vv = _var(ctx, 0), _var(ctx, 1), _var(ctx, 2)
    b1p, b2p, lr, b1, b2, eps = (_scalar(ctx, var, i) for i in range(3 + amsgrad, 9 + amsgrad))
    grad = _value_like(ctx, var, ctx.inputs[9 + amsgrad])
    one = _one(ctx, var)
    lr_t = _ew(ctx, Op.DIV, _ew(ctx, Op.MUL, lr, _ew(ctx, Op.SQRT, _ew(ctx, Op.SUB, one, b2p))),
               _ew(ctx, Op.SUB, one, b1p))
    new_m = _moved(ctx, m.value, grad, _ew(ctx, Op.SUB, one, b1))
    new_v = _moved(ctx, vv.value, _ew(ctx, Op.MUL, grad, grad), _ew(ctx, Op.SUB, one, b2))
    m.assign(new_m)
    vv.assign(new_v)
    if amsgrad:
        vhat = _var(ctx, 3)
        new_v = _ew(ctx, Op.MAX, vhat.value, new_v)
        vhat.assign(new_v)
    denom = _ew(ctx, Op.ADD, _ew(ctx, Op.SQRT, new_v), eps)
    if ctx.attr("use_nesterov"):
        num = _ew(ctx, Op.ADD, _ew(ctx, Op.MUL, new_m, b1),
                  _ew(ctx, Op.MUL, _ew(ctx, Op.SUB, one, b1), grad))
    else:
        num = new_m
    var.assign(_ew(ctx, Op.SUB, var.value, _ew(ctx, Op.DIV, _ew(ctx, Op.MUL, lr_t, num), denom)))
    return []


@register("ResourceApplyRMSProp", "ResourceApplyCenteredRMSProp", dtypes=_OPTIMIZER_DTYPES)
def _rmsprop(ctx):
    """ms += (g^2 - ms) * (1 - rho); mom = mom * momentum + g * lr / sqrt(ms + eps);
    var -= mom.  Centered: also mg += (g - mg) * (1 - rho), and sqrt(ms - mg^2 + eps)."""
    centered = ctx.node.op == "ResourceApplyCenteredRMSProp"
    var = _var(ctx, 0)
    mg = _var(ctx, 1) if centered else None
    ms, mom = _var(ctx, 1 + centered), _var(ctx, 2 + centered)
    lr, rho, momentum, eps = (_scalar(ctx, var, i) for i in range(3 + centered, 7 + centered))
    grad = _value_like(ctx, var, ctx.inputs[7 + centered])
    keep = _ew(ctx, Op.SUB, _one(ctx, var), rho)
    new_ms = _moved(ctx, ms.value, _ew(ctx, Op.MUL, grad, grad), keep)
    denom = new_ms
    if centered:
        new_mg = _moved(ctx, mg.value, grad, keep)
        mg.assign(new_mg)
        denom = _ew(ctx, Op.SUB, new_ms, _ew(ctx, Op.MUL, new_mg, new_mg))
    new_mom = _ew(ctx, Op.ADD, _ew(ctx, Op.MUL, mom.value, momentum),
                  _ew(ctx, Op.DIV, _ew(ctx, Op.MUL, grad, lr),
                      _ew(ctx, Op.SQRT, _ew(ctx, Op.ADD, denom, eps))))
    ms.assign(new_ms)
    mom.assign(new_mom)
    var.assign(_ew(ctx, Op.SUB, var.value, new_mom))
    return []


# TF 1's optimizers and tf_keras's: the rest of training_ops.cc's dense functors, each
# term in the functor's order.

@register("ResourceApplyAdagrad", "ResourceApplyAdagradV2", dtypes=_OPTIMIZER_DTYPES)
def _adagrad(ctx):
    """accum += g^2 (when update_slots); var -= g * lr * rsqrt(accum)
    (V2: var -= g * lr / (sqrt(accum) + eps))"""
    var, acc = _var(ctx, 0), _var(ctx, 1)
    lr = _scalar(ctx, var, 2)
    v2 = ctx.node.op == "ResourceApplyAdagradV2"
    grad = _value_like(ctx, var, ctx.inputs[4 if v2 else 3])
    accum = acc.value
    if ctx.attr("update_slots", True):
        accum = _ew(ctx, Op.ADD, accum, _ew(ctx, Op.MUL, grad, grad))
        acc.assign(accum)
    step = _ew(ctx, Op.MUL, grad, lr)
    if v2:
        step = _ew(ctx, Op.DIV, step, _ew(ctx, Op.ADD, _ew(ctx, Op.SQRT, accum), _scalar(ctx, var, 3)))
    else:
        step = _ew(ctx, Op.MUL, step, _ew(ctx, Op.RSQRT, accum))
    var.assign(_ew(ctx, Op.SUB, var.value, step))
    return []


@register("ResourceApplyAdadelta", dtypes=_OPTIMIZER_DTYPES)
def _adadelta(ctx):
    """accum = accum * rho + g^2 * (1 - rho);
    update = sqrt(accum_update + eps) * rsqrt(accum + eps) * g; var -= update * lr;
    accum_update = accum_update * rho + update^2 * (1 - rho)"""
    var, acc, acc_up = _var(ctx, 0), _var(ctx, 1), _var(ctx, 2)
    lr, rho, eps = (_scalar(ctx, var, i) for i in range(3, 6))
    grad = _value_like(ctx, var, ctx.inputs[6])
    keep = _ew(ctx, Op.SUB, _one(ctx, var), rho)
    accum = _ew(ctx, Op.ADD, _ew(ctx, Op.MUL, acc.value, rho),
                _ew(ctx, Op.MUL, _ew(ctx, Op.MUL, grad, grad), keep))
    update = _ew(ctx, Op.MUL, _ew(ctx, Op.MUL, _ew(ctx, Op.SQRT, _ew(ctx, Op.ADD, acc_up.value, eps)),
                                  _ew(ctx, Op.RSQRT, _ew(ctx, Op.ADD, accum, eps))), grad)
    acc.assign(accum)
    var.assign(_ew(ctx, Op.SUB, var.value, _ew(ctx, Op.MUL, update, lr)))
    acc_up.assign(_ew(ctx, Op.ADD, _ew(ctx, Op.MUL, acc_up.value, rho),
                        _ew(ctx, Op.MUL, _ew(ctx, Op.MUL, update, update), keep)))
    return []


@register("ResourceApplyAdaMax", dtypes=_OPTIMIZER_DTYPES)
def _adamax(ctx):
    """m += (g - m) * (1 - beta1); v = max(beta2 * v, |g|);
    var -= lr / (1 - beta1_power) * (m / (v + eps))"""
    var, m, v = _var(ctx, 0), _var(ctx, 1), _var(ctx, 2)
    b1p, lr, b1, b2, eps = (_scalar(ctx, var, i) for i in range(3, 8))
    grad = _value_like(ctx, var, ctx.inputs[8])
    one = _one(ctx, var)
    new_m = _moved(ctx, m.value, grad, _ew(ctx, Op.SUB, one, b1))
    new_v = _ew(ctx, Op.MAX, _ew(ctx, Op.MUL, b2, v.value), _ew(ctx, Op.ABS, grad))
    m.assign(new_m)
    v.assign(new_v)
    rate = _ew(ctx, Op.DIV, lr, _ew(ctx, Op.SUB, one, b1p))
    step = _ew(ctx, Op.MUL, rate, _ew(ctx, Op.DIV, new_m, _ew(ctx, Op.ADD, new_v, eps)))
    var.assign(_ew(ctx, Op.SUB, var.value, step))
    return []


@register("ResourceApplyFtrl", "ResourceApplyFtrlV2", dtypes=_OPTIMIZER_DTYPES)
def _ftrl(ctx):
    """FTRL-proximal (V2: with l2_shrinkage; multiply_linear_by_lr scales linear by lr):
    linear += g' - (new_accum^-p - accum^-p) / lr * var;
    var = |linear| > l1 ? (l1 * sign(linear) - linear) / (new_accum^-p / lr + 2 * l2) : 0;
    accum = new_accum, with new_accum = accum + g^2 and sqrt for p = -0.5 (TF's case)"""
    var, acc, lin = _var(ctx, 0), _var(ctx, 1), _var(ctx, 2)
    v2 = ctx.node.op == "ResourceApplyFtrlV2"
    grad = _value_like(ctx, var, ctx.inputs[3])
    lr, l1, l2 = (_scalar(ctx, var, i) for i in range(4, 7))
    lr_power_in = ctx.inputs[8 if v2 else 7]
    if lr_power_in.op is not Op.CONSTANT:
        raise Unsupported(f"{ctx.node.op}: lr_power must be a constant (TF picks its formula by "
                          "its value)")
    lr_power = float(np.asarray(lr_power_in.value))
    by_lr = bool(ctx.attr("multiply_linear_by_lr", False))
    two = broadcast_to(ctx.m, ctx.m.scalar(2, var.value.dtype), var.value.shape)
    shrunk = grad
    if v2:
        shrinkage = _scalar(ctx, var, 7)
        shrunk = _ew(ctx, Op.ADD, grad, _ew(ctx, Op.MUL, _ew(ctx, Op.MUL, two, shrinkage), var.value))
    new_accum = _ew(ctx, Op.ADD, acc.value, _ew(ctx, Op.MUL, grad, grad))

    def power(x):
        if lr_power == -0.5:
            return _ew(ctx, Op.SQRT, x)
        exponent = broadcast_to(ctx.m, ctx.m.scalar(-lr_power, var.value.dtype), var.value.shape)
        return _ew(ctx, Op.POW, x, exponent)
    change = _ew(ctx, Op.SUB, power(new_accum), power(acc.value))
    if by_lr:
        linear = _ew(ctx, Op.ADD, lin.value, _ew(ctx, Op.SUB, _ew(ctx, Op.MUL, shrunk, lr),
                                                 _ew(ctx, Op.MUL, change, var.value)))
        l1_t = _ew(ctx, Op.MUL, l1, lr)
        y = _ew(ctx, Op.ADD, power(new_accum), _ew(ctx, Op.MUL, _ew(ctx, Op.MUL, two, l2), lr))
    else:
        linear = _ew(ctx, Op.ADD, lin.value, _ew(ctx, Op.SUB, shrunk, _ew(
            ctx, Op.MUL, _ew(ctx, Op.DIV, change, lr), var.value)))
        l1_t = l1
        y = _ew(ctx, Op.ADD, _ew(ctx, Op.DIV, power(new_accum), lr), _ew(ctx, Op.MUL, two, l2))
    x = _ew(ctx, Op.SUB, _ew(ctx, Op.MUL, l1_t, _ew(ctx, Op.SIGN, linear)), linear)
    zero = broadcast_to(ctx.m, ctx.m.scalar(0, var.value.dtype), var.value.shape)
    new_var = _ew(ctx, Op.SELECT, _ew(ctx, Op.GT, _ew(ctx, Op.ABS, linear), l1_t),
                  _ew(ctx, Op.DIV, x, y), zero)
    lin.assign(linear)
    var.assign(new_var)
    acc.assign(new_accum)
    return []


def _proximal(ctx, var: Variable, prox: Instr, rate: Instr, l1: Instr, l2: Instr) -> None:
    """var = sign(prox) * max(|prox| - rate * l1, 0) / (1 + rate * l2) where l1 > 0, else
    prox / (1 + rate * l2): the Fobos step of the proximal optimizers."""
    if l1.op is not Op.CONSTANT:
        raise Unsupported(f"{ctx.node.op}: l1 must be a constant (TF picks its formula by its sign)")
    one = _one(ctx, var)
    denom = _ew(ctx, Op.ADD, one, _ew(ctx, Op.MUL, rate, l2))
    if float(np.asarray(l1.value).reshape(-1)[0]) > 0:
        zero = broadcast_to(ctx.m, ctx.m.scalar(0, var.value.dtype), var.value.shape)
        shrunk = _ew(ctx, Op.MAX, _ew(ctx, Op.SUB, _ew(ctx, Op.ABS, prox), _ew(ctx, Op.MUL, rate, l1)),
                     zero)
        var.assign(_ew(ctx, Op.DIV, _ew(ctx, Op.MUL, _ew(ctx, Op.SIGN, prox), shrunk), denom))
    else:
        var.assign(_ew(ctx, Op.DIV, prox, denom))


@register("ResourceApplyProximalGradientDescent", dtypes=_OPTIMIZER_DTYPES)
def _proximal_sgd(ctx):
    """prox = var - g * lr, then the Fobos step with rate lr"""
    var = _var(ctx, 0)
    lr, l1, l2 = (_scalar(ctx, var, i) for i in range(1, 4))
    grad = _value_like(ctx, var, ctx.inputs[4])
    prox = _ew(ctx, Op.SUB, var.value, _ew(ctx, Op.MUL, grad, lr))
    _proximal(ctx, var, prox, lr, l1, l2)
    return []


@register("ResourceApplyProximalAdagrad", dtypes=_OPTIMIZER_DTYPES)
def _proximal_adagrad(ctx):
    """accum += g^2; rate = lr * rsqrt(accum); prox = var - g * rate, then the Fobos step"""
    var, acc = _var(ctx, 0), _var(ctx, 1)
    lr, l1, l2 = (_scalar(ctx, var, i) for i in range(2, 5))
    grad = _value_like(ctx, var, ctx.inputs[5])
    accum = _ew(ctx, Op.ADD, acc.value, _ew(ctx, Op.MUL, grad, grad))
    acc.assign(accum)
    rate = _ew(ctx, Op.MUL, lr, _ew(ctx, Op.RSQRT, accum))
    prox = _ew(ctx, Op.SUB, var.value, _ew(ctx, Op.MUL, grad, rate))
    _proximal(ctx, var, prox, rate, l1, l2)
    return []
