"""The fit test of preparation's per-group form of grouped 1 x 1 convolutions
(``tvm_hetero/ops/grouped_conv1x1.py``): grouped, 1 x 1, stride 1, static shapes, float32 only."""

import pytest
import tvm

from tvm_hetero.ops import grouped_conv1x1


@pytest.mark.parametrize("data, weight, groups, strides, padding, fits", [
    ((1, 136, 28, 28), (136, 34, 1, 1), 4, (1, 1), (0, 0, 0, 0), True),
    ((1, 136, 28, 28), (136, 1, 1, 1), 136, (1, 1), (0, 0, 0, 0), False),  # depthwise
    ((1, 136, 28, 28), (136, 136, 1, 1), 1, (1, 1), (0, 0, 0, 0), False),  # not grouped
    ((1, 136, 28, 28), (136, 34, 3, 3), 4, (1, 1), (1, 1, 1, 1), False),  # 3x3
    ((1, 136, 28, 28), (136, 34, 1, 1), 4, (2, 2), (0, 0, 0, 0), False),  # strided
])
def test_grouped_conv1x1_fits_only_grouped_1x1_stride_1_convolutions(
        data, weight, groups, strides, padding, fits):
    assert grouped_conv1x1.fits(data, weight, groups, strides, padding, (1, 1),
                                ("float32",) * 3) is fits


def test_grouped_conv1x1_does_not_fit_run_time_shapes_or_other_dtypes():
    batch = tvm.tirx.Var("n", "int64")
    assert not grouped_conv1x1.fits((batch, 8, 4, 4), (8, 4, 1, 1), 2, (1, 1), (0,) * 4,
                                    (1, 1), ("float32",) * 3)
    for dtypes in [("float16",) * 3, ("float32", "float16", "float32"),
                   ("float32", "float32", "float16")]:  # data, weight, output
        assert not grouped_conv1x1.fits((1, 8, 4, 4), (8, 4, 1, 1), 2, (1, 1), (0,) * 4,
                                        (1, 1), dtypes)
