"""Convolution classes of the architecture suite: depthwise convolutions (``depthwise-rows``)
and vector exp/sigmoid epilogues (``fast_math`` in every CPU kernel), each checked against TVM's
default loops."""

import numpy as np
import pytest
import tvm

from tvm_hetero import optimize
from tvm_hetero.layers import OP_KINDS_ATTR
from tvm_hetero.optimize.cpu import DepthwiseRows
from tvm_hetero.optimize.pass_ import optimize_function

from test_optimize_kernels import _run, scheduled_and_checked


@pytest.fixture(autouse=True)
def fresh_table():
    optimize.reset_table()
    yield
    optimize.reset_table()


def _depthwise(channels: int, size: int, window: int, stride: int, epilogue: str):
    """A fused depthwise convolution kernel as the ONNX import makes it (group conv, bias and
    `epilogue`: ``clip`` (ReLU6) or ``silu``), with its op kinds."""
    from tvm import te, topi

    x = te.placeholder((1, channels, size, size), "float32", name="x")
    w = te.placeholder((channels, 1, window, window), "float32", name="w")
    b = te.placeholder((1, channels, 1, 1), "float32", name="b")
    conv = topi.nn.group_conv2d_nchw(x, w, stride, window // 2, 1, channels)
    y = topi.add(conv, b)
    if epilogue == "clip":
        y, ops = topi.minimum(topi.maximum(y, 0.0), 6.0), ["conv2d", "add", "maximum", "minimum"]
    else:
        y, ops = topi.multiply(y, topi.sigmoid(y)), ["conv2d", "add", "tir_sigmoid", "multiply"]
    return te.create_prim_func([x, w, b, y]).with_attr(OP_KINDS_ATTR, ops)


@pytest.mark.parametrize("mcpu", ["znver4", "haswell"])
def test_depthwise_rows_schedules_a_stride_1_depthwise_convolution_right(mcpu):
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    assert scheduled_and_checked(_depthwise(24, 56, 3, 1, "clip"), target) == "depthwise-rows"


def test_depthwise_rows_takes_a_5x5_window_with_a_silu_epilogue():
    assert scheduled_and_checked(_depthwise(16, 28, 5, 1, "silu")) == "depthwise-rows"


@pytest.mark.parametrize("size, stride", [(56, 2), (14, 1)])
def test_strided_and_narrow_depthwise_convolutions_stay_with_tiled(size, stride):
    # measured slower under depthwise-rows (MIN_ROW and stride 1 in depthwise_rows.py)
    func = _depthwise(16, size, 3, stride, "clip")
    assert DepthwiseRows().apply(func, tvm.target.Target({"kind": "llvm", "mcpu": "znver4"})) \
        is None
    assert scheduled_and_checked(func) == "tiled"


def _calls(func) -> set[str]:
    import tvm_ffi
    from tvm import ir

    names = set()

    def visit(expr):
        if isinstance(expr, ir.expr.Call):
            names.add(str(getattr(expr.op, "name", "")))
        return expr

    tvm_ffi.structural_map(func.body, visit)
    return names


def test_exp_and_sigmoid_become_vector_math_within_float32_accuracy():
    from tvm import te

    x = te.placeholder((4, 1000), "float32", name="x")
    silu = te.compute(x.shape, lambda i, j: x[i, j] * te.sigmoid(x[i, j]), name="silu")
    y = te.compute(x.shape, lambda i, j: te.exp(silu[i, j]), name="exp")
    func = te.create_prim_func([x, y]).with_attr(OP_KINDS_ATTR, ["multiply", "exp"])
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    scheduled, rule = optimize_function(func.with_attr("target", target), target)
    assert rule is not None
    assert not _calls(scheduled) & {"tirx.exp", "tirx.sigmoid"}  # no scalar libm calls left
    data = np.linspace(-30, 4, 4000, dtype="float32").reshape(4, 1000)
    got = _run(scheduled, target, [data, np.zeros_like(data)])
    wide = data.astype("float64")
    np.testing.assert_allclose(got, np.exp(wide / (1 + np.exp(-wide))), rtol=2e-6)
