"""The register tiles the CPU rules share (``tvm_hetero/optimize/cpu/schedule_helpers.py``):
sized by the target's vector registers and the FMA latency, and the blocked and Winograd
convolutions that use them computing right with each target's tiles."""

import pytest
import tvm

from tvm_hetero.optimize.pass_ import optimize_function
from tvm_hetero.relax_ir import OP_KINDS_ATTR

from tests.helpers.kernels import scheduled_and_checked


def _blocked_conv(lanes: int, channels: int, size: int, winograd_form: bool):
    """A 3x3 stride-1 convolution with bias and ReLU in NCHW[lanes]c as preparation writes it:
    direct (``ops.conv2d_nchwc``) or Winograd (``ops.winograd``, weights already transformed)."""
    from tvm import te, topi

    from tvm_hetero.ops import conv2d_nchwc, winograd

    blocks = channels // lanes
    x = te.placeholder((1, blocks, size, size, lanes), "float32", name="x")
    if winograd_form:
        alpha = winograd.TILE + 2
        w = te.placeholder((alpha, alpha, channels, channels), "float32", name="w")
        conv = winograd.conv2d_nchwc(x, w)
    else:
        w = te.placeholder((blocks, blocks, 3, 3, lanes, lanes), "float32", name="w")
        conv = conv2d_nchwc.conv2d_nchwc(x, w, (1, 1), (1, 1, 1, 1), (1, 1))
    b = te.placeholder((1, blocks, 1, 1, lanes), "float32", name="b")
    y = topi.nn.relu(topi.add(conv, b))
    return te.create_prim_func([x, w, b, y]).with_attr(OP_KINDS_ATTR, ["conv2d", "add", "relu"])


# (channel vectors, columns) of the register tiles: widths of VGG's and ResNet's layers (7 * 2^k:
# 224 to 7; Winograd: their tile columns, 56 / 4 = 14 and 28 / 4 = 7) and SqueezeNet's 27, 13
@pytest.mark.parametrize("mcpu, direct, products", [
    # AVX2, 16 registers: 8 accumulators where the widths allow no more within the registers
    # (the former 6-accumulator limit: 2 x 2 on every 7 * 2^k width, 4 x 1 on 13, Winograd
    # 2 x 2 and 2 x 1); 2 x 7 would hold 22 (its 7 broadcasts kept for the second vector)
    ("haswell", {224: (2, 4), 56: (2, 4), 14: (4, 2), 7: (1, 7), 27: (4, 3), 13: (1, 13)},
     {14: (4, 2), 7: (1, 7)}),
    # AVX-512, 32 registers: up to 16 accumulators
    ("znver4", {224: (4, 4), 56: (4, 4), 14: (2, 7), 7: (2, 7), 27: (4, 3), 13: (1, 13)},
     {14: (2, 7), 7: (2, 7)}),
])
def test_blocked_register_tiles_follow_the_targets_registers(mcpu, direct, products):
    from tvm_hetero.optimize.cpu.schedule_helpers import (PACKED_ACCUMULATORS, packed_tile,
                                                          tile_registers)
    from tvm_hetero.optimize.cpu.winograd import products_tile
    from tvm_hetero.target import cpu_traits

    registers = cpu_traits(tvm.target.Target({"kind": "llvm", "mcpu": mcpu})).registers
    accumulators = PACKED_ACCUMULATORS[registers]
    tiles = {width: packed_tile(16, width, accumulators, registers) for width in direct}
    assert tiles == direct
    assert {cols: products_tile(16, cols, 1, registers) for cols in products} == products
    # the direct tiles' broadcast columns innermost, the products' weight vectors
    assert all(tile_registers(c, w) <= registers for c, w in direct.values())
    assert all(tile_registers(w, c) <= registers for c, w in products.values())


@pytest.mark.parametrize("mcpu, blocks, width, tile", [
    # 80 and 112 channels (EfficientNet's, MobileNetV3's) at 14 x 14 on AVX2: 1 x 14, not the
    # 2 x 2 whose 4 accumulators load least per multiply-add but leave the FMA pipes idle
    ("haswell", 10, 14, (1, 14)), ("haswell", 14, 14, (1, 14)), ("haswell", 30, 14, (1, 14)),
    ("haswell", 60, 14, (4, 2)),
    ("haswell", 10, 7, (1, 7)),  # below the floor where no tile reaches it
    ("znver4", 3, 14, (1, 14)), ("znver4", 10, 27, (1, 9)), ("znver4", 60, 14, (2, 7)),
])
def test_register_tiles_keep_enough_accumulators_for_the_fma_latency(mcpu, blocks, width, tile):
    from tvm_hetero.optimize.cpu.schedule_helpers import PACKED_ACCUMULATORS, packed_tile
    from tvm_hetero.target import cpu_traits

    registers = cpu_traits(tvm.target.Target({"kind": "llvm", "mcpu": mcpu})).registers
    assert packed_tile(blocks, width, PACKED_ACCUMULATORS[registers], registers) == tile


@pytest.mark.parametrize("mcpu, accumulators", [("haswell", {False: 8, True: 7}),
                                                 ("znver4", {False: 16, True: 14})])
@pytest.mark.parametrize("winograd_form, rule", [(False, "blocked-nchwc"), (True, "winograd")])
def test_blocked_convolutions_compute_right_with_the_targets_tiles(mcpu, accumulators,
                                                                    winograd_form, rule):
    import re

    from tvm_hetero.target import cpu_traits

    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    lanes = cpu_traits(target).lanes
    # 28 wide: AVX2 2 x 4 direct tiles and 1 x 7 Winograd ones, AVX-512 4 x 4 and 2 x 7; AVX2's
    # direct tiles' weights (36 KB) outgrow L1: the tiles inside each input channel block
    func = _blocked_conv(lanes, 8 * lanes, 28, winograd_form)
    assert scheduled_and_checked(func, target, rtol=1e-4) == rule
    scheduled, _ = optimize_function(func.with_attr("target", target), target)
    # the register tile: two unrolled loops over one vector of accumulators
    tile = re.search(r"in T\.unroll\((\d+)\):\s+for \w+ in T\.unroll\((\d+)\):"
                     r"\s+for \w+ in T\.vectorized\((\d+)\)", scheduled.script())
    assert tile is not None and int(tile[3]) == lanes
    assert int(tile[1]) * int(tile[2]) == accumulators[winograd_form]
