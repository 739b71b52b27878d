"""Builds of small generated graphs at the rules' edges, each against onnxruntime and
against TVM's default loops (``optimize=False``):

- fan-out epilogues (the convolution's output read twice and joined again: SiLU's
  ``c * sigmoid(c)``, ``c + c * s``, ``c * (c / s)``) on every convolution rule; on the
  Winograd convolution they failed to build ("Buffer T_add_intermediate is used before its
  definition");
- epilogues broadcasting the convolution's tile over more pixels (a squeeze-and-excite gate)
  or more images: unrolled, they took from 10 s to minutes of LLVM code generation. Every
  build here checks, before code generation, that no kernel unrolls more than
  ``MAX_UNROLLED_COPIES`` copies of a block (a structural bound, not a timing);
- the per-kernel compile times in ``BuildStats``.
"""

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

import tvm_hetero as th
from tvm_hetero.build.compile import KernelCache
from tvm_hetero.optimize.cpu.analysis import max_unrolled_copies
from tvm_hetero.optimize.cpu.schedule_helpers import MAX_UNROLLED_COPIES
from tvm_hetero.relax_ir import OP_KINDS_ATTR
from tvm_hetero.testing.models import onnx_reference


def _model(nodes, inputs, inits):
    graph = helper.make_graph(nodes, "edge", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _conv_model(epilogue, cin, cout, size, kernel=3, stride=1, group=1, scale="const",
                bias=True, stem=False):
    """``x -> Conv -> epilogue -> y``: ``silu`` ``c * sigmoid(c)``, ``add_mul`` ``c + c * s``,
    ``mul_div`` ``c * (c / s)``, `s` a scalar constant or (``scale="input"``) an input of the
    convolution's output shape. With `stem`, a 16 -> `cin` 3x3 convolution that runs as
    Winograd comes first (the model's convolutions then go to the blocked layout)."""
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    if stem:
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((cin, 16, 3, 3)) * 0.2).astype(np.float32), "w0"))
        nodes.append(helper.make_node("Conv", ["x0", "w0"], ["x"], kernel_shape=[3, 3],
                                      pads=[1] * 4))
        x = "x0"
    inits.append(numpy_helper.from_array(
        (rng.standard_normal((cout, cin // group, kernel, kernel)) * 0.2).astype(np.float32),
        "w"))
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b"))
        conv_inputs.append("b")
    nodes.append(helper.make_node("Conv", conv_inputs, ["c"], kernel_shape=[kernel, kernel],
                                  pads=[kernel // 2] * 4, strides=[stride] * 2, group=group))
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT,
                                            [1, 16 if stem else cin, size, size])]
    out_size = (size + 2 * (kernel // 2) - kernel) // stride + 1
    if scale == "const":
        inits.append(numpy_helper.from_array(np.array(1.7, np.float32), "s"))
    else:
        inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT,
                                                    [1, cout, out_size, out_size]))
    nodes += {
        "silu": [helper.make_node("Sigmoid", ["c"], ["d"]),
                 helper.make_node("Mul", ["c", "d"], ["y"])],
        "add_mul": [helper.make_node("Mul", ["c", "s"], ["d"]),
                    helper.make_node("Add", ["c", "d"], ["y"])],
        "mul_div": [helper.make_node("Div", ["c", "s"], ["d"]),
                    helper.make_node("Mul", ["c", "d"], ["y"])],
    }[epilogue]
    return _model(nodes, inputs, inits)


def _squeeze_excite(channels, in_channels, full, size=32):
    """``Conv 3x3 -> GlobalAveragePool -> 1x1 Conv [-> Relu -> 1x1 Conv -> Sigmoid] -> Mul``
    with the first convolution's output (``full``: the whole squeeze-and-excite block, a
    quarter of the channels in its squeeze)."""
    rng = np.random.default_rng(0)

    def weight(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)

    squeezed = max(1, channels // 4)
    inits = [weight("w", (channels, in_channels, 3, 3)), weight("b", (channels,))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3],
                              pads=[1] * 4),
             helper.make_node("GlobalAveragePool", ["c"], ["g"])]
    if full:
        inits += [weight("w1", (squeezed, channels, 1, 1)), weight("b1", (squeezed,)),
                  weight("w2", (channels, squeezed, 1, 1)), weight("b2", (channels,))]
        nodes += [helper.make_node("Conv", ["g", "w1", "b1"], ["s1"], kernel_shape=[1, 1]),
                  helper.make_node("Relu", ["s1"], ["r"]),
                  helper.make_node("Conv", ["r", "w2", "b2"], ["s2"], kernel_shape=[1, 1]),
                  helper.make_node("Sigmoid", ["s2"], ["s"])]
    else:
        inits.append(weight("w1", (channels, channels, 1, 1)))
        nodes.append(helper.make_node("Conv", ["g", "w1"], ["s"], kernel_shape=[1, 1]))
    nodes.append(helper.make_node("Mul", ["c", "s"], ["y"]))
    return _model(nodes, [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, in_channels, size, size])], inits)


def _bounded_unrolling(copies: dict):
    """A pass run after scheduling: records each kernel's `max_unrolled_copies` in `copies`
    and fails the build (before code generation, which such a kernel would hold up for
    minutes) where one exceeds ``MAX_UNROLLED_COPIES``."""

    @tvm.transform.module_pass(opt_level=0, name="test.BoundedUnrolling")
    def check(mod, _ctx):
        for gv, func in mod.functions_items():
            if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None \
                    and OP_KINDS_ATTR in func.attrs:
                copies[gv.name_hint] = max_unrolled_copies(func)
        over = {name: n for name, n in copies.items() if n > MAX_UNROLLED_COPIES}
        assert not over, f"kernels unroll more than {MAX_UNROLLED_COPIES} copies: {over}"
        return mod

    return check


def _inputs(model, seed=1):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim])
            .astype(np.float32) for v in model.graph.input}


def _built_and_checked(model, **build):
    """Build all on ``cpu`` (unrolling bounded), run, compare with onnxruntime and with TVM's
    default loops; returns ``(rules by kernel, unrolled copies by kernel)``."""
    inputs = _inputs(model)
    copies = {}
    compiled = th.build(model, "all:cpu", ["cpu"], extra_passes=[_bounded_unrolling(copies)],
                        **build)
    got = compiled.run(inputs)[0]
    want = onnx_reference(model, inputs)[0]
    plain = th.build(model, "all:cpu", ["cpu"], optimize=False).run(inputs)[0]
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * scale)
    np.testing.assert_allclose(got, plain, rtol=0, atol=2e-5 * scale)
    return compiled.stats.rules, copies


# (convolution, the rule that schedules it, epilogues): the rule is the same on AVX2 and
# AVX-512 hosts
FAN_OUT_CASES = [
    ("winograd", dict(cin=16, cout=32, size=20), "winograd",
     [("silu", "const"), ("add_mul", "const"), ("add_mul", "input"), ("mul_div", "input")]),
    ("3x3-stride-2", dict(cin=16, cout=32, size=20, stride=2), "packed-weights",
     [("silu", "const"), ("add_mul", "input")]),
    ("1x1", dict(cin=16, cout=32, size=16, kernel=1), "pixel-lanes-1x1",
     [("silu", "const"), ("add_mul", "input")]),
    ("ragged-channels", dict(cin=3, cout=10, size=13), "tiled",
     [("silu", "const"), ("mul_div", "input")]),
    ("depthwise", dict(cin=16, cout=16, size=30, group=16), "depthwise-rows",
     [("silu", "const")]),
    ("blocked-3x3-stride-2", dict(cin=16, cout=32, size=20, stride=2, stem=True),
     "blocked-nchwc", [("silu", "const"), ("add_mul", "input")]),
    ("blocked-depthwise", dict(cin=16, cout=16, size=20, group=16, stem=True),
     "depthwise-nchwc", [("silu", "const"), ("mul_div", "input")]),
]


@pytest.mark.parametrize("conv, rule, epilogue, scale", [
    pytest.param(conv, rule, epilogue, scale, id=f"{name}-{epilogue}-{scale}")
    for name, conv, rule, epilogues in FAN_OUT_CASES for epilogue, scale in epilogues])
def test_fan_out_epilogues_build_and_match_onnxruntime(conv, rule, epilogue, scale):
    rules, _ = _built_and_checked(_conv_model(epilogue, scale=scale, **conv))
    assert rule in rules.values()


def test_winograd_takes_a_silu_without_bias():
    # the convolution's own output block feeds the two paths: nothing between them
    rules, _ = _built_and_checked(_conv_model("silu", cin=16, cout=32, size=20, bias=False))
    assert "winograd" in rules.values()


@pytest.mark.parametrize("channels, in_channels, full, gate_rule", [
    (16, 3, False, "packed-weights"),  # 27 s of LLVM before, 1024 unrolled copies
    (63, 63, False, "packed-weights"),  # padded to 64 channels; minutes before
    (14, 14, True, None),  # the whole block of the issue (8 min 50 s on its machine)
])
def test_squeeze_excite_gate_is_not_unrolled_over_the_pixels(channels, in_channels, full,
                                                             gate_rule):
    rules, copies = _built_and_checked(_squeeze_excite(channels, in_channels, full))
    gate = [name for name in rules if name.endswith("multiply") and "conv2d" in name]
    assert len(gate) == 1
    if gate_rule is not None:
        assert rules[gate[0]] == gate_rule
    # the gate's multiply over 32x32 pixels per channel is a loop: only the register tile is
    # unrolled around it
    assert copies[gate[0]] <= 16


def test_an_epilogue_over_more_images_than_the_convolution_is_not_vectorized_along_them():
    # conv(x)[1, 32, 10, 10] + r[8, 32, 10, 10]: packed-weights vectorized the images
    # (predicated gathers, 160 unrolled copies, 19 s of LLVM); it declines, tiled takes it
    rng = np.random.default_rng(0)
    model = _model(
        [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
         helper.make_node("Add", ["c", "r"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 10, 10]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [8, 32, 10, 10])],
        [numpy_helper.from_array((rng.standard_normal((32, 16, 3, 3)) * 0.3)
                                 .astype(np.float32), "w")])
    rules, _ = _built_and_checked(model)
    assert "packed-weights" not in rules.values()


def test_build_stats_report_compile_seconds_per_target_and_per_kernel():
    model = _conv_model("silu", cin=16, cout=32, size=20)
    stats = th.build(model, "all:cpu", ["cpu"]).stats
    assert len(stats.target_compile_s) == 1 and not stats.kernel_compile_s
    assert all(seconds >= 0 for seconds in stats.target_compile_s.values())
    assert sum(stats.target_compile_s.values()) <= stats.codegen_s

    stats = th.build(model, "all:cpu", ["cpu"], kernel_cache=KernelCache()).stats
    assert set(stats.rules) <= set(stats.kernel_compile_s)
    slowest = stats.slowest_kernels(3)
    assert len(slowest) == 3
    assert [s for _, s, _ in slowest] == sorted((s for _, s, _ in slowest), reverse=True)
    assert all(rule == stats.rules.get(name) for name, _, rule in slowest)
    assert "winograd" in [rule for _, _, rule in stats.slowest_kernels(len(stats.rules))]


def test_a_model_whose_layout_conversion_tvm_cannot_type_stays_nchw_and_builds():
    # generated graph 578: a blocked convolution's output sliced, then Expand (broadcast_to);
    # TVM's ConvertLayout carried the slice blocked and failed to type the broadcast
    # (ValueError), which failed the build; the model now keeps the NCHW layout
    from tvm_hetero.testing import random_graph, random_inputs

    model = random_graph(578)
    compiled = th.build(model, "all:cpu", ["cpu"])
    feeds = random_inputs(model, 578)
    got = compiled.run(feeds)
    for a, b in zip(got, onnx_reference(model, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * max(np.abs(b).max(), 1))
    assert "blocked-nchwc" not in compiled.stats.rules.values()
