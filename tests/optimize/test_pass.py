import json
import re

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero import optimize
from tvm_hetero.layers.classify import LAYER_KINDS, kernel_kind
from tvm_hetero.testing import max_relative_error, onnx_reference, random_placement

from tests.helpers.models import light, zoo, zoo_direct


# light:resnet50 (40 s) is slow: the default run has the zoo's resnet, and ResNet-50's
# all-on-cpu build (shared with the tests of its rules) against onnxruntime below
@pytest.mark.parametrize("name", ["mlp", "cnn", "vgg", "resnet", "transformer",
                                  "light:bvlc_alexnet", "light:squeezenet",
                                  pytest.param("light:resnet50", marks=pytest.mark.slow)])
def test_rules_match_onnxruntime(name, cpu_devices):
    """The scheduled build, all on cpu and one random placement over both devices, against
    onnxruntime on the ONNX model: a bug in the preparation shows too (the unoptimized build
    of the same prepared module would share it)."""
    model = light(name[6:]) if name.startswith("light:") else zoo(name)
    layers = th.extract_layers(model)
    inputs = model.random_inputs(seed=5)
    reference = onnx_reference(model.onnx_model, inputs, model)
    # all on cpu (the light graphs' build is shared with the tests that read its rules), and
    # one random placement over both devices
    all_on_cpu = _built_all_on_cpu(name[6:], cpu_devices) if name.startswith("light:") \
        else th.build(model, th.Placement.all_on(layers, "cpu"), cpu_devices)
    random = th.build(model, random_placement(layers, cpu_devices.names,
                                              np.random.default_rng(1)), cpu_devices)
    for compiled in (all_on_cpu, random):
        # 1e-4: cpu-generic's layers round without FMA (tests/test_build.py)
        assert max_relative_error(compiled.run(inputs), reference) < 1e-4


def test_resnet50s_all_on_cpu_build_matches_onnxruntime(cpu_devices):
    """ResNet-50 (the onnx package's graph, seeded weights) in the default run: the build the
    tests of its rules read, run, against onnxruntime (random placements: test_build, slow)."""
    model = light("resnet50")
    inputs = model.random_inputs(seed=5)
    got = _built_all_on_cpu("resnet50", cpu_devices).run(inputs)
    assert max_relative_error(got, onnx_reference(model.onnx_model, inputs, model)) < 1e-4


_BUILT = {}


def _built_all_on_cpu(name, devices):
    """One all-on-`cpu` build per light graph, shared by the tests that only read its rules."""
    if name not in _BUILT:
        _BUILT[name] = th.build(light(name), "all:cpu", devices)
    return _BUILT[name]


def test_every_cpu_kernel_of_resnet50_is_scheduled(cpu_devices):
    rules = _built_all_on_cpu("resnet50", cpu_devices).stats.rules
    unscheduled = [name for name, rule in rules.items() if rule is None]
    # only kernels without loops worth scheduling may stay (reshape views, tiny softmax, the
    # 2048-element layout transform back from the blocked layout)
    assert len(unscheduled) <= 4, unscheduled


def test_the_table_lists_every_pair_and_takes_user_rules(cpu_devices):
    rows = optimize.default_table().rows()
    assert {(f, k) for f, k, _ in rows} == {(f, k) for f in optimize.FAMILIES
                                           for k in LAYER_KINDS}
    by_pair = dict(((f, k), names) for f, k, names in rows)
    assert by_pair[("cpu", "conv2d")] == ["winograd", "blocked-nchwc", "depthwise-nchwc",
                                         "grouped-pixels-1x1", "pixel-lanes-1x1",
                                         "packed-weights", "depthwise-rows", "tiled",
                                         "row-reductions", "parallel-loops"]
    assert by_pair[("cpu", "matmul")] == ["packed-matmul", "split-k-gemv", "tiled",
                                         "row-reductions", "parallel-loops"]
    assert by_pair[("cpu", "pooling")] == ["pooling-rows", "reduction-chains",
                                          "parallel-loops"]
    assert by_pair[("cpu", "reduction")] == ["scan-lines", "row-reductions",
                                            "reduction-chains", "parallel-loops",
                                            "dlight.cpu.Reduction"]
    assert by_pair[("cpu", "elementwise")] == ["concat-copies", "layout-copies",
                                              "separable-resize", "injective-lanes",
                                              "parallel-loops"]
    assert by_pair[("cpu", "normalization")] == ["row-reductions", "parallel-loops"]
    assert by_pair[("cpu", "other")] == ["separable-resize", "injective-lanes",
                                        "parallel-loops"]
    seen = []

    def mark(func, target):
        seen.append(target.kind.name)
        return func.with_attr("tvm_hetero.rule", "mine")

    rules = optimize.default_table().with_rule(
        "cpu", "pooling", optimize.Rule.from_callable("mine", "test rule", mark))
    compiled = th.build(zoo("cnn"), "all:cpu", cpu_devices, rules=rules)
    assert seen == ["llvm", "llvm"]  # the two max-pool layers, nothing else
    assert compiled.run(zoo("cnn").random_inputs())[0].shape == (1, 10)
    with pytest.raises(ValueError, match="unknown"):
        rules.with_rule("tpu", "conv2d", optimize.Rule.from_callable("x", "x", mark))


def test_each_layer_gets_the_rules_of_its_device():
    devices = th.DeviceSet.parse(["cpu", "cuda"])
    used = []
    rules = optimize.default_table()
    for family in ("cpu", "cuda"):
        def spy(func, target, family=family):
            used.append((family, target.kind.name))
            return None  # pass on to the default rules

        for kind in LAYER_KINDS:
            rules = rules.with_rule(family, kind, optimize.Rule.from_callable("spy", "spy", spy))
    model = zoo("resnet")
    layers = th.extract_layers(model)
    placement = th.Placement({l.name: devices.names[i % 2] for i, l in enumerate(layers)})
    th.build(model, placement, devices, rules=rules)
    assert set(used) == {("cpu", "llvm"), ("cuda", "cuda")}


def test_a_gpu_kernel_no_rule_schedules_is_an_error():
    rules = optimize.default_table()
    for kind in LAYER_KINDS:
        rules = rules.with_rules("cuda", kind, [])
    with pytest.raises(th.BuildError, match="would silently run as host code"):
        th.build(zoo("mlp"), "all:cuda", ["cpu", "cuda"], rules=rules)
    # a variant: the default table still has its GPU rules
    assert all(optimize.default_table().rules_for("cuda", kind) for kind in LAYER_KINDS)


def test_optimizations_cli_json(capsys):
    from tvm_hetero.cli.main import main

    assert main(["optimizations", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert {"family": "cpu", "kind": "matmul",
            "rules": ["packed-matmul", "split-k-gemv", "tiled", "row-reductions",
                      "parallel-loops"]} in table


def test_direct_and_grouped_convolutions_get_packed_weights_or_the_blocked_layout(cpu_devices):
    rules = _built_all_on_cpu("bvlc_alexnet", cpu_devices).stats.rules
    convs = sorted(k for k in rules if k.startswith("fused_conv2d"))
    matmuls = [k for k in rules if k.startswith("fused_matmul")]
    assert len(convs) == 5 and len(matmuls) == 3  # the dense layers: [K, N] weights, batch 1
    # AlexNet's second, fourth and fifth convolutions have two groups of whole channel
    # vectors: packed-weights; its direct ones blocked (the RGB one reads its 3 channels as
    # one block and writes 16-channel blocks, the third is 256 -> 384)
    assert [rules[k] for k in convs].count("packed-weights") == 3, rules
    assert [rules[k] for k in convs].count("blocked-nchwc") == 2, rules
    # 9216 -> 4096 and 4096 -> 4096 (144 and 64 MB) in weight panels; 4096 -> 1000 (ragged
    # columns, one row) split along its reduction
    assert sorted(rules[k] for k in matmuls) == ["packed-matmul", "packed-matmul",
                                                 "split-k-gemv"], rules


def test_packed_weights_are_repacked_constants_in_the_built_module(cpu_devices):
    import tvm

    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize.cpu import PACKED_WEIGHTS_ATTR
    from tvm_hetero.relax_ir import main_bindings

    model = light("bvlc_alexnet")
    target = cpu_devices["cpu"].tvm_target()
    annotated = th.AnnotateDevice(th.Placement.all_on(th.extract_layers(model), "cpu"),
                                  th.DeviceSet([cpu_devices["cpu"]]))(layered_module(model))
    optimize_layers = optimize.OptimizeLayers(optimize.default_table())
    with target:
        scheduled = optimize_layers(annotated)
    packed = {gv.name_hint: func.attrs[PACKED_WEIGHTS_ATTR] for gv, func in
              scheduled.functions_items() if isinstance(func, tvm.tirx.PrimFunc)
              and func.attrs is not None and PACKED_WEIGHTS_ATTR in func.attrs
              and kernel_kind(func) == "conv2d"}  # (not packed-matmul's weight panels)
    # AlexNet's three grouped convolutions (its direct ones run blocked)
    assert len(packed) == 3
    # what the pass chose is on it once run: packed-weights for exactly those three
    assert sorted(k for k, rule in optimize_layers.chosen.items()
                  if rule == "packed-weights") == sorted(packed)
    weights = [arg for binding in main_bindings(scheduled)
               if isinstance(binding.value, tvm.relax.Call) and len(binding.value.args) > 1
               and isinstance(binding.value.args[0], tvm.ir.GlobalVar)
               and binding.value.args[0].name_hint in packed
               for arg in binding.value.args[1].fields[1:2]]
    assert len(weights) == 3  # one per call, all repacked at build time
    assert all(isinstance(w, tvm.ir.GenericConst) and len(w.ty.shape) == 5 for w in weights)
    assert not any(gv.name_hint.startswith("pack_weight") for gv, _ in
                   scheduled.functions_items())


def _conv_with_weight_input():
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [32, 8, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 10, 10])
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "conv_weight_input", [x, w], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_weight_given_at_run_time_is_packed_by_a_kernel(cpu_devices):
    import onnxruntime as ort

    onnx_model = _conv_with_weight_input()
    model = th.load_model(onnx_model, name="conv_weight_input")
    compiled = th.build(model, "all:cpu", cpu_devices)
    assert list(compiled.stats.rules.values()) == ["packed-weights"]
    assert "call  pack_weight" in compiled.executable.as_text()  # each call, before the conv
    inputs = model.random_inputs(seed=3)
    expected = ort.InferenceSession(onnx_model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, inputs)
    assert max_relative_error(compiled.run(inputs), expected) < 1e-5


def test_tiled_declines_a_weight_it_would_gather():
    import tvm
    from tvm.script import tirx as T

    from tvm_hetero.optimize.cpu import Tiled

    def dense(weight_transposed: bool):
        w_shape = (32, 64) if weight_transposed else (64, 32)

        @T.prim_func(private=True, s_tir=True)
        def func(x: T.Buffer((8, 64), "float32"), w: T.Buffer(w_shape, "float32"),
                 y: T.Buffer((8, 32), "float32")):
            for i, j, k in T.grid(8, 32, 64):
                with T.sblock("dense"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    with T.init():
                        y[vi, vj] = T.float32(0)
                    if weight_transposed:  # a Python bool: TVMScript keeps one branch
                        y[vi, vj] = y[vi, vj] + x[vi, vk] * w[vj, vk]
                    else:
                        y[vi, vj] = y[vi, vj] + x[vi, vk] * w[vk, vj]

        return func

    target = tvm.target.Target({"kind": "llvm"})
    assert Tiled().apply(dense(True), target) is None  # lanes along j would stride through w
    assert "T.vectorized" in Tiled().apply(dense(False), target).script()


def test_weights_lifted_to_a_second_device_are_packed_once_when_the_model_loads(cpu_devices):
    model = zoo_direct("resnet")
    layers = th.extract_layers(model)
    # the convolutions on the second device: their weights are lifted into hetero_weights()
    placement = th.Placement({layer.name: "cpu-generic" if "conv2d" in layer.op_kinds else "cpu"
                              for layer in layers})
    compiled = th.build(model, placement, cpu_devices)
    assert "packed-weights" in compiled.stats.rules.values()
    assert "call  pack_weight" not in compiled.executable.as_text()  # not at each call
    _, weights = compiled._session()
    assert any(len(w.shape) == 5 for w in weights)  # [F/lanes, C, KH, KW, lanes]
    inputs = model.random_inputs(seed=4)
    reference = onnx_reference(th.zoo_model("resnet"), inputs, model)
    assert max_relative_error(compiled.run(inputs), reference) < 1e-4


def _conv1x1_residual(stride: int):
    from onnx import TensorProto, helper, numpy_helper

    size = 8 // stride
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])
    r = helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 32, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, size, size])
    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((32, 16, 1, 1)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], strides=[stride, stride]),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "conv1x1_residual", [x, r], [y], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("stride, rule", [(1, "pixel-lanes-1x1"), (2, "packed-weights")])
def test_a_1x1_convolution_with_a_residual_add_takes_pixel_lanes(stride, rule, cpu_devices):
    import onnxruntime as ort

    onnx_model = _conv1x1_residual(stride)
    model = th.load_model(onnx_model, name="conv1x1_residual")
    compiled = th.build(model, "all:cpu", cpu_devices)
    assert list(compiled.stats.rules.values()) == [rule]  # strided: the pixels are not a row
    inputs = model.random_inputs(seed=2)
    expected = ort.InferenceSession(onnx_model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, inputs)
    assert max_relative_error(compiled.run(inputs), expected) < 1e-5


def test_resnet50s_blocked_convolutions_take_the_blocked_rule(cpu_devices):
    model = light("resnet50")
    layers = th.extract_layers(model)
    rules = _built_all_on_cpu("resnet50", cpu_devices).stats.rules
    blocked = {layer.func_name for layer in layers if layer.kind == "conv2d"
               and len(layer.outputs[0].shape) == 5}
    assert len(blocked) == 24  # 53 calls: every convolution (the RGB one reads one block)
    # the stride-1 3x3 ones at 56x56 (64 channels) and 28x28 (128) are Winograd; the deeper
    # ones have too few tiles for their weights (see tests/test_layers.py)
    winograd = {name for name in blocked if rules[name] == "winograd"}
    assert [layer.outputs[0].shape for layer in layers if layer.func_name in winograd] \
        == [(1, 4, 56, 56, 16)] * 3 + [(1, 8, 28, 28, 16)] * 3
    assert {name for name, rule in rules.items() if rule == "blocked-nchwc"} \
        == blocked - winograd
    assert {layer.func_name for layer in layers if layer.kind == "conv2d"} == blocked
    # one transform into the layout (the image's 3 channels as one block), one out: form
    # kernels of the layers they serve (no layers: tvm_hetero.prepare.device_forms)
    from tvm_hetero.layers.classify import classify_bindings
    from tvm_hetero.layers.layered import layered_module

    transforms = [(tuple(int(d) for d in binding.var.ty.shape), info.name)
                  for binding, info in classify_bindings(layered_module(model))
                  if info is not None and info.form_kernel]
    assert [shape for shape, _ in transforms] == [(1, 1, 224, 224, 3), (1, 2048, 1, 1)]
    assert transforms[0][1] == "conv2d_0" and not any(
        "layout_transform" in op for layer in layers for op in layer.op_kinds)


def test_the_blocked_rule_declines_nchw_convolutions(cpu_devices):
    import tvm

    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize.cpu import BlockedNCHWc

    model = th.load_model(_conv1x1_residual(1), name="conv1x1_residual")
    (func,) = [f for _, f in layered_module(model).functions_items()
               if isinstance(f, tvm.tirx.PrimFunc)]
    assert BlockedNCHWc().apply(func, cpu_devices["cpu"].tvm_target()) is None


def _rgb_conv(size: int):
    """SqueezeNet's first convolution: 3 -> 64 channels, 3x3, stride 2, on size x size."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((64, 3, 3, 3)).astype("float32")
    out = (size - 3) // 2 + 1
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2])], "rgb_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, out, out])],
        [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return th.load_model(model, name=f"rgb_conv{size}")


def test_a_short_window_reduction_is_packed_only_where_tiled_lanes_would_be_ragged(
        cpu_devices, prepare_for_devices):
    # NCHW (the blocked layout off): 3x3 over RGB, 27 multiply-adds per output
    prepare_for_devices(blocked_layout=False)
    rules = th.build(_rgb_conv(224), "all:cpu", cpu_devices).stats.rules
    assert list(rules.values()) == ["packed-weights"]  # 111 columns: tiled would get 3 lanes
    rules = th.build(_rgb_conv(65), "all:cpu", cpu_devices).stats.rules
    assert list(rules.values()) == ["tiled"]  # 32 columns: whole vectors


def _max_pool_17_wide():
    """A 3x3 stride-2 max pool over 35x35 (17 output columns: sliding windows)."""
    @T.prim_func(private=True, s_tir=True)
    def pool(x: T.Buffer((1, 8, 35, 35), "float32"), y: T.Buffer((1, 8, 17, 17), "float32")):
        T.func_attr({"tvm_hetero.op_kinds": ["max_pool2d"]})
        for n, c, h, w, rh, rw in T.grid(1, 8, 17, 17, 3, 3):
            with T.sblock("pool"):
                vn, vc, vh, vw, vrh, vrw = T.axis.remap("SSSSRR", [n, c, h, w, rh, rw])
                with T.init():
                    y[vn, vc, vh, vw] = T.float32(-3.4e38)
                y[vn, vc, vh, vw] = T.max(y[vn, vc, vh, vw], x[vn, vc, vh * 2 + vrh, vw * 2 + vrw])

    return pool


def test_windowed_pools_take_pooling_rows_unless_the_width_has_no_lanes(cpu_devices):
    rules = _built_all_on_cpu("squeezenet", cpu_devices).stats.rules
    # 55, 27 and 13 output columns: 11, 9 and 13 lanes; the global average pool is a reduction
    assert sorted(k for k, rule in rules.items() if rule == "pooling-rows") \
        == ["max_pool2d", "max_pool2d1", "max_pool2d2"], rules
    from tvm_hetero.optimize.cpu import PoolingRows

    target = cpu_devices["cpu"].tvm_target()
    assert PoolingRows().apply(_max_pool_17_wide(), target) is None  # 17: no 4-16 lanes divide


def test_a_concatenation_is_one_parallel_copy_per_input(cpu_devices):
    import numpy as np
    import tvm

    from tvm_hetero.optimize.cpu import ConcatCopies

    @T.prim_func(private=True, s_tir=True)
    def concat(a: T.Buffer((1, 64, 55, 55), "float32"), b: T.Buffer((1, 32, 55, 55), "float32"),
               c: T.Buffer((1, 16, 55, 55), "float32"), y: T.Buffer((1, 112, 55, 55), "float32")):
        T.func_attr({"tvm_hetero.op_kinds": ["concatenate"]})
        for n, ch, h, w in T.grid(1, 112, 55, 55):
            with T.sblock("concat"):
                vn, vc, vh, vw = T.axis.remap("SSSS", [n, ch, h, w])
                y[vn, vc, vh, vw] = T.if_then_else(
                    96 <= vc, c[vn, vc - 96, vh, vw],
                    T.if_then_else(64 <= vc, b[vn, vc - 64, vh, vw], a[vn, vc, vh, vw]))

    target = cpu_devices["cpu"].tvm_target()
    scheduled = ConcatCopies().apply(concat, target)
    script = scheduled.script()
    # one parallel loop per input (channels 0-64, 64-96, 96-112), each over whole planes
    assert re.findall(r"in T.parallel\(([^)]*)\):\n\s+for \w+ in range\((\d+)\)", script) \
        == [("64", "3025"), ("64, 96", "3025"), ("96, 112", "3025")], script
    lib = tvm.tirx.build(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}),
                         target=target)
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((1, ch, 55, 55)).astype("float32") for ch in (64, 32, 16)]
    out = tvm.runtime.tensor(np.zeros((1, 112, 55, 55), "float32"))
    lib["main"](*[tvm.runtime.tensor(p) for p in parts], out)
    np.testing.assert_array_equal(out.numpy(), np.concatenate(parts, axis=1))
    assert ConcatCopies().apply(_elementwise_add(), target) is None  # not a concatenation


def test_squeezenets_concatenations_take_concat_copies(cpu_devices):
    rules = _built_all_on_cpu("squeezenet", cpu_devices).stats.rules
    assert sorted(k for k, rule in rules.items() if rule == "concat-copies") == [
        "concatenate", "concatenate1", "concatenate2", "concatenate3"], rules


def test_global_pools_and_means_take_reduction_chains_sliding_windows_do_not(cpu_devices):
    import numpy as np
    import tvm

    from tvm_hetero.optimize.cpu import ReductionChains

    rules = _built_all_on_cpu("squeezenet", cpu_devices).stats.rules
    assert rules["mean"] == "reduction-chains"  # 13x13 over 13x13: one window per channel
    rules = _built_all_on_cpu("resnet50", cpu_devices).stats.rules
    # its 7x7 global pool runs blocked: one channel vector per window, pooling-rows (4.2 us
    # against 7.7 with reduction-chains)
    assert rules["avg_pool2d"] == "pooling-rows"
    assert rules["max_pool2d"] == "pooling-rows"

    @T.prim_func(private=True, s_tir=True)
    def mean(x: T.Buffer((1, 40, 13, 13), "float32"), y: T.Buffer((1, 40, 1, 1), "float32")):
        T.func_attr({"tvm_hetero.op_kinds": ["mean"]})
        total = T.sblock_alloc_buffer((1, 40, 1, 1))
        for n, c, h, w, kh, kw in T.grid(1, 40, 1, 1, 13, 13):
            with T.sblock("sum"):
                vn, vc, vh, vw, vkh, vkw = T.axis.remap("SSSSRR", [n, c, h, w, kh, kw])
                with T.init():
                    total[vn, vc, vh, vw] = T.float32(0)
                total[vn, vc, vh, vw] = total[vn, vc, vh, vw] + x[vn, vc, vkh, vkw]
        for n, c, h, w in T.grid(1, 40, 1, 1):
            with T.sblock("divide"):
                vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
                y[vn, vc, vh, vw] = total[vn, vc, vh, vw] / T.float32(169)

    target = cpu_devices["cpu"].tvm_target()
    scheduled = ReductionChains().apply(mean, target)
    # 5 tasks of 8 channels, their 8 accumulators updated side by side (unrolled innermost)
    assert re.search(r"in T.parallel\(5\):(.|\n)*for \w+, \w+ in T.grid\(13, 13\):\n\s+"
                     r"for \w+ in T.unroll\(8\):", scheduled.script()), scheduled.script()
    lib = tvm.tirx.build(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}),
                         target=target)
    x = np.random.default_rng(0).standard_normal((1, 40, 13, 13)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, 40, 1, 1), "float32"))
    lib["main"](tvm.runtime.tensor(x), out)
    np.testing.assert_allclose(out.numpy(), x.astype("float64").mean(axis=(2, 3), keepdims=True),
                               rtol=1e-5, atol=1e-6)

    assert ReductionChains().apply(_max_pool_17_wide(), target) is None


def _gemv(k: int, n: int):
    @T.prim_func(private=True, s_tir=True)
    def gemv(x: T.Buffer((1, k), "float32"), w: T.Buffer((k, n), "float32"),
             y: T.Buffer((1, n), "float32")):
        T.func_attr({"tvm_hetero.op_kinds": ["matmul"]})
        for i, j, r in T.grid(1, n, k):
            with T.sblock("matmul"):
                vi, vj, vr = T.axis.remap("SSR", [i, j, r])
                with T.init():
                    y[vi, vj] = T.float32(0)
                y[vi, vj] = y[vi, vj] + x[vi, vr] * w[vr, vj]

    return gemv


def test_a_large_matrix_vector_product_is_split_along_its_reduction(cpu_devices):
    import numpy as np
    import tvm

    from tvm_hetero.optimize.cpu import SplitKGemv

    target = cpu_devices["cpu"].tvm_target()
    scheduled = SplitKGemv().apply(_gemv(2048, 1024), target)
    # 8 parallel slices of 256 weight rows, each row walked whole (the outputs innermost)
    assert re.search(r"in T.parallel\(8\):(.|\n)*for \w+, \w+ in T.grid\(256, 1024\):",
                     scheduled.script()), scheduled.script()
    lib = tvm.tirx.build(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}),
                         target=target)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2048)).astype("float32")
    w = rng.standard_normal((2048, 1024)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, 1024), "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    np.testing.assert_allclose(out.numpy(), x.astype("float64") @ w, rtol=1e-4, atol=1e-4)
    assert SplitKGemv().apply(_gemv(2048, 10), target) is None  # 80 KB: stays in cache, tiled
    assert th.build(zoo("cnn"), "all:cpu", cpu_devices).stats.rules["fused_matmul_add2"] \
        == "tiled"


def _elementwise_add():
    @T.prim_func(private=True, s_tir=True)
    def add(a: T.Buffer((64, 64), "float32"), b: T.Buffer((64, 64), "float32"),
            y: T.Buffer((64, 64), "float32")):
        T.func_attr({"tvm_hetero.op_kinds": ["add"]})
        for i, j in T.grid(64, 64):
            with T.sblock("add"):
                vi, vj = T.axis.remap("SS", [i, j])
                y[vi, vj] = a[vi, vj] + b[vi, vj]

    return add


def test_parallel_loops_keeps_the_innermost_loop_of_an_elementwise_kernel_apart():
    import tvm

    from tvm_hetero.optimize.cpu import ParallelLoops

    @T.prim_func(private=True, s_tir=True)
    def concat(a: T.Buffer((1, 64, 55, 55), "float32"), b: T.Buffer((1, 64, 55, 55), "float32"),
               y: T.Buffer((1, 128, 55, 55), "float32")):
        for n, c, h, w in T.grid(1, 128, 55, 55):
            with T.sblock("concat"):
                vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
                y[vn, vc, vh, vw] = T.if_then_else(64 <= vc, b[vn, vc - 64, vh, vw],
                                                   a[vn, vc, vh, vw])

    script = ParallelLoops().apply(concat, tvm.target.Target({"kind": "llvm"})).script()
    # rows in parallel; each row's 55 columns one inner loop (no index division per element)
    assert re.search(r"in T.parallel\(7040\):\n\s+for \w+ in range\(55\):", script), script


def test_a_residual_add_goes_to_the_tiled_rule_where_it_gets_whole_vectors(cpu_devices):
    rules = th.build(zoo_direct("resnet"), "all:cpu", cpu_devices).stats.rules
    # the same 3x3 convolutions (32 and 16 columns), with and without the residual add
    assert rules["fused_conv2d1_add_add1_relu"] == rules["fused_conv2d3_add2_add3_relu1"] \
        == "tiled"
    # without it: 32 channels are packed; 16 channels, one vector, go to tiled (a packed
    # tile of one channel vector loads 17 vectors per 16 multiply-adds)
    assert rules["fused_conv2d3_add2_relu1"] == "packed-weights"
    assert rules["fused_conv2d1_add_relu"] == "tiled"


def _padded_convolutions(model, target):
    """``{kernel: (rule, parallel loops)}`` of a model's convolutions that pad their input."""
    import tvm

    from tvm_hetero.layers.layered import layered_module

    found = {}
    for gv, func in layered_module(model).functions_items():
        if isinstance(func, tvm.tirx.PrimFunc) and kernel_kind(func) == "conv2d" \
                and "T.if_then_else(" in func.script():  # real padding, not a copy
            scheduled, rule = optimize.optimize_function(func.with_attr("target", target),
                                                         target)
            found[gv.name_hint] = (rule, scheduled.script().count("T.parallel("))
    return found


def test_small_convolutions_pad_their_input_per_parallel_task(cpu_devices):
    target = cpu_devices["cpu"].tvm_target()
    # the zoo models' padded direct convolutions (tiled and packed-weights) and their
    # Winograd ones: one parallel loop, each task padding the rows it reads
    for name in ("vgg", "resnet"):
        found = _padded_convolutions(zoo_direct(name), target)
        assert {rule for rule, _ in found.values()} == {"tiled", "packed-weights"}
        assert all(loops == 1 for _, loops in found.values()), found
        found = _padded_convolutions(zoo(name), target)
        # (the RGB convolution and the zoo ResNet's strided 3x3 one are blocked, and small
        # enough to pad per task)
        assert {rule for rule, _ in found.values()} == {"winograd", "blocked-nchwc"}
        assert all(loops == 1 for _, loops in found.values()), found
    # ResNet-50's blocked ones would pad 45-55 KB per task: padded first, in a loop of its own;
    # its RGB one (3 channels, one block) pads per task
    found = _padded_convolutions(light("resnet50"), target)
    blocked = sorted(loops for rule, loops in found.values() if rule == "blocked-nchwc")
    assert len(blocked) > 2 and blocked[0] == 1 and set(blocked[1:]) == {2}


def test_a_winograd_kernel_is_one_parallel_loop_with_its_epilogue_inlined(cpu_devices):
    import tvm

    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize.cpu import Winograd, is_winograd

    target = cpu_devices["cpu"].tvm_target()
    mod = layered_module(zoo("resnet"))
    kernels = {gv.name_hint: func for gv, func in mod.functions_items()
               if isinstance(func, tvm.tirx.PrimFunc) and is_winograd(func)}
    # the 3x3 stride-1 convolutions, two with a residual add
    assert sorted(kernels) == ["fused_conv2d1_add_add1_relu", "fused_conv2d1_add_relu",
                               "fused_conv2d3_add2_add3_relu1", "fused_conv2d3_add2_relu1"]
    for func in kernels.values():
        scheduled, rule = optimize.optimize_function(func.with_attr("target", target), target)
        assert rule == "winograd"
        text = scheduled.script()
        assert text.count("T.parallel(") == 1  # one task per row of output tiles
        # the bias, residual and relu written with the output, not blocks of their own
        assert not re.search(r'T\.sblock\("T_(add|relu)', text)
        assert re.search(r"T\.vectorized\((T\.int64\()?16", text)
    # a direct convolution is not the rule's
    direct = mod["fused_conv2d2_add2_relu1"]
    assert not is_winograd(direct) and Winograd().apply(direct, target) is None


def test_a_layout_transform_is_copied_row_by_row_in_parallel(cpu_devices):
    from tvm_hetero.layers.layered import layered_module
    from tvm_hetero.optimize.cpu import LayoutCopies

    target = cpu_devices["cpu"].tvm_target()
    model = zoo("resnet")
    rules = th.build(model, "all:cpu", cpu_devices).stats.rules
    assert rules["te_layout_transform"] == rules["te_layout_transform1"] == "layout-copies"
    # ResNet-50's image into NCHW3c: [1, 3, 224, 224] -> [1, 1, 224, 224, 3]; contiguous
    # reads along the columns
    text = LayoutCopies().apply(layered_module(light("resnet50"))["te_layout_transform"],
                                target).script()
    assert "T.parallel(T.int64(672))" in text and "T.vectorized(T.int64(224))" in text
    # the parallel loop runs over output rows first (row = fused // 3): each task writes whole
    # rows, not alternate parts of the same cache lines
    assert re.search(r"v_i1 = T\.axis\.spatial\(T\.int64\(224\), \w+ // T\.int64\(3\)\)",
                     text)
    assert LayoutCopies().apply(layered_module(model)["fused_conv2d_add_relu"], target) is None
