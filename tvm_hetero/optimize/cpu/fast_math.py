"""Vector-friendly math in a kernel's epilogue: ``erf`` and ``tanh`` (GELU) as TVM's rational
approximations (``topi.fast_erf``, ``topi.fast_tanh``), ``pow`` by a small whole exponent as
multiplications.

LLVM lowers ``erf``, ``tanh`` (through ``exp``) and ``pow`` on x86 to scalar libm calls, one per
element even inside vectorized loops (the GELU epilogue of ViT's 197 x 768 -> 3072 matmul: 258
ms of scalar ``erff`` against 10-20 ms for its multiply-adds). The approximations are the
polynomials TVM's own ``FastMathTransform`` uses; measured over [-12, 12] against float64: erf
3.3e-7 and tanh 3.0e-7 absolute (float32 epsilon is 1.2e-7). ``exp`` is left alone (its fast
form is 4e-6 relative).
"""

from __future__ import annotations

import functools

# pow(x, n) with a whole n up to this is written as n - 1 multiplications (GPT-2's x ** 3)
MAX_POWER_AS_PRODUCT = 4


@functools.lru_cache(maxsize=None)
def _approximation(name: str):
    """``(x, expression of x)``: topi's ``fast_<name>`` of one float32 value."""
    import tvm_ffi
    from tvm import s_tir, te, tirx, topi

    x = te.placeholder((1,), "float32", name="x")
    func = te.create_prim_func([x, getattr(topi, f"fast_{name}")(x)])
    sch = s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    for block_rv in blocks[:-1]:  # fast_tanh clamps in blocks of their own
        sch.compute_inline(block_rv)
    value = sch.get(sch.get_child_blocks(sch.get_sblock("root"))[-1]).body.value
    var = tirx.Var("x", "float32")
    return var, tvm_ffi.structural_map(value, lambda e: var if _is_load(e) else e)


def _is_load(expr) -> bool:
    return type(expr).__name__ in ("BufferLoad", "TensorLoad")


def _whole_power(call) -> int | None:
    exponent = call.args[1]
    value = getattr(exponent, "value", None)
    if isinstance(value, float) and value.is_integer() and 2 <= value <= MAX_POWER_AS_PRODUCT:
        return int(value)
    return None


def _rewrite(call):
    from tvm import tirx

    name = getattr(call.op, "name", "")
    if str(call.ty) != "float32":
        return call
    if name in ("tirx.erf", "tirx.tanh"):
        var, body = _approximation(name[len("tirx."):])
        return tirx.Let(var, call.args[0], body)
    if name == "tirx.pow" and _whole_power(call) is not None:
        var = tirx.Var("base", "float32")
        product = var
        for _ in range(_whole_power(call) - 1):
            product = product * var
        return tirx.Let(var, call.args[0], product)
    return call


def uses_slow_math(func) -> bool:
    """Whether `func` calls float32 ``erf``, ``tanh`` or ``pow`` by a small whole exponent."""
    return not fast_math(func).same_as(func)


def fast_math(func):
    """`func` with its float32 ``erf`` and ``tanh`` calls replaced by rational approximations
    and ``pow(x, n)`` (whole n up to `MAX_POWER_AS_PRODUCT`) by products; `func` itself when
    it has none."""
    import tvm_ffi
    from tvm import ir

    def visit(expr):
        return _rewrite(expr) if isinstance(expr, ir.expr.Call) else expr

    return tvm_ffi.structural_map(func, visit)
