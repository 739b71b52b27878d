"""The random graph generator: valid by construction (onnx's checker, strict shape inference,
onnxruntime), deterministic, and covering its vocabulary and structures."""

from collections import Counter

import numpy as np
import onnx
import pytest

from tvm_hetero.testing import random_graph, random_inputs
from tvm_hetero.testing.fuzz import onnxruntime_outputs

SEEDS = range(200)


@pytest.fixture(scope="module")
def graphs():
    return {seed: random_graph(seed) for seed in SEEDS}


def test_every_graph_is_valid_and_runs(graphs):
    for seed, model in graphs.items():
        onnx.checker.check_model(model, full_check=True)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        assert 4 <= len(model.graph.node) <= 20, seed
        assert model.opset_import[0].version == 17
        # the declared output shapes are those onnx infers; all static
        declared = {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim]
                    for o in model.graph.output}
        for value in inferred.graph.output:
            assert all(d.HasField("dim_value") for d in value.type.tensor_type.shape.dim)
            assert [d.dim_value for d in value.type.tensor_type.shape.dim] == \
                declared[value.name], seed
        outputs = onnxruntime_outputs(model, random_inputs(model, seed))
        for out in outputs:
            assert out.dtype == np.float32, seed
            assert np.isfinite(out).all(), seed  # numerically tame


def test_same_seed_same_graph():
    assert random_graph(7).SerializeToString() == random_graph(7).SerializeToString()
    assert random_graph(7).SerializeToString() != random_graph(8).SerializeToString()
    a, b = random_inputs(random_graph(7), 3), random_inputs(random_graph(7), 3)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_node_count_bounds():
    for seed in range(20):
        assert 2 <= len(random_graph(seed, min_nodes=2, max_nodes=5).graph.node) <= 5
    with pytest.raises(ValueError):
        random_graph(0, min_nodes=5, max_nodes=4)


def test_vocabulary_is_covered(graphs):
    ops = Counter(n.op_type for m in graphs.values() for n in m.graph.node)
    expected = {
        "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
        "Resize", "Concat", "Split", "Slice", "Pad", "Reshape", "Flatten", "Transpose",
        "Squeeze", "Unsqueeze", "Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "Add", "Mul",
        "Sub", "Div", "Pow", "Max", "Min", "ReduceMean", "ReduceMax", "ReduceSum", "ReduceMin",
        "ReduceL2", "Softmax", "LayerNormalization", "BatchNormalization", "MatMul", "Gemm",
        "Gather", "Where", "Expand", "Cast", "Sqrt",
    }
    assert expected <= set(ops), expected - set(ops)
    assert len(ops) >= 60


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def test_edge_cases_occur(graphs):
    """Grouped, depthwise, dilated, strided and 1-D convolutions; reductions over non-last and
    negative axes, with and without keepdims; Gemm transposes and inner dimensions of 1."""
    seen = Counter()
    for model in graphs.values():
        inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
        inferred = onnx.shape_inference.infer_shapes(model).graph
        shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                  for v in [*inferred.value_info, *inferred.input, *inferred.output]}
        for node in model.graph.node:
            if node.op_type == "Conv":
                weight = inits[node.input[1]]
                group = _attr(node, "group", 1)
                seen["conv depthwise"] += group > 1 and weight.shape[1] == 1
                seen["conv grouped"] += group > 1 and weight.shape[1] > 1
                seen["conv dilated"] += any(d > 1 for d in _attr(node, "dilations", [1]))
                seen["conv strided"] += any(s > 1 for s in _attr(node, "strides", [1]))
                seen["conv 1-D"] += weight.ndim == 3
                seen["conv bias"] += len(node.input) == 3
            if node.op_type.startswith("Reduce"):
                axes = _attr(node, "axes")
                if axes is None and len(node.input) > 1:
                    axes = inits[node.input[1]].tolist()
                rank = len(shapes.get(node.input[0], []))
                if axes:
                    seen["reduce negative axis"] += any(a < 0 for a in axes)
                    seen["reduce non-last axis"] += any(a % rank != rank - 1 for a in axes)
                seen[f"reduce keepdims={_attr(node, 'keepdims', 1)}"] += 1
            if node.op_type == "Gemm":
                seen["gemm transA"] += _attr(node, "transA", 0) == 1
                seen["gemm transB"] += _attr(node, "transB", 0) == 1
                a = shapes.get(node.input[0])
                inner = a[0] if _attr(node, "transA", 0) else a[1]
                seen["gemm inner 1"] += inner == 1
                seen["gemm bias"] += len(node.input) == 3
            if node.op_type == "MatMul":
                a = shapes.get(node.input[0]) or list(inits[node.input[0]].shape)
                seen["matmul inner 1"] += a[-1] == 1
            if node.op_type == "Resize":
                seen[f"resize {_attr(node, 'mode', b'nearest').decode()}"] += 1
            if node.op_type == "Softmax":
                seen["softmax non-last axis"] += _attr(node, "axis", -1) not in (-1, len(
                    shapes.get(node.input[0], [])) - 1)
    for case in ("conv depthwise", "conv grouped", "conv dilated", "conv strided", "conv 1-D",
                 "conv bias", "reduce negative axis", "reduce non-last axis",
                 "reduce keepdims=0", "reduce keepdims=1", "gemm transA", "gemm transB",
                 "gemm inner 1", "gemm bias", "matmul inner 1", "resize nearest",
                 "resize linear", "softmax non-last axis"):
        assert seen[case] > 0, case


def test_structures_occur(graphs):
    """Fan-out (a value read by several nodes), several graph outputs, extents of 1 and odd
    extents in the graph inputs."""
    fan_out = multi_output = ones = odd = 0
    for model in graphs.values():
        reads = Counter(name for node in model.graph.node for name in node.input)
        produced = {o for node in model.graph.node for o in node.output}
        fan_out += any(reads[name] >= 2 for name in produced)
        multi_output += len(model.graph.output) >= 2
        dims = [d.dim_value for v in model.graph.input for d in v.type.tensor_type.shape.dim]
        ones += 1 in dims
        odd += any(d % 2 == 1 and d > 1 for d in dims)
    assert fan_out >= 50 and multi_output >= 30 and ones >= 50 and odd >= 50, \
        (fan_out, multi_output, ones, odd)
