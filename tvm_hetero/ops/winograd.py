"""Winograd F(4x4, 3x3) convolutions in the blocked layout NCHW[x]c: the matrices, the test of
which convolutions take it, the weight transform (at preparation), the TE compute and the names
of its blocks (what the ``winograd`` rule schedules and what tuning leaves alone).

Winograd F(4x4, 3x3) (Lavin and Gray, 2016): a 3x3 stride-1 convolution computes each 4x4
output tile from a 6x6 input tile with 36 products per channel pair instead of 144; the weights
are transformed once, at preparation, the data and the output per call (work that grows with
the channels, the products' with their square). Only in the blocked layout (each transform a
contiguous channel vector) and with constant weights. Where the output has fewer tiles than
``MIN_TILES``, or the transformed weights (36 x C x K floats, 4x the original) exceed
``MAX_WEIGHT_BYTES``, reading them (once per row of tiles) costs more than the products save:
ResNet-50's 28x28 layers (2.4 MB) made it 5 % faster, its 14x14 ones (9.4 MB, 16 tiles) about
7 % slower; its 7x7 ones ran 4x slower alone.
"""

from __future__ import annotations

import numpy as np

TILE = 4
MIN_TILES = 16
MAX_WEIGHT_BYTES = 4 << 20

# the blocks of the compute, in the order the rule nests them (the output block last)
PAD_BLOCK = "winograd_pad"
ROWS_BLOCK = "winograd_rows"
DATA_BLOCK = "winograd_data"
GEMM_BLOCK = "winograd_gemm"
INVERSE_ROWS_BLOCK = "winograd_inverse_rows"
INVERSE_BLOCK = "winograd_inverse"
OUT_BLOCK = "winograd_out"
# the stages computed per row of output tiles, innermost first
STAGES = (INVERSE_BLOCK, INVERSE_ROWS_BLOCK, GEMM_BLOCK, DATA_BLOCK, ROWS_BLOCK, PAD_BLOCK)


def matrices(tile: int = TILE):
    """``(A^T, B^T, G)`` of Winograd F(tile, 3), from TVM's Cook-Toom construction (its
    interpolation points 0, -1, 1, 1/2, -2, ...)."""
    from tvm.topi.nn import winograd_util

    a, b, g = winograd_util._cook_toom_convolution(
        winograd_util._interpolation_points(tile + 1), tile, 3)
    return a.T.astype(np.float64), b.T.astype(np.float64), g.astype(np.float64)


def fits(batch, in_channels, out_channels, out_h, out_w, window, strides, padding, dilation,
         groups, *, lanes: int = 16, min_tiles: int = MIN_TILES,
         max_weight_bytes: int = MAX_WEIGHT_BYTES) -> bool:
    """Whether a float32 convolution (any layout) runs as Winograd F(4x4, 3x3) in the blocked
    layout of `lanes` channels per block."""
    tiles = -(-out_h // TILE) * -(-out_w // TILE)
    return (batch == 1 and groups == 1 and tuple(window) == (3, 3) and tuple(strides) == (1, 1)
            and tuple(dilation) == (1, 1) and tuple(padding) == (1, 1, 1, 1)
            and in_channels % lanes == 0 and out_channels % lanes == 0
            and tiles >= min_tiles
            and (TILE + 2) ** 2 * in_channels * out_channels * 4 <= max_weight_bytes)


def transform_weight(weight: np.ndarray, tile: int = TILE) -> np.ndarray:
    """``OIHW[x]i[y]o`` 3x3 weights -> ``U[alpha, alpha, C, K] = G w G^T`` (float64 inside)."""
    out_blocks, in_blocks, kh, kw, in_lanes, out_lanes = weight.shape
    oihw = weight.transpose(0, 5, 1, 4, 2, 3).reshape(out_blocks * out_lanes,
                                                      in_blocks * in_lanes, kh, kw)
    _, _, g = matrices(tile)
    return np.ascontiguousarray(
        np.einsum("ea,kcab,nb->enck", g, oihw.astype(np.float64), g).astype(np.float32))


def _linear_combination(coefficients, terms):
    """``sum(c * t)`` over the nonzero coefficients, without multiplying by 1 or -1."""
    from tvm import tirx

    total = None
    for coefficient, term in zip(coefficients, terms):
        if coefficient == 0:
            continue
        value = term if coefficient == 1 else (-term if coefficient == -1 else
                                               term * tirx.const(float(coefficient), "float32"))
        total = value if total is None else total + value
    return tirx.const(0.0, "float32") if total is None else total


def _matrix_row(matrix, index, terms):
    """``sum(matrix[index, j] * terms[j])`` for a constant matrix: one linear combination per
    row, chosen by `index` (a loop unrolled by the schedule folds the choice away)."""
    from tvm import tirx

    rows = [_linear_combination(row, terms) for row in matrix]
    chosen = rows[-1]
    for value in range(len(rows) - 2, -1, -1):
        chosen = tirx.Select(index == value, rows[value], chosen)
    return chosen


def conv2d_nchwc(data, transformed, tile: int = TILE):
    """TE compute of a 3x3 stride-1 padding-1 convolution of NCHW[x]c data (batch 1) by
    Winograd F(tile, 3) with pre-transformed weights ``transformed[alpha, alpha, C, K]``
    (:func:`transform_weight`). Per output tile row ``r`` and column ``t``: the padded input
    (``PAD_BLOCK``: ``[y, x, c]``), its rows then columns transformed (``ROWS_BLOCK``,
    ``DATA_BLOCK``), the 36 channel products (``GEMM_BLOCK``), the inverse transform
    (``INVERSE_ROWS_BLOCK``, ``INVERSE_BLOCK``) and the tiles written back as NCHW[x]c
    (``OUT_BLOCK``). The transforms are written out per row of the constant matrices, so the
    schedule's unrolling leaves only their nonzero terms."""
    from tvm import te, tirx

    _, _, height, width, lanes = (int(v) for v in data.shape)
    alpha, _, channels, out_channels = (int(v) for v in transformed.shape)
    a_t, b_t, _ = matrices(tile)
    rows, cols = -(-height // tile), -(-width // tile)
    zero = tirx.const(0.0, "float32")
    padded = te.compute(
        (rows * tile + 2, cols * tile + 2, channels),
        lambda y, x, c: tirx.if_then_else(
            tirx.all(y >= 1, y <= height, x >= 1, x <= width),
            data[0, c // lanes, y - 1, x - 1, c % lanes], zero),
        name=PAD_BLOCK)
    by_rows = te.compute(
        (rows, cols, alpha, alpha, channels),
        lambda r, t, e, b, c: _matrix_row(
            b_t, e, [padded[r * tile + a, t * tile + b, c] for a in range(alpha)]),
        name=ROWS_BLOCK)
    transformed_data = te.compute(
        (rows, cols, alpha, alpha, channels),
        lambda r, t, e, n, c: _matrix_row(b_t, n, [by_rows[r, t, e, b, c]
                                                    for b in range(alpha)]),
        name=DATA_BLOCK)
    rc = te.reduce_axis((0, channels), "rc")
    products = te.compute(
        (rows, cols, alpha, alpha, out_channels),
        lambda r, t, e, n, k: te.sum(transformed_data[r, t, e, n, rc] * transformed[e, n, rc, k],
                                     axis=[rc]),
        name=GEMM_BLOCK)
    inverse_rows = te.compute(
        (rows, cols, tile, alpha, out_channels),
        lambda r, t, i, n, k: _matrix_row(a_t, i, [products[r, t, e, n, k]
                                                    for e in range(alpha)]),
        name=INVERSE_ROWS_BLOCK)
    inverse = te.compute(
        (rows, cols, tile, tile, out_channels),
        lambda r, t, i, j, k: _matrix_row(a_t, j, [inverse_rows[r, t, i, n, k]
                                                    for n in range(alpha)]),
        name=INVERSE_BLOCK)
    return te.compute(
        (1, out_channels // lanes, height, width, lanes),
        lambda b, f, y, x, lane: inverse[y // tile, x // tile, y % tile, x % tile,
                                         f * lanes + lane],
        name=OUT_BLOCK)


def is_winograd(func) -> bool:
    """Whether a kernel is a Winograd convolution (written by preparation: it has a
    ``GEMM_BLOCK``).

    MetaSchedule is not asked to tune these: its search space does not unroll the transforms
    over their constant matrices (best of 128 trials on the zoo ResNet's 32-channel layer:
    389 us; the winograd rule: 9 us)."""
    from tvm import s_tir

    try:
        s_tir.Schedule(func).get_sblock(GEMM_BLOCK)
    except s_tir.ScheduleError:
        return False
    return True
