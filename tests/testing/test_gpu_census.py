"""The census's no-GPU goals for CUDA kernels, checked on suite models built all on
``cuda@sm_90``: no convolution, matmul, depthwise or pooling kernel on dlight's catch-all
rules, scheduled work within 1.3x of the layer's, no register spills (nvcc), threads and shared
memory within sm_90's limits, and every kernel over 10 MFLOP on at least one block per SM."""

import shutil

import pytest

import tvm_hetero as th
from tvm_hetero.target import cuda_multiprocessors
from tvm_hetero.testing.gpu_census import GOALS, KernelRow, census, misses
from tvm_hetero.testing.suite import SUITE

ARCH = "sm_90"
# small suite models that reach every heavy kind: dense at batch 8, attention, depthwise
# convolutions with squeeze-and-excite, grouped convolutions, max and average pooling
QUICK = ("mlp_b8", "bert_layer", "mobilenet_v3_block", "efficientnet_block", "squeezenet")
# the rest of the suite (several minutes)
REST = tuple(name for name in SUITE if name not in QUICK)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def _missed(name: str) -> list[str]:
    proto, _ = SUITE[name]()
    rows, _ = census(th.load_model(proto, name=name), ARCH,
                     with_nvcc=shutil.which("nvcc") is not None)
    assert rows, f"{name}: no CUDA kernel"
    sms = cuda_multiprocessors(ARCH)
    return [f"{name}: {row.kernel} ({row.kind}, {row.rule}): {'; '.join(problems)}"
            for row in rows if (problems := misses(row, sms, ARCH))]


@pytest.mark.parametrize("name", QUICK)
def test_cuda_kernels_meet_the_goals(name):
    assert _missed(name) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", REST)
def test_cuda_kernels_of_the_rest_of_the_suite_meet_the_goals(name):
    assert _missed(name) == []


def test_each_goal_is_reported():
    sms = cuda_multiprocessors(ARCH)
    fine = KernelRow("k", "conv2d", "tvm_hetero.gpu.x", mflop=100.0, scheduled_mflop=110.0,
                     blocks=sms, threads=256, registers=64, spill_bytes=0, shared_bytes=4096)
    assert misses(fine, sms, ARCH) == []
    broken = KernelRow("k", "pooling", "dlight.gpu.Fallback", mflop=100.0,
                       scheduled_mflop=100.0 * GOALS.max_work * 2, blocks=sms - 1,
                       threads=2048, registers=255, spill_bytes=8, shared_bytes=64 << 10)
    found = " | ".join(misses(broken, sms, ARCH))
    for words in ("heavy kernel on Fallback", "work 2.6x", "spills 8 B",
                  f"{sms - 1} blocks < {sms} SMs", "2048 threads > 1024", "B shared >"):
        assert words in found, found


@needs_nvcc
def test_nvcc_resources_read_registers_spills_and_shared_memory():
    from tvm_hetero.testing.gpu_census import nvcc_resources

    source = """
extern "C" __global__ void __launch_bounds__(128) tile_kernel(float* out, const float* in) {
  __shared__ float tile[1024];
  tile[threadIdx.x] = in[blockIdx.x * 128 + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * 128 + threadIdx.x] = tile[127 - threadIdx.x] * 2.0f;
}
"""
    found = nvcc_resources(source, ARCH)
    assert found["tile_kernel"]["shared_bytes"] == 4096
    assert found["tile_kernel"]["spill_bytes"] == 0
    assert 0 < found["tile_kernel"]["registers"] <= 32


def _activation_times_vector():
    """[2048, 1024] x [1024, 1]: dlight's GEMV stages 16,384 floats of the activation (64 KiB)
    in shared memory, over sm_90's 48 KiB."""
    from tvm import te

    data = te.placeholder((2048, 1024), name="data")
    weight = te.placeholder((1024, 1), name="weight")
    k = te.reduce_axis((0, 1024), name="k")
    out = te.compute((2048, 1), lambda i, j: te.sum(data[i, k] * weight[k, j], axis=k))
    return te.create_prim_func([data, weight, out]).with_attr("tirx.noalias", True)


def test_a_kernel_over_the_gpus_shared_memory_goes_to_the_next_rule():
    from tvm_hetero.optimize.gpu import DlightRule
    from tvm_hetero.optimize.gpu.limits import within_gpu_limits
    from tvm_hetero.optimize.pass_ import optimize_function
    from tvm_hetero.optimize.table import default_table

    target = th.DeviceSet.parse([f"cuda@{ARCH}"])[0].tvm_target()
    func = _activation_times_vector()
    gemv = DlightRule("gpu", "GEMV").apply(func, target)
    assert gemv is not None and not within_gpu_limits(gemv, target)
    table = default_table().with_rules("cuda", "matmul", [DlightRule("gpu", "GEMV"),
                                                          DlightRule("gpu", "Fallback")])
    scheduled, rule = optimize_function(func, target, "activation_times_vector", table)
    assert rule == "dlight.gpu.Fallback"
    assert within_gpu_limits(scheduled, target)


def convnext_stage(channels: int = 32, size: int = 32):
    """ConvNeXt's pattern as torch's TorchScript exporter writes it (opset 17): a 2x2
    stride-2 downsampling convolution, one block (a 7x7 depthwise convolution, a transpose to
    channels-last, LayerNorm over the channels, a pointwise MLP with an exact GELU, the
    transpose back, the layer scale and the residual add), then the next downsampling
    (transpose, LayerNorm, transpose, 2x2 convolution)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node
    c, hidden = channels, 4 * channels
    shapes = {"wd": (c, c // 2, 2, 2), "bd": (c,), "wdw": (c, 1, 7, 7), "bdw": (c,),
              "g1": (c,), "b1": (c,), "w1": (c, hidden), "bb1": (hidden,), "w2": (hidden, c),
              "bb2": (c,), "scale": (c, 1, 1), "g2": (c,), "b2": (c,),
              "wn": (2 * c, c, 2, 2), "bn": (2 * c,)}
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype("float32"), k)
             for k, s in shapes.items()]
    inits += [numpy_helper.from_array(np.array(v, "float32"), k)
              for k, v in (("sqrt2", 2 ** 0.5), ("one", 1.0), ("half", 0.5))]
    nodes = [
        node("Conv", ["x", "wd", "bd"], ["d"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["d", "wdw", "bdw"], ["dw"], kernel_shape=[7, 7], pads=[3, 3, 3, 3],
             group=c),
        node("Transpose", ["dw"], ["t"], perm=[0, 2, 3, 1]),
        node("LayerNormalization", ["t", "g1", "b1"], ["ln"], axis=-1, epsilon=1e-6),
        node("MatMul", ["ln", "w1"], ["m1"]), node("Add", ["bb1", "m1"], ["a1"]),
        node("Div", ["a1", "sqrt2"], ["q"]), node("Erf", ["q"], ["e"]),
        node("Add", ["e", "one"], ["e1"]), node("Mul", ["a1", "e1"], ["g"]),
        node("Mul", ["g", "half"], ["gh"]),
        node("MatMul", ["gh", "w2"], ["m2"]), node("Add", ["bb2", "m2"], ["a2"]),
        node("Transpose", ["a2"], ["t2"], perm=[0, 3, 1, 2]),
        node("Mul", ["scale", "t2"], ["s"]), node("Add", ["s", "d"], ["r"]),
        node("Transpose", ["r"], ["t3"], perm=[0, 2, 3, 1]),
        node("LayerNormalization", ["t3", "g2", "b2"], ["ln2"], axis=-1, epsilon=1e-6),
        node("Transpose", ["ln2"], ["t4"], perm=[0, 3, 1, 2]),
        node("Conv", ["t4", "wn", "bn"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(
        nodes, "convnext_stage",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c // 2, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                       [1, 2 * c, size // 4, size // 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def stage():
    return th.load_model(convnext_stage(), name="convnext_stage")


def test_a_convnext_stage_built_all_on_cuda_meets_the_goals(stage, caplog):
    """ConvNeXt-T all on cuda ran every layer in the CPU forms (the blocked layout cut the
    layer of a stage's last residual add in two), so its blocked 7x7 depthwise convolutions
    went to GeneralReduction at 7.8x their work; in the model's own form they are depthwise
    convolutions that window-tiles takes."""
    with caplog.at_level("WARNING", logger="tvm_hetero.layers.layered"):
        rows, _ = census(stage, ARCH, with_nvcc=shutil.which("nvcc") is not None)
    assert "every layer runs the CPU forms" not in caplog.text
    sms = cuda_multiprocessors(ARCH)
    assert [(row.kernel, problems) for row in rows
            if (problems := misses(row, sms, ARCH))] == []
    assert [row.rule for row in rows if row.kind == "depthwise"] == ["window-tiles"]


def test_the_transpose_after_a_stages_last_residual_add_is_a_piece_of_its_layer(stage):
    """In the model's form the residual add and the transpose to channels-last after it are
    one layer (``reshape_1``); on a CPU the add reads the blocked shortcut and the transpose
    reads the transform out of it. The transpose kernel is also the layer ``transpose_0``
    (after the depthwise convolution), so the piece calls get a copy of their own
    (``transpose_piece``) and the CPU forms keep the model form's layer names."""
    import numpy as np

    from tvm_hetero.layers.classify import classify_bindings
    from tvm_hetero.layers.layered import layer_forms
    from tvm_hetero.prepare import PrepareConfig
    from tvm_hetero.testing import max_relative_error, onnx_reference

    devices = th.DeviceSet.parse([f"cuda@{ARCH}"])
    forms = layer_forms(stage, PrepareConfig.for_devices(devices))

    def layers(mod):
        return {(info.name, b.value.args[0].name_hint, info.form_kernel)
                for b, info in classify_bindings(mod) if info is not None}

    cpu, own = layers(forms.cpu_form()), layers(forms.model_form())
    assert {(name, kernel) for name, kernel, piece in cpu if piece
            and "layout_transform" not in kernel} == {("reshape_1", "add4"),
                                                       ("reshape_1", "transpose_piece")}
    assert ("transpose_0", "transpose", False) in cpu
    assert sorted(n for n, _, piece in cpu if not piece) == sorted(n for n, _, _ in own)
    names = sorted(n for n, _, _ in own)
    forms.placed({n for n in names if n != "reshape_1"})  # mixed forms: no FormsMismatch
    # the CPU forms still compute the model (the copy is the same kernel)
    inputs = stage.random_inputs(seed=1)
    got = th.build(stage, "all:cpu", th.DeviceSet.parse(["cpu"])).run(inputs)
    want = onnx_reference(convnext_stage(), inputs, stage)
    assert max_relative_error(got, want) < 1e-4, np.abs(got[0] - want[0]).max()


def aspp_block(channels: int = 32, size: int = 16):
    """DeepLabV3's pattern (its ASPP on a 16x16 map): a depthwise convolution (the blocked
    layout on a CPU), then a 1x1 and two atrous 3x3 convolutions of rates 12 and 24 reading its
    output, concatenated, ReLU, a 1x1 projection. DropPaddingTaps computes the atrous ones by
    bands of outputs, each from its own slice of the map: slices of one map that both read."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node
    c = channels
    shapes = {"wd": (c, 1, 3, 3), "bd": (c,), "w12": (c, c, 3, 3), "w24": (c, c, 3, 3),
              "w1": (c, c, 1, 1), "wp": (c, 3 * c, 1, 1)}
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype("float32"), k)
             for k, s in shapes.items()]
    nodes = [
        node("Conv", ["x", "wd", "bd"], ["d"], kernel_shape=[3, 3], pads=[1] * 4, group=c),
        node("Relu", ["d"], ["a"]),
        node("Conv", ["a", "w1"], ["b1"], kernel_shape=[1, 1]),
        node("Conv", ["a", "w12"], ["b12"], kernel_shape=[3, 3], pads=[12] * 4,
             dilations=[12, 12]),
        node("Conv", ["a", "w24"], ["b24"], kernel_shape=[3, 3], pads=[24] * 4,
             dilations=[24, 24]),
        node("Concat", ["b1", "b12", "b24"], ["cat"], axis=1),
        node("Relu", ["cat"], ["r"]),
        node("Conv", ["r", "wp"], ["y"], kernel_shape=[1, 1])]
    graph = helper.make_graph(
        nodes, "aspp_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, size, size])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_models_own_slices_of_a_blocked_map_stay_layers_on_a_cpu(caplog):
    """DropPaddingTaps' slices of the map the atrous convolutions read: on a CPU they read the
    transform out of the blocked layout, where the padded channels' slices of the CPU forms
    would; they are layers of the model's form (the bands' slices of both convolutions, one
    each: the duplicates merged in the model phase, as the blocked layout merges them), so the
    CPU forms keep them layers and the names match. All on cuda: the model's form, the goals
    met; all on cpu: onnxruntime's values."""
    from tvm_hetero.layers.classify import classify_bindings
    from tvm_hetero.layers.layered import layer_forms
    from tvm_hetero.prepare import PrepareConfig
    from tvm_hetero.testing import max_relative_error, onnx_reference

    model = th.load_model(aspp_block(), name="aspp_block")
    forms = layer_forms(model, PrepareConfig.for_devices(th.DeviceSet.parse([f"cuda@{ARCH}"])))

    def layers(mod):
        return [(info.name, info.op_kinds[0]) for _, info in classify_bindings(mod)
                if info is not None and not info.form_kernel]

    cpu, own = layers(forms.cpu_form()), layers(forms.model_form())
    assert sorted(cpu) == sorted(own)
    assert sorted(n for n, kind in own if kind == "strided_slice") == [
        "strided_slice_0", "strided_slice_1", "strided_slice_2"]
    with caplog.at_level("WARNING", logger="tvm_hetero.layers.layered"):
        rows, _ = census(model, ARCH, with_nvcc=False)
    assert "every layer runs the CPU forms" not in caplog.text
    sms = cuda_multiprocessors(ARCH)
    assert [(row.kernel, problems) for row in rows
            if (problems := misses(row, sms, ARCH))] == []
    inputs = model.random_inputs(seed=1)
    got = th.build(model, "all:cpu", th.DeviceSet.parse(["cpu"])).run(inputs)
    assert max_relative_error(got, onnx_reference(aspp_block(), inputs, model)) < 1e-4
