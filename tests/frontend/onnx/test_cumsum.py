"""CumSum (RoBERTa's and MPNet's position ids) through the tool's path: every attribute against
onnxruntime, the scan kernel scheduled by ``scan-lines`` on the CPU (and by dlight's fallback on
a GPU, emulated), ``relax.cumsum``/``relax.cumprod`` of a Relax module legalized as well."""

import itertools

import numpy as np
import pytest
import tvm

import tvm_hetero as th
from tvm_hetero.testing import onnx_reference, random_placement

SHAPE = (2, 3, 4)
NUMPY = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "int64": np.int64}


def _onnx_type(dtype: str):
    from onnx import TensorProto

    return {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
            "int32": TensorProto.INT32, "int64": TensorProto.INT64}[dtype]


def _cumsum_model(dtype, axes, axis_dtype="int64", axis_shape=(), run_time_axis=False,
                  shape=SHAPE):
    """One CumSum per (axis, exclusive, reverse) of `axes` x {0, 1} x {0, 1}, each its own
    output; the axis a constant of `axis_dtype` and `axis_shape`, or one graph input."""
    from onnx import helper

    vi = helper.make_tensor_value_info
    nodes, outputs, inits = [], [], []
    inputs = [vi("x", _onnx_type(dtype), list(shape))]
    if run_time_axis:
        inputs.append(vi("axis", _onnx_type(axis_dtype), list(axis_shape)))
    for axis, exclusive, reverse in itertools.product(axes, (0, 1), (0, 1)):
        name = f"a{axis}_e{exclusive}_r{reverse}".replace("-", "m")
        axis_name = "axis"
        if not run_time_axis:
            axis_name = f"axis_{name}"
            inits.append(helper.make_tensor(axis_name, _onnx_type(axis_dtype), list(axis_shape),
                                            [axis]))
        nodes.append(helper.make_node("CumSum", ["x", axis_name], [name], exclusive=exclusive,
                                      reverse=reverse))
        outputs.append(vi(name, _onnx_type(dtype), list(shape)))
    graph = helper.make_graph(nodes, "cumsum", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _data(dtype, shape=SHAPE, seed=0):
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return rng.integers(-50, 50, size=shape).astype(NUMPY[dtype])
    return rng.standard_normal(shape).astype(NUMPY[dtype])


def _assert_matches(got, want, names):
    assert len(got) == len(want)
    for name, a, b in zip(names, got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if a.dtype.kind in "iu":
            np.testing.assert_array_equal(a, b, err_msg=name)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=name)


def _all_on(model, device):
    return th.Placement({layer.name: device for layer in th.extract_layers(model)})


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("axis_dtype, axis_shape", [("int64", ()), ("int32", (1,))])
def test_cumsum_with_a_constant_axis_matches_onnxruntime(dtype, axis_dtype, axis_shape):
    proto = _cumsum_model(dtype, range(-3, 3), axis_dtype, axis_shape)
    model = th.load_model(proto)
    compiled = th.build(model, _all_on(model, "cpu"), ["cpu"])
    x = _data(dtype)
    got = compiled.run({model.inputs[0].name: x})
    _assert_matches(got, onnx_reference(proto, {"x": x}), [o.name for o in proto.graph.output])
    # a scan layer per node (the kernels of equal scans shared), each kernel scheduled by
    # scan-lines; no kernel left to TVM's default loops
    layers = th.extract_layers(model)
    assert sum(layer.op_kinds == ["cumsum"] for layer in layers) == 24
    rules = compiled.stats.rules
    assert {rules[k] for k in rules if k.startswith("cumsum")} == {"scan-lines"}, rules
    assert None not in rules.values(), rules


@pytest.mark.parametrize("dtype, axis_dtype", [("float32", "int64"), ("int64", "int32")])
@pytest.mark.parametrize("axis_shape", [(), (1,)])
def test_cumsum_with_a_run_time_axis_matches_onnxruntime(dtype, axis_dtype, axis_shape):
    proto = _cumsum_model(dtype, [0], axis_dtype, axis_shape, run_time_axis=True)
    model = th.load_model(proto)
    compiled = th.build(model, _all_on(model, "cpu"), ["cpu"])
    names = {spec.source_name: spec.name for spec in model.inputs}
    x = _data(dtype)
    for axis in range(-3, 3):
        feeds = {"x": x, "axis": np.full(axis_shape, axis, NUMPY[axis_dtype])}
        got = compiled.run({names[k]: v for k, v in feeds.items()})
        _assert_matches(got, onnx_reference(proto, feeds),
                        [f"axis {axis}: {o.name}" for o in proto.graph.output])
    with pytest.raises(th.InputError, match="out-of-range index.*CumSum"):
        compiled.run({names["x"]: x, names["axis"]: np.full(axis_shape, 3, NUMPY[axis_dtype])})


def _position_ids_model(batch=2, seq=16, padding_idx=1):
    """RoBERTa's position ids (transformers' ``create_position_ids_from_input_ids``):
    ``cumsum(ids != pad, axis=1) * (ids != pad) + pad``, as the TorchScript exporter writes
    it (int32 mask and CumSum, int64 result)."""
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Equal", ["ids", "pad"], ["is_pad"]),
             helper.make_node("Not", ["is_pad"], ["not_pad"]),
             helper.make_node("Cast", ["not_pad"], ["mask"], to=TensorProto.INT32),
             helper.make_node("CumSum", ["mask", "axis"], ["counts"]),
             helper.make_node("Mul", ["counts", "mask"], ["incremental"]),
             helper.make_node("Cast", ["incremental"], ["incremental_64"], to=TensorProto.INT64),
             helper.make_node("Add", ["incremental_64", "pad"], ["position_ids"])]
    inits = [helper.make_tensor("pad", TensorProto.INT64, [], [padding_idx]),
             helper.make_tensor("axis", TensorProto.INT32, [], [1])]
    graph = helper.make_graph(nodes, "position_ids",
                              [vi("ids", TensorProto.INT64, [batch, seq])],
                              [vi("position_ids", TensorProto.INT64, [batch, seq])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("seed", range(3))
def test_roberta_position_ids_run_across_two_devices(seed):
    proto = _position_ids_model()
    model = th.load_model(proto)
    layers = th.extract_layers(model)
    assert [layer.op_kinds for layer in layers if "cumsum" in layer.op_kinds] == [["cumsum"]]
    devices = ["cpu", "cpu-generic"]
    placement = random_placement(layers, devices, np.random.default_rng(seed))
    compiled = th.build(model, placement, devices)
    ids = np.random.default_rng(seed).integers(0, 6, size=(2, 16)).astype(np.int64)
    ids[:, -3:] = 1  # right padding, as tokenizers pad
    (got,) = compiled.run({model.inputs[0].name: ids})
    np.testing.assert_array_equal(got, onnx_reference(proto, {"ids": ids})[0])
    assert "scan-lines" in compiled.stats.rules.values()


def test_no_kernel_of_a_cumsum_model_keeps_tvms_default_loops():
    # the CPU census: every kernel of the layered module scheduled by a rule of the table
    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize.pass_ import optimize_function

    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    for proto in (_position_ids_model(), _cumsum_model("float32", [-1, 0], shape=(8, 64, 48))):
        mod = layered_module(th.load_model(proto))
        rules = {}
        for gv, func in mod.functions_items():
            if isinstance(func, tvm.tirx.PrimFunc):
                _, rules[gv.name_hint] = optimize_function(func.with_attr("target", target),
                                                           target, gv.name_hint)
        assert None not in rules.values(), rules
        assert {r for k, r in rules.items() if k.startswith("cumsum")} == {"scan-lines"}


def _run_kernel(func, target, x):
    lib = tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                         target=target)
    out = tvm.runtime.tensor(np.zeros(x.shape, x.dtype))
    lib["main"](tvm.runtime.tensor(x), out)
    return out.numpy()


@pytest.mark.parametrize("shape, axis, vectorized, parallel", [
    ((64, 128, 256), 1, True, True),   # lines along the last axis in vectors, outer parallel
    ((2, 10, 36), 1, True, False),     # 36 lines in one vector loop; too small for the pool
    ((30, 50, 67), 1, False, True),    # 67 lines, prime, over 4 vectors: scalar, parallel
    ((512, 300), 1, False, True),      # along the last axis: one line per row, parallel
    ((1, 16), -1, False, False),       # one line: a serial loop
    ((7,), 0, False, False),
])
@pytest.mark.parametrize("exclusive, reverse", [(False, False), (True, True)])
def test_scan_lines_schedules_a_scan_as_lines(shape, axis, vectorized, parallel, exclusive,
                                              reverse):
    from tvm_hetero.ops.scan import scan_func
    from tvm_hetero.optimize.pass_ import optimize_function

    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    func = scan_func(shape, axis, "float32", "float32", "cumsum", exclusive, reverse)
    func = func.with_attr("tvm_hetero.op_kinds", ["cumsum"]).with_attr("target", target)
    scheduled, rule = optimize_function(func, target)
    assert rule == "scan-lines"
    script = scheduled.script()
    assert ("T.vectorized" in script) == vectorized and ("T.parallel" in script) == parallel
    x = _data("float32", shape)
    np.testing.assert_array_equal(_run_kernel(scheduled, target, x),
                                  _run_kernel(func, target, x))


def test_a_scan_on_a_gpu_is_scheduled_by_dlights_fallback():
    from tvm_hetero.ops.scan import scan_func
    from tvm_hetero.optimize.pass_ import optimize_function
    from tvm_hetero.testing.gpu_emulation import check_gpu_schedule

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm"})
    for shape, axis in [((7,), 0), ((2, 16), 1), ((4, 9, 33), 1)]:
        func = scan_func(shape, axis, "float32", "float32", "cumsum", True, True)
        func = func.with_attr("tvm_hetero.op_kinds", ["cumsum"])
        scheduled, rule = optimize_function(func.with_attr("target", target), target)
        assert rule == "dlight.gpu.Fallback"
        assert check_gpu_schedule(func, scheduled) == 0.0


def test_relax_cumsum_and_cumprod_of_a_relax_module_are_legalized():
    # torch's cumsum and cumprod import as these ops; TVM 0.27 has no legalization for them
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 4), "int32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            along_rows = bb.emit(relax.op.cumsum(x, axis=-1))
            flattened = bb.emit(relax.op.cumsum(x, axis=None, dtype="int64"))
            products = bb.emit(relax.op.cumprod(x, axis=0, exclusive=True))
            out = bb.emit_output(relax.Tuple([along_rows, flattened, products]))
        bb.emit_func_output(out)
    model = th.load_model(bb.get())
    compiled = th.build(model, _all_on(model, "cpu-generic"), ["cpu", "cpu-generic"])
    data = _data("int32", (3, 4)) % 5 - 2
    got = compiled.run([data])
    np.testing.assert_array_equal(got[0], np.cumsum(data, axis=-1))
    assert got[1].dtype == np.int64
    np.testing.assert_array_equal(got[1], np.cumsum(data.ravel(), dtype=np.int64))
    np.testing.assert_array_equal(got[2], np.concatenate(
        [np.ones((1, 4), np.int32), np.cumprod(data, axis=0)[:-1]]))


@pytest.mark.parametrize("axis, message", [
    ([3], "CumSum (node CumSum_0): axis 3 is outside [-3, 3)"),
    ([0, 1], "CumSum (node CumSum_0): the axis must be one value"),
])
def test_a_bad_constant_axis_is_a_one_line_error(axis, message):
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("CumSum", ["x", "axis"], ["y"])], "cumsum",
        [vi("x", TensorProto.FLOAT, list(SHAPE))], [vi("y", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor("axis", TensorProto.INT64, [len(axis)], axis)])
    with pytest.raises(th.ModelError) as err:
        th.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert message in str(err.value) and "\n" not in str(err.value)
