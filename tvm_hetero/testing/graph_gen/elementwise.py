"""Elementwise ops: unary ops (with the fused activations of convolutions and products),
binary ops with broadcasting, ``Where`` and comparison masks. Each ``op_*`` returns False when
it does not fit (the builder then rolls back)."""

from __future__ import annotations

import math

import numpy as np

from .builder import (MAX_ELEMENTS, MAX_RANK, MAX_RMS, Builder, Value, broadcast,
                      broadcastable_shape, numel, stretched_axes)


_UNARY = {  # name -> (weight, magnitude of the output given the input's)
    "Relu": (3, lambda r: r), "Sigmoid": (2, lambda r: 1.0), "Tanh": (2, lambda r: 1.0),
    "LeakyRelu": (1, lambda r: r), "Elu": (1, lambda r: r), "Selu": (1, lambda r: 1.1 * r),
"HardSigmoid": (1, lambda r: 1.0), "HardSwish": (1, lambda r: r),
    "Softplus": (1, lambda r: r + 1), "Softsign": (1, lambda r: 1.0), "Erf": (1, lambda r: 1.0),
    "Abs": (1, lambda r: r), "Neg": (1, lambda r: r), "Exp": (1, lambda r: math.exp(2 * r)),
    "Sin": (1, lambda r: 1.0), "Cos": (1, lambda r: 1.0), "Log": (1, lambda r: math.log(r + 1) + 1),
    "Sqrt": (1, lambda r: math.sqrt(r)), "Reciprocal": (1, lambda r: 1.0),
    "Clip": (2, lambda r: min(r, 6.0)), "SiLU": (2, lambda r: r), "Identity": (0.3, lambda r: r),
    "Dropout": (0.3, lambda r: r), "Floor": (0.5, lambda r: r), "Ceil": (0.3, lambda r: r),
    "Round": (0.3, lambda r: r), "Sign": (0.3, lambda r: 1.0),
}
_EXACT_UNARY = {"Relu", "Abs", "Neg", "Identity", "Dropout", "Clip"}
_NEEDS_EXACT = {"Floor", "Ceil", "Round", "Sign"}  # discontinuous
_NEEDS_POSITIVE = {"Log", "Sqrt", "Reciprocal"}


def op_unary(b: Builder, name: str | None = None, value: Value | None = None) -> bool:
    names = list(_UNARY)
    if name is None:
        weights = np.array([_UNARY[n][0] for n in names], dtype=float)
        name = names[int(b.rng.choice(len(names), p=weights / weights.sum()))]
    if value is None:
        value = b.pick(lambda v: v.exact) if name in _NEEDS_EXACT else b.pick()
    if value is None:
        return False
    if name == "Exp" and value.rms > 1.5:
        return False
    if name in ("Sin", "Cos") and value.rms > 10:
        return False
    if name in _NEEDS_POSITIVE:
        value = b.positive(value)
    rms = _UNARY[name][1](value.rms)
    meta = dict(rms=rms, flat=value.flat, exact=value.exact and name in _EXACT_UNARY)
    if name == "LeakyRelu":
        (out,) = b.node(name, [value.name], alpha=float(b.choice((0.01, 0.1, 0.2))))
    elif name == "Elu":
        (out,) = b.node(name, [value.name], alpha=float(b.choice((1.0, 0.5))))
    elif name == "HardSigmoid":
        (out,) = b.node(name, [value.name], alpha=float(b.choice((0.2, 1 / 6))), beta=0.5)
    elif name == "Clip":
        low, high = b.choice(((0.0, 6.0), (-1.0, 1.0), (-0.5, None), (None, 0.5)))
        inputs = [value.name, b.floats(low) if low is not None else "",
                  b.floats(high) if high is not None else ""]
        while inputs[-1] == "":
            inputs.pop()
        (out,) = b.node(name, inputs)
    elif name == "SiLU":  # x * Sigmoid(x): the fan-out of SiLU convolutions
        (sig,) = b.node("Sigmoid", [value.name])
        (out,) = b.node("Mul", [value.name, sig])
    elif name == "Dropout":
        (out,) = b.node(name, [value.name])
    elif name in ("Floor", "Ceil", "Round", "Sign"):
        (scaled,) = b.node("Mul", [value.name, b.floats(2.0)])  # exact: a power of two
        (out,) = b.node(name, [scaled])
        meta["exact"] = True
    else:
        (out,) = b.node(name, [value.name])
    meta["positive"] = name == "Sqrt"  # of a value >= 0.25
    b.add(out, value.shape, **meta)
    return True


_BINARY = ("Add", "Add", "Mul", "Mul", "Sub", "Div", "Pow", "Max", "Min", "Sum", "Mean")


def _second_operand(b: Builder, a: Value) -> tuple[Value | str, tuple[int, ...]] | None:
    """Another operand for an elementwise op on `a`: an existing value of the same shape (a
    residual join), one that broadcasts, a constant or a new graph input of a broadcastable
    shape. Returns (a value or a constant's name, its shape)."""
    mode = b.choice(("same", "same", "broadcast", "const", "const", "input", "wide"))
    if mode == "same":
        other = b.pick(lambda v: v.shape == a.shape, exclude=(a.name,))
        if other is not None or b.chance(0.3):
            return (other, other.shape) if other is not None else (a, a.shape)  # x op x
        mode = "broadcast"
    if mode == "broadcast":
        other = b.pick(lambda v: v.shape != a.shape and broadcast(v.shape, a.shape) == a.shape,
                       exclude=(a.name,))
        if other is not None:
            return other, other.shape
        mode = "const"
    shape = broadcastable_shape(b, a.shape, widen=mode == "wide")
    if numel(broadcast(shape, a.shape)) > MAX_ELEMENTS:
        return None
    if mode == "input":
        return b.graph_input(shape), shape
    data = b.rng.standard_normal(shape).astype(np.float32)
    return b.const(data, "c"), shape


def _broadcast_pair(b: Builder):
    """``(value, other, other's shape, broadcast shape)``: a value and a second operand (a
    constant's name or a value) that broadcast together within the size and rank bounds; None
    when none fits."""
    a = b.pick()
    if a is None:
        return None
    found = _second_operand(b, a)
    if found is None:
        return None
    other, shape = found
    out_shape = broadcast(a.shape, shape)
    if out_shape is None or numel(out_shape) > MAX_ELEMENTS or len(out_shape) > MAX_RANK:
        return None
    return a, other, shape, out_shape


def op_binary(b: Builder) -> bool:
    op = b.choice(_BINARY)
    found = _broadcast_pair(b)
    if found is None:
        return False
    a, other, shape, out_shape = found
    if isinstance(other, str):  # a constant: magnitude 1, never exact
        other = Value(other, shape, rms=1.0)
    if op == "Sub" and other is not a:
        # x - reduce(x) over an axis where x is constant leaves only rounding noise
        stretched = stretched_axes(other.shape, out_shape)
        if stretched and stretched <= set(a.flat) | stretched_axes(a.shape, out_shape):
            return False
    flat = frozenset((set(a.flat) | stretched_axes(a.shape, out_shape))
                     & (set(other.flat) | stretched_axes(other.shape, out_shape)))
    exact = a.exact and other.exact and op in ("Max", "Min")  # these never round
    if op == "Div":
        if other.name in b.uses:
            other = b.positive(other)
        else:  # a constant denominator bounded away from 0
            data = b.rng.uniform(0.5, 2.0, shape) * b.rng.choice((-1, 1), shape)
            other = Value(b.floats(data), shape, rms=1.0, positive=False)
        (out,) = b.node("Div", [a.name, other.name])
        b.add(out, out_shape, rms=a.rms / max(other.rms, 0.25) * 2, flat=flat)
        return True
    if op == "Pow":
        base = b.positive(a)
        exponent = b.choice((2.0, 2.0, 3.0, 0.5, 1.5))
        if base.rms ** exponent > MAX_RMS:
            return False
        if b.chance(0.3) and base.rank >= 1:  # a per-channel exponent
            shape = broadcastable_shape(b, base.shape)
            data = b.rng.choice((0.5, 1.0, 2.0), shape)
            (out,) = b.node("Pow", [base.name, b.floats(data)])
            out_shape = broadcast(base.shape, shape)
        else:
            (out,) = b.node("Pow", [base.name, b.floats(exponent)])
            out_shape = base.shape
        b.add(out, out_shape, rms=max(base.rms, 1.0) ** max(exponent, 2.0), flat=base.flat)
        return True
    inputs = [a.name, other.name]
    if b.chance(0.5):
        inputs.reverse()
    if op in ("Sum", "Mean", "Max", "Min") and b.chance(0.3):  # variadic: a third operand
        third = b.pick(lambda v: broadcast(v.shape, out_shape) == out_shape)
        if third is not None:
            inputs.append(third.name)
    (out,) = b.node(op, inputs)
    rms = a.rms * other.rms if op == "Mul" else a.rms + other.rms
    b.add(out, out_shape, rms=rms, flat=flat, exact=exact)
    return True


def activation(b: Builder, value: Value) -> Value:
    """A fused activation after a convolution or matmul (or none)."""
    name = b.choice((None, None, "Relu", "Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "SiLU",
                     "SiLU", "HardSwish"))
    if name is None:
        return value
    op_unary(b, name, value)
    return b.values[-1]


def _condition(b: Builder, shape) -> str:
    """A boolean tensor broadcastable to `shape` that every implementation computes the same:
    a comparison of a graph input (or of data movement of one), or a constant."""
    exact = b.pick(lambda v: v.exact and broadcast(v.shape, shape) == tuple(shape))
    if exact is not None and b.chance(0.7):
        op = b.choice(("Greater", "Less", "GreaterOrEqual", "LessOrEqual"))
        (cond,) = b.node(op, [exact.name, b.floats(float(b.choice((0.0, 0.5, -0.3))))])
        return cond
    cond_shape = broadcastable_shape(b, shape)
    if b.chance(0.2):
        return b.graph_input(cond_shape, "bool")
    return b.const(b.rng.random(cond_shape) < 0.5, "m")


def op_where(b: Builder) -> bool:
    found = _broadcast_pair(b)
    if found is None:
        return False
    x, other, shape, out_shape = found
    other_name = other if isinstance(other, str) else other.name
    cond = _condition(b, out_shape)
    pair = [x.name, other_name] if b.chance(0.5) else [other_name, x.name]
    (out,) = b.node("Where", [cond] + pair)
    rms = max(x.rms, other.rms if isinstance(other, Value) else 1.0)
    other_flat = other.flat if isinstance(other, Value) else frozenset()
    flat = ((set(x.flat) | stretched_axes(x.shape, out_shape))
            & (set(other_flat) | stretched_axes(shape, out_shape)))
    b.add(out, out_shape, rms=rms, flat=frozenset(flat))
    return True


def op_mask(b: Builder) -> bool:
    """x * Cast(Greater(input, c)): a float mask from a comparison."""
    x = b.pick()
    if x is None:
        return False
    cond = _condition(b, x.shape)
    (mask,) = b.node("Cast", [cond], to=1)  # FLOAT
    (out,) = b.node("Mul", [x.name, mask] if b.chance(0.5) else [mask, x.name])
    b.add(out, x.shape, rms=x.rms, flat=x.flat)
    return True


__all__ = ["activation", "op_binary", "op_mask", "op_unary", "op_where"]
