"""The suite's ONNX graph builder: :class:`GraphBuilder` (nodes, seeded initializers, layers
such as convolutions, attention and encoder layers), graph inputs and seeded input arrays, and
:func:`strip_initializer_inputs`."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class GraphBuilder:
    """Nodes, seeded initializers and unique names for one ONNX graph."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, array: np.ndarray, prefix: str = "c") -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, shape, fan_in: int | None = None, prefix: str = "w") -> str:
        fan_in = fan_in or int(np.prod(shape[1:]))
        data = self.rng.standard_normal(shape) * math.sqrt(2.0 / max(fan_in, 1))
        return self.const(data.astype(np.float32), prefix)

    def bias(self, size: int, scale: float = 0.05) -> str:
        return self.const((self.rng.standard_normal(size) * scale).astype(np.float32), "b")

    def op(self, op_type: str, inputs, **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def ints(self, values) -> str:
        return self.const(np.array(values, np.int64), "shape")

    def scalar(self, value: float) -> str:
        return self.const(np.array(value, np.float32), "s")

    # layers ---------------------------------------------------------------------------------
    def conv(self, x, cin, cout, k, stride=1, group=1, pad=None, dilation=1, dims=2):
        kernel = [k] * dims
        pad = (k - 1) // 2 * dilation if pad is None else pad
        w = self.weight([cout, cin // group] + kernel, fan_in=cin // group * k ** dims)
        return self.op("Conv", [x, w, self.bias(cout)], kernel_shape=kernel,
                       strides=[stride] * dims, pads=[pad] * (2 * dims), group=group,
                       dilations=[dilation] * dims)

    def relu6(self, x):
        return self.op("Clip", [x, self.scalar(0.0), self.scalar(6.0)])

    def silu(self, x):
        return self.op("Mul", [x, self.op("Sigmoid", [x])])

    def gemm(self, x, fin, fout):
        return self.op("Gemm", [x, self.weight([fout, fin]), self.bias(fout)], transB=1)

    def linear(self, x, fin, fout):
        """MatMul + Add on a [.., fin] tensor (transformer style)."""
        return self.op("Add", [self.op("MatMul", [x, self.weight([fin, fout], fan_in=fin)]),
                               self.bias(fout)])

    def layer_norm(self, x, d):
        scale = self.const((1.0 + self.rng.standard_normal(d) * 0.05).astype(np.float32))
        return self.op("LayerNormalization", [x, scale, self.bias(d)], axis=-1, epsilon=1e-5)

    def gelu_erf(self, x):
        inner = self.op("Erf", [self.op("Div", [x, self.scalar(math.sqrt(2.0))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [inner, self.scalar(1.0)])]),
                               self.scalar(0.5)])

    def gelu_tanh(self, x):
        cube = self.op("Mul", [self.op("Pow", [x, self.scalar(3.0)]), self.scalar(0.044715)])
        inner = self.op("Mul", [self.op("Add", [x, cube]), self.scalar(math.sqrt(2 / math.pi))])
        one_plus = self.op("Add", [self.op("Tanh", [inner]), self.scalar(1.0)])
        return self.op("Mul", [self.op("Mul", [x, one_plus]), self.scalar(0.5)])

    def squeeze_excite(self, x, channels, reduced, act="relu", gate="sigmoid"):
        pooled = self.op("GlobalAveragePool", [x])
        hidden = self.conv(pooled, channels, reduced, 1)
        hidden = self.op("Relu", [hidden]) if act == "relu" else self.silu(hidden)
        scale = self.conv(hidden, reduced, channels, 1)
        scale = self.op("HardSigmoid", [scale], alpha=1 / 6, beta=0.5) if gate == "hard" \
            else self.op("Sigmoid", [scale])
        return self.op("Mul", [x, scale])

    def attention(self, x, seq, d, heads, mask=None):
        """Multi-head self-attention on [1, seq, d]; `mask` an additive [1|.., seq, seq]
        tensor broadcast over heads."""
        dh = d // heads

        def split(t, perm):
            return self.op("Transpose", [self.op("Reshape", [t, self.ints([1, seq, heads, dh])])],
                           perm=perm)

        q = split(self.linear(x, d, d), [0, 2, 1, 3])
        k = split(self.linear(x, d, d), [0, 2, 3, 1])
        v = split(self.linear(x, d, d), [0, 2, 1, 3])
        scores = self.op("Div", [self.op("MatMul", [q, k]), self.scalar(math.sqrt(dh))])
        if mask is not None:
            scores = self.op("Add", [scores, mask])
        probs = self.op("Softmax", [scores], axis=-1)
        ctx = self.op("Transpose", [self.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = self.op("Reshape", [ctx, self.ints([1, seq, d])])
        return self.linear(ctx, d, d)

    def encoder_layer(self, x, seq, d, heads, ffn, mask=None):
        """Post-norm (BERT) encoder layer with GELU through Erf."""
        x = self.layer_norm(self.op("Add", [x, self.attention(x, seq, d, heads, mask)]), d)
        hidden = self.gelu_erf(self.linear(x, d, ffn))
        return self.layer_norm(self.op("Add", [x, self.linear(hidden, ffn, d)]), d)

    def model(self, name, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, [], self.inits)
        # the producer names the module's old home (benchmarks/suite_models.py): the same
        # name gives the same bytes, so figures recorded before the move still apply
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="tvm_hetero.benchmarks.suite_models")
        model.ir_version = 8
        # the outputs' shapes from ONNX shape inference
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
        model.graph.output.extend(inferred[o] for o in outputs)
        onnx.checker.check_model(model)
        return model


def float_input(name, shape):
    """A float32 graph input of `shape`."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def normal_array(shape, seed=1):
    """Seeded standard-normal float32 data of `shape` (the suite's inputs)."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def strip_initializer_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Remove the initializers from the graph inputs (in place): onnxruntime folds only
    initializers that are not also inputs."""
    inits = {init.name for init in model.graph.initializer}
    keep = [v for v in model.graph.input if v.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    model.ir_version = max(model.ir_version, 4)
    return model
