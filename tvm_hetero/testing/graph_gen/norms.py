"""Reductions over any axes, softmax and normalizations (layer, instance, RMS), never over
a slice that a broadcast made constant. Each ``op_*`` returns False when it does not fit (the
builder then rolls back)."""

from __future__ import annotations

import math

from .builder import MAX_RMS, Builder, Value, numel


_REDUCE = ("ReduceMean", "ReduceMean", "ReduceMax", "ReduceMax", "ReduceSum", "ReduceSum",
           "ReduceMin", "ReduceL2", "ReduceL1", "ReduceSumSquare", "ReduceLogSumExp",
           "ReduceProd")


def op_reduce(b: Builder) -> bool:
    op = b.choice(_REDUCE)
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return False
    if b.chance(0.5):  # one axis: most often not the last
        axes = [b.randint(0, x.rank - 1)]
    else:
        axes = sorted(b.rng.choice(x.rank, b.randint(1, x.rank), replace=False).tolist())
    all_axes = b.chance(0.1)
    if all_axes:
        axes = list(range(x.rank))
    count = numel([x.shape[a] for a in axes])
    keepdims = int(b.chance(0.5))
    if op == "ReduceProd" and (count > 4 or x.rms > 2):
        return False
    if op == "ReduceLogSumExp" and x.rms > 5:
        return False
    rms = {"ReduceSum": lambda r: r * count, "ReduceL1": lambda r: r * count,
           "ReduceSumSquare": lambda r: r * r * count, "ReduceL2": lambda r: r * count ** 0.5,
           "ReduceProd": lambda r: max(r, 1.0) ** count,
           "ReduceLogSumExp": lambda r: r + math.log(count) + 1}.get(op, lambda r: r)(x.rms)
    if rms > MAX_RMS:
        return False
    written = [b.axis(x.rank, a) for a in axes]
    if op == "ReduceSum":
        inputs = [x.name] if all_axes and b.chance(0.5) else [x.name, b.ints(written)]
        (out,) = b.node(op, inputs, keepdims=keepdims)
    elif all_axes and b.chance(0.5):
        (out,) = b.node(op, [x.name], keepdims=keepdims)
    else:
        (out,) = b.node(op, [x.name], axes=written, keepdims=keepdims)
    if keepdims:
        shape = [1 if i in axes else e for i, e in enumerate(x.shape)]
        flat = x.flat - set(axes)
    else:
        keep = [i for i in range(x.rank) if i not in axes]
        shape = [x.shape[i] for i in keep]
        flat = frozenset(j for j, i in enumerate(keep) if i in x.flat)
    b.add(out, shape, rms=rms, flat=frozenset(flat),
          exact=x.exact and op in ("ReduceMax", "ReduceMin"))
    return True


def op_softmax(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None or x.rms > 50:
        return False
    op = b.choice(("Softmax", "Softmax", "LogSoftmax"))
    axis = b.randint(0, x.rank - 1)
    attrs = {} if b.chance(0.2) else dict(axis=b.axis(x.rank, axis))
    (out,) = b.node(op, [x.name], **attrs)
    b.add(out, x.shape, rms=1.0 if op == "Softmax" else x.rms + 3, flat=x.flat)
    return True


def _normalizes_noise(x: Value, axes) -> bool:
    """Whether normalizing `x` over `axes` may divide rounding noise by ~0: the slice is
    constant (every axis of extent > 1 in it may be flat) but holds more than one element."""
    wide = [a for a in axes if x.shape[a] > 1]
    return bool(wide) and all(a in x.flat for a in wide)


def _epsilon(b: Builder, normalized_shape) -> float:
    """A normalization's epsilon: 1 over a single element, whose exact output is the bias
    (x - mean = 0) but whose rounding noise onnxruntime divides by sqrt(epsilon)."""
    epsilon = float(b.choice((1e-5, 1e-3)))
    return 1.0 if numel(normalized_shape) == 1 else epsilon


def op_layer_norm(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return False
    axis = b.randint(0, x.rank - 1) if b.chance(0.6) else x.rank - 1
    if _normalizes_noise(x, range(axis, x.rank)):
        return False
    shape = x.shape[axis:]
    inputs = [x.name, b.floats(b.rng.uniform(0.5, 1.5, shape))]
    if b.chance(0.7):
        inputs.append(b.floats(b.rng.standard_normal(shape) * 0.1))
    attrs = dict(epsilon=_epsilon(b, shape))
    if axis != x.rank - 1 or b.chance(0.5):
        attrs["axis"] = b.axis(x.rank, axis)
    (out,) = b.node("LayerNormalization", inputs, **attrs)
    b.add(out, x.shape, rms=1.5, flat=x.flat - set(range(axis, x.rank)))
    return True


def op_instance_norm(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 3 and not _normalizes_noise(v, range(2, v.rank)))
    if x is None:
        return False
    channels = x.shape[1]
    (out,) = b.node("InstanceNormalization",
                    [x.name, b.floats(b.rng.uniform(0.5, 1.5, channels)),
                     b.floats(b.rng.standard_normal(channels) * 0.1)],
                    epsilon=_epsilon(b, x.shape[2:]))
    b.add(out, x.shape, rms=1.5, flat=x.flat & {0, 1})
    return True


def op_rms_norm(b: Builder) -> bool:
    """x / Sqrt(ReduceMean(Pow(x, 2), -1) + eps) * g: the RMS norm of LLaMA-style models."""
    x = b.pick(lambda v: v.rank >= 2 and not _normalizes_noise(v, [v.rank - 1]))
    if x is None or x.rms > 100:
        return False
    (p,) = b.node("Pow", [x.name, b.floats(2.0)])
    (m,) = b.node("ReduceMean", [p], axes=[-1], keepdims=1)
    (e,) = b.node("Add", [m, b.floats(1e-5)])
    (s,) = b.node("Sqrt", [e])
    (d,) = b.node("Div", [x.name, s])
    (out,) = b.node("Mul", [d, b.floats(b.rng.uniform(0.5, 1.5, x.shape[-1]))])
    b.add(out, x.shape, rms=1.5, flat=x.flat - {x.rank - 1})
    return True


__all__ = ["op_instance_norm", "op_layer_norm", "op_reduce", "op_rms_norm", "op_softmax"]
