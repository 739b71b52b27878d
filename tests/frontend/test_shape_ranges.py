"""Shape ranges: a model with dynamic dimensions imported, placed, built once and run at any
size in its ranges, checked against onnxruntime; sizes outside them refused."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_hetero as th
from tvm_hetero.search.records import header_path, read_header
from tvm_hetero.cli.main import main
from tvm_hetero.optimize.pass_ import ROW_CHUNKS
from tvm_hetero.frontend.shape_ranges import (ShapeRange, parse_shape_range, ranged_shapes,
                                              split_ranged_dims)

ort = pytest.importorskip("onnxruntime")

DEVICES = ["cpu", "cpu-generic"]


def dynamic_model(path=None):
    """[batch, seq, 32] -> MatMul + bias -> GELU-free MLP -> softmax over the last axis, and
    a softmax over the sequence (a reduction along the dynamic axis)."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype("float32") * 0.2,
                                       name) for name, shape in
               (("w1", (32, 48)), ("b1", (48,)), ("w2", (48, 32)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["m"]),
             helper.make_node("Softmax", ["m"], ["rows"], axis=-1),
             helper.make_node("Softmax", ["m"], ["over_seq"], axis=1)]
    graph = helper.make_graph(
        nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                     ["batch", "seq", 32])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["batch", "seq", 32]),
         helper.make_tensor_value_info("over_seq", TensorProto.FLOAT, ["batch", "seq", 32])],
        weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if path is not None:
        onnx.save(model, path)
    return model


RANGES = {"batch": (1, 3, 2), "seq": (1, 40, 8)}


def onnxruntime_outputs(model, x):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def test_parse_shape_range():
    assert parse_shape_range("seq=1:512:128") == ("seq", ShapeRange(1, 512, 128))
    assert parse_shape_range("n=2:8") == ("n", ShapeRange(2, 8, 8))
    for bad in ("seq", "seq=1", "seq=a:b", "1x=1:2", "seq=0:4", "seq=4:2", "seq=1:4:9"):
        with pytest.raises(th.ModelError, match="shape range"):
            parse_shape_range(bad)


def test_import_keeps_named_dimensions_symbolic():
    model = th.load_model(dynamic_model(), shape_ranges=RANGES)
    assert model.inputs[0].shape == ("batch", "seq", 32) and model.is_dynamic
    assert model.shape_ranges == {"batch": ShapeRange(1, 3, 2), "seq": ShapeRange(1, 40, 8)}
    assert model.random_inputs()["x"].shape == (2, 8, 32)  # the tuning point
    # the form records store, read back
    shapes, ranges = split_ranged_dims(ranged_shapes(model))
    assert shapes == {"x": ("batch", "seq", 32)} and ranges == model.shape_ranges
    # renamed dimensions, one pinned
    renamed = th.load_model(dynamic_model(), input_shapes={"x": (1, "tokens", 32)},
                            shape_ranges={"tokens": "1:16:4"})
    assert renamed.inputs[0].shape == (1, "tokens", 32)


@pytest.mark.parametrize("kwargs, message", [
    ({}, "or a range for batch"),
    ({"shape_ranges": {"seq": (1, 8)}}, "or a range for batch"),
    ({"shape_ranges": {**RANGES, "other": (1, 2)}}, "shape range given for other"),
    ({"input_shapes": {"x": (1, "seq")}, "shape_ranges": {"seq": (1, 8)}}, "has rank 3"),
])
def test_import_refusals(kwargs, message):
    with pytest.raises(th.ModelError, match=message):
        th.load_model(dynamic_model(), **kwargs)


def test_layers_count_flops_at_the_tuning_point_and_memory_at_the_maximum():
    model = th.load_model(dynamic_model(), shape_ranges=RANGES)
    layers = {layer.name: layer for layer in th.extract_layers(model)}
    first = layers["matmul_0"]
    assert first.outputs[0].shape == (2, 8, 48) and first.outputs[0].max_shape == (3, 40, 48)
    assert first.flops >= 2 * 2 * 8 * 32 * 48
    static = th.load_model(dynamic_model(), input_shapes={"x": (2, 8, 32)})
    assert first.flops == {l.name: l for l in th.extract_layers(static)}["matmul_0"].flops
    assert first.max_activation_bytes == 4 * (3 * 40 * 32 + 3 * 40 * 48)
    use = th.memory_use(list(layers.values()), th.Placement.all_on(layers.values(), "cpu"))
    assert use["cpu"].peak_activation_bytes >= first.max_activation_bytes


@pytest.mark.parametrize("placement", ["all-cpu", "two-devices"])
def test_one_library_runs_every_shape_in_range(tmp_path, placement):
    source = dynamic_model()
    model = th.load_model(source, shape_ranges=RANGES)
    layers = th.extract_layers(model, th.PrepareConfig.for_devices(
        th.DeviceSet.parse(DEVICES)))
    devices = th.DeviceSet.parse(DEVICES)
    chosen = th.Placement.all_on(layers, "cpu") if placement == "all-cpu" else th.Placement(
        {l.name: DEVICES[i % 2] for i, l in enumerate(layers)})
    compiled = th.build(model, chosen, devices)
    # the kernels whose rows are independent run as row loops of scheduled static kernels;
    # the softmax over the sequence is not one
    rules = compiled.stats.rules
    assert sorted(r for r in rules.values() if r and r.startswith(ROW_CHUNKS)) == [
        "rows:packed-matmul", "rows:packed-matmul", "rows:row-reductions"], rules
    path = str(tmp_path / "dyn.so")
    compiled.export_library(path)
    loaded = th.load(path)
    assert loaded.shape_ranges == model.shape_ranges
    rng = np.random.default_rng(1)
    for shape in [(1, 1, 32), (3, 40, 32), (2, 8, 32), (1, 23, 32), (3, 5, 32)]:
        x = rng.standard_normal(shape).astype("float32")
        for got, want in zip(loaded.run({"x": x}), onnxruntime_outputs(source, x)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(th.InputError, match="seq is 41, outside the range"):
        loaded.run({"x": np.zeros((1, 41, 32), "float32")})
    with pytest.raises(th.InputError, match="batch is 4, outside"):
        loaded.run({"x": np.zeros((4, 2, 32), "float32")})
    with pytest.raises(th.InputError, match="expects"):
        loaded.run({"x": np.zeros((1, 2, 31), "float32")})


def test_command_line_compile_and_run(tmp_path, capsys):
    source = str(tmp_path / "dyn.onnx")
    dynamic_model(source)
    library = str(tmp_path / "dyn.so")
    code = main(["compile", source, "-d", "cpu", "-p", "all:cpu", "--shape-range",
                 "batch=1:3:2", "--shape-range", "seq=1:40:8", "--verify", "-o", library])
    out, err = capsys.readouterr()
    assert code == 0, err
    inputs = str(tmp_path / "in.npz")
    np.savez(inputs, x=np.ones((3, 17, 32), "float32"))
    assert main(["run", library, "--inputs", inputs, "--json"]) == 0
    capsys.readouterr()
    np.savez(inputs, x=np.ones((1, 50, 32), "float32"))
    code = main(["run", library, "--inputs", inputs])
    err = capsys.readouterr().err
    assert code != 0 and err.strip().startswith("Error: ") and "outside the range" in err
    assert len(err.strip().splitlines()) == 1
    code = main(["compile", source, "-d", "cpu", "-p", "all:cpu", "-o", library])
    err = capsys.readouterr().err
    assert code != 0 and "--shape-range batch=MIN:MAX" in err
    code = main(["compile", source, "-d", "cpu", "-p", "all:cpu", "-o", library,
                 "--shape-range", "batch=3:1", "--shape-range", "seq=1:4"])
    err = capsys.readouterr().err
    assert code != 0 and "bad shape range 'batch=3:1'" in err


def test_search_verifies_each_candidate_at_the_ends_of_the_ranges(tmp_path):
    """A candidate is checked at the tuning point and at the ranges' minimum and maximum:
    the task holds the inputs and reference of each, and the records header keeps the
    ranges."""
    source = str(tmp_path / "dyn.onnx")
    dynamic_model(source)
    model = th.load_model(source, shape_ranges=RANGES)
    records = str(tmp_path / "r.jsonl")
    result = th.tune(model, th.DeviceSet.parse(DEVICES), trials=3, strategy="random",
                     records=records, workdir=str(tmp_path / "w"), retime=0)
    assert result.trials and all(t.result.ok for t in result.trials)
    work = tmp_path / "w"
    for where in ("min", "max"):
        assert (work / f"inputs.at-{where}.npz").exists()
        assert (work / f"reference.at-{where}.npz").exists()
    with np.load(work / "inputs.at-max.npz") as data:
        assert data["x"].shape == (3, 40, 32)
    with open(header_path(records), encoding="utf-8") as handle:
        header = json.load(handle)
    assert header["input_shapes"]["x"] == ["batch=1:3:2", "seq=1:40:8", 32]
    assert read_header(records)["input_shapes"]["x"] == ("batch=1:3:2", "seq=1:40:8", 32)


@pytest.fixture
def keep_log_level():
    """The worker function quiets the package's logger (as in a worker process): restored."""
    import logging

    logger = logging.getLogger("tvm_hetero")
    level = logger.level
    yield
    logger.setLevel(level)


def test_a_candidate_wrong_at_the_maximum_is_wrong(tmp_path, keep_log_level):
    """The runner checks the extra shapes: a reference that disagrees only at the maximum
    fails the candidate."""
    from tvm_hetero.measure.worker import run_candidate

    source = dynamic_model()
    model = th.load_model(source, shape_ranges=RANGES)
    devices = th.DeviceSet.parse(["cpu"])
    compiled = th.build(model, th.Placement.all_on(th.extract_layers(model), "cpu"), devices)
    library = str(tmp_path / "c.so")
    compiled.export_library(library)
    for where, dims in (("", model.dims_at("opt")), (".at-max", model.dims_at("max"))):
        x = model.random_inputs(0, dims)["x"]
        np.savez(tmp_path / f"inputs{where}.npz", x=x)
        np.savez(tmp_path / f"reference{where}.npz", *onnxruntime_outputs(source, x))
    args = (library, devices.to_json(), str(tmp_path / "inputs.npz"),
            str(tmp_path / "reference.npz"), 0, 1, 0.0)
    assert run_candidate(*args)["ok"]
    with np.load(tmp_path / "reference.at-max.npz") as data:
        wrong = [data[f"arr_{i}"] for i in range(len(data.files))]
    wrong[1] = wrong[1] + 0.1
    np.savez(tmp_path / "reference.at-max.npz", *wrong)
    assert not run_candidate(*args)["ok"]


def test_cuda_kernels_over_a_range_are_right_at_several_shapes():
    """Built all on ``cuda@sm_90`` (no GPU needed), dlight schedules the kernels of symbolic
    extents, and each, emulated on the CPU with the dimensions fixed at several sizes, computes
    what the unscheduled kernel computes."""
    from tvm_hetero.relax_ir import bounded_kernel
    from tvm_hetero.testing.gpu_emulation import check_gpu_schedule, cuda_build_kernels

    model = th.load_model(dynamic_model(), shape_ranges=RANGES)
    kernels = cuda_build_kernels(model)
    assert len(kernels) == 4
    for name, (original, scheduled, rule) in kernels.items():
        assert rule is not None and rule.startswith("dlight."), (name, rule)
        for dims in ({"batch": 1, "seq": 1}, {"batch": 2, "seq": 8}, {"batch": 3, "seq": 40}):
            check_gpu_schedule(bounded_kernel(original, dims), bounded_kernel(scheduled, dims))


def test_shape_functions_are_built_apart_from_the_kernels():
    """A dynamic build's host shape functions go through a tirx.build of their own: in one
    with them, a CPU kernel of the same target was compiled to code 2.3x slower."""
    model = th.load_model(dynamic_model(), shape_ranges=RANGES)
    devices = th.DeviceSet.parse(["cpu"])
    compiled = th.build(model, th.Placement.all_on(th.extract_layers(model), "cpu"), devices)
    keys = list(compiled.stats.target_compile_s)
    assert len(keys) == 2 and sum(k.startswith("host ") for k in keys) == 1, keys
    # a profile gives kernels over symbolic extents no FLOP rate (TVM counts them as 1)
    x = np.zeros((2, 8, 32), "float32")
    rows = [r for r in compiled.profile({"x": x}, repeat=1).rows if "matmul" in r.name]
    assert rows and all(r.gflops is None and r.gbps is not None for r in rows)
