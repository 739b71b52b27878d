"""The graph under construction (:class:`Builder`), the float values it holds
(:class:`Value`), shape helpers and the bounds every generated graph keeps; the first graph
input."""

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
class Value:
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


def numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def broadcast(a, b) -> tuple[int, ...] | None:
    """numpy's broadcast of two shapes, or None."""
    out = []
    for x, y in zip(((1,) * (len(b) - len(a))) + tuple(a), ((1,) * (len(a) - len(b))) + tuple(b)):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(out)


def stretched_axes(shape, out_shape) -> set[int]:
    """Axes of `out_shape` along which `shape` (right-aligned) is broadcast (extent 1 or
    missing, while the output's extent is more)."""
    pad = len(out_shape) - len(shape)
    return {i for i, extent in enumerate(out_shape)
            if extent > 1 and (i < pad or shape[i - pad] == 1)}


class Builder:
    """The graph under construction: nodes, initializers, graph inputs and the float values
    that the next node may read."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list = []
        self.inits: list = []
        self.inputs: list = []
        self.values: list[Value] = []
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

    def add(self, name: str, shape, **meta) -> Value:
        value = Value(name, tuple(int(d) for d in shape), **meta)
        value.rms = float(min(max(value.rms, 1e-3), MAX_RMS))
        self.values.append(value)
        self.uses[name] = 0
        return value

    def graph_input(self, shape, dtype: str = "float32") -> Value | str:
        from onnx import TensorProto, helper

        name = self.fresh("in")
        elem = TensorProto.FLOAT if dtype == "float32" else TensorProto.BOOL
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        if dtype != "float32":
            return name
        return self.add(name, shape, exact=True)

    def pick(self, ok: Callable[[Value], bool] = lambda v: True,
             exclude: tuple = ()) -> Value | None:
        """An available value passing `ok`: unread ones and recent ones preferred."""
        found = [(i, v) for i, v in enumerate(self.values) if ok(v) and v.name not in exclude]
        if not found:
            return None
        weights = np.array([(1 + i) * (4.0 if self.uses[v.name] == 0 else 1.0)
                            for i, v in found])
        return found[int(self.rng.choice(len(found), p=weights / weights.sum()))][1]

    def positive(self, value: Value) -> Value:
        """`value`, or ``|value| + c`` (c >= 0.25) when it may come near 0."""
        if value.positive:
            return value
        (abs_,) = self.node("Abs", [value.name])
        c = float(self.choice((0.25, 0.5, 1.0)))
        (out,) = self.node("Add", [abs_, self.floats(c)])
        return self.add(out, value.shape, rms=value.rms + c, positive=True, flat=value.flat)


# ----------------------------------------------------------------------------------------------
# graph inputs


def first_input(b: Builder) -> Value:
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
    while numel(shape) > MAX_ELEMENTS // 2:
        shape = tuple(max(1, d // 2) if d == max(shape) else d for d in shape)
    return b.graph_input(shape)


def broadcastable_shape(b: Builder, shape, *, widen: bool = False) -> tuple[int, ...]:
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


__all__ = ["BATCH", "Builder", "CHANNELS", "FEATURES", "IR_VERSION", "MAX_ELEMENTS", "MAX_RANK",
           "MAX_RMS", "OPSET", "ROWS", "SPATIAL", "Value", "broadcast", "broadcastable_shape",
           "first_input", "numel", "stretched_axes"]
