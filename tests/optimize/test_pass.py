import json
import numpy as np
import pytest
import re
from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero import optimize
from tvm_hetero.layers.classify import LAYER_KINDS, kernel_kind
from tvm_hetero.testing import max_relative_error, onnx_reference, random_placement

from tests.helpers.models import light, zoo, zoo_direct


# light:resnet50 (40 s) and light:bvlc_alexnet (20 s) are slow: the default run has the zoo's
# resnet, ResNet-50's all-on-cpu build (shared with the tests of its rules) against
# onnxruntime below, and AlexNet's random placements in build/test_compile.py
@pytest.mark.parametrize("name", ["mlp", "cnn", "vgg", "resnet", "transformer",
                                  pytest.param("light:bvlc_alexnet", marks=pytest.mark.slow),
                                  "light:squeezenet",
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
        # 1e-4: cpu-generic's layers round without FMA (tests/build/test_compile.py)
        assert max_relative_error(compiled.run(inputs), reference) < 1e-4


def test_resnet50s_all_on_cpu_build_matches_onnxruntime(cpu_devices):
    """ResNet-50 (the onnx package's graph, seeded weights) in the default run: the build the
    tests of its rules read, run, against onnxruntime (random placements: build/test_compile.py,
    slow)."""
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
                                         "packed-weights", "depthwise-rows",
                                         "strided-depthwise-rows", "tiled", "row-reductions",
                                         "symbolic-loops", "parallel-loops"]
    assert by_pair[("cpu", "matmul")] == ["packed-matmul", "split-k-gemv", "tiled",
                                         "row-reductions", "symbolic-loops", "parallel-loops"]
    assert by_pair[("cpu", "pooling")] == ["pooling-rows", "reduction-chains",
                                          "symbolic-loops", "parallel-loops"]
    assert by_pair[("cpu", "reduction")] == ["scan-lines", "row-reductions",
                                            "reduction-chains", "symbolic-loops",
                                            "parallel-loops",
                                            "dlight.cpu.Reduction"]
    assert by_pair[("cpu", "elementwise")] == ["concat-copies", "layout-copies",
                                              "separable-resize", "injective-lanes",
                                              "symbolic-loops", "parallel-loops"]
    assert by_pair[("cpu", "normalization")] == ["row-reductions", "symbolic-loops",
                                                "parallel-loops"]
    assert by_pair[("cpu", "other")] == ["separable-resize", "injective-lanes",
                                        "symbolic-loops", "parallel-loops"]
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
                      "symbolic-loops", "parallel-loops"]} in table


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


def test_resnet50s_blocked_convolutions_take_the_blocked_rule(cpu_devices):
    model = light("resnet50")
    layers = th.extract_layers(model)
    rules = _built_all_on_cpu("resnet50", cpu_devices).stats.rules
    blocked = {layer.func_name for layer in layers if layer.kind == "conv2d"
               and len(layer.outputs[0].shape) == 5}
    assert len(blocked) == 24  # 53 calls: every convolution (the RGB one reads one block)
    # the stride-1 3x3 ones at 56x56 (64 channels) and 28x28 (128) are Winograd; the deeper
    # ones have too few tiles for their weights (see tests/layers/test_extract.py)
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
