"""Bilinear resizes as two passes (ops.resize) and the separable-resize rule: the tables
against the ONNX formula, the rule's schedule, and resizes of every coordinate transformation
built whole against onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_hetero as th
from tvm_hetero.build.compile import BuildStats
from tvm_hetero.ops.resize import linear_tables
from tvm_hetero.testing import max_relative_error, onnx_reference


def _source(out, in_size, out_size, mode):
    """The ONNX Resize specification's source coordinate."""
    scale = out_size / in_size
    if mode == "align_corners":
        return out * (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if mode == "asymmetric":
        return out / scale
    if mode == "pytorch_half_pixel" and out_size == 1:
        return 0.0
    return (out + 0.5) / scale - 0.5


@pytest.mark.parametrize("mode", ["half_pixel", "pytorch_half_pixel", "align_corners",
                                  "asymmetric"])
@pytest.mark.parametrize("in_size, out_size", [(32, 256), (7, 14), (5, 3), (1, 4), (4, 1)])
def test_tables_interpolate_as_the_onnx_formula(mode, in_size, out_size):
    first, second, weight = linear_tables(in_size, out_size, mode)
    row = np.random.default_rng(0).standard_normal(in_size).astype("float32")
    got = row[first] * (1 - weight) + row[second] * weight
    for out in range(out_size):
        source = min(max(_source(out, in_size, out_size, mode), 0.0), in_size - 1)
        low = int(np.floor(source))
        high = min(low + 1, in_size - 1)
        want = row[low] * (1 - (source - low)) + row[high] * (source - low)
        assert got[out] == pytest.approx(want, rel=1e-5, abs=1e-5), out  # float32 source


def _resize_model(shape, sizes, mode, method="linear", relu=False):
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["y" if relu else "out"],
                              mode=method, coordinate_transformation_mode=mode)]
    if relu:
        nodes.append(helper.make_node("Relu", ["y"], ["out"]))
    graph = helper.make_graph(
        nodes, "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, sizes)],
        [numpy_helper.from_array(np.array(sizes, np.int64), "sizes")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _built(onnx_model):
    model = th.load_model(onnx_model)
    stats = BuildStats()
    compiled = th.build(model, "all:cpu", ["cpu"], stats=stats)
    inputs = model.random_inputs()
    error = max_relative_error(compiled.run(inputs), onnx_reference(onnx_model, inputs, model))
    return stats.rules, error


@pytest.mark.parametrize("mode", ["half_pixel", "pytorch_half_pixel", "align_corners",
                                  "asymmetric"])
@pytest.mark.parametrize("shape, sizes, relu", [
    ([1, 21, 8, 8], [1, 21, 64, 64], False),  # a segmentation head's upsampling: a task a map
    ([1, 2, 5, 7], [1, 2, 9, 20], True),  # two maps: a task per output row; then a ReLU
    ([2, 3, 6, 6], [2, 3, 3, 4], False),  # downsampling
])
def test_bilinear_resizes_take_separable_resize_and_are_right(mode, shape, sizes, relu):
    rules, error = _built(_resize_model(shape, sizes, mode, relu=relu))
    assert [r for k, r in rules.items() if "resize" in k] == ["separable-resize"], rules
    assert error < 1e-5


def test_nearest_resizes_keep_tvm_s_kernel():
    rules, error = _built(_resize_model([1, 3, 4, 4], [1, 3, 8, 8], "asymmetric",
                                        method="nearest"))
    assert "separable-resize" not in rules.values()
    assert error < 1e-6


def test_the_columns_pass_runs_per_map_inside_the_parallel_tasks():
    from tvm import s_tir, tirx

    from tvm_hetero.devices import DeviceSet
    from tvm_hetero.optimize.cpu.separable_resize import SeparableResize
    from tvm_hetero.prepare.config import PrepareConfig
    from tvm_hetero.layers.layered import layered_module

    model = th.load_model(_resize_model([1, 8, 4, 4], [1, 8, 32, 32], "half_pixel"))
    devices = DeviceSet.parse(["cpu"])
    layered = layered_module(model, PrepareConfig.for_devices(devices))
    [kernel] = [f for gv, f in layered.functions_items() if gv.name_hint != "main"]
    scheduled = SeparableResize().apply(kernel, devices.devices[0].target)
    sch = s_tir.Schedule(scheduled)
    columns, rows = (sch.get_sblock(name) for name in ("resize_columns", "resize_rows"))
    task = sch.get_loops(rows)[0]
    assert sch.get(task).kind == tirx.ForKind.PARALLEL
    assert sch.get(sch.get_loops(columns)[0]).same_as(sch.get(task))  # per map, in the task
    assert sch.get(sch.get_loops(rows)[-1]).kind == tirx.ForKind.VECTORIZED
