"""onnxruntime's dynamic quantization through the tool's path: DynamicQuantizeLinear,
MatMulInteger and ConvInteger equal to onnxruntime's bit for bit on small graphs (every zero
point form and convolution attribute), and models quantized by ``quantize_dynamic`` (an MLP and
a CNN) with every integer op checked against onnxruntime on our own inputs to it."""

import re

import numpy as np
import pytest

import tvm_hetero as th
from tvm_hetero.testing import max_relative_error, onnx_reference, random_placement

OPSET = 17
INTEGER_OPS = ("DynamicQuantizeLinear", "MatMulInteger", "ConvInteger")


def _tensor_type(dtype):
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _node_model(op, feeds, constants, output_dtype, prefix="", **attrs):
    """A graph of one `op` node: `feeds` ({name: array}, graph inputs) and `constants`
    ({name: array or None}, initializers; None: the optional input left out), in the order
    given; one output of `output_dtype` (shapes from ONNX shape inference). Every name of the
    graph starts with `prefix` (graphs to merge: :func:`_merged`)."""
    from onnx import helper, numpy_helper

    names, inputs, inits = [], [], []
    for name, value in {**feeds, **constants}.items():
        name = prefix + name
        names.append(name if value is not None else "")
        if value is None:
            continue
        if name[len(prefix):] in feeds:
            inputs.append(helper.make_tensor_value_info(name, _tensor_type(value.dtype),
                                                        list(value.shape)))
        else:
            inits.append(numpy_helper.from_array(value, name))
    while names and not names[-1]:
        names.pop()
    outputs = [prefix + o for o in (
        ["y"] if op != "DynamicQuantizeLinear" else ["y", "y_scale", "y_zero_point"])]
    node = helper.make_node(op, names, outputs, **attrs)
    dtypes = [output_dtype] if op != "DynamicQuantizeLinear" else [np.uint8, np.float32,
                                                                   np.uint8]
    graph = helper.make_graph([node], op, inputs,
                              [helper.make_tensor_value_info(o, _tensor_type(d), None)
                               for o, d in zip(outputs, dtypes)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def _merged(protos):
    """One graph of the nodes, inputs, outputs and initializers of `protos` (their names
    apart), so that one build serves many cases."""
    from onnx import helper

    graphs = [proto.graph for proto in protos]
    graph = helper.make_graph([n for g in graphs for n in g.node], "cases",
                              [v for g in graphs for v in g.input],
                              [v for g in graphs for v in g.output],
                              [t for g in graphs for t in g.initializer])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def _run(proto, feeds, placement="all:cpu", devices=("cpu",)):
    model = th.load_model(proto)
    if not isinstance(placement, str):
        placement = placement(th.extract_layers(model))
    compiled = th.build(model, placement, list(devices))
    names = {spec.source_name: spec.name for spec in model.inputs}
    return compiled, compiled.run({names[k]: v for k, v in feeds.items()})


def _assert_exact(got, want, what=""):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, what
        np.testing.assert_array_equal(a, b, err_msg=what)


def _integers(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


# --- DynamicQuantizeLinear ------------------------------------------------------------------
def _dql_input(kind, rng):
    if kind == "normal":
        return rng.standard_normal((64, 100)).astype(np.float32)
    if kind == "zeros":  # onnxruntime's scale 1 (max == min), not a division by 0
        return np.zeros((4, 8), np.float32)
    if kind == "positive":
        return rng.uniform(0.5, 3.0, (4, 8)).astype(np.float32)
    if kind == "negative":
        return rng.uniform(-3.0, -0.5, (4, 8)).astype(np.float32)
    if kind == "ties":  # scale 1, zero point 127.5 -> 128: halves round to even
        return np.array([[-127.5, 127.5, 0.5, 1.5, 2.5, -0.5, -1.5, 100.5]], np.float32)
    if kind == "wide":
        return (rng.standard_normal((8, 8)) * 1e30).astype(np.float32)
    return (rng.standard_normal((8, 8)) * 1e-30).astype(np.float32)  # "narrow"


DQL_KINDS = ["normal", "zeros", "positive", "negative", "ties", "wide", "narrow"]


@pytest.mark.parametrize("devices", [("cpu",), ("cpu-generic",)])
def test_dynamic_quantize_linear_equals_onnxruntime(devices):
    rng = np.random.default_rng(0)
    cases = {kind: _dql_input(kind, rng) for kind in DQL_KINDS}
    proto = _merged([_node_model("DynamicQuantizeLinear", {"x": x}, {}, np.uint8,
                                 prefix=f"{kind}_") for kind, x in cases.items()])
    feeds = {f"{kind}_x": x for kind, x in cases.items()}
    _, got = _run(proto, feeds, f"all:{devices[0]}", devices)
    want = onnx_reference(proto, feeds)
    for index, kind in enumerate(DQL_KINDS):  # y, its scale and its zero point
        _assert_exact(got[3 * index:3 * index + 3], want[3 * index:3 * index + 3], kind)


# --- MatMulInteger --------------------------------------------------------------------------
# (A shape, B shape, A's zero point shape or None, B's zero point shape or None)
MATMUL_CASES = [
    ((3, 20), (20, 9), None, None),
    ((3, 20), (20, 9), (), ()),
    ((2, 5, 20), (20, 9), (1,), (9,)),          # one A value as a vector; per column of B
    ((2, 5, 20), (2, 20, 9), (), (2, 1, 9)),    # batched both sides, N-D per column
    ((20,), (20, 9), (), (9,)),                 # a vector A
    ((20,), (20, 9), (1,), (1,)),               # a vector A, one-element zero points
    ((3, 20), (20,), (), ()),                   # a vector B
    ((3, 20), (20,), (1,), (1,)),               # a vector B, one-element zero points
    ((3, 20), (20, 9), (3,), (9,)),             # per row of A (onnxruntime: scalar only)
    ((2, 3, 20), (20, 9), (2, 3, 1), None),     # N-D per row of A
]


def _ones_like(value):
    return np.ones(value.shape, value.dtype)


def _matmul_reference(a, b, a_point, b_point):
    """onnxruntime's MatMulInteger; a zero point of A that onnxruntime refuses (not one
    value) by linearity: ``(A - za) (B - zb) = A (B - zb) - za * 1 (B - zb)``."""
    def ort(a_value, a_zero):
        proto = _node_model("MatMulInteger", {"a": a_value, "b": b},
                            {"a_zero_point": a_zero, "b_zero_point": b_point}, np.int32)
        return onnx_reference(proto, {"a": a_value, "b": b})[0]

    if a_point is None or a_point.size == 1:
        return ort(a, a_point)
    per_row = a_point.astype(np.int64)
    per_row = per_row.reshape(-1, 1) if per_row.ndim == 1 else per_row  # [M]: one per row
    products = ort(a, None).astype(np.int64)
    sums = ort(_ones_like(a), None).astype(np.int64)
    return (products - per_row * sums).astype(np.int32)


@pytest.mark.parametrize("a_dtype, b_dtype", [(np.uint8, np.int8), (np.int8, np.uint8),
                                              (np.uint8, np.uint8), (np.int8, np.int8)])
def test_matmul_integer_equals_onnxruntime(a_dtype, b_dtype):
    rng = np.random.default_rng(0)
    protos, feeds, want = [], {}, []
    for case, (a_shape, b_shape, a_point_shape, b_point_shape) in enumerate(MATMUL_CASES):
        a, b = _integers(rng, a_dtype, a_shape), _integers(rng, b_dtype, b_shape)
        a_point = None if a_point_shape is None else _integers(rng, a_dtype, a_point_shape)
        b_point = None if b_point_shape is None else _integers(rng, b_dtype, b_point_shape)
        protos.append(_node_model("MatMulInteger", {"a": a, "b": b},
                                  {"a_zero_point": a_point, "b_zero_point": b_point}, np.int32,
                                  prefix=f"case{case}_"))
        feeds.update({f"case{case}_a": a, f"case{case}_b": b})
        want.append(_matmul_reference(a, b, a_point, b_point))
    _, got = _run(_merged(protos), feeds)
    for case, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == b.dtype and a.shape == b.shape, MATMUL_CASES[case]
        np.testing.assert_array_equal(a, b, err_msg=str(MATMUL_CASES[case]))


# --- ConvInteger ----------------------------------------------------------------------------
# (x shape, w shape, attributes)
CONV_CASES = [
    ((1, 3, 9, 9), (4, 3, 3, 3), {}),
    ((2, 3, 9, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 4, 11, 10), (6, 2, 3, 3), {"pads": [0, 1, 2, 1], "strides": [2, 1], "group": 2}),
    ((1, 3, 12, 12), (4, 3, 3, 3), {"dilations": [2, 2], "strides": [2, 2],
                                     "pads": [2, 2, 2, 2]}),
    ((1, 4, 8, 8), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 3, 9, 8), (4, 3, 3, 2), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 9, 8), (4, 3, 2, 3), {"auto_pad": "SAME_LOWER"}),
    ((1, 3, 9, 8), (4, 3, 3, 3), {"auto_pad": "VALID", "strides": [2, 1]}),
    ((1, 8, 7, 7), (16, 8, 1, 1), {}),                                  # 1x1
    ((2, 3, 20), (4, 3, 5), {"pads": [2, 1], "strides": [2]}),           # 1-D
    ((1, 2, 5, 6, 6), (3, 2, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}),    # 3-D
]


def _conv_reference(x, w, x_point, w_point, attrs):
    """onnxruntime's ConvInteger; a zero point of w per output channel (which onnxruntime
    refuses) by linearity: ``conv(x - zx, w - zw) = conv(x - zx, w) - zw * conv(x - zx, 1)``."""
    def ort(weight, w_zero):
        proto = _node_model("ConvInteger", {"x": x, "w": weight},
                            {"x_zero_point": x_point, "w_zero_point": w_zero}, np.int32,
                            **attrs)
        return onnx_reference(proto, {"x": x, "w": weight})[0]

    if w_point is None or w_point.size == 1:
        return ort(w, w_point)
    per_channel = w_point.astype(np.int64).reshape((1, -1) + (1,) * (x.ndim - 2))
    products = ort(w, None).astype(np.int64)
    sums = ort(_ones_like(w), None).astype(np.int64)
    return (products - per_channel * sums).astype(np.int32)


@pytest.mark.parametrize("points", ["none", "scalar", "per-channel"])
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv_integer_equals_onnxruntime(case, points):
    x_shape, w_shape, attrs = CONV_CASES[case]
    # every combination of 8-bit types across the cases
    x_dtype, w_dtype = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.uint8),
                        (np.int8, np.int8)][case % 4]
    rng = np.random.default_rng(case)
    x, w = _integers(rng, x_dtype, x_shape), _integers(rng, w_dtype, w_shape)
    x_point = w_point = None
    if points != "none":
        x_point = _integers(rng, x_dtype, ())
        w_point = _integers(rng, w_dtype, (w_shape[0],) if points == "per-channel" else ())
    proto = _node_model("ConvInteger", {"x": x, "w": w},
                        {"x_zero_point": x_point, "w_zero_point": w_point}, np.int32, **attrs)
    _, got = _run(proto, {"x": x, "w": w})
    _assert_exact(got, [_conv_reference(x, w, x_point, w_point, attrs)])


@pytest.mark.parametrize("op, feeds, constants, message", [
    ("ConvInteger", {"x": np.zeros((1, 2, 4, 4), np.uint8), "w": np.zeros((3, 2, 1, 1),
                                                                          np.uint8)},
     {"x_zero_point": np.zeros((2,), np.uint8)}, "x's zero point must be one value"),
    ("ConvInteger", {"x": np.zeros((1, 2, 4, 4), np.uint8), "w": np.zeros((3, 2, 1, 1),
                                                                          np.uint8)},
     {"x_zero_point": np.zeros((), np.uint8), "w_zero_point": np.zeros((2,), np.uint8)},
     "w's zero point has 2 values"),
    ("MatMulInteger", {"a": np.zeros((3, 4), np.uint8), "b": np.zeros((4, 5), np.uint8)},
     {"a_zero_point": np.zeros((4,), np.uint8)}, "a zero point of 4 values does not match"),
])
def test_a_zero_point_onnx_does_not_allow_is_a_one_line_error(op, feeds, constants, message):
    proto = _node_model(op, feeds, constants, np.int32)
    with pytest.raises(th.ModelError) as err:
        th.load_model(proto)
    assert message in str(err.value) and op in str(err.value) and "\n" not in str(err.value)


# --- models quantized by quantize_dynamic ---------------------------------------------------
def _quantized(name, weight_type, tmp_path):
    """zoo model `name` (an MLP of three dense layers; a CNN of two convolutions and a dense
    layer) quantized by onnxruntime's ``quantize_dynamic``, every tensor the integer ops read
    or write (but the graph's inputs) a graph output too."""
    import onnx
    from onnx import helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from tvm_hetero.frontend import zoo

    source, target = tmp_path / f"{name}.onnx", tmp_path / f"{name}.quant.onnx"
    onnx.save(zoo.ZOO[name](), source)
    quantize_dynamic(str(source), str(target), weight_type=getattr(QuantType, weight_type))
    proto = onnx.load(target)
    assert {node.op_type for node in proto.graph.node} >= {
        "DynamicQuantizeLinear", "MatMulInteger"} | ({"ConvInteger"} if name == "cnn" else set())
    constants = {init.name for init in proto.graph.initializer}
    inputs = {value.name for value in proto.graph.input}
    seen = {value.name for value in proto.graph.output}
    for node in proto.graph.node:
        if node.op_type in INTEGER_OPS:
            for tensor in [*node.input, *node.output]:
                if tensor and tensor not in constants | inputs | seen:
                    proto.graph.output.append(helper.make_empty_tensor_value_info(tensor))
                    seen.add(tensor)
    return proto


def _check_integer_ops(proto, values, feeds):
    """Every integer op of `proto` run by onnxruntime alone on our values of its inputs equals
    our values of its outputs, bit for bit."""
    from onnx import helper

    constants = {init.name: init for init in proto.graph.initializer}
    checked = 0
    for node in proto.graph.node:
        if node.op_type not in INTEGER_OPS:
            continue
        given = {name: values.get(name, feeds.get(name)) for name in node.input
                 if name and name not in constants}
        graph = helper.make_graph(
            [node], node.op_type,
            [helper.make_tensor_value_info(n, _tensor_type(v.dtype), list(v.shape))
             for n, v in given.items()],
            [helper.make_tensor_value_info(o, _tensor_type(values[o].dtype), None)
             for o in node.output],
            [constants[n] for n in node.input if n in constants])
        single = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        for name, want in zip(node.output, onnx_reference(single, given)):
            assert values[name].dtype == want.dtype, name
            np.testing.assert_array_equal(values[name], want, err_msg=name)
        checked += 1
    return checked


@pytest.mark.parametrize("name", ["mlp", "cnn"])
@pytest.mark.parametrize("weight_type", ["QUInt8", "QInt8"])
@pytest.mark.parametrize("devices", [("cpu",), ("cpu", "cpu-generic")])
def test_a_quantize_dynamic_model_matches_onnxruntime(name, weight_type, devices, tmp_path):
    proto = _quantized(name, weight_type, tmp_path)
    model = th.load_model(proto)
    placement = "all:cpu" if len(devices) == 1 else \
        random_placement(th.extract_layers(model), list(devices), np.random.default_rng(1))
    compiled = th.build(model, placement, list(devices))
    # every kernel scheduled, but DynamicQuantizeLinear's reductions of a whole tensor to one
    # value (no rule of the table takes those: TVM's default loops)
    assert [kernel for kernel, rule in compiled.stats.rules.items() if rule is None
            and not re.fullmatch(r"(max|min)\d*(_cpu|_cpu_generic)?", kernel)] == [], \
        compiled.stats.rules
    # random inputs, and zeros (the first range collapses to 0: onnxruntime's scale of 1)
    for fill in ("random", "zeros"):
        feeds = {spec.source_name: spec.random(np.random.default_rng(0)) for spec in
                 model.inputs}
        if fill == "zeros":
            feeds = {k: np.zeros_like(v) for k, v in feeds.items()}
        got = compiled.run({spec.name: feeds[spec.source_name] for spec in model.inputs})
        values = {o.name: value for o, value in zip(proto.graph.output, got)}
        assert _check_integer_ops(proto, values, feeds) >= 6
        # the model's float output, after dequantization, against onnxruntime's whole graph
        want = onnx_reference(proto, feeds)
        assert max_relative_error(got[:1], want[:1]) <= 1e-5, fill
