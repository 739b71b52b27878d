"""Shape arithmetic that static input shapes fix, folded to constants before the import
(tvm_hetero/frontend/onnx/shape_folding.py). Each graph is built by code with the pattern of
a real export that failed to import (GPT-2's position ids, TorchScript's chunk bounds, Swin's
window partition) and is checked against onnxruntime; then the errors: the hint for a dynamic
input, a node that fails on its folded values."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_hetero as th
from tvm_hetero.cli.main import main
from tvm_hetero.frontend.load import static_shape_hint
from tvm_hetero.frontend.onnx import shape_folding
from tvm_hetero.testing import onnx_reference

INT64_MIN, INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def _const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def _model(nodes, inputs, outputs, initializers, opset=17):
    graph = helper.make_graph(nodes, "shapes", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _matches_onnxruntime(proto, inputs, input_shapes=None):
    """Load (shapes pinned where given), build on cpu, run; the outputs against
    onnxruntime's."""
    model = th.load_model(proto, input_shapes=input_shapes)
    layers = th.extract_layers(model)
    compiled = th.build(model, th.Placement({l.name: "cpu" for l in layers}), ["cpu"])
    got = compiled.run({s.name: inputs[s.source_name] for s in model.inputs})
    want = onnx_reference(proto, inputs)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    return model


def _position_ids_model():
    """GPT-2 through torch's dynamo exporter: the sequence axis dynamic, the position ids a
    Range up to the input's length (Shape -> Squeeze -> Range -> Unsqueeze -> Gather)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Shape", ["ids"], ["length_1d"], start=1, end=2),
        helper.make_node("Squeeze", ["length_1d"], ["length"]),
        helper.make_node("Range", ["zero", "length", "one"], ["positions"]),
        helper.make_node("Unsqueeze", ["positions", "axis0"], ["position_ids"]),
        helper.make_node("Gather", ["wte", "ids"], ["tokens"]),
        helper.make_node("Gather", ["wpe", "position_ids"], ["places"]),
        helper.make_node("Add", ["tokens", "places"], ["y"]),
    ]
    inits = [_const("zero", 0), _const("one", 1), _const("axis0", [0]),
             _const("wte", rng.standard_normal((32, 4)), np.float32),
             _const("wpe", rng.standard_normal((16, 4)), np.float32)]
    return _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", 4])],
                  inits, opset=18)


def test_position_ids_of_a_pinned_sequence_axis_match_onnxruntime():
    ids = np.random.default_rng(1).integers(0, 32, size=(1, 8)).astype(np.int64)
    model = _matches_onnxruntime(_position_ids_model(), {"ids": ids}, {"ids": (1, 8)})
    assert model.inputs[0].shape == (1, 8)


def test_folding_leaves_no_shape_arithmetic():
    proto = _position_ids_model()
    shape_folding.pin_input_shapes(proto, {"ids": [1, 8]})
    shapes = shape_folding.fold_shape_arithmetic(proto)
    # the position embeddings are small here: their gather folds too
    assert [n.op_type for n in proto.graph.node] == ["Gather", "Add"]
    folded = {init.name: numpy_helper.to_array(init) for init in proto.graph.initializer}
    np.testing.assert_array_equal(folded["places"], folded["wpe"][np.arange(8)][None])
    assert shapes["y"] == (1, 8, 4)


def test_chunk_bounds_from_a_static_shape_match_onnxruntime():
    """TorchScript's ``x.chunk(2, -1)`` (timm's gMLP, EfficientViT): Slice bounds from
    Shape -> Gather -> Add -> Div -> Mul of the static input shape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "last"], ["width"], axis=0),
        helper.make_node("Add", ["width", "one"], ["rounded"]),
        helper.make_node("Div", ["rounded", "two"], ["half"]),
        helper.make_node("Mul", ["half", "one"], ["half_end"]),
        helper.make_node("Unsqueeze", ["half_end", "zero_1d"], ["half_end_1d"]),
        helper.make_node("Mul", ["half", "two"], ["full_end"]),
        helper.make_node("Unsqueeze", ["full_end", "zero_1d"], ["full_end_1d"]),
        helper.make_node("Slice", ["x", "zero_1d", "half_end_1d", "last_1d"], ["left"]),
        helper.make_node("Slice", ["x", "half_end_1d", "full_end_1d", "last_1d"], ["right"]),
        helper.make_node("Sigmoid", ["right"], ["gate"]),
        helper.make_node("Mul", ["left", "gate"], ["y"]),
    ]
    inits = [_const("last", 2), _const("one", 1), _const("two", 2), _const("zero_1d", [0]),
             _const("last_1d", [2])]
    proto = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 3])], inits)
    x = np.random.default_rng(2).standard_normal((1, 8, 6)).astype(np.float32)
    _matches_onnxruntime(proto, {"x": x})


def _window_partition_model():
    """torchvision's Swin-T through TorchScript: the input padded to whole windows by pads
    computed from constants (F.pad's pattern: Concat -> ConstantOfShape -> Reshape -> reversed
    Slice -> Transpose -> Reshape), then reshaped into windows by a target with -1 computed
    from the padded tensor's Shape."""
    window = 4
    nodes = [
        # pad_r = (window - W % window) % window, as TorchScript records Python int arithmetic
        helper.make_node("Mod", ["width", "window"], ["rest"]),
        helper.make_node("Sub", ["window", "rest"], ["missing"]),
        helper.make_node("Mod", ["missing", "window"], ["pad_r"]),
        helper.make_node("Unsqueeze", ["pad_r", "zero_1d"], ["pad_r_1d"]),
        # torch's pads, last axis first: (0, 0, 0, pad_r, 0, pad_b) with pad_b = pad_r
        helper.make_node("Concat", ["zero_1d", "zero_1d", "zero_1d", "pad_r_1d", "zero_1d",
                                    "pad_r_1d"], ["torch_pads"], axis=0),
        helper.make_node("Shape", ["torch_pads"], ["torch_pads_shape"]),
        helper.make_node("Gather", ["torch_pads_shape", "zero_1d"], ["torch_pads_count"],
                         axis=0),
        helper.make_node("Sub", ["eight", "torch_pads_count"], ["rest_count"]),
        helper.make_node("ConstantOfShape", ["rest_count"], ["rest_pads"],
                         value=numpy_helper.from_array(np.array([0], np.int64))),
        helper.make_node("Cast", ["torch_pads"], ["torch_pads_64"], to=TensorProto.INT64),
        helper.make_node("Concat", ["torch_pads_64", "rest_pads"], ["all_pads"], axis=0),
        helper.make_node("Reshape", ["all_pads", "pairs"], ["pad_pairs"]),
        helper.make_node("Slice", ["pad_pairs", "minus_one", "int64_min", "zero_1d",
                                   "minus_one"], ["reversed_pairs"]),
        helper.make_node("Transpose", ["reversed_pairs"], ["onnx_pairs"], perm=[1, 0]),
        helper.make_node("Reshape", ["onnx_pairs", "minus_one"], ["onnx_pads"]),
        helper.make_node("Pad", ["x", "onnx_pads"], ["padded"], mode="constant"),
        # padded.view(B, H // window, window, W // window, window, -1)
        helper.make_node("Shape", ["padded"], ["padded_shape"]),
        helper.make_node("Gather", ["padded_shape", "one"], ["height_padded"], axis=0),
        helper.make_node("Div", ["height_padded", "window"], ["rows"]),
        helper.make_node("Gather", ["padded_shape", "two"], ["width_padded"], axis=0),
        helper.make_node("Div", ["width_padded", "window"], ["cols"]),
        helper.make_node("Unsqueeze", ["rows", "zero_1d"], ["rows_1d"]),
        helper.make_node("Unsqueeze", ["cols", "zero_1d"], ["cols_1d"]),
        helper.make_node("Concat", ["one_1d", "rows_1d", "window_1d", "cols_1d", "window_1d",
                                    "minus_one"], ["window_shape"], axis=0),
        helper.make_node("Reshape", ["padded", "window_shape"], ["windows"]),
        helper.make_node("Transpose", ["windows"], ["windows_t"], perm=[0, 1, 3, 2, 4, 5]),
        helper.make_node("Reshape", ["windows_t", "token_shape"], ["y"]),
    ]
    inits = [_const("width", 6), _const("window", window), _const("zero", 0), _const("one", 1),
             _const("two", 2), _const("eight", 8), _const("zero_1d", [0]),
             _const("one_1d", [1]), _const("window_1d", [window]), _const("minus_one", [-1]),
             _const("int64_min", [INT64_MIN]), _const("pairs", [-1, 2]),
             _const("token_shape", [-1, window * window, 3])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 6, 3])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16, 3])], inits)


def test_window_partition_over_computed_pads_matches_onnxruntime():
    x = np.random.default_rng(3).standard_normal((1, 6, 6, 3)).astype(np.float32)
    _matches_onnxruntime(_window_partition_model(), {"x": x})


def test_the_hint_for_a_dynamic_input_shows_its_own_dims(tmp_path, capsys):
    with pytest.raises(th.ModelError, match=r"dynamic shape \[1, 'seq'\]; give a static one "
                       r"\(--input-shape ids=1,<seq> with a number for <seq>\)"):
        th.load_model(_position_ids_model())
    path = tmp_path / "gpt2_like.onnx"
    onnx.save(_position_ids_model(), path)
    code = main(["inspect", str(path)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "--input-shape ids=1,<seq> " in lines[0]
    assert "224" not in lines[0]
    assert static_shape_hint("x", ["N", 3, "?", "N"]) == \
        "--input-shape x=<N>,3,<dim2>,<N> with a number for each of <N>, <dim2>"


def test_a_node_that_fails_on_its_folded_values_is_named():
    """The pinned shape has another rank than the graph's arithmetic expects: the Gather of
    the third dimension fails at the fold, naming its node."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "two"], ["depth"], axis=0, name="third_dim"),
             helper.make_node("Unsqueeze", ["depth", "zero_1d"], ["depth_1d"]),
             helper.make_node("Concat", ["minus_one", "depth_1d"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    proto = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])],
                   [_const("two", 2), _const("zero_1d", [0]), _const("minus_one", [-1])])
    x = np.ones((3, 4, 2), np.float32)
    _matches_onnxruntime(proto, {"x": x}, {"x": (3, 4, 2)})
    with pytest.raises(th.ModelError, match=r"Gather \(node third_dim\) fails on the constant "
                       "values the input shapes give its inputs: .*out of bounds"):
        th.load_model(proto, input_shapes={"x": (12, 2)})


def test_token_type_ids_gathered_by_position_ids_fold_and_match_onnxruntime():
    # BERT in transformers: a [1, 512] buffer of token types expanded to the batch and
    # gathered along the sequence by the position ids (a slice of a [1, 512] arange up to the
    # input's length); onnx 1.23's reference GatherElements fails on it at these sizes
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Shape", ["ids"], ["length"], start=1, end=2),
        helper.make_node("Slice", ["arange", "zero", "length", "one"], ["position_ids"]),
        helper.make_node("Shape", ["ids"], ["batch"], start=0, end=1),
        helper.make_node("Concat", ["batch", "minus_one"], ["expand_to"], axis=0),
        helper.make_node("Abs", ["expand_to"], ["expand_shape"]),
        helper.make_node("Expand", ["token_types", "expand_shape"], ["buffered"]),
        helper.make_node("GatherElements", ["buffered", "position_ids"], ["types"], axis=1),
        helper.make_node("Gather", ["type_table", "types"], ["type_embeddings"]),
        helper.make_node("Gather", ["words", "ids"], ["word_embeddings"]),
        helper.make_node("Add", ["word_embeddings", "type_embeddings"], ["y"]),
    ]
    inits = [_const("zero", [0]), _const("one", [1]), _const("minus_one", [-1]),
             _const("arange", np.arange(512).reshape(1, 512)),
             _const("token_types", np.zeros((1, 512))),
             _const("type_table", rng.standard_normal((2, 4)), np.float32),
             _const("words", rng.standard_normal((16, 4)), np.float32)]
    proto = _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", 4])], inits)
    ids = rng.integers(0, 16, size=(1, 128)).astype(np.int64)
    _matches_onnxruntime(proto, {"ids": ids}, {"ids": (1, 128)})
