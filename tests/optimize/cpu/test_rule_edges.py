"""The CPU rules at the edges of the shapes they accept.

- Regression tests: the graphs random-graph testing reduced wrong answers to, against
  onnxruntime (``reduction-chains`` over a non-last axis whose chunks of outputs straddle rows;
  ``parallel-loops`` on a matmul with an inner dimension of 1 and a bias; ``depthwise-rows`` on a
  prime row width and ``pixel-lanes-1x1`` on an epilogue of another shape, which raised).
- A catalogue of small graphs at every rule's edges (reduction axes with and without keepdims,
  extents of 1, odd and non-multiple extents, fan-out epilogues, strides, groups), each built
  with the rules and with TVM's default loops from the same prepared module, run three times:
  the rules' outputs must equal the default loops' (within float reassociation) and each other
  (a race changes them between runs); and every CPU rule of the default table must schedule
  some kernel of the catalogue, so that a rule losing its coverage fails here.
"""

import dataclasses
import numpy as np
import os
import pytest

import tvm_hetero as th
from tvm_hetero import optimize

# a race needs two threads, on a one-core machine too: TVM's pool reads this once, at its
# first parallel kernel (where unset, tvm_hetero sets it to the host's cores then)
if not any(name in os.environ for name in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")):
    os.environ["TVM_NUM_THREADS"] = str(max(2, os.cpu_count() or 1))

RUNS = 3


@pytest.fixture(scope="module")
def devices():
    return th.DeviceSet.parse(["cpu"])


# ---------------------------------------------------------------------------------------------
# graphs


def _graph(nodes, inputs: dict, outputs, inits: dict | None = None, seed: int = 0):
    """An opset-17 ONNX model: `inputs` ``{name: shape}`` (float32), `inits` ``{name: shape or
    array}`` (random float32 weights for shapes), `outputs` the names of its outputs (float32;
    an ``int64:`` prefix for an index output)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    initializers = []
    for name, value in (inits or {}).items():
        array = value if isinstance(value, np.ndarray) else \
            (rng.standard_normal(value) * 0.5).astype("float32")
        initializers.append(numpy_helper.from_array(array, name))
    graph = helper.make_graph(
        nodes, "edges",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n.split(":")[-1], TensorProto.INT64 if ":" in n
                                       else TensorProto.FLOAT, None) for n in outputs],
        initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _node(op, inputs, output, **attrs):
    from onnx import helper

    return helper.make_node(op, list(inputs), [output], **attrs)


def _feeds(model, seed: int = 1):
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal(shape).astype("float32")
    return feeds


def _runs(compiled, feeds, runs: int = RUNS):
    return [compiled.run(feeds) for _ in range(runs)]


def _assert_close(got, want, what, rtol=1e-4):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1.0)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=what)


def _assert_same_every_run(runs, what):
    for i, outputs in enumerate(runs[1:], 1):
        for j, (a, b) in enumerate(zip(runs[0], outputs)):
            assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True), \
                f"{what}: output {j} changed between runs 0 and {i} (a race)"


# ---------------------------------------------------------------------------------------------
# regression tests: the reduced graphs, against onnxruntime


def _check_against_onnxruntime(model, devices, device: str = "cpu"):
    """Build `model` all on `device` with the rules, run it `RUNS` times, compare each run
    with onnxruntime; returns the CompiledModel."""
    from tvm_hetero.testing import onnx_reference

    compiled = th.build(model, f"all:{device}", devices)
    feeds = _feeds(model)
    want = onnx_reference(model, feeds)
    runs = _runs(compiled, feeds)
    for outputs in runs:
        for got, expected in zip(outputs, want):
            _assert_close(got, expected, str(compiled.stats.rules), rtol=2e-5)
    _assert_same_every_run(runs, str(compiled.stats.rules))
    return compiled


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMean"])
def test_reduction_chains_over_a_middle_axis_whose_chunks_straddle_rows(op, devices):
    # 144 outputs in chunks of 8 over rows of 12: the chunks' rows overlapped, each task copied
    # whole rows of its accumulators out (59 % off onnxruntime, varying between runs)
    model = _graph([_node(op, ["x"], "y", axes=[-3], keepdims=1)], {"x": [1, 10, 12, 12]},
                   ["y"])
    compiled = _check_against_onnxruntime(model, devices)
    assert list(compiled.stats.rules.values()) == ["reduction-chains"], compiled.stats.rules


def test_reduction_chains_with_an_epilogue_over_straddling_chunks(devices):
    # a mean (sum, then a division) with a fan-out epilogue, 4 x 6 outputs: chunks of 8 over
    # rows of 6, the epilogue folded into the copy out of the accumulators
    model = _graph([_node("ReduceMean", ["x"], "m", axes=[1], keepdims=0),
                    _node("Add", ["m", "m"], "d"), _node("Mul", ["d", "m"], "y")],
                   {"x": [4, 7, 6]}, ["y"])
    compiled = _check_against_onnxruntime(model, devices)
    assert list(compiled.stats.rules.values()) == ["reduction-chains"], compiled.stats.rules


@pytest.mark.parametrize("case", ["gemm-transB", "gemm-transA-transB", "matmul-add"])
def test_a_matmul_with_an_inner_dimension_of_one_and_a_bias(case, devices):
    # the reduction of extent 1 lost its reduction iterator to normalize_prim_func but kept its
    # init; the bias add, inlined into both, was added twice (0.4-3.9 % off onnxruntime)
    if case == "gemm-transB":
        model = _graph([_node("Gemm", ["a", "b", "c"], "y", transB=1)], {"a": [2697, 1]},
                       ["y"], {"b": [15, 1], "c": [1]})
    elif case == "gemm-transA-transB":
        model = _graph([_node("Gemm", ["a", "b", "c"], "y", transA=1, transB=1)],
                       {"a": [1, 540]}, ["y"], {"b": [62, 1], "c": [62]})
    else:
        model = _graph([_node("MatMul", ["a", "b"], "m"), _node("Add", ["m", "c"], "y")],
                       {"a": [1, 988, 1]}, ["y"], {"b": [1, 68], "c": [68]})
    compiled = _check_against_onnxruntime(model, devices)
    assert "parallel-loops" in compiled.stats.rules.values(), compiled.stats.rules


def test_a_reduction_over_an_axis_of_one_with_an_epilogue(devices):
    # the same fault through a sum: a mean over an axis of extent 1, then an add (33489
    # outputs, not a multiple of 8: parallel-loops)
    model = _graph([_node("ReduceMean", ["x"], "m", axes=[1], keepdims=1),
                    _node("Add", ["m", "b"], "y")],
                   {"x": [1, 1, 183, 183]}, ["y"], {"b": [183]})
    _check_against_onnxruntime(model, devices)


def test_a_matrix_vector_product_over_the_input_rows_is_a_dot_product_per_row(devices):
    # a generated graph's MatMul [1, 16, 48, 68] x [68, 1] went to dlight's CPU GEMV rule, which
    # vectorizes 128 outputs over a gather with the reduction unrolled inside: LLVM never
    # finished compiling it (and took 23 s on a 1024 x 1024 product)
    model = _graph([_node("MatMul", ["x", "w"], "y")], {"x": [1, 16, 48, 68]}, ["y"],
                   {"w": [68, 1]})
    compiled = _check_against_onnxruntime(model, devices)
    # (the product's rows reshaped to 2-D and back: views at run time)
    assert {rule for kernel, rule in compiled.stats.rules.items()
            if not kernel.startswith("reshape")} == {"row-reductions"}, compiled.stats.rules


def test_a_unit_reduction_is_folded_for_every_rule():
    """What the rules are given: a reduction over one point written as the elementwise block
    it is (no init left for normalize_prim_func to keep on a block it calls spatial)."""
    import tvm
    from tvm import s_tir, te, topi

    from tvm_hetero.optimize.unit_reductions import fold_unit_reductions

    a = te.placeholder((5, 1), name="a")
    b = te.placeholder((3, 1), name="b")
    c = te.placeholder((3,), name="c")
    func = te.create_prim_func([a, b, c, topi.add(topi.matmul(a, b, transp_b=True), c)])
    folded = fold_unit_reductions(func)
    sch = s_tir.Schedule(folded)
    blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    assert all(blk.init is None for blk in blocks)
    assert all(iv.iter_type == tvm.tirx.IterVar.DataPar for blk in blocks
               for iv in blk.iter_vars)
    # a real reduction is left alone
    a, b = te.placeholder((5, 2), name="a"), te.placeholder((3, 2), name="b")
    func = te.create_prim_func([a, b, topi.matmul(a, b, transp_b=True)])
    assert fold_unit_reductions(func) is func


@pytest.mark.parametrize("mcpu", ["haswell", "skylake-avx512"])
def test_rules_that_raised_outside_the_suite_decline(mcpu):
    """depthwise-rows on a prime row width (a 1 x 1 tile: "not enough values to unpack") and
    pixel-lanes-1x1 under an epilogue broadcasting its output ("Could not parse mapping as sum
    of iterators") return None: the next rule of the table schedules the kernel."""
    import tvm
    from tvm import te, topi

    from tvm_hetero.optimize.cpu import PixelLanes1x1
    from tvm_hetero.optimize.cpu.depthwise_rows import DepthwiseRows

    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu})
    x, w = te.placeholder((1, 6, 39, 37), name="x"), te.placeholder((6, 1, 3, 3), name="w")
    y = topi.nn.group_conv2d_nchw(x, w, 1, 1, 1, 6)
    depthwise = te.create_prim_func([x, w, y]).with_attr("tvm_hetero.op_kinds", ["conv2d"])
    assert DepthwiseRows().apply(depthwise, target) is None
    x, w = te.placeholder((1, 6, 39, 32), name="x"), te.placeholder((6, 1, 3, 3), name="w")
    y = topi.nn.group_conv2d_nchw(x, w, 1, 1, 1, 6)  # (32 wide: still its own)
    depthwise = te.create_prim_func([x, w, y]).with_attr("tvm_hetero.op_kinds", ["conv2d"])
    assert DepthwiseRows().apply(depthwise, target) is not None

    x, w = te.placeholder((1, 8, 8, 1), name="x"), te.placeholder((16, 8, 1, 1), name="w")
    z = te.placeholder((1, 16, 8, 16), name="z")
    y = topi.add(topi.nn.conv2d_nchw(x, w, 1, 0, 1), z)
    conv = te.create_prim_func([x, w, z, y]).with_attr("tvm_hetero.op_kinds", ["conv2d", "add"])
    assert PixelLanes1x1().apply(conv, target) is None
    x, z = te.placeholder((1, 8, 8, 16), name="x"), te.placeholder((1, 16, 8, 16), name="z")
    y = topi.add(topi.nn.conv2d_nchw(x, w, 1, 0, 1), z)  # (a residual of its own shape)
    conv = te.create_prim_func([x, w, z, y]).with_attr("tvm_hetero.op_kinds", ["conv2d", "add"])
    assert PixelLanes1x1().apply(conv, target) is not None


@pytest.mark.parametrize("optimize_rules", [True, False])
def test_gpu_kernels_with_a_unit_reduction_and_a_bias_add_it_once(optimize_rules):
    """dlight's GPU Fallback inlined the bias into the init and the update of the unfolded
    block alike (no GPU needed: the scheduled TIR shows it)."""
    import tvm
    from tvm import te, topi

    from tvm_hetero.optimize.pass_ import schedule_passes

    devices = th.DeviceSet.parse(["cuda@sm_90"])
    target = devices.devices[0].tvm_target()
    a, b, c = (te.placeholder((2697, 1), name="a"), te.placeholder((15, 1), name="b"),
               te.placeholder((1,), name="c"))
    func = te.create_prim_func([a, b, c, topi.add(topi.matmul(a, b, transp_b=True), c)])
    func = func.with_attr({"target": target, "tvm_hetero.op_kinds": ["matmul", "add"]})
    with target:
        mod = tvm.transform.Sequential(schedule_passes(devices, optimize=optimize_rules))(
            tvm.IRModule({"main": func}))
    script = mod["main"].script()
    assert "T.init" not in script and script.count("c[0]") == 2, script  # reads + the sum


# ---------------------------------------------------------------------------------------------
# the catalogue: small graphs at the edges of every rule, rules against TVM's default loops


@dataclasses.dataclass
class Case:
    """One graph of the catalogue; `prepare` overrides fields of the device set's
    PrepareConfig (the blocked layout on a small model, ...)."""

    name: str
    model: object
    prepare: dict = dataclasses.field(default_factory=dict)


def _reductions():
    n = _node
    yield Case("reduce-middle-axes", _graph([
        n("ReduceMax", ["x"], "a", axes=[-3], keepdims=1),  # chunks of 8 straddle rows of 12
        n("ReduceMean", ["x"], "b", axes=[1], keepdims=0),
        n("ReduceSum", ["x", "axes"], "c", keepdims=1),  # 2 axes, one of them last
        n("ReduceMin", ["x"], "d", axes=[0, 2], keepdims=0),
    ], {"x": [2, 10, 12, 12]}, ["a", "b", "c", "d"], {"axes": np.array([1, 3], "int64")}))
    yield Case("reduce-last-and-all", _graph([
        n("ReduceMax", ["x"], "a", axes=[-1], keepdims=0),  # a row of 33 per output
        n("ReduceMean", ["x"], "b", axes=[0, 1], keepdims=0),  # everything: one output
        n("ReduceSum", ["x", "axes"], "c", keepdims=1),  # 33 outputs, not a multiple of 8
        n("ReduceSumSquare", ["x"], "d", axes=[-1], keepdims=1),
        n("ReduceL2", ["x"], "e", axes=[0], keepdims=0),
    ], {"x": [16, 33]}, ["a", "b", "c", "d", "e"], {"axes": np.array([0], "int64")}))
    yield Case("reduce-unit-axes", _graph([
        n("ReduceMean", ["x"], "m", axes=[1], keepdims=1),  # an axis of extent 1
        n("Add", ["m", "bias"], "a"),
        n("ReduceMax", ["x"], "b", axes=[1, 2], keepdims=0),
        n("ArgMax", ["x"], "c", axis=1, keepdims=1),  # a tuple reduction over one point
        n("ArgMin", ["x"], "d", axis=3, keepdims=0),
    ], {"x": [1, 1, 24, 24]}, ["a", "b", "int64:c", "int64:d"], {"bias": [24]}))
    yield Case("reduce-fan-out-epilogue", _graph([
        n("ReduceMean", ["x"], "m", axes=[2, 3], keepdims=1),  # 24 windows: chains
        n("Mul", ["m", "m"], "s"), n("Add", ["s", "m"], "a"),
        n("ReduceSum", ["x", "axes"], "t", keepdims=0),  # 5 x 7 outputs: straddling chunks
        n("Relu", ["t"], "u"), n("Sub", ["u", "t"], "b"),
        # an epilogue over the input's shape: rows of the reduction (7) are not the
        # epilogue's leading loops (5 x 7): dlight's reduction rule
        n("ReduceSum", ["y", "axes0"], "v", keepdims=1), n("Sub", ["y", "v"], "c"),
    ], {"x": [1, 24, 5, 7], "y": [5, 7]}, ["a", "b", "c"],
        {"axes": np.array([1], "int64"), "axes0": np.array([0], "int64")}))
    # epilogues over a larger domain than the reduction's (a pad's extra rows read no
    # output): generated graph 1955; the squares first, so the pads' rows are reused memory
    pads3 = np.array([0, 0, 0, 0, 1, 0], "int64")
    pads4 = np.array([0, 0, 0, 0, 0, 1, 0, 1], "int64")
    yield Case("reduce-then-pad", _graph([
        n("Mul", ["x", "x"], "sq"), n("Sigmoid", ["sq"], "big"),
        n("ReduceMean", ["big"], "m", axes=[3], keepdims=0), n("Pad", ["m", "p3"], "a"),
        n("ReduceMax", ["big"], "r", axes=[1], keepdims=1), n("Pad", ["r", "p4"], "b"),
        n("ReduceSum", ["big"], "t", axes=[3], keepdims=1), n("Pad", ["t", "p4"], "c"),
        n("Softmax", ["big"], "sm", axis=-1), n("Pad", ["sm", "p4"], "d"),
        n("GlobalAveragePool", ["big"], "g"), n("Pad", ["g", "p4"], "e"),
        n("LayerNormalization", ["big", "ln", "lb"], "l", axis=-1), n("Pad", ["l", "p4"], "f"),
    ], {"x": [1, 24, 4, 48]}, list("abcdef"),
        {"p3": pads3, "p4": pads4, "ln": [48], "lb": [48]}))


def _pools():
    n = _node
    yield Case("pools", _graph([
        n("MaxPool", ["x"], "a", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        n("AveragePool", ["x"], "b", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
          count_include_pad=0),
        n("GlobalAveragePool", ["x"], "c"),  # 16 windows of their own: chains
        n("GlobalMaxPool", ["x"], "d"),
        n("MaxPool", ["x"], "e", kernel_shape=[1, 1]),  # a window of one
        n("AveragePool", ["x"], "f", kernel_shape=[3, 1], pads=[1, 0, 1, 0],
          count_include_pad=1),
    ], {"x": [1, 16, 15, 15]}, ["a", "b", "c", "d", "e", "f"]))
    yield Case("pools-odd-channels", _graph([
        n("GlobalAveragePool", ["x"], "g"), n("Sigmoid", ["g"], "a"),  # 10: not chains
        n("MaxPool", ["x"], "p", kernel_shape=[2, 2], strides=[1, 1]),
        n("Mul", ["p", "p"], "b"),
    ], {"x": [2, 5, 9, 9]}, ["a", "b"]))


def _normalizations():
    n = _node
    yield Case("softmax-layernorm", _graph([
        n("Softmax", ["x"], "a", axis=-1),  # rows of 37
        n("Softmax", ["x"], "b", axis=0),  # over a non-last axis
        n("LayerNormalization", ["x", "g", "be"], "c", axis=-1, epsilon=1e-5),
        n("LogSoftmax", ["x"], "d", axis=1),
    ], {"x": [6, 37]}, ["a", "b", "c", "d"], {"g": [37], "be": [37]}))
    yield Case("norm-unit-rows", _graph([
        n("Softmax", ["x"], "a", axis=-1),  # rows of 1
        n("LayerNormalization", ["x", "g"], "b", axis=-1, epsilon=1e-5),
    ], {"x": [9, 1]}, ["a", "b"], {"g": [1]}))
    yield Case("softmax-3d", _graph([
        n("Softmax", ["x"], "s", axis=-1), n("Mul", ["s", "x"], "a"),  # fan-out
    ], {"x": [2, 16, 40]}, ["a"]))


def _matmuls():
    n = _node
    yield Case("matmul-inner-1", _graph([
        n("Gemm", ["a", "w1", "b1"], "p", transB=1),  # [2400, 1] x [15, 1]^T + [1]
        n("MatMul", ["a", "w2"], "q"), n("Add", ["q", "b2"], "r"),  # [2400, 1] x [1, 68]
        n("MatMul", ["a", "w2"], "s"),  # no bias
    ], {"a": [2400, 1]}, ["p", "r", "s"], {"w1": [15, 1], "b1": [1], "w2": [1, 68],
                                           "b2": [68]}))
    yield Case("matmul-odd", _graph([
        n("MatMul", ["x", "w1"], "m"), n("Add", ["m", "b1"], "mb"), n("Relu", ["mb"], "a"),
        n("MatMul", ["x", "w2"], "b"),  # [K, N] weight, N whole vectors: packed
        n("Gemm", ["v", "w3"], "c", transB=1),  # [output, reduction] weight, one row: GEMV
        n("MatMul", ["x3", "y3"], "d"),  # a batch of products, odd extents
        n("Gemm", ["v", "u"], "e", transB=1),  # an [output, reduction] input: rows
    ], {"x": [5, 17], "v": [1, 64], "x3": [2, 7, 13], "y3": [2, 13, 9], "u": [48, 64]},
        ["a", "b", "c", "d", "e"],
        {"w1": [17, 19], "b1": [19], "w2": [17, 32], "w3": [48, 64]}))
    yield Case("gemv-large", _graph([
        n("MatMul", ["v", "w"], "m"), n("Add", ["m", "b"], "a"),  # 1M weights: split-k
    ], {"v": [1, 1024]}, ["a"], {"w": [1024, 1030], "b": [1030]}))


def _convs():
    n = _node
    yield Case("conv-direct", _graph([
        n("Conv", ["x", "w1", "b1"], "c1", pads=[1, 1, 1, 1], strides=[2, 2]),  # strided
        n("Relu", ["c1"], "a"),
        n("Conv", ["x", "w2"], "c2"), n("Sigmoid", ["c2"], "s2"),
        n("Mul", ["c2", "s2"], "b"),  # 1x1 with a fan-out epilogue (SiLU)
        n("Conv", ["x", "w3"], "c", pads=[0, 1, 0, 1], dilations=[1, 2]),  # 1x3 dilated
        n("Conv", ["x", "w4", "b4"], "d", group=2, pads=[1, 1, 1, 1]),  # grouped 3x3
    ], {"x": [1, 8, 13, 13]}, ["a", "b", "c", "d"],
        {"w1": [16, 8, 3, 3], "b1": [16], "w2": [16, 8, 1, 1], "w3": [5, 8, 1, 3],
         "w4": [6, 4, 3, 3], "b4": [6]}))
    yield Case("conv-unit-extents", _graph([
        n("Conv", ["g", "w1", "b1"], "a"),  # 1x1 of one input channel: a reduction of one
        n("Conv", ["g", "w2"], "b", pads=[1, 1, 1, 1]),  # 3x3 of one input channel
        n("Conv", ["h", "w3"], "c"),  # a 1x1 map
        # 1x1 over 64 pixels, a residual and a fan-out: lanes along the pixels
        n("Conv", ["p", "w4", "b4"], "c4"), n("Add", ["c4", "p"], "s4"),
        n("Sigmoid", ["s4"], "g4"), n("Mul", ["s4", "g4"], "d"),
        # 1x1 whose output an add broadcasts over more columns: pixel-lanes-1x1 raised
        n("Conv", ["q", "w5"], "c5"), n("Add", ["c5", "z"], "e"),
    ], {"g": [1, 1, 8, 8], "h": [1, 8, 1, 1], "p": [1, 8, 8, 8], "q": [1, 8, 8, 1],
        "z": [1, 16, 8, 16]}, ["a", "b", "c", "d", "e"],
        {"w1": [8, 1, 1, 1], "b1": [8], "w2": [3, 1, 3, 3], "w3": [16, 8, 1, 1],
         "w4": [8, 8, 1, 1], "b4": [8], "w5": [16, 8, 1, 1]}))
    yield Case("depthwise", _graph([
        n("Conv", ["x", "w1", "b1"], "c1", group=6, pads=[1, 1, 1, 1]),  # rows of 30
        n("Clip", ["c1", "lo", "hi"], "a"),
        n("Conv", ["x", "w1"], "b", group=6, pads=[1, 1, 1, 1], strides=[2, 2]),
        # rows of 37 (prime): no tile of half a vector, which raised in depthwise-rows
        n("Conv", ["y", "w2"], "c", group=6, pads=[1, 1, 1, 1]),
        # stride 2 onto rows of 30: strided-depthwise-rows; of 31 from 61 columns (63 padded,
        # odd: no even/odd split), declined
        n("Conv", ["z", "w1"], "d", group=6, pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Conv", ["u", "w1"], "e", group=6, pads=[1, 1, 1, 1], strides=[2, 2]),
    ], {"x": [1, 6, 30, 30], "y": [1, 6, 37, 37], "z": [1, 6, 60, 60], "u": [1, 6, 61, 61]},
        ["a", "b", "c", "d", "e"],
        {"w1": [6, 1, 3, 3], "b1": [6], "w2": [6, 1, 3, 3],
         "lo": np.array(0, "float32"), "hi": np.array(6, "float32")}))
    yield Case("squeeze-excite", _graph([
        n("GlobalAveragePool", ["x"], "p"),
        n("Conv", ["p", "w1", "b1"], "q"), n("Relu", ["q"], "r"),  # 1x1 maps: row-reductions
        n("Conv", ["r", "w2", "b2"], "s"), n("Sigmoid", ["s"], "t"),
        n("Mul", ["x", "t"], "a"),
    ], {"x": [1, 16, 6, 6]}, ["a"], {"w1": [4, 16, 1, 1], "b1": [4], "w2": [16, 4, 1, 1],
                                     "b2": [16]}))
    yield Case("grouped-1x1", _graph([
        n("Conv", ["x", "w", "b"], "c", group=2), n("Relu", ["c"], "a"),
    ], {"x": [1, 16, 10, 10]}, ["a"], {"w": [32, 8, 1, 1], "b": [32]}))


def _blocked():
    """A small model in the blocked layout (preparation's threshold lowered): Winograd, the
    blocked convolutions, depthwise and the layout transforms in and out."""
    n = _node
    yield Case("blocked", _graph([
        n("Conv", ["x", "w1", "b1"], "c1", pads=[1, 1, 1, 1]), n("Relu", ["c1"], "r1"),
        n("Conv", ["r1", "w2"], "c2", pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Conv", ["c2", "w3"], "c3", group=16, pads=[1, 1, 1, 1]),
        n("Add", ["c3", "c2"], "a"),
        n("MaxPool", ["r1"], "b", kernel_shape=[2, 2], strides=[2, 2]),
    ], {"x": [1, 16, 16, 16]}, ["a", "b"],
        {"w1": [16, 16, 3, 3], "b1": [16], "w2": [16, 16, 3, 3], "w3": [16, 1, 3, 3]}),
        {"blocked_min_model_flops": 0})


def _elementwise():
    n = _node
    yield Case("elementwise", _graph([
        n("Concat", ["x", "y", "x"], "a", axis=1),  # odd channel counts
        n("Transpose", ["x"], "b", perm=[0, 2, 3, 1]),
        n("Add", ["x", "v"], "s"), n("Tanh", ["s"], "c"),  # broadcast along the last axis
        n("Gather", ["x", "idx"], "d", axis=2),
        n("Where", ["cond", "x", "y3"], "e"),
        n("Resize", ["x", "", "scales"], "f", mode="nearest"),
    ], {"x": [1, 3, 5, 7], "y": [1, 2, 5, 7], "y3": [1, 3, 5, 7]}, ["a", "b", "c", "d", "e",
                                                                    "f"],
        {"v": [7], "idx": np.array([4, 0, 2], "int64"),
         "cond": np.array([True, False, True, False, False, True, True]),
         "scales": np.array([1, 1, 2, 2], "float32")}))
    yield Case("cumsum", _graph([  # scan-lines: lines along the last axis and across it
        n("CumSum", ["x", "last"], "a"),
        n("CumSum", ["x", "first"], "b", exclusive=1, reverse=1),
    ], {"x": [3, 5, 40]}, ["a", "b"],
        {"last": np.array(-1, "int64"), "first": np.array(0, "int64")}))
    yield Case("resize-linear", _graph([  # separable-resize: a task a map, and a row each
        n("Resize", ["x", "", "scales"], "a", mode="linear"),
        n("Resize", ["y", "", "scales"], "b", mode="linear",
          coordinate_transformation_mode="align_corners"),
    ], {"x": [1, 6, 5, 7], "y": [1, 2, 4, 4]}, ["a", "b"],
        {"scales": np.array([1, 1, 2, 3], "float32")}))
    yield Case("elementwise-large", _graph([
        n("Concat", ["x", "y"], "a", axis=1),
        n("Mul", ["x", "x"], "m"), n("Sigmoid", ["m"], "b"),
        n("Transpose", ["y"], "c", perm=[0, 1, 3, 2]),
    ], {"x": [1, 24, 33, 33], "y": [1, 40, 33, 33]}, ["a", "b", "c"]))


def catalogue():
    """Every case of the catalogue, in a fixed order."""
    cases = []
    for part in (_reductions, _pools, _normalizations, _matmuls, _convs, _blocked,
                 _elementwise):
        cases.extend(part())
    return cases


def _kernels():
    """TE kernels as fused layers (``op_kinds`` set): the forms the ONNX frontend's fusion
    does not make but rules of the table serve (dlight's CPU rules) or must decline."""
    from tvm import te, topi

    def kernel(kinds, *tensors):
        return te.create_prim_func(list(tensors)).with_attr("tvm_hetero.op_kinds", kinds)

    n = te.var("n", dtype="int64")
    x = te.placeholder((4, n, n), name="x")
    # a softmax over rows of a symbolic length and count (attention over a shape range)
    yield "softmax-symbolic-rows", kernel(["softmax"], x, topi.nn.softmax(x, axis=-1))
    x, w, b = (te.placeholder((1, 64), name="x"), te.placeholder((48, 64), name="w"),
               te.placeholder((48,), name="b"))
    y = topi.add(topi.matmul(x, w, transp_b=True), b)
    # an [output, reduction] weight, a bias and a fan-out epilogue: a dot product per row
    yield "gemv-output-reduction", kernel(["matmul", "add", "multiply"], x, w, b,
                                          topi.multiply(y, topi.sigmoid(y)))
    x = te.placeholder((5, 7), name="x")
    # the reduction's rows (7 columns) are not the epilogue's leading loops: dlight's reduction
    yield "column-centred", kernel(["sum", "subtract"], x,
                                   topi.subtract(x, topi.sum(x, axis=0, keepdims=True)))
    x = te.placeholder((4, 40, 6), name="x")
    m = topi.divide(topi.sum(x, axis=1), 40.0)
    # chains of 8 outputs over rows of 6, a fan-out epilogue
    yield "mean-straddling-rows", kernel(["mean", "multiply", "add"], x,
                                         topi.add(topi.multiply(m, m), m))
    x = te.placeholder((2, 4, 6, 2), name="x")
    # chains of 8 over rows of 2 (each chunk whole rows: 4 of them), max over axis 2
    yield "max-whole-row-chunks", kernel(["max"], x, topi.max(x, axis=2, keepdims=True))
    x = te.placeholder((4, 40, 6), name="x")
    m = topi.divide(topi.sum(x, axis=1, keepdims=True), 40.0)
    # straddling chains, an epilogue broadcasting the mean back over the input: declined
    yield "mean-broadcast-back", kernel(["mean", "multiply"], x, topi.multiply(x, m))
    x = te.placeholder((1, 16, 5, 5), name="x")
    m = topi.divide(topi.sum(x, axis=(2, 3), keepdims=True), 25.0)
    # a global pool's chains (whole channels per task) and the same broadcast epilogue
    yield "pool-broadcast-back", kernel(["mean", "multiply"], x, topi.multiply(x, m))
    a, c = te.placeholder((1024, 1), name="a"), te.placeholder((1, 48), name="c")
    bias = te.placeholder((48,), name="bias")
    # a reduction of one point, a bias: every rule is given it folded
    yield "matmul-inner-1", kernel(["matmul", "add"], a, c, bias,
                                   topi.add(topi.matmul(a, c), bias))


def _check_kernel(name, func, target):
    """`func` scheduled by the table (``optimize_function``) against TVM's default loops on the
    same random arguments, run `RUNS` times; returns the rule."""
    import tvm

    from tvm_hetero.optimize.pass_ import optimize_function

    func = func.with_attr("target", target)
    scheduled, rule = optimize_function(func, target, name)
    rng = np.random.default_rng(0)
    # a symbolic dimension (a shape range's) at 13: a vector and a tail
    args = [rng.standard_normal([int(d) if isinstance(d, tvm.tirx.IntImm) else 13
                                 for d in p.ty.shape]).astype(str(p.ty.dtype))
            for p in func.params]

    def run(f, times):
        lib = tvm.tirx.build(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}),
                             target=target)
        outs = []
        for _ in range(times):
            tensors = [tvm.runtime.tensor(a.copy()) for a in args[:-1]] + \
                [tvm.runtime.tensor(np.full_like(args[-1], np.nan))]
            lib["main"](*tensors)
            outs.append([tensors[-1].numpy()])
        return outs

    want = run(func, 1)[0][0]
    runs = run(scheduled, RUNS)
    for outputs in runs:
        _assert_close(outputs[0], want, f"{name} ({rule})")
    _assert_same_every_run(runs, f"{name} ({rule})")
    return rule


_RESULTS: dict = {}


def _catalogue_rules(case: Case, devices) -> dict:
    """Build `case` from one prepared module with the rules and with TVM's default loops, run
    both on the same random inputs (the rules' build `RUNS` times), assert they agree; returns
    ``{kernel: rule}`` (cached per case)."""
    device = devices.devices[0].name
    if (case.name, device) in _RESULTS:
        return _RESULTS[case.name, device]
    model = th.load_model(case.model, name=case.name)
    config = th.PrepareConfig.for_devices(devices, **case.prepare)
    model = dataclasses.replace(model, mod=th.prepare(model.mod, config), onnx_model=None,
                                _fingerprint=None, _layered=None)
    ruled = th.build(model, f"all:{device}", devices)
    plain = th.build(model, f"all:{device}", devices, optimize=False)
    feeds = _feeds(case.model)
    want = plain.run(feeds)
    runs = _runs(ruled, feeds)
    names = [v.name for v in case.model.graph.output]
    for outputs in runs:
        for name, got, expected in zip(names, outputs, want):
            _assert_close(got, expected, f"{case.name} output {name}: {ruled.stats.rules}")
    _assert_same_every_run(runs, f"{case.name}: {ruled.stats.rules}")
    _RESULTS[case.name, device] = dict(ruled.stats.rules)
    return _RESULTS[case.name, device]


_KERNEL_RESULTS: dict = {}


def _kernel_rule(name, func, devices) -> str | None:
    device = devices.devices[0]
    if (name, device.name) not in _KERNEL_RESULTS:
        _KERNEL_RESULTS[name, device.name] = _check_kernel(name, func, device.tvm_target())
    return _KERNEL_RESULTS[name, device.name]


@pytest.mark.parametrize("case", catalogue(), ids=lambda case: case.name)
def test_the_rules_compute_what_tvms_loops_compute_at_their_edges(case, devices):
    _catalogue_rules(case, devices)  # (some edges are declined by every rule: that is right)


@pytest.mark.parametrize("name, func", list(_kernels()), ids=[n for n, _ in _kernels()])
def test_the_rules_compute_what_tvms_loops_compute_on_edge_kernels(name, func, devices):
    assert _kernel_rule(name, func, devices) is not None


def test_every_cpu_rule_of_the_table_is_exercised_by_the_catalogue(devices):
    """A rule that no longer schedules any kernel of the catalogue fails here: give it an
    edge case of its own (or take it out of the table)."""
    used = set()
    for case in catalogue():
        used |= {rule for rule in _catalogue_rules(case, devices).values() if rule}
    for name, func in _kernels():
        used.add(_kernel_rule(name, func, devices))
    table = {rule.name for (family, _), rules in optimize.default_table().items()
             if family == "cpu" for rule in rules}
    assert table - used == set(), f"rules no catalogue case reaches: {sorted(table - used)}"


# ---------------------------------------------------------------------------------------------
# the larger sweep (``-m slow``): the same check over a grid of edge shapes


def _sweep():
    """Graphs over a grid of edge shapes, several independent branches (kernels) each."""
    import itertools

    n = _node
    for shape in ([2, 3, 5, 8], [1, 10, 12, 12], [4, 40, 6], [16, 33], [1, 1, 7, 9]):
        rank = len(shape)
        nodes, outs, inits = [], [], {}
        subsets = [list(c) for r in (1, 2) for c in itertools.combinations(range(rank), r)]
        for i, (axes, keep, op) in enumerate(itertools.product(
                subsets, (0, 1), ("ReduceMax", "ReduceMean", "ReduceSum"))):
            if op == "ReduceSum":
                inits[f"ax{i}"] = np.array(axes, "int64")
                nodes.append(n(op, ["x", f"ax{i}"], f"r{i}", keepdims=keep))
            else:
                nodes.append(n(op, ["x"], f"r{i}", axes=axes, keepdims=keep))
            if i % 3 == 0:  # a fan-out epilogue
                nodes.append(n("Mul", [f"r{i}", f"r{i}"], f"s{i}"))
                nodes.append(n("Add", [f"s{i}", f"r{i}"], f"o{i}"))
                outs.append(f"o{i}")
            else:
                outs.append(f"r{i}")
        yield Case(f"sweep-reduce-{'x'.join(map(str, shape))}",
                   _graph(nodes, {"x": shape}, outs, inits))
    for size in (7, 8, 13):
        nodes, outs = [], []
        for i, (k, s, p, ceil) in enumerate(itertools.product((1, 2, 3), (1, 2), (0, 1),
                                                              (0, 1))):
            if p >= k:
                continue
            for op in ("MaxPool", "AveragePool"):
                name = f"{op}{i}"
                nodes.append(n(op, ["x"], name, kernel_shape=[k, k], strides=[s, s],
                               pads=[p] * 4, ceil_mode=ceil))
                outs.append(name)
        yield Case(f"sweep-pools-{size}", _graph(nodes, {"x": [1, 9, size, size]}, outs))
    for m, k in itertools.product((1, 5, 2400), (1, 2, 17, 64)):
        nodes, outs, inits = [], [], {}
        for nn in (1, 7, 16, 33):
            inits[f"w{nn}"], inits[f"b{nn}"] = [k, nn], [nn]
            nodes += [n("MatMul", ["a", f"w{nn}"], f"m{nn}"),
                      n("Add", [f"m{nn}", f"b{nn}"], f"y{nn}")]
            outs.append(f"y{nn}")
        yield Case(f"sweep-matmul-{m}x{k}", _graph(nodes, {"a": [m, k]}, outs, inits))
    for size, cin in itertools.product((7, 8, 29, 37), (1, 3, 8, 16)):
        nodes, outs, inits = [], [], {}
        for i, (cout, kernel, stride, groups) in enumerate(itertools.product(
                (1, 8, 15, 16), (1, 3), (1, 2), (1, 2, cin))):
            if cin % groups or cout % groups or (groups == cin and cout != cin):
                continue
            name = f"c{i}"
            inits[f"w{i}"], inits[f"b{i}"] = [cout, cin // groups, kernel, kernel], [cout]
            nodes.append(n("Conv", ["x", f"w{i}", f"b{i}"], name, group=groups,
                           strides=[stride] * 2, pads=[kernel // 2] * 4))
            if i % 2:  # SiLU: a fan-out epilogue
                nodes += [n("Sigmoid", [name], f"g{i}"), n("Mul", [name, f"g{i}"], f"o{i}")]
                name = f"o{i}"
            outs.append(name)
        if outs:
            yield Case(f"sweep-conv-{size}-{cin}", _graph(nodes, {"x": [1, cin, size, size]},
                                                          outs, inits))


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", "cpu-generic"])
@pytest.mark.parametrize("case", list(_sweep()), ids=lambda case: case.name)
def test_the_rules_compute_what_tvms_loops_compute_over_a_sweep_of_edges(case, device):
    # the host's vector width and SSE2's (4 lanes): the rules' tiles and preconditions differ
    _catalogue_rules(case, th.DeviceSet.parse([device]))


@pytest.mark.parametrize("device", ["cpu", "cpu-generic"])
@pytest.mark.parametrize("shape, axis, where", [
    ([40, 32], -2, False), ([40, 32], -2, True), ([3, 100], 0, False), ([2, 48], -2, False),
    ([85, 16], -2, False)], ids=["40x32-axis-2", "40x32-axis-2-where", "3x100-axis0",
                                 "2x48-axis-2", "85x16-axis-2"])
def test_a_layer_norm_over_every_axis_is_one_row_of_row_reductions(shape, axis, where, device):
    # generated graphs (random_graph(83): LayerNormalization axis=-2 of a [40, 32] input) whose
    # layer norm reduces every axis: its mean is a block of no loop (a 0-d buffer), and
    # row-reductions' rfactor raised "Check failed: block_realize == old_block_realize_.get()"
    # (85 x 16 only where the vectors are narrower than 16 lanes: the host's AVX-512 does not
    # split a row of 16)
    n = len(shape)
    nodes = [_node("LayerNormalization", ["x", "s", "b"], "y", axis=axis, epsilon=1e-5)]
    inits = {"s": shape[axis % n:], "b": shape[axis % n:]}
    if where:  # the kernel fused_layer_norm_less_equal_where of random_graph(83)
        inits["t"] = np.array(0.25, "float32")
        nodes += [_node("LessOrEqual", ["x", "t"], "c"), _node("Where", ["c", "y", "x"], "o")]
    model = _graph(nodes, {"x": shape}, ["o" if where else "y"], inits)
    compiled = _check_against_onnxruntime(model, th.DeviceSet.parse([device]), device)
    norms = {k: r for k, r in compiled.stats.rules.items() if "layer_norm" in k}
    assert norms and set(norms.values()) == {"row-reductions"}, compiled.stats.rules


@pytest.mark.parametrize("device", ["cpu", "cpu-generic"])
@pytest.mark.parametrize("activation", ["Sigmoid", "Exp", "Tanh"])
def test_fast_math_over_a_boolean_cast_builds(activation, device):
    # generated graph 1126, reduced: Less -> Cast -> Sigmoid; the fast approximations bind the
    # vectorized Cast(float32x16, bool) in a Let, and TVM's LowerIntrin failed on it ("IntImm
    # can only take scalar, but boolx16 was supplied")
    nodes = [_node("Less", ["x", "t"], "c"), _node("Cast", ["c"], "f", to=1),
             _node(activation, ["f"], "y")]
    model = _graph(nodes, {"x": [2, 13, 12, 16]}, ["y"], {"t": np.array(0.0, "float32")})
    compiled = _check_against_onnxruntime(model, th.DeviceSet.parse([device]), device)
    assert "injective-lanes" in compiled.stats.rules.values(), compiled.stats.rules


@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduction_chains_with_a_pad_after_runs_the_pad_whole(keepdims, devices):
    # generated graph 1955, reduced: ReduceMean over the last axis, then Pad: the pad's extra
    # row reads no output of any task, and computed per task it was never written (whatever
    # the memory held: a 14 % error there, 0 in a fresh process)
    pads = [0, 0, 0, 0, 0, 1, 0, 0] if keepdims else [0, 0, 0, 0, 1, 0]
    nodes = [_node("Mul", ["x", "x"], "sq"), _node("Sigmoid", ["sq"], "big"),
             _node("ReduceMean", ["big"], "m", axes=[3], keepdims=keepdims),
             _node("Pad", ["m", "p"], "y", mode="constant")]
    model = _graph(nodes, {"x": [1, 24, 1, 48]}, ["y"], {"p": np.array(pads, "int64")})
    compiled = _check_against_onnxruntime(model, devices)
    assert "reduction-chains" in compiled.stats.rules.values(), compiled.stats.rules
