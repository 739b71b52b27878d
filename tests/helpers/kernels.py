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
