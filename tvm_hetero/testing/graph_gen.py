"""Seeded random valid ONNX graphs, for differential testing against onnxruntime and TVM.

:func:`random_graph` builds a graph of 4-20 nodes (opset 17, float32, weights as
initializers, graph inputs of fixed shapes) from the op vocabulary the importer accepts:
convolutions of every kind (grouped, depthwise, dilated, strided, 1-D, transposed) with fused
activations, pools, ``Resize``, ``Concat`` / ``Split`` / ``Slice`` / ``Pad``, reshapes and
transposes, elementwise ops with broadcasting, reductions over any axes, softmax, layer and
batch normalization, ``MatMul`` / ``Gemm``, ``Gather``, ``Where``, ``Expand`` and more, with
fan-out, residual joins and several graph outputs. Shapes favour edge cases: extents of 1,
odd and prime extents, extents that are no multiple of 8 or 16, inner dimensions of 1.

Every graph is valid by construction: ``onnx.checker.check_model(m, full_check=True)``,
``onnx.shape_inference.infer_shapes(m, strict_mode=True)`` and onnxruntime accept it (the
declared output shapes are those onnx infers). Values stay numerically tame, so that a
relative tolerance of about 1e-4 separates a wrong answer from rounding: ``Log`` / ``Sqrt`` /
``Pow`` / ``Reciprocal`` / ``Div`` see inputs bounded away from 0, ``Exp`` small ones,
discontinuous ops (``Floor``, comparisons) only values that every implementation computes
bit for bit (graph inputs and data movement of them), and normalizations never a slice that
a broadcast made constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

OPSET = 17
IR_VERSION = 8
# the largest tensor a graph holds (elements): keeps builds and runs in seconds
MAX_ELEMENTS = 1 << 16
MAX_RANK = 6
# a value's rough magnitude (root mean square) never exceeds this
MAX_RMS = 1e4

# extents chosen from these: 1, odd, prime, and no multiples of 8/16 beside some that are
CHANNELS = (1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 16, 17, 24, 32, 32)
SPATIAL = (1, 2, 3, 5, 7, 8, 9, 12, 13, 16, 17, 20, 20, 24)
BATCH = (1, 1, 1, 1, 2, 3)
FEATURES = (1, 1, 2, 3, 5, 7, 8, 12, 15, 16, 17, 31, 32, 33, 64, 68, 100)
ROWS = (1, 2, 3, 7, 10, 16, 33, 128, 255, 540, 988, 2697)


@dataclass
class _Value:
    """A float tensor of the graph under construction.

    Attributes
    ----------
    name, shape
        Its ONNX name and static shape.
    rms : float
        Its rough magnitude, to keep ``Exp`` and powers in range.
    positive : bool
        Every element is at least about 0.25 (safe for Log, Sqrt, Pow, division).
    flat : frozenset of int
        Axes along which the value may be constant (a broadcast copy): normalizing over such a
        slice divides rounding noise by ~0.
    exact : bool
        Every implementation computes it bit for bit (graph inputs, their data movement), so
        comparisons and rounding of it are safe.
    """

    name: str
    shape: tuple[int, ...]
    rms: float = 1.0
    positive: bool = False
    flat: frozenset = frozenset()
    exact: bool = False

    @property
    def rank(self) -> int:
        return len(self.shape)


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _broadcast(a, b) -> tuple[int, ...] | None:
    """numpy's broadcast of two shapes, or None."""
    out = []
    for x, y in zip(((1,) * (len(b) - len(a))) + tuple(a), ((1,) * (len(a) - len(b))) + tuple(b)):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(out)


def _stretched_axes(shape, out_shape) -> set[int]:
    """Axes of `out_shape` along which `shape` (right-aligned) is broadcast (extent 1 or
    missing, while the output's extent is more)."""
    pad = len(out_shape) - len(shape)
    return {i for i, extent in enumerate(out_shape)
            if extent > 1 and (i < pad or shape[i - pad] == 1)}


class _Builder:
    """The graph under construction: nodes, initializers, graph inputs and the float values
    that the next node may read."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list = []
        self.inits: list = []
        self.inputs: list = []
        self.values: list[_Value] = []
        self.uses: dict[str, int] = {}
        self.count = 0

    # -- bookkeeping -----------------------------------------------------------------------
    def snapshot(self):
        return (len(self.nodes), len(self.inits), len(self.inputs), len(self.values),
                dict(self.uses), self.count)

    def restore(self, snap) -> None:
        n, i, g, v, uses, count = snap
        del self.nodes[n:], self.inits[i:], self.inputs[g:], self.values[v:]
        self.uses, self.count = uses, count

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    # -- random choices --------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def choice(self, options):
        return options[int(self.rng.integers(len(options)))]

    def randint(self, low: int, high: int) -> int:
        """An integer in [low, high]."""
        return int(self.rng.integers(low, high + 1))

    def axis(self, rank: int, axis: int) -> int:
        """`axis`, written negative half of the time."""
        return axis - rank if self.chance(0.5) else axis

    # -- graph pieces ----------------------------------------------------------------------
    def const(self, array, prefix: str = "w") -> str:
        from onnx import numpy_helper

        name = self.fresh(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def ints(self, values) -> str:
        return self.const(np.asarray(values, dtype=np.int64), "k")

    def floats(self, values) -> str:
        return self.const(np.asarray(values, dtype=np.float32), "c")

    def weight(self, shape, fan_in: int, scale: float = 1.0) -> str:
        data = self.rng.standard_normal(shape) * scale / math.sqrt(max(fan_in, 1))
        return self.const(data.astype(np.float32), "w")

    def node(self, op: str, inputs: list[str], outputs: int = 1, **attrs) -> list[str]:
        from onnx import helper

        names = [self.fresh(op.lower() + "_") for _ in range(outputs)]
        for name in inputs:
            if name in self.uses:
                self.uses[name] += 1
        self.nodes.append(helper.make_node(op, inputs, names, name=self.fresh("n"), **attrs))
        return names

    def add(self, name: str, shape, **meta) -> _Value:
        value = _Value(name, tuple(int(d) for d in shape), **meta)
        value.rms = float(min(max(value.rms, 1e-3), MAX_RMS))
        self.values.append(value)
        self.uses[name] = 0
        return value

    def graph_input(self, shape, dtype: str = "float32") -> _Value | str:
        from onnx import TensorProto, helper

        name = self.fresh("in")
        elem = TensorProto.FLOAT if dtype == "float32" else TensorProto.BOOL
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        if dtype != "float32":
            return name
        return self.add(name, shape, exact=True)

    def pick(self, ok: Callable[[_Value], bool] = lambda v: True,
             exclude: tuple = ()) -> _Value | None:
        """An available value passing `ok`: unread ones and recent ones preferred."""
        found = [(i, v) for i, v in enumerate(self.values) if ok(v) and v.name not in exclude]
        if not found:
            return None
        weights = np.array([(1 + i) * (4.0 if self.uses[v.name] == 0 else 1.0)
                            for i, v in found])
        return found[int(self.rng.choice(len(found), p=weights / weights.sum()))][1]

    def positive(self, value: _Value) -> _Value:
        """`value`, or ``|value| + c`` (c >= 0.25) when it may come near 0."""
        if value.positive:
            return value
        (abs_,) = self.node("Abs", [value.name])
        c = float(self.choice((0.25, 0.5, 1.0)))
        (out,) = self.node("Add", [abs_, self.floats(c)])
        return self.add(out, value.shape, rms=value.rms + c, positive=True, flat=value.flat)


# ----------------------------------------------------------------------------------------------
# graph inputs


def _first_input(b: _Builder) -> _Value:
    """The first graph input, from one of four families of shapes."""
    family = b.choice(("image", "image", "image", "image", "seq", "tokens", "tokens", "dense",
                       "dense"))
    if family == "image":
        if b.chance(0.3):  # a convolution-friendly size: Winograd, blocked layout
            shape = (1, b.choice((8, 16, 16, 32)), b.choice((16, 17, 20, 24)),
                     b.choice((16, 20, 20, 24)))
        else:
            shape = (b.choice(BATCH), b.choice(CHANNELS), b.choice(SPATIAL), b.choice(SPATIAL))
    elif family == "seq":
        shape = (b.choice(BATCH), b.choice(CHANNELS), b.choice(SPATIAL + (31, 40, 64)))
    elif family == "tokens":
        shape = (b.choice(BATCH), b.choice((1, 3, 7, 12, 16, 17, 64, 255, 988)),
                 b.choice(FEATURES))
    else:
        shape = (b.choice(ROWS), b.choice(FEATURES))
    while _numel(shape) > MAX_ELEMENTS // 2:
        shape = tuple(max(1, d // 2) if d == max(shape) else d for d in shape)
    return b.graph_input(shape)


def _broadcastable_shape(b: _Builder, shape, *, widen: bool = False) -> tuple[int, ...]:
    """A shape that broadcasts against `shape`: some axes 1, leading axes dropped; with
    `widen`, an axis of extent 1 may grow (the output then grows too)."""
    out = []
    for extent in shape:
        if extent == 1 and widen and b.chance(0.5):
            out.append(b.choice((2, 3, 5)))
        else:
            out.append(1 if b.chance(0.4) else extent)
    drop = b.randint(0, len(out)) if b.chance(0.4) else 0
    return tuple(out[drop:])


# ----------------------------------------------------------------------------------------------
# ops: each returns False when it does not fit (the builder then rolls back)

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


def _op_unary(b: _Builder, name: str | None = None, value: _Value | None = None) -> bool:
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


def _second_operand(b: _Builder, a: _Value) -> tuple[_Value | str, tuple[int, ...]] | None:
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
        other = b.pick(lambda v: v.shape != a.shape and _broadcast(v.shape, a.shape) == a.shape,
                       exclude=(a.name,))
        if other is not None:
            return other, other.shape
        mode = "const"
    shape = _broadcastable_shape(b, a.shape, widen=mode == "wide")
    if _numel(_broadcast(shape, a.shape)) > MAX_ELEMENTS:
        return None
    if mode == "input":
        return b.graph_input(shape), shape
    data = b.rng.standard_normal(shape).astype(np.float32)
    return b.const(data, "c"), shape


def _broadcast_pair(b: _Builder):
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
    out_shape = _broadcast(a.shape, shape)
    if out_shape is None or _numel(out_shape) > MAX_ELEMENTS or len(out_shape) > MAX_RANK:
        return None
    return a, other, shape, out_shape


def _op_binary(b: _Builder) -> bool:
    op = b.choice(_BINARY)
    found = _broadcast_pair(b)
    if found is None:
        return False
    a, other, shape, out_shape = found
    if isinstance(other, str):  # a constant: magnitude 1, never exact
        other = _Value(other, shape, rms=1.0)
    if op == "Sub" and other is not a:
        # x - reduce(x) over an axis where x is constant leaves only rounding noise
        stretched = _stretched_axes(other.shape, out_shape)
        if stretched and stretched <= set(a.flat) | _stretched_axes(a.shape, out_shape):
            return False
    flat = frozenset((set(a.flat) | _stretched_axes(a.shape, out_shape))
                     & (set(other.flat) | _stretched_axes(other.shape, out_shape)))
    exact = a.exact and other.exact and op in ("Max", "Min")  # these never round
    if op == "Div":
        if other.name in b.uses:
            other = b.positive(other)
        else:  # a constant denominator bounded away from 0
            data = b.rng.uniform(0.5, 2.0, shape) * b.rng.choice((-1, 1), shape)
            other = _Value(b.floats(data), shape, rms=1.0, positive=False)
        (out,) = b.node("Div", [a.name, other.name])
        b.add(out, out_shape, rms=a.rms / max(other.rms, 0.25) * 2, flat=flat)
        return True
    if op == "Pow":
        base = b.positive(a)
        exponent = b.choice((2.0, 2.0, 3.0, 0.5, 1.5))
        if base.rms ** exponent > MAX_RMS:
            return False
        if b.chance(0.3) and base.rank >= 1:  # a per-channel exponent
            shape = _broadcastable_shape(b, base.shape)
            data = b.rng.choice((0.5, 1.0, 2.0), shape)
            (out,) = b.node("Pow", [base.name, b.floats(data)])
            out_shape = _broadcast(base.shape, shape)
        else:
            (out,) = b.node("Pow", [base.name, b.floats(exponent)])
            out_shape = base.shape
        b.add(out, out_shape, rms=max(base.rms, 1.0) ** max(exponent, 2.0), flat=base.flat)
        return True
    inputs = [a.name, other.name]
    if b.chance(0.5):
        inputs.reverse()
    if op in ("Sum", "Mean", "Max", "Min") and b.chance(0.3):  # variadic: a third operand
        third = b.pick(lambda v: _broadcast(v.shape, out_shape) == out_shape)
        if third is not None:
            inputs.append(third.name)
    (out,) = b.node(op, inputs)
    rms = a.rms * other.rms if op == "Mul" else a.rms + other.rms
    b.add(out, out_shape, rms=rms, flat=flat, exact=exact)
    return True


def _activation(b: _Builder, value: _Value) -> _Value:
    """A fused activation after a convolution or matmul (or none)."""
    name = b.choice((None, None, "Relu", "Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "SiLU",
                     "SiLU", "HardSwish"))
    if name is None:
        return value
    _op_unary(b, name, value)
    return b.values[-1]


def _conv_geometry(b: _Builder, extent: int, standard: bool):
    """(kernel, stride, dilation, pad begin, pad end, output extent) along one axis."""
    if standard:
        kernel, stride, dilation = 3, 1, 1
        pads = (1, 1)
    else:
        kernel = b.choice((1, 1, 2, 3, 3, 5, 7))
        stride = b.choice((1, 1, 1, 2, 3))
        dilation = b.choice((1, 1, 1, 2, 3))
        pad = b.choice((0, 0, 1, 2, (kernel - 1) * dilation // 2))
        pads = (pad, pad) if b.chance(0.7) else (pad, b.randint(0, kernel - 1))
    span = (kernel - 1) * dilation + 1
    if extent + pads[0] + pads[1] < span:
        kernel, dilation, span = 1, 1, 1
    pads = (min(pads[0], span - 1), min(pads[1], span - 1))
    out = (extent + pads[0] + pads[1] - span) // stride + 1
    return kernel, stride, dilation, pads[0], pads[1], out


def _op_conv(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank in (3, 4))
    if x is None:
        return False
    channels, spatial = x.shape[1], x.shape[2:]
    standard = b.chance(0.35) and all(s >= 3 for s in spatial)
    geometry = [_conv_geometry(b, s, standard) for s in spatial]
    kind = "plain" if standard else b.choice(("plain", "plain", "plain", "depthwise", "grouped"))
    if kind == "depthwise":
        group = channels
        filters = channels * b.choice((1, 1, 2))
    elif kind == "grouped":
        divisors = [d for d in range(2, channels) if channels % d == 0]
        if not divisors:
            return False
        group = b.choice(divisors)
        filters = group * b.choice((1, 2, 3))
    else:
        group = 1
        filters = b.choice((16, 32, 32, 24) if standard else CHANNELS + (48,))
    out_shape = (x.shape[0], filters) + tuple(g[-1] for g in geometry)
    if _numel(out_shape) > MAX_ELEMENTS:
        return False
    kernel = [g[0] for g in geometry]
    fan_in = channels // group * int(np.prod(kernel))
    inputs = [x.name, b.weight((filters, channels // group, *kernel), fan_in)]
    if b.chance(0.6):
        inputs.append(b.floats(b.rng.standard_normal(filters) * 0.1))
    attrs = dict(kernel_shape=kernel, strides=[g[1] for g in geometry])
    if any(g[2] != 1 for g in geometry) or b.chance(0.2):
        attrs["dilations"] = [g[2] for g in geometry]
    if b.chance(0.1) and not standard and all(g[2] == 1 for g in geometry):
        # auto_pad: SAME_UPPER/SAME_LOWER keep ceil(extent / stride)
        attrs["auto_pad"] = b.choice(("SAME_UPPER", "SAME_LOWER"))
        out_shape = (x.shape[0], filters) + tuple(-(-s // g[1]) for s, g in zip(spatial, geometry))
    else:
        attrs["pads"] = [g[3] for g in geometry] + [g[4] for g in geometry]
    if group > 1:
        attrs["group"] = group
    (out,) = b.node("Conv", inputs, **attrs)
    # a broadcast copy along a spatial axis stays one inside the borders
    value = b.add(out, out_shape, rms=x.rms, flat=frozenset(a for a in x.flat if a >= 2))
    if b.chance(0.2):
        value = _batch_norm(b, value)
    _activation(b, value)
    return True


def _op_conv_transpose(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank in (3, 4))
    if x is None:
        return False
    channels, spatial = x.shape[1], x.shape[2:]
    kernel = [b.choice((1, 2, 3, 4)) for _ in spatial]
    stride = [b.choice((1, 2, 2)) for _ in spatial]
    pads = [b.randint(0, max(k - 1, 0)) for k in kernel] * 2
    output_padding = [b.randint(0, s - 1) if b.chance(0.3) else 0 for s in stride]
    out_spatial = [s * (e - 1) + op + k - pb - pe for e, s, op, k, pb, pe in
                   zip(spatial, stride, output_padding, kernel, pads[:len(spatial)],
                       pads[len(spatial):])]
    group = channels if b.chance(0.2) else 1
    filters = group if group > 1 else b.choice(CHANNELS)
    out_shape = (x.shape[0], filters, *out_spatial)
    if min(out_spatial) < 1 or _numel(out_shape) > MAX_ELEMENTS:
        return False
    fan_in = channels // group * int(np.prod(kernel))
    inputs = [x.name, b.weight((channels, filters // group, *kernel), fan_in)]
    if b.chance(0.5):
        inputs.append(b.floats(b.rng.standard_normal(filters) * 0.1))
    attrs = dict(kernel_shape=kernel, strides=stride, pads=pads)
    if any(output_padding):
        attrs["output_padding"] = output_padding
    if group > 1:
        attrs["group"] = group
    (out,) = b.node("ConvTranspose", inputs, **attrs)
    _activation(b, b.add(out, out_shape, rms=x.rms * 2,
                         flat=frozenset(a for a in x.flat if a >= 2)))
    return True


def _batch_norm(b: _Builder, x: _Value) -> _Value:
    channels = x.shape[1]
    inputs = [x.name, b.floats(b.rng.uniform(0.5, 1.5, channels)),
              b.floats(b.rng.standard_normal(channels) * 0.1),
              b.floats(b.rng.standard_normal(channels) * 0.1),
              b.floats(b.rng.uniform(0.5, 1.5, channels))]
    (out,) = b.node("BatchNormalization", inputs, epsilon=float(b.choice((1e-5, 1e-3))))
    return b.add(out, x.shape, rms=x.rms * 1.5 + 0.2, flat=x.flat)


def _op_batch_norm(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 2)
    if x is None:
        return False
    _batch_norm(b, x)
    return True


def _op_pool(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank in (3, 4))
    if x is None:
        return False
    op = b.choice(("MaxPool", "MaxPool", "AveragePool", "AveragePool", "GlobalAveragePool",
                   "GlobalMaxPool"))
    if op.startswith("Global"):
        (out,) = b.node(op, [x.name])
        b.add(out, x.shape[:2] + (1,) * (x.rank - 2), rms=x.rms,
              flat=frozenset(a for a in x.flat if a < 2))
        return True
    spatial = x.shape[2:]
    kernel = [min(b.choice((1, 2, 2, 3, 3, 5)), s) for s in spatial]
    strides = [b.choice((1, 2, 2, 3)) for _ in spatial]
    pads = [b.randint(0, (k - 1) // 2) if b.chance(0.5) else 0 for k in kernel]
    pads_end = [p if b.chance(0.7) else b.randint(0, k - 1) for p, k in zip(pads, kernel)]
    ceil_mode = int(b.chance(0.2))
    out_spatial = []
    for s, k, st, pb, pe in zip(spatial, kernel, strides, pads, pads_end):
        total = s + pb + pe - k
        n = (-(-total // st) if ceil_mode else total // st) + 1
        if ceil_mode and (n - 1) * st >= s + pb:  # the last window would start in the padding
            return False
        out_spatial.append(n)
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads + pads_end)
    if ceil_mode:
        attrs["ceil_mode"] = 1
    if op == "AveragePool" and b.chance(0.5):
        attrs["count_include_pad"] = 1
    if op == "MaxPool" and b.chance(0.15) and not ceil_mode:
        dilation = [2 if s >= 2 * k else 1 for s, k in zip(spatial, kernel)]
        if any(d > 1 for d in dilation):
            attrs["dilations"] = dilation
            out_spatial = [(s + pb + pe - (k - 1) * d - 1) // st + 1 for s, k, d, st, pb, pe in
                           zip(spatial, kernel, dilation, strides, pads, pads_end)]
    if min(out_spatial) < 1:
        return False
    (out,) = b.node(op, [x.name], **attrs)
    b.add(out, x.shape[:2] + tuple(out_spatial), rms=x.rms, flat=x.flat,
          exact=x.exact and op == "MaxPool")
    return True


def _op_resize(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank in (3, 4))
    if x is None:
        return False
    spatial = x.shape[2:]
    mode = b.choice(("nearest", "nearest", "linear"))
    attrs = dict(mode=mode)
    if mode == "nearest":
        # integer up-scaling (or halving even extents with floor): no rounding ties
        style = b.choice(("up_half_pixel", "up_asymmetric", "down"))
        if style == "down" and all(s % 2 == 0 for s in spatial):
            scale = [0.5] * len(spatial)
            attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        else:
            scale = [float(b.choice((2, 2, 3))) if s > 0 else 1.0 for s in spatial]
            if style == "up_asymmetric":
                attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        out_spatial = [int(s * f) for s, f in zip(spatial, scale)]
        inputs = [x.name, "", b.floats([1.0, 1.0] + scale)]
    else:
        attrs["coordinate_transformation_mode"] = b.choice(
            ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"))
        if b.chance(0.5):
            scale = [float(b.choice((2, 2, 3))) for _ in spatial]
            out_spatial = [int(s * f) for s, f in zip(spatial, scale)]
            inputs = [x.name, "", b.floats([1.0, 1.0] + scale)]
        else:  # any sizes
            out_spatial = [b.choice((max(1, s // 2), s + 1, 2 * s - 1, s + 3)) for s in spatial]
            inputs = [x.name, "", "", b.ints(list(x.shape[:2]) + out_spatial)]
    out_shape = x.shape[:2] + tuple(out_spatial)
    if _numel(out_shape) > MAX_ELEMENTS or min(out_spatial) < 1:
        return False
    (out,) = b.node("Resize", inputs, **attrs)
    b.add(out, out_shape, rms=x.rms, flat=x.flat, exact=x.exact and mode == "nearest")
    return True


def _op_concat(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return False
    axis = b.randint(0, x.rank - 1)
    parts = [x]
    for _ in range(b.choice((1, 1, 2))):
        if b.chance(0.6):
            other = b.pick(lambda v: v.rank == x.rank and all(
                e == f for i, (e, f) in enumerate(zip(v.shape, x.shape)) if i != axis))
            if other is not None:
                parts.append(other)
                continue
        shape = list(x.shape)
        shape[axis] = b.choice((1, 2, 3, 5, 8, 13))
        if b.chance(0.3):
            parts.append(b.graph_input(shape))
        else:
            parts.append(_Value(b.floats(b.rng.standard_normal(shape)), tuple(shape)))
    out_shape = list(x.shape)
    out_shape[axis] = sum(p.shape[axis] for p in parts)
    if _numel(out_shape) > MAX_ELEMENTS:
        return False
    if b.chance(0.5):
        b.rng.shuffle(parts)
    (out,) = b.node("Concat", [p.name for p in parts], axis=b.axis(x.rank, axis))
    flat = frozenset.intersection(*[p.flat for p in parts]) - {axis}
    b.add(out, out_shape, rms=max(p.rms for p in parts), flat=flat,
          exact=all(p.exact for p in parts))
    return True


def _op_split(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1 and max(v.shape) >= 2)
    if x is None:
        return False
    axis = b.choice([i for i, e in enumerate(x.shape) if e >= 2])
    extent = x.shape[axis]
    parts = b.randint(2, min(3, extent))
    if extent % parts == 0 and b.chance(0.4):
        sizes = [extent // parts] * parts
        inputs = [x.name]
    else:
        cuts = sorted(b.rng.choice(np.arange(1, extent), parts - 1, replace=False).tolist())
        sizes = [e - s for s, e in zip([0] + cuts, cuts + [extent])]
        inputs = [x.name, b.ints(sizes)]
    outs = b.node("Split", inputs, outputs=parts, axis=b.axis(x.rank, axis))
    for name, size in zip(outs, sizes):
        shape = list(x.shape)
        shape[axis] = size
        b.add(name, shape, rms=x.rms, flat=x.flat, exact=x.exact)
    return True


def _op_slice(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1 and max(v.shape) >= 2)
    if x is None:
        return False
    axes = [i for i, e in enumerate(x.shape) if e >= 2]
    axes = sorted(b.rng.choice(axes, b.randint(1, min(2, len(axes))), replace=False).tolist())
    starts, ends, steps, out_shape = [], [], [], list(x.shape)
    for axis in axes:
        n = x.shape[axis]
        step = b.choice((1, 1, 1, 2, 3, -1))
        start = b.randint(-n, n - 1)
        if step > 0:
            end = b.choice((n, 2 ** 31 - 1, -1, b.randint(-n + 1, n)))
        else:
            end = b.choice((-(2 ** 31), -n - 1, b.randint(-n, n - 1)))
        count = len(range(*slice(start, end, step).indices(n)))
        if count < 1:
            start, end, step = 0, n, 1
            count = n
        starts.append(start)
        ends.append(end)
        steps.append(step)
        out_shape[axis] = count
    inputs = [x.name, b.ints(starts), b.ints(ends), b.ints([b.axis(x.rank, a) for a in axes])]
    if any(s != 1 for s in steps) or b.chance(0.3):
        inputs.append(b.ints(steps))
    (out,) = b.node("Slice", inputs)
    b.add(out, out_shape, rms=x.rms, flat=x.flat, exact=x.exact)
    return True


def _op_pad(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return False
    mode = b.choice(("constant", "constant", "reflect", "edge"))
    begin, end = [0] * x.rank, [0] * x.rank
    axes = list(range(x.rank - 2, x.rank)) if b.chance(0.6) else list(range(x.rank))
    for axis in axes:
        if axis < 0 or not b.chance(0.7):
            continue
        limit = x.shape[axis] - 1 if mode == "reflect" else 3
        begin[axis] = b.randint(0, max(0, min(3, limit)))
        end[axis] = b.randint(0, max(0, min(3, limit)))
        if mode == "constant" and b.chance(0.1) and x.shape[axis] > 2:
            end[axis] = -1  # a negative pad crops
    out_shape = [e + p + q for e, p, q in zip(x.shape, begin, end)]
    if _numel(out_shape) > MAX_ELEMENTS or min(out_shape) < 1:
        return False
    inputs = [x.name, b.ints(begin + end)]
    if mode == "constant" and b.chance(0.5):
        inputs.append(b.floats(float(b.choice((0.5, -1.0, 2.0)))))
    (out,) = b.node("Pad", inputs, mode=mode)
    padded = {a for a in range(x.rank) if begin[a] or end[a]}
    b.add(out, out_shape, rms=x.rms, flat=x.flat - padded if mode == "constant" else x.flat,
          exact=x.exact)
    return True


def _factorize(b: _Builder, total: int, rank: int) -> list[int]:
    """`total` as a product of `rank` extents."""
    dims = [1] * rank
    left = total
    primes = []
    p = 2
    while p * p <= left:
        while left % p == 0:
            primes.append(p)
            left //= p
        p += 1
    if left > 1:
        primes.append(left)
    for prime in primes:
        dims[b.randint(0, rank - 1)] *= prime
    return dims


def _op_reshape(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return False
    total = _numel(x.shape)
    if b.chance(0.3):  # Flatten
        axis = b.randint(0, x.rank)
        shape = (_numel(x.shape[:axis]), _numel(x.shape[axis:]))
        (out,) = b.node("Flatten", [x.name], axis=b.axis(x.rank, axis) if axis < x.rank else axis)
    else:
        rank = b.randint(1, 5)
        shape = _factorize(b, total, rank)
        spec = list(shape)
        if b.chance(0.4):
            spec[b.randint(0, rank - 1)] = -1
        for i in range(min(rank, x.rank)):
            if spec[i] == x.shape[i] and spec[i] != -1 and b.chance(0.3):
                spec[i] = 0  # copy the input's extent
        (out,) = b.node("Reshape", [x.name, b.ints(spec)])
    flat = frozenset(range(len(shape))) if x.flat else frozenset()
    b.add(out, shape, rms=x.rms, flat=flat, exact=x.exact)
    return True


def _op_transpose(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 2)
    if x is None:
        return False
    perm = b.rng.permutation(x.rank).tolist()
    attrs = {} if b.chance(0.15) else dict(perm=perm)
    if not attrs:
        perm = list(range(x.rank))[::-1]
    (out,) = b.node("Transpose", [x.name], **attrs)
    b.add(out, [x.shape[p] for p in perm], rms=x.rms,
          flat=frozenset(i for i, p in enumerate(perm) if p in x.flat), exact=x.exact)
    return True


def _op_squeeze(b: _Builder) -> bool:
    x = b.pick(lambda v: 1 in v.shape or v.rank < MAX_RANK - 1)
    if x is None:
        return False
    ones = [i for i, e in enumerate(x.shape) if e == 1]
    if ones and (x.rank >= MAX_RANK - 1 or b.chance(0.6)):
        axes = sorted(b.rng.choice(ones, b.randint(1, len(ones)), replace=False).tolist())
        keep = [i for i in range(x.rank) if i not in axes]
        inputs = [x.name] if len(axes) == len(ones) and b.chance(0.2) else \
            [x.name, b.ints([b.axis(x.rank, a) for a in axes])]
        (out,) = b.node("Squeeze", inputs)
        shape = [x.shape[i] for i in keep]
        flat = frozenset(j for j, i in enumerate(keep) if i in x.flat)
    else:
        rank = x.rank + b.randint(1, 2)
        axes = sorted(b.rng.choice(rank, rank - x.rank, replace=False).tolist())
        (out,) = b.node("Unsqueeze", [x.name, b.ints([b.axis(rank, a) for a in axes])])
        source = iter(range(x.rank))
        mapping = [None if i in axes else next(source) for i in range(rank)]
        shape = [1 if m is None else x.shape[m] for m in mapping]
        flat = frozenset(i for i, m in enumerate(mapping) if m in x.flat)
    b.add(out, shape, rms=x.rms, flat=flat, exact=x.exact)
    return True


_REDUCE = ("ReduceMean", "ReduceMean", "ReduceMax", "ReduceMax", "ReduceSum", "ReduceSum",
           "ReduceMin", "ReduceL2", "ReduceL1", "ReduceSumSquare", "ReduceLogSumExp",
           "ReduceProd")


def _op_reduce(b: _Builder) -> bool:
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
    count = _numel([x.shape[a] for a in axes])
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


def _op_softmax(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None or x.rms > 50:
        return False
    op = b.choice(("Softmax", "Softmax", "LogSoftmax"))
    axis = b.randint(0, x.rank - 1)
    attrs = {} if b.chance(0.2) else dict(axis=b.axis(x.rank, axis))
    (out,) = b.node(op, [x.name], **attrs)
    b.add(out, x.shape, rms=1.0 if op == "Softmax" else x.rms + 3, flat=x.flat)
    return True


def _normalizes_noise(x: _Value, axes) -> bool:
    """Whether normalizing `x` over `axes` may divide rounding noise by ~0: the slice is
    constant (every axis of extent > 1 in it may be flat) but holds more than one element."""
    wide = [a for a in axes if x.shape[a] > 1]
    return bool(wide) and all(a in x.flat for a in wide)


def _epsilon(b: _Builder, normalized_shape) -> float:
    """A normalization's epsilon: 1 over a single element, whose exact output is the bias
    (x - mean = 0) but whose rounding noise onnxruntime divides by sqrt(epsilon)."""
    epsilon = float(b.choice((1e-5, 1e-3)))
    return 1.0 if _numel(normalized_shape) == 1 else epsilon


def _op_layer_norm(b: _Builder) -> bool:
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


def _op_instance_norm(b: _Builder) -> bool:
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


def _bias_shapes(rows: int, cols: int) -> list[tuple[int, ...]]:
    """Every shape that broadcasts to [rows, cols] without growing it."""
    return [(), (1,), (cols,), (1, cols), (rows, 1), (rows, cols), (1, 1)]


def _features_fitting(b: _Builder, rows: int) -> int:
    """An output width from FEATURES for `rows` rows within MAX_ELEMENTS; a third of the time
    the widest (rules apply from a work size on: large products reach them)."""
    fitting = [n for n in FEATURES if rows * n <= MAX_ELEMENTS]
    if not fitting:
        return 1
    return fitting[-1] if b.chance(0.3) else b.choice(fitting)


def _op_matmul(b: _Builder) -> bool:
    a = b.pick(lambda v: v.rank >= 1)
    if a is None:
        return False
    k = a.shape[-1]
    n = _features_fitting(b, _numel(a.shape[:-1]))
    style = b.choice(("weight", "weight", "weight", "vector", "batched", "value"))
    if a.rank == 1:
        style = "weight"
    if style == "vector":  # [.., K] x [K] -> [..]
        b_shape, out_shape = (k,), a.shape[:-1]
    elif style == "batched" and a.rank >= 2:  # a weight with batch axes of its own
        batch = tuple(1 if b.chance(0.5) else e for e in a.shape[:-2])
        b_shape = batch + (k, n)
        out_shape = _broadcast(a.shape[:-2], batch) + (a.shape[-2], n)
    else:
        b_shape = (k, n)
        out_shape = a.shape[:-1] + (n,)
    if _numel(out_shape) > MAX_ELEMENTS or k * n > MAX_ELEMENTS:
        return False
    other = None
    if style == "value":
        other = b.pick(lambda v: v.rank == 2 and v.shape[0] == k, exclude=(a.name,))
        if other is not None:
            out_shape = a.shape[:-1] + (other.shape[1],)
            n = other.shape[1]
            if _numel(out_shape) > MAX_ELEMENTS:
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
    _activation(b, value)
    return True


def _op_matmul_left(b: _Builder) -> bool:
    """W x a: a weight on the left of a value of rank >= 2 ([n, K] x [.., K, cols])."""
    a = b.pick(lambda v: v.rank >= 2)
    if a is None:
        return False
    k, n = a.shape[-2], b.choice(FEATURES)
    out_shape = a.shape[:-2] + (n, a.shape[-1])
    if _numel(out_shape) > MAX_ELEMENTS or k * n > MAX_ELEMENTS:
        return False
    (out,) = b.node("MatMul", [b.weight((n, k), k), a.name])
    flat = frozenset(i for i in a.flat if i != a.rank - 2)
    _activation(b, b.add(out, out_shape, rms=a.rms, flat=flat))
    return True


def _op_gemm(b: _Builder) -> bool:
    a = b.pick(lambda v: v.rank == 2 or (v.rank > 2 and _numel(v.shape) <= MAX_ELEMENTS))
    if a is None:
        return False
    if a.rank != 2:  # a classifier head: Flatten first
        (flat,) = b.node("Flatten", [a.name])
        a = b.add(flat, (a.shape[0], _numel(a.shape[1:])), rms=a.rms)
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
    _activation(b, b.add(out, (m, n), rms=a.rms * 2 + 1,
                         flat=frozenset((0, 1)) if a.flat else frozenset()))
    return True


def _op_gather(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return False
    axis = b.randint(0, x.rank - 1)
    n = x.shape[axis]
    index_shape = b.choice(((), (1,), (2,), (3,), (5,), (2, 3)))
    indices = b.rng.integers(-n, n, index_shape)
    out_shape = x.shape[:axis] + tuple(index_shape) + x.shape[axis + 1:]
    if _numel(out_shape) > MAX_ELEMENTS or len(out_shape) > MAX_RANK or not out_shape:
        return False
    (out,) = b.node("Gather", [x.name, b.ints(indices)], axis=b.axis(x.rank, axis))
    flat = frozenset(i if i < axis else i + len(index_shape) - 1
                     for i in x.flat if i != axis)
    b.add(out, out_shape, rms=x.rms, flat=flat, exact=x.exact)
    return True


def _op_expand(b: _Builder) -> bool:
    x = b.pick(lambda v: 1 in v.shape or v.rank < 3)
    if x is None:
        return False
    lead = b.randint(0, 1) if x.rank < MAX_RANK else 0
    target = [b.choice((2, 3)) for _ in range(lead)]
    for extent in x.shape:
        if extent == 1:
            target.append(b.choice((1, 2, 3, 4, 7)))
        else:
            target.append(extent if b.chance(0.7) else 1)  # 1: keep the input's extent
    out_shape = _broadcast(x.shape, target)
    if out_shape is None or out_shape == x.shape or _numel(out_shape) > MAX_ELEMENTS:
        return False
    (out,) = b.node("Expand", [x.name, b.ints(target)])
    flat = set(_stretched_axes(x.shape, out_shape)) | {a + len(out_shape) - x.rank
                                                        for a in x.flat}
    b.add(out, out_shape, rms=x.rms, flat=frozenset(flat), exact=x.exact)
    return True


def _op_tile(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return False
    repeats = [b.choice((1, 1, 2, 3)) for _ in x.shape]
    out_shape = tuple(e * r for e, r in zip(x.shape, repeats))
    if _numel(out_shape) > MAX_ELEMENTS:
        return False
    (out,) = b.node("Tile", [x.name, b.ints(repeats)])
    b.add(out, out_shape, rms=x.rms, flat=x.flat, exact=x.exact)
    return True


def _condition(b: _Builder, shape) -> str:
    """A boolean tensor broadcastable to `shape` that every implementation computes the same:
    a comparison of a graph input (or of data movement of one), or a constant."""
    exact = b.pick(lambda v: v.exact and _broadcast(v.shape, shape) == tuple(shape))
    if exact is not None and b.chance(0.7):
        op = b.choice(("Greater", "Less", "GreaterOrEqual", "LessOrEqual"))
        (cond,) = b.node(op, [exact.name, b.floats(float(b.choice((0.0, 0.5, -0.3))))])
        return cond
    cond_shape = _broadcastable_shape(b, shape)
    if b.chance(0.2):
        return b.graph_input(cond_shape, "bool")
    return b.const(b.rng.random(cond_shape) < 0.5, "m")


def _op_where(b: _Builder) -> bool:
    found = _broadcast_pair(b)
    if found is None:
        return False
    x, other, shape, out_shape = found
    other_name = other if isinstance(other, str) else other.name
    cond = _condition(b, out_shape)
    pair = [x.name, other_name] if b.chance(0.5) else [other_name, x.name]
    (out,) = b.node("Where", [cond] + pair)
    rms = max(x.rms, other.rms if isinstance(other, _Value) else 1.0)
    other_flat = other.flat if isinstance(other, _Value) else frozenset()
    flat = ((set(x.flat) | _stretched_axes(x.shape, out_shape))
            & (set(other_flat) | _stretched_axes(shape, out_shape)))
    b.add(out, out_shape, rms=rms, flat=frozenset(flat))
    return True


def _op_mask(b: _Builder) -> bool:
    """x * Cast(Greater(input, c)): a float mask from a comparison."""
    x = b.pick()
    if x is None:
        return False
    cond = _condition(b, x.shape)
    (mask,) = b.node("Cast", [cond], to=1)  # FLOAT
    (out,) = b.node("Mul", [x.name, mask] if b.chance(0.5) else [mask, x.name])
    b.add(out, x.shape, rms=x.rms, flat=x.flat)
    return True


def _op_depth_space(b: _Builder) -> bool:
    x = b.pick(lambda v: v.rank == 4)
    if x is None:
        return False
    n, c, h, w = x.shape
    if c % 4 == 0 and b.chance(0.5):
        mode = b.choice(("DCR", "CRD"))
        (out,) = b.node("DepthToSpace", [x.name], blocksize=2, mode=mode)
        shape = (n, c // 4, h * 2, w * 2)
    elif h % 2 == 0 and w % 2 == 0:
        (out,) = b.node("SpaceToDepth", [x.name], blocksize=2)
        shape = (n, c * 4, h // 2, w // 2)
    else:
        return False
    b.add(out, shape, rms=x.rms, exact=x.exact,
          flat=frozenset(range(4)) if x.flat else frozenset())
    return True


# -- real-model patterns (several nodes) ---------------------------------------------------


def _op_squeeze_excite(b: _Builder) -> bool:
    """x * Sigmoid(Conv(Relu(Conv(GlobalAveragePool(x))))), with a convolution before."""
    x = b.pick(lambda v: v.rank == 4)
    if x is None:
        return False
    if b.chance(0.5):
        channels = b.choice((8, 14, 16, 24, 32))
        if _numel((x.shape[0], channels) + x.shape[2:]) > MAX_ELEMENTS:
            return False
        (conv,) = b.node("Conv", [x.name, b.weight((channels, x.shape[1], 3, 3),
                                                   x.shape[1] * 9)],
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        x = b.add(conv, (x.shape[0], channels) + x.shape[2:], rms=x.rms)
    channels = x.shape[1]
    squeeze = max(1, channels // b.choice((2, 4, 8)))
    (pool,) = b.node("GlobalAveragePool", [x.name])
    (c1,) = b.node("Conv", [pool, b.weight((squeeze, channels, 1, 1), channels),
                            b.floats(np.zeros(squeeze))], kernel_shape=[1, 1])
    (r,) = b.node("Relu", [c1])
    (c2,) = b.node("Conv", [r, b.weight((channels, squeeze, 1, 1), squeeze)],
                   kernel_shape=[1, 1])
    (s,) = b.node("Sigmoid", [c2])
    (out,) = b.node("Mul", [x.name, s])
    b.add(out, x.shape, rms=x.rms, flat=x.flat)
    return True


def _op_residual(b: _Builder) -> bool:
    """Relu(x + Conv(Relu(Conv(x)))): a residual block, same channels, 3x3 pad 1."""
    x = b.pick(lambda v: v.rank == 4)
    if x is None:
        return False
    c = x.shape[1]
    (c1,) = b.node("Conv", [x.name, b.weight((c, c, 3, 3), c * 9), b.floats(np.zeros(c))],
                   kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    (r,) = b.node("Relu", [c1])
    (c2,) = b.node("Conv", [r, b.weight((c, c, 3, 3), c * 9, scale=0.5)],
                   kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    (s,) = b.node("Add", [c2, x.name] if b.chance(0.5) else [x.name, c2])
    (out,) = b.node("Relu", [s])
    b.add(out, x.shape, rms=x.rms * 1.5, flat=x.flat)
    return True


def _op_rms_norm(b: _Builder) -> bool:
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


def _op_conv_fanout(b: _Builder) -> bool:
    """c * (c / s) or c + c * s after a 3x3 convolution: an epilogue read twice."""
    x = b.pick(lambda v: v.rank == 4 and min(v.shape[2:]) >= 3)
    if x is None:
        return False
    filters = b.choice((16, 32, 32, 13))
    shape = (x.shape[0], filters) + x.shape[2:]
    if _numel(shape) > MAX_ELEMENTS:
        return False
    (c,) = b.node("Conv", [x.name, b.weight((filters, x.shape[1], 3, 3), x.shape[1] * 9),
                           b.floats(b.rng.standard_normal(filters) * 0.1)],
                  kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    scale = b.floats(b.rng.uniform(0.5, 2.0, (filters, 1, 1)))
    if b.chance(0.5):
        (d,) = b.node("Div", [c, scale])
        (out,) = b.node("Mul", [c, d])
        rms = x.rms ** 2 * 2
    else:
        (d,) = b.node("Mul", [c, scale])
        (out,) = b.node("Add", [c, d])
        rms = x.rms * 3
    if rms > MAX_RMS:
        return False
    b.add(out, shape, rms=rms, flat=x.flat - {1})
    return True


_OPS: dict[str, tuple[float, Callable[[_Builder], bool]]] = {
    "unary": (6, _op_unary), "binary": (7, _op_binary), "conv": (6, _op_conv),
    "conv_transpose": (1, _op_conv_transpose), "batch_norm": (1, _op_batch_norm),
    "pool": (3, _op_pool), "resize": (1.5, _op_resize), "concat": (2, _op_concat),
    "split": (1.5, _op_split), "slice": (2, _op_slice), "pad": (1.5, _op_pad),
    "reshape": (2, _op_reshape), "transpose": (1.5, _op_transpose),
    "squeeze": (1.5, _op_squeeze), "reduce": (5, _op_reduce), "softmax": (2, _op_softmax),
    "layer_norm": (1.5, _op_layer_norm), "instance_norm": (0.5, _op_instance_norm),
    "matmul": (4, _op_matmul), "matmul_left": (1, _op_matmul_left), "gemm": (3, _op_gemm),
    "gather": (1.5, _op_gather),
    "expand": (1.5, _op_expand), "tile": (0.7, _op_tile), "where": (1.5, _op_where),
    "mask": (0.7, _op_mask), "depth_space": (0.5, _op_depth_space),
    "squeeze_excite": (0.7, _op_squeeze_excite), "residual": (0.7, _op_residual),
    "rms_norm": (0.7, _op_rms_norm), "conv_fanout": (1, _op_conv_fanout),
}


# ----------------------------------------------------------------------------------------------
# the public functions


def random_graph(seed: int, *, min_nodes: int = 4, max_nodes: int = 20):
    """A random valid ONNX graph (opset 17, float32).

    Parameters
    ----------
    seed : int
        The same seed gives the same graph (byte for byte).
    min_nodes, max_nodes : int
        The graph has between `min_nodes` and `max_nodes` nodes (inclusive).

    Returns
    -------
    onnx.ModelProto
        Weights are initializers, inputs graph inputs of fixed shapes; every value no node
        reads is a graph output (often several), sometimes an intermediate value too.
    """
    from onnx import helper

    if not 1 <= min_nodes <= max_nodes:
        raise ValueError(f"need 1 <= min_nodes <= max_nodes, got {min_nodes}, {max_nodes}")
    rng = np.random.default_rng(seed)
    b = _Builder(rng)
    target = b.randint(min_nodes, max_nodes)
    _first_input(b)
    names = list(_OPS)
    weights = np.array([_OPS[n][0] for n in names], dtype=float)
    tries = 0
    while len(b.nodes) < target and tries < 400:
        tries += 1
        snap = b.snapshot()
        op = _OPS[names[int(rng.choice(len(names), p=weights / weights.sum()))]][1]
        if not op(b) or len(b.nodes) > max_nodes:
            b.restore(snap)
    if len(b.nodes) < min_nodes:  # pad with cheap unary ops (never in practice)
        while len(b.nodes) < min_nodes:
            _op_unary(b, "Relu")
    produced = {out for node in b.nodes for out in node.output}
    outputs = [v for v in b.values if b.uses[v.name] == 0 and v.name in produced]
    inner = [v for v in b.values if b.uses[v.name] > 0 and v.name in produced]
    if inner and rng.random() < 0.3:  # an intermediate value as an output too
        outputs.append(inner[int(rng.integers(len(inner)))])
    used = {name for node in b.nodes for name in node.input}
    inputs = [i for i in b.inputs if i.name in used]
    graph = helper.make_graph(
        b.nodes, f"fuzz_{seed}", inputs,
        [helper.make_tensor_value_info(v.name, 1, list(v.shape)) for v in outputs],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tvm_hetero.graph_gen")
    model.ir_version = IR_VERSION
    return model


def random_inputs(model, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input of `model` (not its initializers): standard normal
    floats, random booleans, small integers.

    Parameters
    ----------
    model : onnx.ModelProto
    seed : int

    Returns
    -------
    dict of str to numpy.ndarray
        By graph input name.
    """
    from onnx import helper

    rng = np.random.default_rng(seed)
    init_names = {init.name for init in model.graph.initializer}
    out = {}
    for value in model.graph.input:
        if value.name in init_names:
            continue
        ttype = value.type.tensor_type
        shape = [d.dim_value for d in ttype.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(ttype.elem_type)
        if dtype == np.bool_:
            data = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            data = rng.integers(0, 4, shape)
        else:
            data = rng.standard_normal(shape)
        out[value.name] = np.asarray(data).astype(dtype)
    return out


def op_types(model) -> list[str]:
    """The op types of `model`'s nodes, in order."""
    return [node.op_type for node in model.graph.node]


__all__ = ["OPSET", "op_types", "random_graph", "random_inputs"]
