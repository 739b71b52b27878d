"""``depthwise-nchwc`` on inputs whose padded rows outgrow L1 (Faster R-CNN's 800 x 800
backbone): tasks of several row tiles, each padding its own band of rows, instead of one padded
copy of the whole input. The schedule's structure and what it computes against numpy."""

import numpy as np
import pytest
import tvm
from tvm import s_tir, te, tirx, topi

from tvm_hetero.ops.conv2d_nchwc import depthwise_conv2d_nchwc
from tvm_hetero.optimize.cpu import DepthwiseNCHWc
from tvm_hetero.optimize.cpu.depthwise_nchwc import padding_band
from tvm_hetero.relax_ir import OP_KINDS_ATTR

# AVX-512: 16 lanes, 32 KiB L1d, 1 MiB L2 (cpu_traits); 2 cores
TARGET = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})


def _blocked_depthwise(height: int, width: int, stride: int = 2, blocks: int = 1):
    """A 3x3 depthwise convolution in NCHW16c (padding 1) with a bias and ReLU."""
    x = te.placeholder((1, blocks, height, width, 16), "float32", name="x")
    w = te.placeholder((blocks, 1, 3, 3, 1, 16), "float32", name="w")
    b = te.placeholder((1, blocks, 1, 1, 16), "float32", name="b")
    y = topi.nn.relu(topi.add(depthwise_conv2d_nchwc(x, w, (stride, stride), (1, 1, 1, 1),
                                                     (1, 1)), b))
    return te.create_prim_func([x, w, b, y]).with_attr(OP_KINDS_ATTR, ["conv2d", "add", "relu"])


def test_padding_bands_fill_half_of_l2_only_where_a_tasks_rows_outgrow_l1():
    # 402 padded columns of 16 lanes: 25.7 KB a row; 3 rows (one output row at stride 2)
    # outgrow 32 KiB; bands of 8 output rows pad 17 rows (437 KB, under half of 1 MiB)
    assert padding_band(402, 16, 1, 2, 3, 200, TARGET) == 8
    # 58 padded columns: 3 rows are 11 KB, in L1: one row tile per task, as before
    assert padding_band(58, 16, 1, 2, 3, 28, TARGET) == 1


def test_each_task_pads_its_band_of_rows_inside_the_parallel_loop():
    # 64 x 340 at stride 2 -> 32 x 170, tiles of 2 x 2: 16 row tiles; 5 padded rows per tile
    # (109 KB) outgrow L1, bands of 4 tiles (17 rows, 372 KB) fit half of L2: 4 tasks
    scheduled = DepthwiseNCHWc().apply(_blocked_depthwise(64, 340), TARGET)
    assert scheduled is not None
    sch = s_tir.Schedule(scheduled)
    pad_loops = [sch.get(lp) for lp in sch.get_loops(sch.get_sblock("pad"))]
    assert pad_loops[0].kind == tirx.ForKind.PARALLEL and int(pad_loops[0].extent) == 4
    # 17 rows of the 341 padded columns the stride-2 window reads (of 342), 16 lanes
    assert [int(lp.extent) for lp in pad_loops[1:]] == [17, 341, 16]
    assert pad_loops[-1].kind == tirx.ForKind.VECTORIZED
    conv = [sch.get(lp) for lp in sch.get_loops(sch.get_sblock("depthwise_conv2d_NCHWc_update"))]
    assert conv[0].kind == tirx.ForKind.PARALLEL and int(conv[0].extent) == 4
    assert conv[-1].kind == tirx.ForKind.VECTORIZED and int(conv[-1].extent) == 16


@pytest.mark.parametrize("height, width, stride", [(64, 340, 2), (20, 400, 1)])
def test_banded_padding_computes_the_convolution(height, width, stride):
    if "avx512f" not in open("/proc/cpuinfo").read():
        pytest.skip("the host runs no AVX-512")
    func = _blocked_depthwise(height, width, stride, blocks=2)
    scheduled = DepthwiseNCHWc().apply(func, TARGET)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, height, width, 16)).astype("float32")
    w = rng.standard_normal((2, 1, 3, 3, 1, 16)).astype("float32")
    b = rng.standard_normal((1, 2, 1, 1, 16)).astype("float32")
    out_h, out_w = (height - 1) // stride + 1, (width - 1) // stride + 1
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0))).astype("float64")
    want = np.zeros((1, 2, out_h, out_w, 16))
    for ry in range(3):
        for rx in range(3):
            want += padded[:, :, ry:ry + stride * out_h:stride, rx:rx + stride * out_w:stride] \
                * w[None, :, 0, ry, rx, 0][:, :, None, None, :]
    want = np.maximum(want + b, 0.0)
    lib = tvm.tirx.build(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}),
                         target=TARGET)
    tensors = [tvm.runtime.tensor(a) for a in
               (x, w, b, np.zeros((1, 2, out_h, out_w, 16), "float32"))]
    lib["main"](*tensors)
    np.testing.assert_allclose(tensors[-1].numpy(), want, rtol=1e-5, atol=1e-5)
