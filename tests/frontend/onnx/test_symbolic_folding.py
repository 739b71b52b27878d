"""Shape arithmetic over a shape range's dimension: the patterns torch's exporters write for a
dynamic sequence (head splits through ``Shape -> Gather -> Concat -> Reshape``, position ids
through ``Range``, a mask expanded by ``Where(Equal(shape, -1), 1, shape) -> Expand``, gathers
with indices as long as the sequence) import with the dimension symbolic, build once and
match onnxruntime at several sequence lengths."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_hetero as th
from tvm_hetero.frontend.onnx import shape_folding
from tvm_hetero.frontend.onnx.symbolic_folding import (SYMBOLIC_VALUE_OP,
                                                       fold_symbolic_shape_arithmetic,
                                                       probe_points)

ort = pytest.importorskip("onnxruntime")

WIDTH, HEADS = 16, 2
RANGES = {"seq": (1, 40, 8)}


def _const(name, value, dtype="int64"):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def exported_attention():
    """A one-layer encoder over ``ids [1, seq]`` and ``mask [1, seq]`` written as
    TorchScript's exporter writes BERT's and GPT-2's shape arithmetic."""
    rng = np.random.default_rng(0)
    head = WIDTH // HEADS
    inits = [
        numpy_helper.from_array(rng.standard_normal((50, WIDTH)).astype("float32"), "tokens"),
        numpy_helper.from_array(rng.standard_normal((64, WIDTH)).astype("float32"), "places"),
        numpy_helper.from_array((rng.standard_normal((WIDTH, 3 * WIDTH)) * 0.3)
                                .astype("float32"), "w_qkv"),
        _const("zero", 0), _const("one", 1), _const("axis0", [0]), _const("minus1", [-1]),
        _const("ones2", [1, 1]), _const("axes12", [1, 2]), _const("heads", [HEADS]),
        _const("head", [head]),
        _const("width", [WIDTH]), _const("split", [WIDTH, WIDTH, WIDTH]),
        numpy_helper.from_array(np.array(head ** -0.5, "float32"), "scale"),
        numpy_helper.from_array(np.array(-1e4, "float32"), "masked"),
    ]
    n = helper.make_node
    nodes = [
        n("Gather", ["tokens", "ids"], ["embedded"]),  # indices as long as the sequence
        # position ids: Shape -> Gather -> Range -> Unsqueeze -> Gather
        n("Shape", ["ids"], ["ids_shape"]),
        n("Gather", ["ids_shape", "one"], ["seq_len"], axis=0),
        n("Range", ["zero", "seq_len", "one"], ["positions"]),
        n("Unsqueeze", ["positions", "axis0"], ["position_ids"]),
        n("Gather", ["places", "position_ids"], ["placed"]),
        n("Add", ["embedded", "placed"], ["x"]),
        n("MatMul", ["x", "w_qkv"], ["qkv"]),
        n("Split", ["qkv", "split"], ["q", "k", "v"], axis=2),
        # heads: [1, seq, 16] -> Reshape(Concat(batch, seq, heads, head)) -> Transpose
        n("Shape", ["x"], ["x_shape"]),
        n("Gather", ["x_shape", "zero"], ["batch"], axis=0),
        n("Gather", ["x_shape", "one"], ["seq"], axis=0),
        n("Unsqueeze", ["batch", "axis0"], ["batch1"]),
        n("Unsqueeze", ["seq", "axis0"], ["seq1"]),
        n("Concat", ["batch1", "seq1", "heads", "head"], ["split_shape"], axis=0),
        n("Reshape", ["q", "split_shape"], ["q4"]),
        n("Reshape", ["k", "split_shape"], ["k4"]),
        n("Reshape", ["v", "split_shape"], ["v4"]),
        n("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        n("MatMul", ["qh", "kt"], ["scores"]),
        n("Mul", ["scores", "scale"], ["scaled"]),
        # the mask: expand(batch, -1) written as Where(Equal(shape, -1), 1, shape) -> Expand
        n("Concat", ["batch1", "minus1"], ["wanted"], axis=0),
        n("Equal", ["wanted", "minus1"], ["is_any"]),
        n("Where", ["is_any", "ones2", "wanted"], ["expand_to"]),
        n("Expand", ["mask", "expand_to"], ["mask2"]),
        n("Unsqueeze", ["mask2", "axes12"], ["mask4"]),
        n("Cast", ["mask4"], ["maskf"], to=TensorProto.FLOAT),
        n("Sub", ["one_f", "maskf"], ["inverted"]),
        n("Mul", ["inverted", "masked"], ["bias"]),
        n("Add", ["scaled", "bias"], ["biased"]),
        n("Softmax", ["biased"], ["weights"], axis=-1),
        n("MatMul", ["weights", "vh"], ["context"]),
        n("Transpose", ["context"], ["context_t"], perm=[0, 2, 1, 3]),
        n("Concat", ["batch1", "seq1", "width"], ["merged_shape"], axis=0),
        n("Reshape", ["context_t", "merged_shape"], ["hidden"]),
        # a pooler: the first token, a gather on data of a symbolic shape
        n("Gather", ["hidden", "zero"], ["pooled"], axis=1),
    ]
    inits.append(numpy_helper.from_array(np.array(1.0, "float32"), "one_f"))
    graph = helper.make_graph(
        nodes, "exported_attention",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, [1, "seq"])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, "seq", WIDTH]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, WIDTH])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feed(seq, seed):
    rng = np.random.default_rng(seed)
    mask = np.ones((1, seq), "int64")
    mask[0, seq // 2 + 1:] = 0
    return {"ids": rng.integers(0, 50, (1, seq)).astype("int64"), "mask": mask}


@pytest.mark.parametrize("devices", [["cpu"], ["cpu", "cpu-generic"]])
def test_exported_attention_over_a_sequence_range(devices):
    source = exported_attention()
    model = th.load_model(source, shape_ranges=RANGES)
    assert model.inputs[0].shape == (1, "seq")
    device_set = th.DeviceSet.parse(devices)
    layers = th.extract_layers(model, th.PrepareConfig.for_devices(device_set))
    placement = th.Placement({l.name: devices[i % len(devices)] for i, l in enumerate(layers)})
    compiled = th.build(model, placement, device_set)
    session = ort.InferenceSession(source.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for seq in (1, 2, 8, 17, 40):
        feed = _feed(seq, seq)
        for got, want in zip(compiled.run(feed), session.run(None, feed)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(th.InputError, match="outside the range"):
        compiled.run(_feed(41, 0))


def test_a_token_outside_the_table_is_refused():
    model = th.load_model(exported_attention(), shape_ranges=RANGES)
    layers = th.extract_layers(model)
    compiled = th.build(model, th.Placement.all_on(layers, "cpu"), ["cpu"])
    feed = _feed(5, 0)
    feed["ids"][0, 3] = 50
    with pytest.raises(Exception, match="out-of-range index"):
        compiled.run(feed)


def _folded(model):
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    shape_dict = {"ids": [1, "seq"], "mask": [1, "seq"]}
    shape_folding.pin_input_shapes(copy, shape_dict)
    fold_symbolic_shape_arithmetic(copy, shape_dict, {"seq": (1, 40)})
    return copy


def test_shape_values_become_polynomials_of_the_dimension():
    folded = _folded(exported_attention())
    ops = [node.op_type for node in folded.graph.node]
    assert "Shape" not in ops and "Concat" not in ops and "Where" not in ops
    symbolic = {node.output[0]: json.loads(next(helper.get_attribute_value(a)
                                                 for a in node.attribute
                                                 if a.name == "polynomial"))
                for node in folded.graph.node if node.op_type == SYMBOLIC_VALUE_OP}
    # the seq scalar Range reads, the split and merged shapes (the mask's Expand target is
    # constant: [1, 1] with the batch of 1)
    assert set(symbolic) == {"seq_len", "split_shape", "merged_shape"}
    monomials = symbolic["split_shape"]["monomials"]
    coefficients = dict(zip(map(tuple, monomials), zip(*symbolic["split_shape"]["coefficients"])))
    assert coefficients[(0,)] == (1, 0, HEADS, WIDTH // HEADS)  # the constant terms
    assert coefficients[(1,)] == (0, 1, 0, 0)  # seq
    assert not any(coefficients[(2,)])


def test_values_that_are_not_polynomials_stay_computed():
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["shape"]), n("Gather", ["shape", "one"], ["seq"], axis=0),
             n("Div", ["seq", "two"], ["half"]),  # floor division: not a polynomial
             n("Mul", ["seq", "three"], ["triple"]),
             n("Range", ["zero", "half", "one"], ["first"]),
             n("Range", ["zero", "triple", "one"], ["second"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq"])],
        [helper.make_tensor_value_info("first", TensorProto.INT64, ["a"]),
         helper.make_tensor_value_info("second", TensorProto.INT64, ["b"])],
        [_const("zero", 0), _const("one", 1), _const("two", 2), _const("three", 3)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    shape_dict = {"x": [1, "seq"]}
    shape_folding.pin_input_shapes(model, shape_dict)
    fold_symbolic_shape_arithmetic(model, shape_dict, {"seq": (1, 100)})
    ops = [node.op_type for node in model.graph.node]
    assert "Div" in ops  # computed from the seq value, which is folded
    assert ops.count(SYMBOLIC_VALUE_OP) == 2  # seq (for the Div) and 3 * seq
    assert "Mul" not in ops


def test_probes_lie_in_the_ranges_and_fix_the_fit():
    points, monomials = probe_points(["batch", "seq"], {"batch": (1, 2), "seq": (3, 40)})
    assert all(1 <= b <= 2 and 3 <= s <= 40 for b, s in points)
    # two batch sizes fix no square of the batch; the checks come on top of the fit
    assert (2, 0) not in monomials and (0, 2) in monomials and (1, 1) in monomials
    assert len(points) == len(monomials) + 2


def decode_step():
    """One decode step over a KV cache of ``past`` positions: the new token's key joins the
    cache, the mask covers ``past+1`` positions, the position id is the cache's length read
    off its shape (a folded value used as data)."""
    rng = np.random.default_rng(1)
    n = helper.make_node
    nodes = [
        n("Shape", ["past_k"], ["cache_shape"]),
        n("Gather", ["cache_shape", "two"], ["past_len"], axis=0),
        n("Unsqueeze", ["past_len", "axes01"], ["position"]),  # [1, 1]: data
        n("Gather", ["places", "position"], ["placed"]),  # [1, 1, 16]
        n("Add", ["x", "placed"], ["xp"]),
        n("MatMul", ["xp", "w_q"], ["q"]), n("MatMul", ["xp", "w_k"], ["k"]),
        n("Reshape", ["q", "heads_shape"], ["q4"]), n("Reshape", ["k", "heads_shape"], ["k4"]),
        n("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k4"], ["kh"], perm=[0, 2, 1, 3]),
        n("Concat", ["past_k", "kh"], ["keys"], axis=2),  # [1, 2, past + 1, 8]
        n("Transpose", ["keys"], ["keys_t"], perm=[0, 1, 3, 2]),
        n("MatMul", ["qh", "keys_t"], ["scores"]),
        n("Unsqueeze", ["mask", "axes12"], ["mask4"]),
        n("Cast", ["mask4"], ["maskf"], to=TensorProto.FLOAT),
        n("Sub", ["one_f", "maskf"], ["inverted"]),
        n("Mul", ["inverted", "masked"], ["bias"]),
        n("Add", ["scores", "bias"], ["biased"]),
        n("Softmax", ["biased"], ["weights"], axis=-1),
        n("MatMul", ["weights", "keys"], ["out"]),
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal((1100, WIDTH)).astype("float32"), "places"),
        numpy_helper.from_array((rng.standard_normal((WIDTH, WIDTH)) * 0.3).astype("float32"),
                                "w_q"),
        numpy_helper.from_array((rng.standard_normal((WIDTH, WIDTH)) * 0.3).astype("float32"),
                                "w_k"),
        _const("two", 2), _const("axes01", [0, 1]), _const("axes12", [1, 2]),
        _const("heads_shape", [1, 1, HEADS, WIDTH // HEADS]),
        numpy_helper.from_array(np.array(1.0, "float32"), "one_f"),
        numpy_helper.from_array(np.array(-1e4, "float32"), "masked"),
    ]
    graph = helper.make_graph(
        nodes, "decode_step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, WIDTH]),
         helper.make_tensor_value_info("past_k", TensorProto.FLOAT,
                                       [1, HEADS, "past_sequence", WIDTH // HEADS]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, [1, "total_sequence"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, HEADS, 1, WIDTH // HEADS])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


DECODE_SHAPES = {"x": (1, 1, WIDTH), "past_k": (1, HEADS, "past", WIDTH // HEADS),
                 "mask": (1, "past+1")}


def test_a_decode_step_over_a_cache_length_range():
    source = decode_step()
    model = th.load_model(source, input_shapes=DECODE_SHAPES, shape_ranges={"past": "1:1023:127"})
    assert model.inputs[2].shape == (1, "past+1")
    layers = th.extract_layers(model)
    compiled = th.build(model, th.Placement.all_on(layers, "cpu"), ["cpu"])
    session = ort.InferenceSession(source.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for past in (1, 2, 127, 500, 1023):
        feed = model.random_inputs(seed=past, dims={"past": past})
        assert feed["mask"].shape == (1, past + 1)
        feed["mask"] = np.ones_like(feed["mask"])
        feed["mask"][0, 0] = 0
        (got,) = compiled.run(feed)
        np.testing.assert_allclose(got, session.run(None, feed)[0], rtol=1e-4, atol=1e-5)
    feed = model.random_inputs(dims={"past": 5})
    feed["mask"] = np.ones((1, 5), "int64")  # past, not past + 1
    with pytest.raises(th.InputError, match="past"):
        compiled.run(feed)
    feed = model.random_inputs(dims={"past": 1024})
    with pytest.raises(th.InputError, match="outside the range"):
        compiled.run(feed)


@pytest.mark.parametrize("text, parts", [("seq", ("seq", 0)), ("past+1", ("past", 1)),
                                         ("n - 2", ("n", -2))])
def test_dimension_text(text, parts):
    from tvm_hetero.frontend.shape_ranges import dim_parts, dim_size

    assert dim_parts(text) == parts
    assert dim_size(text, {parts[0]: 10}) == 10 + parts[1]


def test_a_derived_dimension_needs_the_range_of_its_base():
    with pytest.raises(th.ModelError, match="range for past"):
        th.load_model(decode_step(), input_shapes={**DECODE_SHAPES, "past_k": (1, HEADS, 7, 8)},
                      shape_ranges={})


@pytest.mark.slow  # two CUDA builds, each kernel emulated at several lengths (about a minute)
@pytest.mark.parametrize("case", ["attention", "decode"])
def test_builds_for_cuda_and_its_kernels_are_right(case):
    """All on ``cuda@sm_90`` (no GPU needed): every kernel over the sequence (or the cache) is
    scheduled (the GPU rules of static rows decline it, dlight's take it) and, emulated on the
    CPU at several lengths, computes what the unscheduled kernel computes; a kernel with a
    ``past + 1`` buffer is fixed at a length through its ``past`` buffer."""
    from tvm_hetero.relax_ir import bounded_kernel
    from tvm_hetero.testing.gpu_emulation import check_gpu_schedule, cuda_build_kernels

    if case == "attention":
        model = th.load_model(exported_attention(), shape_ranges=RANGES)
        sizes = ({"seq": 1}, {"seq": 17}, {"seq": 40})
    else:
        model = th.load_model(decode_step(), input_shapes=DECODE_SHAPES,
                              shape_ranges={"past": "1:1023:127"})
        sizes = ({"past": 1}, {"past": 300})
    kernels = cuda_build_kernels(model)
    assert all(rule is not None for _, _, rule in kernels.values())
    for original, scheduled, _ in kernels.values():
        for dims in sizes:
            check_gpu_schedule(bounded_kernel(original, dims), bounded_kernel(scheduled, dims))
