"""Small real models, made by code at run time (no downloads), addressable as ``zoo:NAME``.

Each builder returns an ``onnx.ModelProto`` with seeded random weights, so that onnxruntime can
give reference outputs. ``zoo:vgg`` is the embedded default model (the demo's).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

OPSET = 17  # onnx 1.23 defaults to opset 28, which TVM's importer does not know yet


def _helpers():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    return onnx, TensorProto, helper, numpy_helper


class _GraphBuilder:
    """Accumulates ONNX nodes and seeded initializers."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self._count = 0

    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def weight(self, prefix: str, shape, scale: float | None = None) -> str:
        _, _, _, numpy_helper = _helpers()
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else (2.0 / max(fan_in, 1)) ** 0.5
        name = self.fresh(prefix)
        data = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(data, name))
        return name

    def const(self, prefix: str, array: np.ndarray) -> str:
        _, _, _, numpy_helper = _helpers()
        name = self.fresh(prefix)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        _, _, helper, _ = _helpers()
        out = self.fresh(op_type.lower() + "_")
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, relu: bool = True) -> str:
        w = self.weight("conv_w", (cout, cin, k, k))
        b = self.weight("conv_b", (cout,), scale=0.01)
        y = self.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride],
                    pads=[k // 2] * 4)
        return self.op("Relu", [y]) if relu else y

    def dense(self, x: str, din: int, dout: int) -> str:
        w = self.weight("fc_w", (dout, din))
        b = self.weight("fc_b", (dout,), scale=0.01)
        return self.op("Gemm", [x, w, b], transB=1)

    def model(self, name: str, in_shape, out_shape):
        """The ONNX model; the last node's output becomes the graph output ``output``."""
        onnx, TensorProto, helper, _ = _helpers()
        self.nodes[-1].output[0] = "output"
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(in_shape))],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, list(out_shape))],
            initializer=self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="tvm_hetero.zoo")
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def mlp(batch: int = 8, sizes=(256, 512, 256, 10), seed: int = 0):
    """Multi-layer perceptron: Gemm+Relu blocks, a final Gemm."""
    g = _GraphBuilder(seed)
    x = "input"
    for i, (din, dout) in enumerate(zip(sizes[:-1], sizes[1:])):
        x = g.dense(x, din, dout)
        if i < len(sizes) - 2:
            x = g.op("Relu", [x])
    return g.model("mlp", (batch, sizes[0]), (batch, sizes[-1]))


def cnn(batch: int = 1, seed: int = 0):
    """Small CNN: two conv+relu+maxpool stages, flatten, dense."""
    g = _GraphBuilder(seed)
    x = g.conv("input", 3, 16, 3)
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.conv(x, 16, 32, 3)
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Flatten", [x], axis=1)
    x = g.dense(x, 32 * 8 * 8, 10)
    return g.model("cnn", (batch, 3, 32, 32), (batch, 10))


def vgg(batch: int = 1, seed: int = 0):
    """Small VGG-style CNN: two blocks of two 3x3 convolutions and a max-pool, two dense
    layers (9 layers: small enough for exhaustive search on two devices)."""
    g = _GraphBuilder(seed)
    x, cin = "input", 3
    for cout in (16, 32):
        x = g.conv(x, cin, cout, 3)
        x = g.conv(x, cout, cout, 3)
        x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        cin = cout
    x = g.op("Flatten", [x], axis=1)
    x = g.op("Relu", [g.dense(x, 32 * 8 * 8, 128)])
    x = g.dense(x, 128, 10)
    return g.model("vgg", (batch, 3, 32, 32), (batch, 10))


def resnet(batch: int = 1, seed: int = 0):
    """Residual CNN: a stem, three residual blocks (one with a strided 1x1 projection), two
    parallel 1x1 branches joined by a Concat, global average pooling and a dense head."""
    g = _GraphBuilder(seed)
    x = g.conv("input", 3, 16, 3)
    cin = 16
    for cout, stride in [(16, 1), (32, 2), (32, 1)]:
        y = g.conv(x, cin, cout, 3, stride)
        y = g.conv(y, cout, cout, 3, 1, relu=False)
        skip = x if (stride == 1 and cin == cout) else g.conv(x, cin, cout, 1, stride, relu=False)
        x = g.op("Relu", [g.op("Add", [y, skip])])
        cin = cout
    left = g.conv(x, cin, 16, 1)
    right = g.conv(x, cin, 16, 1)
    x = g.op("Concat", [left, right], axis=1)
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    x = g.dense(x, 32, 10)
    return g.model("resnet", (batch, 3, 32, 32), (batch, 10))


def transformer(batch: int = 1, seq: int = 16, dim: int = 64, heads: int = 4, seed: int = 0):
    """One transformer encoder block: multi-head self-attention and a feed-forward network,
    each with a residual connection and layer normalization (post-norm)."""
    g = _GraphBuilder(seed)
    head_dim = dim // heads

    def layer_norm(x):
        scale = g.const("ln_scale", np.ones(dim, np.float32))
        bias = g.const("ln_bias", np.zeros(dim, np.float32))
        return g.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)

    def linear(x, din, dout):
        w = g.weight("lin_w", (din, dout), scale=(1.0 / din) ** 0.5)
        b = g.weight("lin_b", (dout,), scale=0.01)
        return g.op("Add", [g.op("MatMul", [x, w]), b])

    def split_heads(x):
        shape = g.const("shape", np.array([batch, seq, heads, head_dim], np.int64))
        return g.op("Transpose", [g.op("Reshape", [x, shape])], perm=[0, 2, 1, 3])

    x = "input"
    q, k, v = (split_heads(linear(x, dim, dim)) for _ in range(3))
    kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])
    scale = g.const("scale", np.array(1.0 / head_dim**0.5, np.float32))
    att = g.op("Softmax", [g.op("Mul", [g.op("MatMul", [q, kt]), scale])], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [att, v])], perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, g.const("shape", np.array([batch, seq, dim], np.int64))])
    x = layer_norm(g.op("Add", [x, linear(ctx, dim, dim)]))
    ffn = linear(g.op("Relu", [linear(x, dim, 4 * dim)]), 4 * dim, dim)
    x = layer_norm(g.op("Add", [x, ffn]))
    return g.model("transformer", (batch, seq, dim), (batch, seq, dim))


ZOO: dict[str, Callable] = {
    "mlp": mlp,
    "cnn": cnn,
    "vgg": vgg,
    "resnet": resnet,
    "transformer": transformer,
}
DEFAULT_MODEL = "zoo:vgg"


def zoo_model(name: str):
    """The ONNX model of zoo entry `name` (``mlp``, ``cnn``, ``vgg``, ``resnet``,
    ``transformer``)."""
    from ..errors import ModelError

    if name not in ZOO:
        raise ModelError(f"unknown zoo model {name!r}; the zoo has: {', '.join(sorted(ZOO))}")
    return ZOO[name]()
