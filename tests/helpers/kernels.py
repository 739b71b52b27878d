"""One kernel scheduled by the table and run against TVM's default loops (no model build)."""

import numpy as np
import tvm

from tvm_hetero.optimize.pass_ import optimize_function


def llvm_target(mcpu: str = "znver4"):
    """An LLVM target for `mcpu` with 2 cores."""
    return tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})


def run_kernel(func, target, args):
    """`func` built for `target` and run on `args` (NumPy arrays); returns the last one's values."""
    lib = tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                         target=target)
    tensors = [tvm.runtime.tensor(a) for a in args]
    lib["main"](*tensors)
    return tensors[-1].numpy()


def random_args(func, seed: int = 0):
    """Seeded arguments for `func`'s parameters: small integers, booleans or normal floats."""
    rng = np.random.default_rng(seed)
    args = []
    for param in func.params:
        buf = param.ty
        shape, dtype = [int(d) for d in buf.shape], str(buf.dtype)
        if np.issubdtype(np.dtype(dtype), np.integer):
            args.append(rng.integers(0, 4, size=shape).astype(dtype))
        elif dtype == "bool":
            args.append(rng.integers(0, 2, size=shape).astype(bool))
        else:
            args.append(rng.standard_normal(shape).astype(dtype))
    return args


def scheduled_and_checked(func, target=None, rtol: float = 1e-5):
    """`func` scheduled by the table; asserts it computes what TVM's default loops compute
    (same random arguments) and returns the rule's name."""
    target = target or llvm_target()
    func = func.with_attr("target", target)
    scheduled, rule = optimize_function(func, target)
    assert [str(p.ty.shape) for p in scheduled.params] == [str(p.ty.shape) for p in func.params]
    args = random_args(func)
    want = run_kernel(func, target, [a.copy() for a in args])
    got = run_kernel(scheduled, target, [a.copy() for a in args])
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(np.abs(want).max(), 1))
    return rule


def depthwise_conv(channels: int, size: int, window: int, stride: int, epilogue: str):
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
    return te.create_prim_func([x, w, b, y]).with_attr("tvm_hetero.op_kinds", ops)
