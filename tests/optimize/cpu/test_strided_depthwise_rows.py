"""The ``strided-depthwise-rows`` rule: stride-2 NCHW depthwise convolutions, each task's padded
rows split into even and odd columns. Which rule the table gives such a kernel, the schedule's
structure, and what it computes against numpy."""

import numpy as np
import pytest
import tvm
from tvm import s_tir, te, tirx, topi

from tvm_hetero.optimize.cpu import StridedDepthwiseRows
from tvm_hetero.optimize.pass_ import optimize_function
from tvm_hetero.relax_ir import OP_KINDS_ATTR

# AVX-512 (16 lanes) and AVX2 (8 lanes), 2 cores, whatever the host
TARGETS = {mcpu: tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
           for mcpu in ("skylake-avx512", "haswell")}


def _depthwise(channels: int, size: int, window: int, stride: int = 2):
    """A depthwise convolution with a bias and ReLU, as the ONNX import fuses it."""
    x = te.placeholder((1, channels, size, size), "float32", name="x")
    w = te.placeholder((channels, 1, window, window), "float32", name="w")
    b = te.placeholder((1, channels, 1, 1), "float32", name="b")
    conv = topi.nn.group_conv2d_nchw(x, w, stride, window // 2, 1, channels)
    y = topi.nn.relu(topi.add(conv, b))
    return te.create_prim_func([x, w, b, y]).with_attr(OP_KINDS_ATTR, ["conv2d", "add", "relu"])


def _numpy_depthwise(x, w, b, stride: int):
    """The reference: ``relu(depthwise(x, w, stride, padding window // 2) + b)``."""
    window = w.shape[-1]
    pad = window // 2
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out_size = (x.shape[2] + 2 * pad - window) // stride + 1
    out = np.zeros((1, x.shape[1], out_size, out_size), "float64")
    for ry in range(window):
        for rx in range(window):
            rows = padded[:, :, ry:ry + stride * out_size:stride, rx:rx + stride * out_size:stride]
            out += rows * w[None, :, 0, ry, rx, None, None]
    return np.maximum(out + b, 0.0).astype("float32")


@pytest.mark.parametrize("mcpu", sorted(TARGETS))
def test_the_table_gives_a_stride_2_depthwise_convolution_to_strided_depthwise_rows(mcpu):
    target = TARGETS[mcpu]
    _, rule = optimize_function(_depthwise(24, 64, 5).with_attr("target", target), target)
    assert rule == "strided-depthwise-rows"


def test_each_task_pads_its_rows_into_even_and_odd_columns_with_contiguous_loads():
    target = TARGETS["skylake-avx512"]
    scheduled = StridedDepthwiseRows().apply(_depthwise(3, 64, 3), target)
    assert scheduled is not None
    sch = s_tir.Schedule(scheduled)
    pad = sch.get(sch.get_sblock("pad_temp"))
    # the padded buffer [n, c, row, column % 2, column // 2]: 66 padded columns, 2 x 33
    assert [int(d) for d in pad.writes[0].source.shape[3:]] == [2, 33]
    pad_loops = [sch.get(lp) for lp in sch.get_loops(sch.get_sblock("pad_temp"))]
    assert pad_loops[0].kind == tirx.ForKind.PARALLEL  # inside the tasks
    # a task pads 2 * 4 + 3 - 2 = 9 rows for its 4 output rows, each split in two, vectorized
    assert [int(lp.extent) for lp in pad_loops[1:]] == [9, 2, 33]
    assert pad_loops[-1].kind == tirx.ForKind.VECTORIZED

    update = sch.get_sblock("group_conv2d_nchw_update")
    loops = [sch.get(lp) for lp in sch.get_loops(update)]
    assert loops[0].kind == tirx.ForKind.PARALLEL and int(loops[0].extent) == 3 * 32 // 4
    # window rows, window columns and the tile's 4 rows unrolled; 32 columns vectorized
    assert [lp.kind for lp in loops[-4:]] == [tirx.ForKind.UNROLLED] * 3 + [
        tirx.ForKind.VECTORIZED]
    assert [int(lp.extent) for lp in loops[-4:]] == [3, 3, 4, 32]
    # the output column indexes the padded buffer's last axis only: contiguous vector loads
    read = next(r for r in sch.get(update).reads if r.source.same_as(pad.writes[0].source))
    block = sch.get(update)
    column = block.iter_vars[3].var
    assert len(read.region) == 5 and any(v.same_as(column) for v in
                                         tirx.analysis.undefined_vars(read.region[4].min))
    assert not any(v.same_as(column) for v in tirx.analysis.undefined_vars(read.region[3].min))


@pytest.mark.parametrize("kernel", [
    lambda: _depthwise(8, 64, 3, stride=1),  # stride 1: depthwise-rows' or tiled's
    lambda: _depthwise(8, 28, 3),  # output rows of 14: under MIN_OUTPUT_ROW
])
def test_strided_depthwise_rows_declines_other_convolutions(kernel):
    assert StridedDepthwiseRows().apply(kernel(), TARGETS["skylake-avx512"]) is None


@pytest.mark.parametrize("channels, size, window", [
    (3, 64, 3),  # 3x3: 66 padded columns
    (5, 60, 5),  # 5x5: 30 output columns, rows 30 / 4 -> tiles of 3 rows
    (2, 112, 3),  # 56 output columns: tiles of 28
])
@pytest.mark.parametrize("mcpu", sorted(TARGETS))
def test_strided_depthwise_rows_computes_the_convolution(mcpu, channels, size, window):
    target = TARGETS[mcpu]
    func = _depthwise(channels, size, window)
    scheduled = StridedDepthwiseRows().apply(func, target)
    assert scheduled is not None
    if mcpu == "skylake-avx512" and "avx512f" not in open("/proc/cpuinfo").read():
        pytest.skip("the host runs no AVX-512")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, channels, size, size)).astype("float32")
    w = rng.standard_normal((channels, 1, window, window)).astype("float32")
    b = rng.standard_normal((1, channels, 1, 1)).astype("float32")
    out_size = size // 2
    lib = tvm.tirx.build(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}),
                         target=target)
    tensors = [tvm.runtime.tensor(a) for a in
               (x, w, b, np.zeros((1, channels, out_size, out_size), "float32"))]
    lib["main"](*tensors)
    np.testing.assert_allclose(tensors[-1].numpy(), _numpy_depthwise(x, w, b, 2),
                               rtol=1e-5, atol=1e-5)
