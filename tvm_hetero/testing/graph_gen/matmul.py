"""Matrix products: ``MatMul`` (weights on either side, vectors, batched, two values)
and ``Gemm``, with biases and fused activations. Each ``op_*`` returns False when it does not
fit (the builder then rolls back)."""

from __future__ import annotations

import math

from .builder import FEATURES, MAX_ELEMENTS, MAX_RMS, Builder, broadcast, numel
from .elementwise import activation


def _bias_shapes(rows: int, cols: int) -> list[tuple[int, ...]]:
    """Every shape that broadcasts to [rows, cols] without growing it."""
    return [(), (1,), (cols,), (1, cols), (rows, 1), (rows, cols), (1, 1)]


def _features_fitting(b: Builder, rows: int) -> int:
    """An output width from FEATURES for `rows` rows within MAX_ELEMENTS; a third of the time
    the widest (rules apply from a work size on: large products reach them)."""
    fitting = [n for n in FEATURES if rows * n <= MAX_ELEMENTS]
    if not fitting:
        return 1
    return fitting[-1] if b.chance(0.3) else b.choice(fitting)


def op_matmul(b: Builder) -> bool:
    a = b.pick(lambda v: v.rank >= 1)
    if a is None:
        return False
    k = a.shape[-1]
    n = _features_fitting(b, numel(a.shape[:-1]))
    style = b.choice(("weight", "weight", "weight", "vector", "batched", "value"))
    if a.rank == 1:
        style = "weight"
    if style == "vector":  # [.., K] x [K] -> [..]
        b_shape, out_shape = (k,), a.shape[:-1]
    elif style == "batched" and a.rank >= 2:  # a weight with batch axes of its own
        batch = tuple(1 if b.chance(0.5) else e for e in a.shape[:-2])
        b_shape = batch + (k, n)
        out_shape = broadcast(a.shape[:-2], batch) + (a.shape[-2], n)
    else:
        b_shape = (k, n)
        out_shape = a.shape[:-1] + (n,)
    if numel(out_shape) > MAX_ELEMENTS or k * n > MAX_ELEMENTS:
        return False
    other = None
    if style == "value":
        other = b.pick(lambda v: v.rank == 2 and v.shape[0] == k, exclude=(a.name,))
        if other is not None:
            out_shape = a.shape[:-1] + (other.shape[1],)
            n = other.shape[1]
            if numel(out_shape) > MAX_ELEMENTS:
                return False
    name = other.name if other is not None else b.weight(b_shape, k)
    rms = a.rms * (other.rms * math.sqrt(k) if other is not None else 1.0)
    if rms > MAX_RMS:
        return False
    (out,) = b.node("MatMul", [a.name, name])
    # rows of `a` that a broadcast made equal stay equal; anything else varies
    flat = frozenset(i for i in a.flat if i < a.rank - 1) if len(out_shape) == a.rank else \
        (frozenset(range(len(out_shape))) if a.flat else frozenset())
    value = b.add(out, out_shape, rms=rms, flat=flat)
    if b.chance(0.5) and len(out_shape) >= 1:  # a bias of a broadcastable shape
        rows = out_shape[-2] if len(out_shape) >= 2 else 1
        shapes = _bias_shapes(rows, out_shape[-1]) if len(out_shape) >= 2 else \
            [(), (1,), (out_shape[-1],)]
        shape = b.choice(shapes)
        bias = b.floats(b.rng.standard_normal(shape) * 0.5)
        inputs = [out, bias] if b.chance(0.7) else [bias, out]
        (added,) = b.node("Add", inputs)
        value = b.add(added, out_shape, rms=rms + 0.5, flat=flat)
    activation(b, value)
    return True


def op_matmul_left(b: Builder) -> bool:
    """W x a: a weight on the left of a value of rank >= 2 ([n, K] x [.., K, cols])."""
    a = b.pick(lambda v: v.rank >= 2)
    if a is None:
        return False
    k, n = a.shape[-2], b.choice(FEATURES)
    out_shape = a.shape[:-2] + (n, a.shape[-1])
    if numel(out_shape) > MAX_ELEMENTS or k * n > MAX_ELEMENTS:
        return False
    (out,) = b.node("MatMul", [b.weight((n, k), k), a.name])
    flat = frozenset(i for i in a.flat if i != a.rank - 2)
    activation(b, b.add(out, out_shape, rms=a.rms, flat=flat))
    return True


def op_gemm(b: Builder) -> bool:
    a = b.pick(lambda v: v.rank == 2 or (v.rank > 2 and numel(v.shape) <= MAX_ELEMENTS))
    if a is None:
        return False
    if a.rank != 2:  # a classifier head: Flatten first
        (flat,) = b.node("Flatten", [a.name])
        a = b.add(flat, (a.shape[0], numel(a.shape[1:])), rms=a.rms)
    trans_a, trans_b = int(b.chance(0.3)), int(b.chance(0.5))
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    n = _features_fitting(b, m)
    if m * n > MAX_ELEMENTS or k * n > MAX_ELEMENTS:
        return False
    b_shape = (n, k) if trans_b else (k, n)
    inputs = [a.name, b.weight(b_shape, k)]
    attrs = {}
    if trans_a:
        attrs["transA"] = 1
    if trans_b:
        attrs["transB"] = 1
    if b.chance(0.3):
        attrs["alpha"] = float(b.choice((0.5, 2.0)))
    if b.chance(0.75):
        shape = b.choice([s for s in _bias_shapes(m, n) if len(s) <= 2])
        inputs.append(b.floats(b.rng.standard_normal(shape) * 0.5))
        if b.chance(0.3):
            attrs["beta"] = float(b.choice((0.5, 2.0)))
    (out,) = b.node("Gemm", inputs, **attrs)
    activation(b, b.add(out, (m, n), rms=a.rms * 2 + 1,
                         flat=frozenset((0, 1)) if a.flat else frozenset()))
    return True


__all__ = ["op_gemm", "op_matmul", "op_matmul_left"]
